"""Upstream TorchTitan (torchtitan==0.3.0, installed by scripts/setup.sh), unchanged,
on "tpu" (issue 10): its llama3 debug model trained for a few steps through its own
entry point, `torchrun -m torchtitan.train --module llama3 --config
llama3_debugmodel`, with no wrapper and no patch, on 1 and on 2 processes (FSDP).

TorchTitan picks the device itself: the first available accelerator
(torch._utils._get_available_device_type), which is "tpu" because `import
torch` loads torchtpu (the torch.backends entry point); "TPU capacity" in its
log says so. Only TorchTitan options are given on the command line: a short
sequence and batch, the seed checkpoint to start from, and
parallelism.spmd_backend partial_dtensor (its default, spmd_types, hands FSDP
plain tensors with dp_mesh_dims, which needs a PyTorch newer than 2.13).

The reference is the same run on the CPU from the same seed checkpoint
(created on the CPU by TorchTitan's --checkpoint.create_seed_checkpoint):
tests/torchtitan_cpu_reference.py, TorchTitan's entry point on plain CPU
PyTorch (see there for what it must bend, TorchTitan having no CPU mode).
Per-step losses, parsed from TorchTitan's log lines, agree within 1e-3
(relative). The tokenizer and the c4_test data set are made locally
(tests/torchtitan_assets.py). The ops that ran on the CPU fallback
(TORCHTPU_FALLBACK_SUMMARY) may only be the complex-number ops of the RoPE.
The 1-process run also writes TorchTitan's memory snapshot (torch.tpu.memory,
issue 42), which must load in PyTorch's memory-viz tooling."""
import json
import os
import re
import subprocess
import sys

import pytest

import torchtpu

torchtitan = pytest.importorskip("torchtitan")  # scripts/setup.sh installs it

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from torchtitan_assets import make_assets  # noqa: E402

STEPS = 3
COMMON = ["--module", "llama3", "--config", "llama3_debugmodel",
          "--training.steps", str(STEPS), "--training.seq_len", "64",
          "--training.local_batch_size", "2", "--debug.seed", "0",
          "--parallelism.spmd_backend", "partial_dtensor"]
# RoPE's complex math (torch.polar, complex gather and multiply) still runs on
# the CPU fallback; any other op doing so is a regression.
COMPLEX_FALLBACKS = {"aten::polar.out", "aten::gather", "aten::mul.Tensor",
                     "aten::view_as_real", "aten::view_as_complex"}
LOSS = re.compile(r"step:\s*(\d+)\s+loss:\s*([0-9.]+)")


def _run(cwd, nproc, program, args, timeout=600):
    env = dict(os.environ, TORCHTPU_FALLBACK="silent", TORCHTPU_FALLBACK_SUMMARY="1",
               PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", *program, *args]
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    log = re.sub(r"\x1b\[[0-9;]*m", "", p.stdout + p.stderr)  # TorchTitan's colours
    assert p.returncode == 0, f"{' '.join(cmd)}\n{log[-6000:]}"
    return log


def _losses(log):
    losses = {int(s): float(v) for s, v in LOSS.findall(log)}
    assert sorted(losses) == list(range(1, STEPS + 1)), log[-4000:]
    return [losses[s] for s in range(1, STEPS + 1)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """Assets where the debug config looks for them (./tests/assets/...), and
    the seed checkpoint, created on the CPU."""
    root = str(tmp_path_factory.mktemp("torchtitan"))
    make_assets(root)
    _run(root, 1, [os.path.join(HERE, "torchtitan_cpu_reference.py")],
         COMMON + ["--checkpoint.enable", "--checkpoint.create_seed_checkpoint",
                   "--dump_folder", os.path.join(root, "seed")])
    return root


@pytest.mark.parametrize("nproc", [1, 2])
def test_llama3_debug_model_matches_cpu(workdir, nproc):
    start = ["--checkpoint.enable", "--checkpoint.load_only",
             "--checkpoint.initial_load_path", os.path.join(workdir, "seed", "checkpoint",
                                                            "step-0")]
    # One process also writes TorchTitan's memory snapshot of the last step
    # (its --profiling.enable_memory_snapshot, spelt --profiler.* in 0.3.0).
    snapshot = ["--profiler.enable-memory-snapshot", "--profiler.memory-snapshot-freq",
                str(STEPS)] if nproc == 1 else []
    tpu_log = _run(workdir, nproc, ["-m", "torchtitan.train"],
                   COMMON + start + snapshot
                   + ["--dump_folder", os.path.join(workdir, f"tpu{nproc}")])
    cpu_log = _run(workdir, nproc, [os.path.join(HERE, "torchtitan_cpu_reference.py")],
                   COMMON + start + ["--dump_folder", os.path.join(workdir, f"cpu{nproc}")])
    assert "TPU capacity" in tpu_log, tpu_log[-4000:]  # TorchTitan chose "tpu" itself
    assert "CPU capacity" in cpu_log, cpu_log[-4000:]
    tpu, cpu = _losses(tpu_log), _losses(cpu_log)
    rel = [abs(t - c) / abs(c) for t, c in zip(tpu, cpu)]
    assert max(rel) <= 1e-3, f"tpu {tpu}\ncpu {cpu}\nrelative differences {rel}"

    summaries = [json.loads(line.split(torchtpu.FALLBACK_SUMMARY_PREFIX, 1)[1])
                 for line in tpu_log.splitlines() if torchtpu.FALLBACK_SUMMARY_PREFIX in line]
    # one per rank, and one from torchrun's own process (it imports torch too)
    assert len(summaries) >= nproc, tpu_log[-4000:]
    fallbacks = set().union(*summaries)
    assert fallbacks <= COMPLEX_FALLBACKS, f"ops on the CPU fallback: {sorted(fallbacks)}"
    if snapshot:
        _check_memory_snapshot(os.path.join(workdir, "tpu1"), tpu_log)


def _check_memory_snapshot(dump_folder, log):
    """TorchTitan's pickle of torch.tpu.memory._snapshot() loads in PyTorch's
    memory-viz tooling (segsum checks its accounting), and its blocks were
    allocated by TorchTitan's code (their stacks say where)."""
    import glob
    import pickle

    from torch.cuda import _memory_viz

    paths = glob.glob(os.path.join(dump_folder, "profiling", "memory_snapshot",
                                   f"step_{STEPS:012d}", "*.pickle"))
    assert len(paths) == 1, log[-4000:]
    with open(paths[0], "rb") as f:
        snap = pickle.load(f)
    active = sum(b["size"] for seg in snap["segments"] for b in seg["blocks"])
    assert f"total_allocated: {_memory_viz.Bytes(active)}" in _memory_viz.segsum(snap)
    files = {fr["filename"] for seg in snap["segments"] for fr in seg["frames"]}
    assert any("torchtitan" in f for f in files), sorted(files)[:20]
    events = snap["device_traces"][0]
    assert {"alloc", "free_completed"} <= {e["action"] for e in events}
    assert f"{len(events)} entries" in _memory_viz.trace(snap)
