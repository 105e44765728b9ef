"""torch.tpu.memory (issue 42): torch.cuda.memory's tools on "tpu", checked
against what they describe.

- A snapshot of a training step, taken with _record_memory_history and
  _dump_snapshot, loads in PyTorch's own memory-viz tooling
  (torch.cuda._memory_viz: segsum's accounting, trace, trace_plot and
  segment_plot, the command line), its active blocks add up to
  torch.tpu.memory_allocated() at the snapshot, and every live tensor of
  the step (parameters, gradients, optimizer state) is a segment at its
  storage's data_ptr() with its storage's size and the stack that made it.
- The history holds each allocation and free of a storage with its size,
  address and stack, bounded by max_entries.
- set_per_process_memory_fraction: an allocation past the limit raises
  torch.OutOfMemoryError naming the limit (the allocator's and an op's
  result alike), changes nothing in memory, counts in num_ooms and in the
  history.
- The memory_stats keys TorchTitan reads, read by TorchTitan's own
  DeviceMemoryMonitor."""
import base64
import gc
import json
import os
import pickle
import re
import subprocess
import sys

import pytest
import torch

import torchtpu
from torch.cuda import _memory_viz

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20


@pytest.fixture
def history():
    """Records with Python stacks for the test, then stops and clears."""
    torch.tpu.memory._record_memory_history(stacks="python", max_entries=100000,
                                             clear_history=True)
    yield
    torch.tpu.memory._record_memory_history(enabled=None, clear_history=True)


def _active(snapshot):
    return sum(b["size"] for seg in snapshot["segments"] for b in seg["blocks"]
               if b["state"] == "active_allocated")


def _make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 10)).to("tpu")


def _train_step(model, opt, x, y):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    return loss


def _replay_as_segment_plot(snap):
    """MemoryViz.js's segment view (segment_plot) rebuilds the memory before
    each event by undoing the later ones from the snapshot's state, and draws
    each active block inside its segment: undo every event and check that
    each block has its segment and each undone segment_alloc finds its own."""
    segments = {s["address"]: s["total_size"] for s in snap["segments"]}
    blocks = {b["address"]: b["size"] for s in snap["segments"] for b in s["blocks"]
              if b["state"] == "active_allocated"}
    for e in reversed(snap["device_traces"][0]):
        if e["action"] == "segment_free":
            segments[e["addr"]] = e["size"]
        elif e["action"] == "segment_alloc":
            assert segments.pop(e["addr"], None) is not None, e
        elif e["action"] == "free_completed":
            blocks[e["addr"]] = e["size"]
        elif e["action"] == "alloc":
            blocks.pop(e["addr"], None)
        for addr, size in blocks.items():
            assert any(a <= addr and addr + size <= a + n for a, n in segments.items()), e


def _viz_html_snapshot(html):
    """The snapshot embedded in memory_viz's HTML (its base64 pickle)."""
    blob = json.loads(re.search(r"const local_files = (\[.*?\])\n", html).group(1))
    return pickle.loads(base64.b64decode(blob[0]["base64"]))


def test_training_step_snapshot_loads_in_memory_viz(history, tmp_path):
    model = _make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64, device="tpu"), torch.randint(0, 10, (32,), device="tpu")
    for _ in range(2):
        loss = _train_step(model, opt, x, y)
    path = str(tmp_path / "snapshot.pickle")
    gc.collect()  # tensors left by earlier tests' tracebacks must not be freed in between
    torch.tpu.synchronize()
    torch.tpu.memory._dump_snapshot(path)
    allocated = torch.tpu.memory_allocated()
    with open(path, "rb") as f:
        snap = pickle.load(f)

    # The blocks add up to memory_allocated(), in our sum and in segsum's
    # accounting (which raises on a block that does not fit its segment).
    assert _active(snap) == allocated > 0
    summary = _memory_viz.segsum(snap)
    assert f"total_allocated: {_memory_viz.Bytes(allocated)}" in summary
    assert f"segments: {len(snap['segments'])}" in summary

    # Every live tensor of the step is a segment at its storage's address,
    # of its storage's size.
    by_address = {seg["address"]: seg for seg in snap["segments"]}
    live = [p for p in model.parameters()] + [p.grad for p in model.parameters()]
    live += [v for st in opt.state.values() for v in st.values() if v.device.type == "tpu"]
    live += [x, y, loss]
    for t in live:
        storage = t.untyped_storage()
        seg = by_address.get(storage.data_ptr())
        assert seg is not None, f"no segment for a live {tuple(t.shape)} {t.dtype} tensor"
        assert seg["total_size"] == storage.nbytes()
        assert seg["device"] == 0 and seg["blocks"][0]["state"] == "active_allocated"

    # Stacks: the parameters were made in _make_model, the loss and the
    # optimizer state in _train_step, each in this file. (Gradients are made
    # by the autograd engine's device thread, which has no Python stack: as
    # on CUDA, stacks="all" would show its C++ frames.)
    def names(t):
        return {f["name"] for f in by_address[t.untyped_storage().data_ptr()]["frames"]
                if f["filename"] == __file__}
    assert "_make_model" in names(next(model.parameters()))
    assert "_train_step" in names(loss)
    assert "_train_step" in names(next(iter(opt.state.values()))["exp_avg"])

    # The history, in memory_viz's text form and its HTML plots; replayed
    # back from the snapshot as segment_plot's viewer does, it stays whole.
    events = snap["device_traces"][0]
    assert {e["action"] for e in events} >= {"segment_alloc", "alloc", "free_requested",
                                             "free_completed", "segment_free"}
    _replay_as_segment_plot(snap)
    assert f"{len(events)} entries" in _memory_viz.trace(snap)
    for plot in (_memory_viz.trace_plot, _memory_viz.segment_plot):
        assert _viz_html_snapshot(plot(snap)) == snap

    # PyTorch's command line, as a user runs it on the file.
    out = str(tmp_path / "trace.html")
    subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", path,
                    "-o", out], check=True, capture_output=True,
                   env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    with open(out) as f:
        assert _viz_html_snapshot(f.read()) == snap


def _allocate_here(n):
    return torch.empty(n, dtype=torch.uint8, device="tpu").fill_(1)


def test_history_of_allocations_and_frees(history):
    t = _allocate_here(12345)
    address = t.untyped_storage().data_ptr()
    del t
    events = torch.tpu.memory._snapshot()["device_traces"][0]
    mine = [e for e in events if e.get("addr") == address]
    assert [e["action"] for e in mine] == ["segment_alloc", "alloc", "free_requested",
                                           "free_completed", "segment_free"]
    assert all(e["size"] == 12345 for e in mine)
    frames = {f["name"] for f in mine[1]["frames"] if f["filename"] == __file__}
    assert frames >= {"_allocate_here", "test_history_of_allocations_and_frees"}

    # A storage never written holds no device memory: an empty segment whose
    # block is inactive, with the size PyTorch asked for and its stack.
    before = torch.tpu.memory_allocated()
    unwritten = torch.empty(1000, device="tpu")
    snap = torch.tpu.memory._snapshot()
    (seg,) = [s for s in snap["segments"]
              if s["address"] == unwritten.untyped_storage().data_ptr()]
    assert seg["total_size"] == 0 and seg["blocks"][0]["state"] == "inactive"
    assert seg["blocks"][0]["requested_size"] == 4000
    assert "test_history_of_allocations_and_frees" in {f["name"] for f in seg["frames"]}
    assert _active(snap) == torch.tpu.memory_allocated() == before
    _memory_viz.segsum(snap)  # its accounting holds
    del unwritten

    # max_entries keeps the newest events.
    torch.tpu.memory._record_memory_history(stacks="python", max_entries=4,
                                             clear_history=True)
    keep = [_allocate_here(100 + k) for k in range(6)]
    events = torch.tpu.memory._snapshot()["device_traces"][0]
    assert [(e["action"], e["size"]) for e in events] == [
        ("segment_alloc", 104), ("alloc", 104), ("segment_alloc", 105), ("alloc", 105)]
    assert [e["addr"] for e in events[1::2]] == [k.untyped_storage().data_ptr()
                                                 for k in keep[4:]]

    # Stopped: no more events, and no stacks for what is allocated now.
    torch.tpu.memory._record_memory_history(enabled=None)
    later = _allocate_here(777)
    snap = torch.tpu.memory._snapshot()
    assert [e["size"] for e in snap["device_traces"][0]] == [104, 104, 105, 105]
    seg = {s["address"]: s for s in snap["segments"]}[later.untyped_storage().data_ptr()]
    assert seg["frames"] == [] and seg["total_size"] == 777


def test_record_memory_history_arguments():
    with pytest.raises(ValueError, match="enabled must be one of"):
        torch.tpu.memory._record_memory_history(enabled="some")
    with pytest.raises(ValueError, match="stacks must be"):
        torch.tpu.memory._record_memory_history(stacks="cpp")
    with pytest.raises(ValueError, match="unknown skip_actions"):
        torch.tpu.memory._record_memory_history(skip_actions=["allocate"])


def test_fused_snapshot_counts_deferred_buffers():
    """In fused eager, a buffer whose storage died while a deferred program
    still reads it is held by that program: counted, and listed as such."""
    with torchtpu.modes.mode("fused"):
        torchtpu.modes.sync()
        base = torch.tpu.memory_allocated()
        a = torch.randn(1000, device="tpu")
        torchtpu.modes.sync()
        b = a * 2  # deferred: reads a's buffer
        del a
        snap = torch.tpu.memory._snapshot()
        assert _active(snap) == torch.tpu.memory_allocated() == base + 4000
        (held,) = [s for s in snap["segments"] if s["frames"] and
                   s["frames"][0]["name"].startswith("held by a deferred program")]
        assert held["total_size"] == 4000
        torchtpu.modes.sync()
    snap = torch.tpu.memory._snapshot()
    assert _active(snap) == torch.tpu.memory_allocated() == base + 4000
    assert b.untyped_storage().data_ptr() in [s["address"] for s in snap["segments"]]
    assert not [s for s in snap["segments"] if s["address"] == 0]


@pytest.fixture
def no_limit_after():
    yield
    torch.tpu.memory._lib().tt_runtime_set_memory_limit(torchtpu._core.runtime(), 0)
    torch.tpu.memory._fractions.clear()


def test_per_process_memory_fraction(no_limit_after, history):
    total = torch.tpu.mem_get_info()[1]
    assert torch.tpu.get_per_process_memory_fraction() == 1.0
    x = torch.ones(MiB, device="tpu")  # 4 MiB
    base = torch.tpu.memory_allocated()
    ooms = torch.tpu.memory_stats()["num_ooms"]
    fraction = (base + 6 * MiB) / total
    torch.tpu.set_per_process_memory_fraction(fraction)
    assert torch.tpu.get_per_process_memory_fraction() == fraction
    limit_mib = f"{int(fraction * total) / MiB:.2f} MiB"

    y = torch.ones(MiB, device="tpu")  # fits: base + 4 MiB
    for make in (lambda: torch.ones(MiB, device="tpu"),  # the allocator's check
                 lambda: x + y):                          # an op's result
        with pytest.raises(torch.OutOfMemoryError, match=re.escape(limit_mib)) as e:
            make()
        assert "set_per_process_memory_fraction" in str(e.value)
        assert torch.tpu.memory_allocated() == base + 4 * MiB  # nothing kept
    assert torch.tpu.memory_stats()["num_ooms"] == ooms + 2
    events = torch.tpu.memory._snapshot()["device_traces"][0]
    oom = [e for e in events if e["action"] == "oom"]
    assert oom and oom[0]["size"] == 4 * MiB and oom[0]["device_free"] == 2 * MiB

    torch.tpu.set_per_process_memory_fraction(1.0)
    z = x + y
    torch.testing.assert_close(z.cpu(), torch.full((MiB,), 2.0))

    with pytest.raises(TypeError, match="must be `float`"):
        torch.tpu.set_per_process_memory_fraction(1)
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="Allowed range"):
            torch.tpu.set_per_process_memory_fraction(bad)
    assert torch.tpu.get_per_process_memory_fraction() == 1.0


def test_memory_stats_torchtitan_reads():
    pytest.importorskip("torchtitan")
    from torchtitan.components.metrics import DeviceMemoryMonitor

    monitor = DeviceMemoryMonitor("tpu")  # resets the peaks, as TorchTitan does
    keep = torch.ones(3 * MiB, device="tpu")  # 12 MiB
    tmp = keep * 2
    del tmp
    stats = torch.tpu.memory_stats()
    assert stats["active_bytes.all.peak"] == torch.tpu.max_memory_allocated()
    assert stats["reserved_bytes.all.peak"] == torch.tpu.max_memory_reserved()
    assert stats["active_bytes.all.peak"] >= torch.tpu.memory_allocated() + 12 * MiB
    assert stats["num_alloc_retries"] == 0 and stats["num_ooms"] >= 0
    peak = monitor.get_peak_stats()
    assert peak.max_active_gib == pytest.approx(stats["active_bytes.all.peak"] / 2**30)
    assert peak.max_reserved_gib == pytest.approx(stats["reserved_bytes.all.peak"] / 2**30)
    assert peak.num_alloc_retries == 0 and peak.num_ooms == stats["num_ooms"]
    assert monitor.device_capacity == torch.tpu.get_device_properties().total_memory


def test_mem_get_info_and_memory_usage():
    free, total = torch.tpu.mem_get_info()
    assert 0 < free <= total == torch.tpu.get_device_properties().total_memory
    keep = torch.ones(8 * MiB, device="tpu")
    assert torch.tpu.memory_usage() == round(100 * torch.tpu.memory_reserved() / total)
    del keep


def test_memory_module_mirrors_torch_cuda_memory():
    import torch.tpu.memory as mem
    assert mem is torch.tpu.memory
    for name in ("_record_memory_history", "_snapshot", "_dump_snapshot",
                 "set_per_process_memory_fraction", "get_per_process_memory_fraction",
                 "memory_stats", "mem_get_info", "memory_allocated", "max_memory_reserved"):
        assert hasattr(torch.cuda.memory, name) and callable(getattr(mem, name))
    assert set(mem.__all__) <= set(dir(mem))
    assert torch.tpu.memory_allocated is mem.memory_allocated
