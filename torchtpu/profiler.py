"""torchtpu.profiler — what torch.profiler does not already give for "tpu".

torch.profiler itself records the tpu device: the shim registers a Kineto
child profiler through PyTorch's PrivateUse1 profiling interface
(shim/profiler.cpp), so unchanged code

    with torch.profiler.profile(activities=[ProfilerActivity.CPU,
                                            ProfilerActivity.PrivateUse1]) as p:
        step()
    p.export_chrome_trace("trace.json")
    print(p.key_averages().table(sort_by="self_device_time_total"))

gets one device event per program the core launched (the ATen op in strict
eager, "fused graph of N ops (...)", a compiled graph's replay, a
collective), linked to the ATen op it ran under, with its device time and
bytes. See docs/profiling.md.

This module adds:

    # the programs alone, without torch.profiler (cheap: the core's ring)
    with torchtpu.profiler.trace() as t:
        step()
    print(t.table())                     # name, kind, calls, device time, bytes
    t.export_chrome_trace("tpu.json")    # a Chrome trace of the programs

torchtpu.profiler.profile is torch.profiler.profile (kept for code written
against earlier versions, when it merged the programs into the trace).

Clocks: the core stamps CLOCK_MONOTONIC; trace() exports Unix-epoch
microseconds, the offset measured at export. Device time (`device_time_us`)
is launch start to completion-event ready: it includes the launch and, for a
program launched while earlier ones still ran, its wait behind them;
`exec_us` is the share after the device's previous programs finished (exact
if it runs programs in order).
"""
import ctypes
import gzip
import json
import os
import tempfile
import time

import torch
from . import _core

__all__ = ["profile", "trace", "chrome_events", "key_averages", "table",
           "TPU_PID_BASE"]

TPU_PID_BASE = 1 << 20  # pid of device d's process in the trace: base + d


def _monotonic_to_unix_ns():
    """Unix ns minus CLOCK_MONOTONIC ns, from the tightest of a few brackets."""
    best = None
    for _ in range(5):
        a = time.time_ns()
        m = _core.profile_now_ns()
        b = time.time_ns()
        if best is None or b - a < best[0]:
            best = (b - a, (a + b) // 2 - m)
    return best[1]


def _lanes(events):
    """A lane (trace thread) per event such that events on one lane of a
    device never overlap: programs launched before the last one finished
    (asynchronous dispatch) go on the next lane."""
    ends = {}  # device -> [end of the last event on each lane]
    out = []
    for e in events:
        start, end = e["start_ns"], max(e["end_ns"], e["start_ns"])
        lanes = ends.setdefault(e["device"], [])
        for i, last in enumerate(lanes):
            if start >= last:
                lanes[i] = end
                out.append(i)
                break
        else:
            lanes.append(end)
            out.append(len(lanes) - 1)
    return out


def chrome_events(events, base_time_ns=0):
    """Chrome trace events ("ph": "X", one per program, plus process and
    thread names) for core events; timestamps in us since `base_time_ns`
    (Unix ns; PyTorch's trace states its own as baseTimeNanoseconds)."""
    offset = _monotonic_to_unix_ns() - base_time_ns
    out = []
    seen = set()
    busy_until = {}  # device -> latest end so far (exec_us: in-order estimate)
    for e, lane in zip(events, _lanes(events)):
        pid = TPU_PID_BASE + e["device"]
        if e["device"] not in seen:
            seen.add(e["device"])
            out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                        "args": {"name": f"tpu:{e['device']}"}})
            out.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0,
                        "args": {"labels": "tpu programs (torchtpu)"}})
            out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                        "args": {"sort_index": pid}})
        if (e["device"], lane) not in seen:
            seen.add((e["device"], lane))
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": lane,
                        "args": {"name": "programs" if lane == 0 else f"programs ({lane})"}})
        done = e["end_ns"] > 0
        dur_ns = e["end_ns"] - e["start_ns"] if done else e["launched_ns"] - e["start_ns"]
        # A program launched while earlier ones still ran waited for them
        # (if the device runs programs in order): its own share.
        began = max(e["start_ns"], busy_until.get(e["device"], 0))
        exec_ns = max(e["end_ns"] - began, 0) if done else None
        if done:
            busy_until[e["device"]] = max(busy_until.get(e["device"], 0), e["end_ns"])
        out.append({
            "ph": "X", "cat": "tpu_program", "name": e["name"], "pid": pid, "tid": lane,
            "ts": (e["start_ns"] + offset) / 1000.0, "dur": max(dur_ns, 0) / 1000.0,
            "args": {"kind": e["kind"], "device_time_us": dur_ns / 1000.0 if done else None,
                     "exec_us": exec_ns / 1000.0 if done else None,
                     "launch_us": (e["launched_ns"] - e["start_ns"]) / 1000.0,
                     "bytes_in": e["bytes_in"], "bytes_out": e["bytes_out"],
                     "seq": e["seq"], "failed": e["failed"]},
        })
    return out


def key_averages(events):
    """Per program name: calls, total and mean device time (us), bytes; the
    largest total first."""
    rows = {}
    for e in events:
        r = rows.setdefault(e["name"], {"name": e["name"], "kind": e["kind"], "calls": 0,
                                        "total_us": 0.0, "bytes_in": 0, "bytes_out": 0})
        r["calls"] += 1
        if e["end_ns"] > 0:
            r["total_us"] += (e["end_ns"] - e["start_ns"]) / 1000.0
        r["bytes_in"] += e["bytes_in"]
        r["bytes_out"] += e["bytes_out"]
    out = sorted(rows.values(), key=lambda r: -r["total_us"])
    for r in out:
        r["mean_us"] = r["total_us"] / r["calls"]
    return out


def table(events, row_limit=20):
    """key_averages as text, one program name a row."""
    return _format_table(key_averages(events), row_limit)


def _format_table(rows, row_limit):
    w = min(max([len(r["name"]) for r in rows] + [4]), 60)
    lines = [f"{'Name':<{w}}  {'Kind':<10} {'Calls':>6} {'Device total us':>16} "
             f"{'Mean us':>10} {'Bytes in':>12} {'Bytes out':>12}"]
    lines.append("-" * len(lines[0]))
    for r in rows[:row_limit]:
        lines.append(f"{r['name'][:w]:<{w}}  {r['kind']:<10} {r['calls']:>6} "
                     f"{r['total_us']:>16.1f} {r['mean_us']:>10.1f} "
                     f"{r['bytes_in']:>12} {r['bytes_out']:>12}")
    return "\n".join(lines)


def _write_trace(path, data):
    opener = gzip.open if path.endswith(".gz") else open
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
    os.close(fd)
    with opener(tmp, "wt") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _bind():
    """ctypes signatures of the core's mark-based reads (this module's own)."""
    core = _core.core
    if getattr(core.tt_runtime_profile_mark, "restype", None) is not ctypes.c_uint64:
        core.tt_runtime_profile_mark.restype = ctypes.c_uint64
        core.tt_runtime_profile_mark.argtypes = [ctypes.c_void_p]
        core.tt_runtime_profile_read_since.restype = ctypes.c_void_p
        core.tt_runtime_profile_read_since.argtypes = [
            ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(_core.ProfileEvent),
            ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    return core


def _event_dict(e):
    kinds = _core.PROFILE_KINDS
    return {"name": e.name.decode("utf-8", "replace"),
            "kind": kinds[e.kind] if 0 <= e.kind < len(kinds) else str(e.kind),
            "device": e.device, "start_ns": e.start_ns, "launched_ns": e.launched_ns,
            "end_ns": e.end_ns, "bytes_in": e.bytes_in, "bytes_out": e.bytes_out,
            "seq": e.seq, "failed": e.failed, "correlation": e.correlation}


class trace:
    """Records the tpu programs run inside the block: at most the last
    `capacity` (default 65536) are kept, `dropped` counts the others. Usable
    alone or inside a torch.profiler.profile (each reads its own events);
    not reentrant."""

    def __init__(self, capacity=0):
        self.capacity = capacity
        self.events = []
        self.dropped = 0
        self._mark = None

    def start(self):
        torch.tpu.synchronize()  # work launched before does not count
        _core.profile_start(self.capacity)
        self._mark = _bind().tt_runtime_profile_mark(_core.runtime())

    def stop(self):
        try:
            torch.tpu.synchronize()  # flushes fused work; every end is stamped
        finally:
            _core.profile_stop()
        core, rt = _bind(), _core.runtime()
        total = core.tt_runtime_profile_mark(rt) - self._mark
        cap = min(total, self.capacity or 65536)
        buf = (_core.ProfileEvent * max(cap, 1))()
        n = ctypes.c_int()
        _core.check(core.tt_runtime_profile_read_since(rt, self._mark, buf, cap,
                                                       ctypes.byref(n)))
        self.events = [_event_dict(e) for e in buf[:n.value]]
        self.dropped = total - n.value

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def export_chrome_trace(self, path):
        """Writes a Chrome trace of the programs alone (a "tpu:N" process per
        device). Inside a torch.profiler.profile, that profile's own trace
        already holds them, linked to their ops."""
        _write_trace(path, {"traceEvents": chrome_events(self.events),
                            "displayTimeUnit": "ms"})

    def key_averages(self):
        return key_averages(self.events)

    def table(self, row_limit=20):
        return table(self.events, row_limit)


# torch.profiler.profile records the tpu programs itself now; the name stays
# for code written against earlier torchtpu versions.
profile = torch.profiler.profile
