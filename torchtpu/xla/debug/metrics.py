"""torch_xla.debug.metrics (met): torchtpu's counters in PyTorch/XLA's report layout.

    print(met.short_metrics_report())
    Metric: CompileTime
      TotalSamples: 12
      Accumulator: 192ms194.403us
      Percentiles: 1%=...; 50%=...; 99%=...
    Counter: CachedCompile
      Value: 40

What each name counts here (the runtime's statistics, torch.tpu._get_cache_stats):

    Metric CompileTime          programs compiled and the seconds spent; the
                                percentiles are over the programs still cached
    Counter CachedCompile       program launches that compiled nothing (an eager
                                op's plan reused, or an in-memory cache hit)
    Counter UncachedCompile     programs compiled
    Counter MarkStep            xm.mark_step / torch_xla.sync calls
    Counter PersistentCacheHit / PersistentCacheMiss   the on-disk cache
    Counter aten::<op>          calls of <op> that ran on the CPU (no tpu lowering)
    Counter torchtpu::...       torchtpu's own: ops launched, recompiles, bytes
                                copied to and from the device, fused graphs run

PyTorch/XLA's ExecuteTime and TransferTo/FromDeviceTime have no counterpart
(torchtpu counts bytes, not times: torchtpu.profiler has device times); a
name with no value is left out of the report, as PyTorch/XLA leaves out
inactive counters."""
import torch

import torchtpu
from torchtpu import _core

_DEFAULT_COUNTERS = ["CachedCompile", "MarkStep"]
_DEFAULT_METRICS = ["CompileTime", "ExecuteTime", "ExecuteReplicatedTime",
                    "TransferToDeviceTime", "TransferFromDeviceTime"]

_counter_base = {}
_metric_base = {}


def _raw_counters():
    from ..core import xla_model as xm
    st = _core.stats() if _core._rt is not None else {}
    fused = torchtpu.modes.fused_stats() if _core._rt is not None else {}
    out = {
        "CachedCompile": st.get("sig_hits", 0) + st.get("cache_hits", 0),
        "UncachedCompile": st.get("compiles", 0),
        "MarkStep": xm._steps,
        "PersistentCacheHit": st.get("disk_hits", 0),
        "PersistentCacheMiss": st.get("disk_misses", 0),
        "torchtpu::OpCalls": st.get("op_calls", 0),
        "torchtpu::Recompiles": st.get("recompiles", 0),
        "torchtpu::FusedGraphs": fused.get("graphs", 0),
        "torchtpu::TransferToDeviceBytes": st.get("host_to_device_bytes", 0),
        "torchtpu::TransferFromDeviceBytes": st.get("device_to_host_bytes", 0),
    }
    for op, calls in torchtpu.fallback_counts().items():
        out[op if op.startswith("aten::") else "aten::" + op] = calls
    return out


def _counters():
    raw = _raw_counters()
    values = {k: v - _counter_base.get(k, 0) for k, v in raw.items()}
    return {k: v for k, v in values.items() if v > 0}


def _compile_samples():
    if _core._rt is None:
        return []
    return sorted(e["compile_seconds"] for e in torch.tpu._get_cache_stats()["entries"]
                  if not e["from_disk"])


def _metrics():
    """{name: (total samples, accumulated seconds, sample values)}."""
    st = _core.stats() if _core._rt is not None else {}
    n = st.get("compiles", 0) - _metric_base.get("compiles", 0)
    seconds = st.get("compile_seconds", 0.0) - _metric_base.get("compile_seconds", 0.0)
    if n <= 0:
        return {}
    samples = [] if _metric_base else _compile_samples()
    return {"CompileTime": (n, seconds, samples)}


def _fmt_time(seconds):
    """PyTorch/XLA's duration format: 06m09s401ms746.001us, 001ms32.778us."""
    minutes, rest = divmod(seconds * 1e6, 60e6)
    secs, rest = divmod(rest, 1e6)
    ms, us = divmod(rest, 1e3)
    text = f"{int(ms):03d}ms{us:.3f}us"
    if secs or minutes:
        text = f"{int(secs):02d}s" + text
    if minutes:
        text = f"{int(minutes):02d}m" + text
    return text


def _percentiles(samples):
    if not samples:
        return None
    picks = []
    for p in (1, 5, 10, 20, 50, 80, 90, 95, 99):
        i = min(len(samples) - 1, int(round(p / 100 * (len(samples) - 1))))
        picks.append(f"{p}%={_fmt_time(samples[i])}")
    return "; ".join(picks)


def _metric_text(name, data):
    total, seconds, samples = data
    lines = [f"Metric: {name}", f"  TotalSamples: {total}", f"  Accumulator: {_fmt_time(seconds)}"]
    pct = _percentiles(samples)
    if pct:
        lines.append(f"  Percentiles: {pct}")
    return lines


def _report(counter_names=None, metric_names=None):
    metrics, counters = _metrics(), _counters()
    lines = []
    for name in (metric_names if metric_names is not None else sorted(metrics)):
        if name in metrics:
            lines += _metric_text(name, metrics[name])
    for name in (counter_names if counter_names is not None else counters):
        if name in counters:
            lines += [f"Counter: {name}", f"  Value: {counters[name]}"]
    return "\n".join(lines) + ("\n" if lines else "")


def metrics_report():
    """Every active metric and counter, in PyTorch/XLA's layout."""
    return _report()


def short_metrics_report(counter_names=None, metric_names=None):
    """The named metrics and counters (PyTorch/XLA's defaults when None)."""
    return _report(counter_names or _DEFAULT_COUNTERS, metric_names or _DEFAULT_METRICS)


def counter_names():
    return list(_counters())


def counter_value(name):
    """The counter's value, None when it is not active."""
    return _counters().get(name)


def metric_names():
    return list(_metrics())


def metric_data(name):
    """(total samples, accumulator in nanoseconds, [(0, sample ns), ...]), or None;
    PyTorch/XLA keeps times in nanoseconds."""
    data = _metrics().get(name)
    if data is None:
        return None
    total, seconds, samples = data
    return total, seconds * 1e9, [(0, s * 1e9) for s in samples]


def executed_fallback_ops():
    """The aten ops that ran on the CPU."""
    return [k for k in _counters() if k.startswith("aten::")]


def clear_counters():
    _counter_base.clear()
    _counter_base.update(_raw_counters())


def clear_metrics():
    st = _core.stats() if _core._rt is not None else {}
    _metric_base.clear()
    _metric_base.update(compiles=st.get("compiles", 0),
                        compile_seconds=st.get("compile_seconds", 0.0))


def clear_all():
    clear_metrics()
    clear_counters()


def __getattr__(name):
    raise AttributeError(f"torch_xla.debug.metrics.{name} is not provided by torchtpu's "
                         "migration layer (docs/migrating_from_torch_xla.md)")
