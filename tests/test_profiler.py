"""The tpu device in torch.profiler, unchanged (shim/profiler.cpp: a Kineto
child profiler through PyTorch's PrivateUse1 profiling interface): every
program the core launches (strict op, fused graph, compiled graph,
collective) is a device event linked to the ATen op that ran it, with its
device time and bytes, in export_chrome_trace and key_averages();
torchtpu.profiler.trace records the programs alone; the trainer's
[profiling] window; nothing recorded while off.

References: the ops each step runs are PyTorch's own CPU events in the same
trace (a device event must name an op that ran, inside that op's time), and
the byte counts are the tensors' sizes."""
import json
import os

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, record_function

import torchtpu
import torchtpu.profiler
from torchtpu import _core
from torchtpu import train as trainer
from torchtpu.trainer.config import ConfigError, load_config

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def load(path):
    with open(path) as f:
        return json.load(f)


def kernels(trace):
    return [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]


def cpu_ops(trace):
    return {e["args"]["External id"]: e for e in trace["traceEvents"]
            if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}


def inside(inner, outer, slack_us=1.0):
    return (outer["ts"] - slack_us <= inner["ts"]
            and inner["ts"] <= outer["ts"] + outer["dur"] + slack_us)


def test_strict_ops_under_their_aten_ops(tmp_path):
    a = torch.randn(64, 32, device="tpu")
    b = torch.randn(32, 16, device="tpu")
    c = torch.randn(64, 16, device="tpu")
    torch.tpu.synchronize()
    with torchtpu.mode("strict"):
        with torch.profiler.profile(activities=ACTIVITIES) as prof:
            y = torch.mm(a, b)
            z = y * c
    path = str(tmp_path / "trace.json")
    prof.export_chrome_trace(path)
    trace = load(path)
    ours = kernels(trace)
    assert [e["name"] for e in ours] == ["aten::mm (tpu program)",
                                         "aten::mul.Tensor (tpu program)"]
    mm, mul = ours
    assert mm["args"]["bytes in"] == (64 * 32 + 32 * 16) * 4
    assert mm["args"]["bytes out"] == y.numel() * 4
    assert mul["args"]["bytes in"] == (y.numel() + c.numel()) * 4
    assert mul["args"]["bytes out"] == z.numel() * 4
    ops = cpu_ops(trace)
    for k, op in ((mm, "aten::mm"), (mul, "aten::mul")):
        assert k["ph"] == "X" and k["args"]["kind"] == "op" and k["dur"] > 0
        parent = ops[k["args"]["External id"]]  # linked to the op that ran it
        assert parent["name"] == op and inside(k, parent)
    names = {e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert "tpu:0" in names
    # key_averages: the device time of each op is its program's
    avg = {e.key: e for e in prof.key_averages()}
    for k, op in ((mm, "aten::mm"), (mul, "aten::mul")):
        assert avg[op].device_time_total == pytest.approx(k["dur"], rel=1e-3, abs=1e-3)
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=10)
    assert "aten::mm" in table and "TPU total" in table


def test_training_steps_unchanged_user_code(tmp_path):
    """Three training steps in torch.profiler.profile: every device event is
    linked to an ATen op (forward, backward, optimizer) that ran it, the
    record_function range spans its programs on the device row, and
    key_averages() lists device time for the tpu ops."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                            torch.nn.Linear(32, 4)).to("tpu")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(8, 16, device="tpu")
    y = torch.randn(8, 4, device="tpu")

    def step():
        with record_function("forward_pass"):
            loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    step()
    torch.tpu.synchronize()
    with torch.profiler.profile(activities=ACTIVITIES) as prof:
        for _ in range(3):
            step()
    path = str(tmp_path / "steps.json")
    prof.export_chrome_trace(path)
    trace = load(path)
    ours, ops = kernels(trace), cpu_ops(trace)
    assert len(ours) >= 3 * 6  # linear x2, loss, backward, optimizer ...
    for k in ours:
        parent = ops[k["args"]["External id"]]
        assert parent["name"].startswith("aten::") and inside(k, parent), (k, parent)
    parents = {ops[k["args"]["External id"]]["name"] for k in ours}
    assert {"aten::addmm", "aten::mse_loss_backward"} <= parents
    spans = [e for e in trace["traceEvents"] if e.get("cat") == "gpu_user_annotation"
             and e["name"] == "forward_pass"]
    assert len(spans) == 3
    for s in spans:
        within = [k for k in ours if s["ts"] <= k["ts"] <= s["ts"] + s["dur"]]
        assert within and any("addmm" in k["name"] for k in within)
    avg = {e.key: e for e in prof.key_averages()}
    assert avg["aten::addmm"].device_time_total > 0
    assert avg["aten::addmm"].device_type == DeviceType.CPU  # the op, with its device time
    assert sum(e.self_device_time_total for e in prof.key_averages()) > 0
    programs = [e for e in prof.profiler.kineto_results.events()
                if e.device_type() == DeviceType.PrivateUse1 and not e.is_user_annotation()]
    assert len(programs) == len(ours)
    assert sum(e.name() == "aten::addmm (tpu program)" for e in programs) == 6
    addmm = [k for k in ours if k["name"] == "aten::addmm (tpu program)"]
    assert sum(k["args"]["bytes out"] for k in addmm) == 3 * (8 * 32 + 8 * 4) * 4


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
    ours = [e for e in load(path)["traceEvents"] if e.get("cat") == "tpu_program"]
    assert len(ours) == 1 and ours[0]["args"]["device_time_us"] > 0


def test_compiled_graph_and_trace_beside_torch_profiler(tmp_path):
    f = torch.compile(lambda x, w: torch.relu(x @ w) + 1, backend="tpu")
    x = torch.randn(8, 32, device="tpu")
    w = torch.randn(32, 4, device="tpu")
    f(x, w)
    f(x, w)  # captured; later calls replay it
    torch.tpu.synchronize()
    with torch.profiler.profile(activities=ACTIVITIES) as p, \
            torchtpu.profiler.trace() as t:
        f(x, w)
    path = str(tmp_path / "compiled.json")
    p.export_chrome_trace(path)
    ours = kernels(load(path))
    assert len(ours) == 1 and len(t.events) == 1  # both readers see the one replay
    assert ours[0]["args"]["kind"] == "graph" and t.events[0]["kind"] == "graph"
    assert ours[0]["name"].startswith("compiled inference graph") and "mm" in ours[0]["name"]
    assert ours[0]["name"] == t.events[0]["name"]


def test_off_records_nothing():
    assert not _core.profile_enabled()
    before = _core.profile_counts()[0]
    a = torch.randn(8, device="tpu")
    with torchtpu.mode("strict"):
        (a + a).cpu()
    with torchtpu.mode("fused"):
        (a * a).cpu()
    assert _core.profile_counts()[0] == before


_CPU_ONLY_SCRIPT = """
import json, sys, torch, torchtpu
from torch.profiler import ProfilerActivity
from torchtpu import _core
a = torch.randn(8, device="tpu")
torch.tpu.synchronize()
with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
    (a - a).cpu()
prof.export_chrome_trace(sys.argv[1])
print("RECORDING", _core.profile_enabled())
"""


def test_cpu_activity_alone_records_the_runtime(tmp_path):
    """ProfilerActivity.CPU alone (what TorchTitan asks for on a device that
    is neither CUDA nor XPU) includes PyTorch's PRIVATEUSE1_RUNTIME: the
    programs still show, linked to their ops; recording ends with the trace.
    In a fresh process: one that traced PrivateUse1 before would hide a
    profiler PyTorch never handed to Kineto."""
    import subprocess
    import sys
    path = str(tmp_path / "cpu.json")
    out = subprocess.run([sys.executable, "-c", _CPU_ONLY_SCRIPT, path],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "RECORDING False" in out.stdout
    trace = load(path)
    ours = kernels(trace)
    assert [k["name"] for k in ours] == ["aten::sub.Tensor (tpu program)"]
    assert cpu_ops(trace)[ours[0]["args"]["External id"]]["name"] == "aten::sub"


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
    ours = kernels(trace)
    assert ours and all(e["dur"] > 0 for e in ours)
    ops = cpu_ops(trace)
    assert all(e["args"]["External id"] in ops for e in ours)
    steps = [e for e in trace["traceEvents"] if e.get("cat") == "user_annotation"
             and str(e.get("name", "")).startswith("ProfilerStep#")]
    assert len(steps) == 3
    on_device = [e for e in trace["traceEvents"] if e.get("cat") == "gpu_user_annotation"
                 and str(e.get("name", "")).startswith("ProfilerStep#")]
    assert len(on_device) == 3  # each step's span over its programs
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


def test_profiling_keeps_device_errors():
    """The trace's end waits for the window's programs without taking their
    errors: a device-side check in the window still raises, at the
    synchronize PyTorch's profiler does on leaving (torch.tpu.synchronize),
    and then the device is clean again."""
    x = torch.randn(4, device="tpu")
    idx = torch.tensor([7], device="tpu")
    torch.tpu.synchronize()
    with torchtpu.mode("strict"):
        with pytest.raises(IndexError, match="out of bounds"):
            with torch.profiler.profile(activities=ACTIVITIES):
                x[idx]
        # PyTorch's profiler never stops Kineto when its closing synchronize
        # raises: stop it, or every later test runs under the profiler.
        if torch._C._autograd._profiler_enabled():
            torch._C._autograd._disable_profiler()
        torch.tpu.synchronize()
