"""torch.tpu.memory: torch.cuda.memory's tools for the "tpu" device, with
torch.cuda's names, signatures and file formats.

- Statistics: memory_stats (torch.cuda.memory_stats' keys, those TorchTitan
  reads among them: active_bytes.all.peak, reserved_bytes.all.peak,
  num_alloc_retries, num_ooms), memory_allocated and the rest, mem_get_info,
  memory_usage.
- A per-process limit: set_per_process_memory_fraction(fraction) makes the
  allocator refuse, with torch.OutOfMemoryError naming the limit, any storage
  that would bring the bytes in use past fraction * total memory.
- Allocation history and snapshots: _record_memory_history, _snapshot,
  _dump_snapshot write what torch.cuda.memory writes, so PyTorch's own
  viewers read it (`python -m torch.cuda._memory_viz trace_plot|segment_plot|
  stats|trace snapshot.pickle`, pytorch.org/memory_viz).

What a tpu snapshot holds (docs/memory.md): a segment is one PJRT buffer,
with one block, the storage that holds it (its address is the storage's
data_ptr()); the blocks' sizes add up to memory_allocated() at the snapshot.
There is no caching allocator: reserved equals allocated, a buffer is never
split, cached or reused, and the pool, split and retry counters stay 0. The
history records segment_alloc + alloc when PyTorch gets a tpu storage (a
storage is its own segment) and free_requested + free_completed +
segment_free when it lets go of one (at once: no stream waits before a tpu
free), with the Python (and with stacks="all", C++) stack of the caller,
captured as CUDA's allocator captures it."""
import ctypes
import json
import pickle
import sys

import torch

from . import _core
from . import tpu as _tpu

__all__ = [
    "get_per_process_memory_fraction", "set_per_process_memory_fraction",
    "empty_cache", "memory_stats", "memory_stats_as_nested_dict",
    "reset_accumulated_memory_stats", "reset_peak_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached", "memory_allocated",
    "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_cached",
    "max_memory_cached", "memory_snapshot", "memory_summary", "mem_get_info",
    "memory_usage", "device_memory_used", "get_allocator_backend",
]

# --- statistics ------------------------------------------------------------------------
#
# Device buffers are counted by the core for all devices together.


def memory_stats(device=None):
    """torch.cuda.memory_stats' keys (from the allocator's statistics, as
    torch.accelerator.memory_stats), plus host_to_device_bytes and
    device_to_host_bytes. There is no caching allocator: reserved equals
    allocated, and the pool, split and retry counters stay 0; num_ooms counts
    the allocations the per-process limit refused."""
    if not _tpu.is_initialized() and not _tpu.is_available():
        return {}
    _tpu._lazy_init()
    out = dict(torch.accelerator.memory_stats(torch.device("tpu", _tpu._index(device))))
    st = _core.stats()
    out["host_to_device_bytes"] = st["host_to_device_bytes"]
    out["device_to_host_bytes"] = st["device_to_host_bytes"]
    return dict(sorted(out.items()))


def memory_stats_as_nested_dict(device=None):
    nested = {}
    for key, value in memory_stats(device).items():
        node = nested
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return nested


def memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


memory_cached = memory_reserved
max_memory_cached = max_memory_reserved


def reset_peak_memory_stats(device=None):
    del device
    _tpu._lazy_init()
    _core.reset_peak()


reset_max_memory_allocated = reset_peak_memory_stats
reset_max_memory_cached = reset_peak_memory_stats


def reset_accumulated_memory_stats(device=None):
    """Nothing accumulates: the allocator keeps current and peak values only."""
    del device


def mem_get_info(device=None):
    """(free, total) bytes of the device's memory, as torch.cuda.mem_get_info
    (which the per-process fraction does not change either): host memory on
    the CPU plugin (free is what the OS reports available); raises
    NotImplementedError for a device kind whose memory size is unknown."""
    _tpu._lazy_init()
    return torch.accelerator.get_memory_info(torch.device("tpu", _tpu._index(device)))


def memory_usage(device=None):
    """The percent (an int, 0-100) of the device's memory this process holds:
    memory_reserved() / total memory. torch.cuda.memory_usage reports
    nvidia-smi's memory-controller busy time instead, which PJRT does not
    report; this is the closest figure a tpu has, and says so."""
    total = mem_get_info(device)[1]
    return int(round(100 * memory_reserved(device) / total)) if total else 0


def device_memory_used(device=None):
    return memory_reserved(device)


def memory_summary(device=None, abbreviated=False):
    del abbreviated
    st = memory_stats(device)
    lines = [f"tpu memory ({_tpu.get_device_name(device)}):"]
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
                "reserved_bytes.all.current", "reserved_bytes.all.peak",
                "allocation.all.current", "num_ooms", "host_to_device_bytes",
                "device_to_host_bytes"):
        lines.append(f"  {key:32s} {st.get(key, 0):>16,d}")
    fraction = get_per_process_memory_fraction(device)
    if fraction < 1.0:
        lines.append(f"  {'per-process fraction':32s} {fraction:>16.4f}")
    return "\n".join(lines) + "\n"


def memory_snapshot(mempool_id=None, include_traces=True):
    """The segments of _snapshot(): one per live PJRT buffer."""
    del mempool_id, include_traces
    return _snapshot()["segments"]


def empty_cache():
    """Nothing is cached: device buffers are freed with their storages."""


def get_allocator_backend():
    """"native": one PJRT buffer per storage, no caching allocator."""
    return "native"


# --- the per-process limit ---------------------------------------------------------------

_fractions = {}  # device index -> the fraction last set


def set_per_process_memory_fraction(fraction, device=None):
    """Limits this process's tpu memory to fraction * the device's total
    memory (mem_get_info()[1]): an allocation that would bring the bytes in
    use (memory_allocated()) past it raises torch.OutOfMemoryError naming the
    limit, and counts in memory_stats()["num_ooms"]. The core counts all
    devices of the process together, so the limit last set holds for them all.
    Op results are checked too: on the CPU plugin their program has run by
    then, and its results are dropped before the op raises."""
    _tpu._lazy_init()
    idx = _tpu._index(device)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if not 0 <= fraction <= 1:  # NaN too
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    try:
        total = mem_get_info(idx)[1]
    except NotImplementedError as e:
        raise NotImplementedError(
            f"torch.tpu.set_per_process_memory_fraction({fraction}): {e}") from None
    # 0 bytes would mean "no limit" to the core: a fraction of 0 allows 1 byte.
    _lib().tt_runtime_set_memory_limit(_core.runtime(), max(1, int(fraction * total)))
    _fractions[idx] = fraction


def get_per_process_memory_fraction(device=None):
    """The fraction set for the device (1.0 when none was set)."""
    _tpu._lazy_init()
    return _fractions.get(_tpu._index(device), 1.0)


# --- allocation history and snapshots ------------------------------------------------------

_ENABLED = (None, "state", "all")
_CONTEXT = {None: 0, "state": 1, "alloc": 2, "all": 3}
_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc",
            "segment_free", "oom", "snapshot")
_skip_actions = frozenset()
_libs = None


class _Lib:
    """The native entry points: the core's (ctypes), and the shim's snapshot
    called holding the GIL (ctypes.PyDLL), since it symbolizes Python frames."""

    def __init__(self):
        _core.load()
        core = _core.core
        core.tt_runtime_set_memory_limit.restype = None
        core.tt_runtime_set_memory_limit.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        self.tt_runtime_set_memory_limit = core.tt_runtime_set_memory_limit
        shim = ctypes.CDLL(_core.SHIM_PATH)
        self.record = shim.torchtpu_shim_record_memory_history
        self.record.restype = None
        self.record.argtypes = [ctypes.c_bool, ctypes.c_bool, ctypes.c_int, ctypes.c_bool,
                                ctypes.c_int64, ctypes.c_bool]
        self.free = shim.torchtpu_shim_free
        self.free.restype = None
        self.free.argtypes = [ctypes.c_void_p]
        self.snapshot = ctypes.PyDLL(_core.SHIM_PATH).torchtpu_shim_memory_snapshot
        self.snapshot.restype = ctypes.c_bool
        self.snapshot.argtypes = [ctypes.POINTER(ctypes.c_void_p)]


def _lib():
    global _libs
    if _libs is None:
        _libs = _Lib()
    return _libs


def _record_memory_history(enabled="all", context="all", stacks="all",
                           max_entries=sys.maxsize, device=None, clear_history=False,
                           compile_context=False, global_record_annotations=False,
                           skip_actions=None, **legacy):
    """torch.cuda.memory._record_memory_history for tpu storages.

    enabled: None (stop), "state" (keep the stacks of live allocations), "all"
    (also keep a history of alloc/free/oom events, the last `max_entries`).
    context: which stacks are kept (None, "state", "alloc", "all": frees
    too); stacks: "python" (Python and TorchScript frames) or "all" (C++ too;
    symbolizing them at the snapshot takes much longer). clear_history drops
    the events kept so far; skip_actions leaves those actions out of
    snapshots. The legacy spelling _record_memory_history(True/False, ...)
    means "all" / None. compile_context and global_record_annotations are
    accepted and ignored (no compile-kernel or annotation records on tpu);
    the history covers every tpu device (`device` is ignored)."""
    del device, compile_context, global_record_annotations
    if isinstance(enabled, bool):  # the legacy form
        max_entries = legacy.pop("trace_alloc_max_entries", 1)
        context = "all" if legacy.pop("record_context", True) else None
        stacks = "all" if legacy.pop("record_context_cpp", False) else "python"
        legacy.pop("trace_alloc_record_context", None)
        enabled = "all" if enabled else None
    if legacy:
        raise TypeError(f"_record_memory_history() got unexpected arguments {sorted(legacy)}")
    if enabled not in _ENABLED:
        raise ValueError(f"_record_memory_history: enabled must be one of {_ENABLED}, "
                         f"got {enabled!r}")
    if context not in _CONTEXT:
        raise ValueError(f"_record_memory_history: context must be one of "
                         f"{tuple(_CONTEXT)}, got {context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"_record_memory_history: stacks must be 'python' or 'all', "
                         f"got {stacks!r}")
    if not isinstance(max_entries, int) or max_entries < 0:
        raise ValueError(f"_record_memory_history: max_entries must be an int >= 0, "
                         f"got {max_entries!r}")
    bad = set(skip_actions or ()) - set(_ACTIONS)
    if bad:
        raise ValueError(f"_record_memory_history: unknown skip_actions {sorted(bad)} "
                         f"(valid: {list(_ACTIONS)})")
    global _skip_actions
    _skip_actions = frozenset(skip_actions or ())
    _tpu._lazy_init()
    _lib().record(enabled is not None, enabled == "all", _CONTEXT[context], stacks == "all",
                  min(max_entries, 2**63 - 1), bool(clear_history))


def _raw_snapshot():
    lib = _lib()
    text = ctypes.c_void_p()
    ok = lib.snapshot(ctypes.byref(text))
    if not text.value:
        raise MemoryError("torch.tpu.memory._snapshot: out of host memory")
    try:
        body = ctypes.string_at(text.value).decode("utf-8", "replace")
    finally:
        lib.free(text)
    if not ok:
        raise RuntimeError(f"torch.tpu.memory._snapshot: {body}")
    return json.loads(body)


def _segment(address, device, size, frames):
    return {
        "device": device, "address": address, "total_size": size,
        "allocated_size": size, "active_size": size, "requested_size": size,
        "stream": 0, "segment_type": "large" if size >= (1 << 20) else "small",
        "segment_pool_id": (0, 0), "is_expandable": False, "frames": frames,
        "blocks": [{"address": address, "size": size, "requested_size": size,
                    "state": "active_allocated", "frames": frames}],
    }


# The bytes a deferred (fused eager) program holds until it runs: counted in
# memory_allocated(), owned by no storage.
_DEFERRED_FRAME = {"filename": "<torchtpu>", "line": 0,
                   "name": "held by a deferred program (fused eager) until it runs"}


def _snapshot(device=None, augment_with_fx_traces=False):
    """torch.cuda.memory._snapshot()'s dictionary for tpu: "segments" (one per
    live PJRT buffer: its storage's address, size, device and allocation
    stack; while recording, also an empty one per recorded storage that holds
    no buffer) and "device_traces" (one list of events per device, oldest
    first: segment_alloc + alloc when PyTorch gets a storage, free_requested +
    free_completed + segment_free when it lets go of one, oom). The active
    blocks' sizes add up to memory_allocated() at this instant.
    Takes no synchronisation: programs still running hold their results'
    buffers already."""
    del device  # all devices, as CUDA's snapshot
    _tpu._lazy_init()
    raw = _raw_snapshot()
    frames = [{"filename": f, "line": line, "name": name} for f, line, name in raw["frames"]]
    segments, listed = [], 0
    for address, dev, size, _recorded, stack in raw["buffers"]:
        segments.append(_segment(address, dev, size, [frames[i] for i in stack]))
        listed += size
    for address, dev, size, stack in raw["unwritten"]:
        # A storage PyTorch holds whose value is not on the device (not written
        # yet, or due from a deferred program): no device memory, so an empty
        # segment whose one block is inactive (size: what PyTorch asked for).
        seg = _segment(address, dev, 0, [frames[i] for i in stack])
        seg["blocks"][0].update(state="inactive", requested_size=size)
        segments.append(seg)
    deferred = raw["bytes_in_use"] - listed
    if deferred > 0:
        segments.append(_segment(0, _tpu.current_device(), deferred, [dict(_DEFERRED_FRAME)]))
    traces = [[] for _ in range(max(1, _tpu.device_count()))]
    for action, address, size, dev, time_us, device_free, stack in raw["events"]:
        if action in _skip_actions:
            continue
        entry = {"action": action, "addr": address, "size": size, "stream": 0,
                 "time_us": time_us, "frames": [frames[i] for i in stack]}
        if action == "oom":
            del entry["addr"]
            entry["device_free"] = device_free
        traces[dev if 0 <= dev < len(traces) else 0].append(entry)
    snapshot = {"segments": sorted(segments, key=lambda s: s["address"]),
                "device_traces": traces, "allocator_settings": {}}
    if augment_with_fx_traces:
        from torch._utils import _augment_memory_snapshot_stack_traces
        snapshot = _augment_memory_snapshot_stack_traces(snapshot)
    return snapshot


def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
    """Pickles _snapshot() to `filename`, as torch.cuda.memory._dump_snapshot:
    `python -m torch.cuda._memory_viz trace_plot filename -o out.html` and
    pytorch.org/memory_viz read it."""
    s = _snapshot(augment_with_fx_traces=augment_with_fx_traces)
    with open(filename, "wb") as f:
        pickle.dump(s, f)


# `import torch.tpu.memory` finds this module, as `import torch.cuda.memory` does.
sys.modules.setdefault("torch.tpu.memory", sys.modules[__name__])
