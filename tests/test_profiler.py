"""torchtpu.profiler: one trace event per tpu program (strict op, fused graph,
compiled graph) with device time and bytes, merged into PyTorch's Chrome
trace; the trainer's [profiling] window; nothing recorded while off."""
import json
import os

import pytest
import torch
from torch.profiler import ProfilerActivity

import torchtpu
import torchtpu.profiler
from torchtpu import _core
from torchtpu import train as trainer
from torchtpu.trainer.config import ConfigError, load_config

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def tpu_events(trace):
    return [e for e in trace["traceEvents"] if e.get("cat") == "tpu_program"]


def load(path):
    with open(path) as f:
        return json.load(f)


def test_strict_ops_in_torch_trace(tmp_path):
    a = torch.randn(64, 32, device="tpu")
    b = torch.randn(32, 16, device="tpu")
    c = torch.randn(64, 16, device="tpu")
    torch.tpu.synchronize()
    with torchtpu.mode("strict"):
        with torchtpu.profiler.profile(activities=ACTIVITIES) as prof:
            y = torch.mm(a, b)
            z = y * c
    path = str(tmp_path / "trace.json")
    prof.export_chrome_trace(path)
    trace = load(path)
    ours = tpu_events(trace)
    assert [e["name"] for e in ours] == ["aten::mm", "aten::mul.Tensor"]
    mm, mul = ours
    assert mm["args"]["bytes_in"] == (64 * 32 + 32 * 16) * 4
    assert mm["args"]["bytes_out"] == y.numel() * 4
    assert mul["args"]["bytes_in"] == (y.numel() + c.numel()) * 4
    assert mul["args"]["bytes_out"] == z.numel() * 4
    for e in ours:
        assert e["ph"] == "X" and e["args"]["kind"] == "op"
        assert e["args"]["device_time_us"] > 0 and e["dur"] > 0
    # PyTorch's CPU events are in the same trace, on the same clock: our
    # program runs inside the aten::mm the dispatcher recorded.
    cpu_mm = [e for e in trace["traceEvents"]
              if e.get("name") == "aten::mm" and e.get("cat") == "cpu_op"]
    assert cpu_mm
    assert cpu_mm[0]["ts"] - 1000 <= mm["ts"] <= cpu_mm[0]["ts"] + cpu_mm[0]["dur"] + 1000
    names = {e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert "tpu:0" in names
    rows = prof.tpu_key_averages()
    assert {r["name"]: r["calls"] for r in rows} == {"aten::mm": 1, "aten::mul.Tensor": 1}
    assert "aten::mm" in prof.tpu_table()


def test_fused_flush_is_one_event(tmp_path):
    a = torch.randn(16, 16, device="tpu")
    torch.tpu.synchronize()
    with torchtpu.profiler.trace() as t:
        with torchtpu.mode("fused"):
            r = (torch.relu(a) * 2 + 1).sum()
            torchtpu.sync()
    assert len(t.events) == 1
    e = t.events[0]
    assert e["kind"] == "fused" and e["name"].startswith("fused graph of ")
    assert "relu" in e["name"] and e["end_ns"] > e["start_ns"]
    assert e["bytes_out"] == r.element_size()
    path = str(tmp_path / "alone.json")
    t.export_chrome_trace(path)  # on its own: only the tpu process
    ours = tpu_events(load(path))
    assert len(ours) == 1 and ours[0]["args"]["device_time_us"] > 0


def test_compiled_graph_event_beside_torch_profiler(tmp_path):
    f = torch.compile(lambda x, w: torch.relu(x @ w) + 1, backend="tpu")
    x = torch.randn(8, 32, device="tpu")
    w = torch.randn(32, 4, device="tpu")
    f(x, w)
    f(x, w)  # captured; later calls replay it
    torch.tpu.synchronize()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as p, \
            torchtpu.profiler.trace() as t:
        f(x, w)
    path = str(tmp_path / "merged.json")
    t.export_chrome_trace(path, p)
    trace = load(path)
    ours = tpu_events(trace)
    assert len(ours) == 1
    assert ours[0]["args"]["kind"] == "graph"
    assert ours[0]["name"].startswith("compiled inference graph")
    assert "mm" in ours[0]["name"]
    assert any(e.get("cat") == "cpu_op" for e in trace["traceEvents"])


def test_off_records_nothing():
    assert not _core.profile_enabled()
    before = _core.profile_counts()[0]
    a = torch.randn(8, device="tpu")
    with torchtpu.mode("strict"):
        (a + a).cpu()
    with torchtpu.mode("fused"):
        (a * a).cpu()
    assert _core.profile_counts()[0] == before
    # A CPU-only torchtpu profile does not turn the core's recording on.
    with torchtpu.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
        (a - a).cpu()
    assert prof.tpu_events == [] and _core.profile_counts()[0] == before


def test_ring_keeps_the_newest():
    a = torch.randn(4, device="tpu")
    with torchtpu.mode("strict"), torchtpu.profiler.trace(capacity=3) as t:
        for _ in range(5):
            a = a + 1
    assert len(t.events) == 3 and t.dropped == 2
    assert [e["seq"] for e in t.events] == [2, 3, 4]


def test_trainer_traces_three_steps(tmp_path):
    cfg = load_config(overrides={
        "job": {"dump_folder": str(tmp_path)},
        "model": {"name": "llama", "flavor": "tiny", "dropout": 0.0},
        "training": {"device": "tpu", "steps": 3, "local_batch_size": 2, "seq_len": 32},
        "checkpoint": {"enable": False},
        "metrics": {"log_freq": 1, "peak_flops": 1e9, "plot": False, "progress_bar": False},
    }, argv=["--profiling.enable", "--profiling.profile_freq", "3",
             "--profiling.profiler_warmup", "0", "--profiling.profiler_active", "3"])
    lines = []
    trainer.train(cfg, log=lambda *a, **k: lines.append(" ".join(map(str, a))))
    path = tmp_path / "profile_traces" / "iteration_3" / "rank0_trace.json"
    assert path.exists(), lines
    trace = load(str(path))
    ours = tpu_events(trace)
    assert ours and all(e["args"]["device_time_us"] > 0 for e in ours)
    steps = [e for e in trace["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert len(steps) == 3
    # every step's programs lie in the traced window
    lo = min(e["ts"] for e in steps)
    hi = max(e["ts"] + e["dur"] for e in steps)
    inside = [e for e in ours if lo - 1000 <= e["ts"] <= hi + 1000]
    assert len(inside) >= len(ours) - 1  # the stop's own sync may flush a last one
    assert any("profiler: trace of steps 1..3" in l for l in lines)


def test_profiling_config():
    cfg = load_config(argv=["--profiling.enable_profiling", "--profiling.profile_freq", "5"])
    assert cfg["profiling"]["enable_profiling"] and cfg["profiling"]["profile_freq"] == 5
    with pytest.raises(ConfigError):
        load_config(argv=["--profiling.profile_freq", "2"])  # < warmup 3 + active 1


_COLLECTIVE_SCRIPT = """
import torch, torchtpu, torchtpu.profiler
from torchtpu.distributed import device_collectives as dc
xs = [torch.ones(8, device=f"tpu:{i}") for i in range(2)]
torch.tpu.synchronize()
with torchtpu.profiler.trace() as t:
    dc.all_reduce(xs, "SUM")
for e in t.events:
    print("EVENT", e["kind"], e["device"], e["bytes_in"], e["bytes_out"], e["end_ns"] > 0, e["name"])
"""


def test_collective_one_event_per_device():
    import subprocess
    import sys
    env = dict(os.environ, TORCHTPU_CPU_DEVICES="2")
    out = subprocess.run([sys.executable, "-c", _COLLECTIVE_SCRIPT], env=env,
                         capture_output=True, text=True, timeout=300)
    events = [l.split(None, 6)[1:] for l in out.stdout.splitlines() if l.startswith("EVENT")]
    assert out.returncode == 0 and len(events) == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert sorted(e[1] for e in events) == ["0", "1"]
    for kind, _, bin_, bout, done, name in events:
        assert kind == "collective" and bin_ == bout == "32" and done == "True"
        assert "all_reduce" in name
