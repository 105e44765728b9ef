"""Upstream TorchTitan (torchtitan==0.3.0), unchanged, with
--profiler.enable_profiling on "tpu": its own torch.profiler.profile (which
asks for ProfilerActivity.CPU alone on any device but CUDA and XPU) writes a
Chrome trace holding the tpu programs of the profiled step as device events,
each linked to the ATen op of the step that ran it (shim/profiler.cpp: the
CPU activity includes PyTorch's PRIVATEUSE1_RUNTIME). The reference is
PyTorch's own CPU events in the same trace: every device event must name
an op that ran, and lie inside that op's time."""
import glob
import gzip
import json
import os
import sys

import pytest

pytest.importorskip("torchtitan")  # scripts/setup.sh installs it

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_torchtitan import COMMON, _run  # noqa: E402
from torchtitan_assets import make_assets  # noqa: E402


def test_enable_profiling_writes_tpu_device_events(tmp_path):
    root = str(tmp_path)
    make_assets(root)
    dump = os.path.join(root, "out")
    log = _run(root, 1, ["-m", "torchtitan.train"],
               COMMON + ["--dump_folder", dump, "--profiler.enable_profiling",
                         "--profiler.profile_freq", "3", "--profiler.profiler_warmup", "1",
                         "--profiler.profiler_active", "1"])
    assert "TPU capacity" in log, log[-4000:]
    traces = glob.glob(os.path.join(dump, "**", "rank0_trace.json*"), recursive=True)
    assert len(traces) == 1, log[-4000:]
    with (gzip.open if traces[0].endswith(".gz") else open)(traces[0], "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    ops = {e["args"]["External id"]: e for e in events
           if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    programs = [e for e in events if e.get("cat") == "kernel"]
    assert len(programs) > 20, len(programs)  # forward, backward, optimizer of one step
    for p in programs:
        op = ops[p["args"]["External id"]]
        # an ATen op, or the autograd.Function of a compiled region (its replay)
        assert op["name"].startswith(("aten::", "torchtpu::", "CompiledFunction")), op
        assert op["ts"] - 1 <= p["ts"] <= op["ts"] + op["dur"] + 1, (p, op)
        assert p["dur"] > 0 and p["args"]["bytes out"] >= 0
    parents = {ops[p["args"]["External id"]]["name"] for p in programs}
    assert "aten::mm" in parents or "aten::addmm" in parents, sorted(parents)
    names = {e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert "tpu:0" in names
