"""torchtpu.profiler — the programs run on "tpu", in PyTorch's Chrome trace.

While profiling is on, the core records one event per program it launches
(runtime/profile.c): its name (the ATen op in strict eager, "fused graph of N
ops (...)" for a fused flush, the compiled graph's name for a torch.compile
replay, the collective's name), the host time the launch began, the time its
completion event became ready, and the bytes of its parameters and results.
Off by default; then a launch costs one flag test.

Two ways to use it:

    # drop-in for torch.profiler.profile (same arguments): the trace it
    # exports holds PyTorch's CPU events plus a "tpu:0" process
    with torchtpu.profiler.profile(activities=[ProfilerActivity.CPU,
                                               ProfilerActivity.PrivateUse1]) as prof:
        step()
    prof.export_chrome_trace("trace.json")
    print(prof.tpu_table())

    # on its own, or beside a torch.profiler.profile the caller runs
    with torch.profiler.profile() as p, torchtpu.profiler.trace() as t:
        step()
    t.export_chrome_trace("trace.json", p)   # p optional

Why not plain torch.profiler.profile(activities=[..., PrivateUse1]): PyTorch
accepts that activity, but device events only reach its trace through a C++
libkineto::IActivityProfiler registered with REGISTER_PRIVATEUSE1_PROFILER;
without one it records nothing for the device. This module merges our events
into the trace PyTorch exports instead (as PyTorch's CUPTI monitor does).

Clocks: the core stamps CLOCK_MONOTONIC; PyTorch's trace holds microseconds
since its "baseTimeNanoseconds" (Unix time). The offset between the two
clocks is measured once per export.

Device time (`device_time_us`, the event's duration) is launch start to
completion-event ready: it includes the launch and, for a program launched
while earlier ones still ran, its wait behind them; `exec_us` is the share
after the device's previous programs finished (exact if it runs programs in
order). Overlapping programs go on separate rows ("programs (1)", ...).
"""
import gzip
import json
import os
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity

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
    rows = key_averages(events)
    w = min(max([len(r["name"]) for r in rows] + [4]), 60)
    lines = [f"{'Name':<{w}}  {'Kind':<10} {'Calls':>6} {'Device total us':>16} "
             f"{'Mean us':>10} {'Bytes in':>12} {'Bytes out':>12}"]
    lines.append("-" * len(lines[0]))
    for r in rows[:row_limit]:
        lines.append(f"{r['name'][:w]:<{w}}  {r['kind']:<10} {r['calls']:>6} "
                     f"{r['total_us']:>16.1f} {r['mean_us']:>10.1f} "
                     f"{r['bytes_in']:>12} {r['bytes_out']:>12}")
    return "\n".join(lines)


def _load_trace(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def _write_trace(path, data):
    opener = gzip.open if path.endswith(".gz") else open
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
    os.close(fd)
    with opener(tmp, "wt") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _merge(path, events):
    """Adds the tpu events to the Chrome trace at `path` (rewritten)."""
    data = _load_trace(path)
    base = int(data.get("baseTimeNanoseconds", 0) or 0)
    data.setdefault("traceEvents", []).extend(chrome_events(events, base))
    _write_trace(path, data)


class trace:
    """Records the tpu programs run inside the block (the core's ring holds
    the last `capacity` of them). Usable alone or beside a
    torch.profiler.profile; not reentrant."""

    def __init__(self, capacity=0):
        self.capacity = capacity
        self.events = []
        self.dropped = 0

    def start(self):
        torch.tpu.synchronize()  # work launched before does not count
        _core.profile_start(self.capacity)

    def stop(self):
        try:
            torch.tpu.synchronize()  # flushes fused work; every end is stamped
        finally:
            _core.profile_stop()
        self.events = _core.profile_read(self.capacity or 65536)
        self.dropped = _core.profile_counts()[1]

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def export_chrome_trace(self, path, torch_profile=None):
        """Writes a Chrome trace: `torch_profile`'s (a torch.profiler.profile
        that has stopped) with the tpu events added, or theirs alone."""
        if torch_profile is not None:
            torch_profile.export_chrome_trace(path)
            if isinstance(torch_profile, profile):
                return  # already merged its own events
            _merge(path, self.events)
        else:
            _write_trace(path, {"traceEvents": chrome_events(self.events),
                                "displayTimeUnit": "ms"})

    def key_averages(self):
        return key_averages(self.events)

    def table(self, row_limit=20):
        return table(self.events, row_limit)


class profile(torch.profiler.profile):
    """torch.profiler.profile that also records the tpu programs of each
    recorded window when ProfilerActivity.PrivateUse1 is among `activities`
    (the default activities include it), and exports them in its trace.
    `tpu_events` holds the last window's events."""

    def __init__(self, *args, tpu_capacity=0, **kwargs):
        super().__init__(*args, **kwargs)
        self._tpu = trace(tpu_capacity)
        self._tpu_on = ProfilerActivity.PrivateUse1 in self.activities
        self._tpu_recording = False

    @property
    def tpu_events(self):
        return self._tpu.events

    def start_trace(self):
        super().start_trace()
        if self._tpu_on:
            self._tpu.start()
            self._tpu_recording = True

    def stop_trace(self):
        if self._tpu_recording:
            self._tpu_recording = False
            self._tpu.stop()
        super().stop_trace()

    def export_chrome_trace(self, path, use_python_export=False):
        super().export_chrome_trace(path, use_python_export)
        if self._tpu_on:
            _merge(path, self._tpu.events)

    def tpu_key_averages(self):
        return self._tpu.key_averages()

    def tpu_table(self, row_limit=20):
        return self._tpu.table(row_limit)
