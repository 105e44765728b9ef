"""Device collectives (torchtpu.distributed.device_collectives): one process
driving 4 (and 2) XLA CPU-plugin devices runs each StableHLO collective as
one replicated PJRT program; every result is compared with the same
collective computed by torch on CPU copies (exact for integers, <= 1e-6
relative for float32), on dense and strided inputs, in strict, fused and
debug eager. See tests/device_collectives_worker.py."""
import os
import subprocess
import sys

import pytest

_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "device_collectives_worker.py")


@pytest.mark.parametrize("ndev,mode", [(4, "strict"), (2, "strict"), (4, "fused"),
                                       (2, "debug")])
def test_device_collectives(ndev, mode):
    env = dict(os.environ, TORCHTPU_CPU_DEVICES=str(ndev))
    env.pop("TORCH_TPU_DEFER_AND_FUSE", None)
    env.pop("TPU_LAUNCH_BLOCKING", None)
    if mode == "fused":
        env["TORCH_TPU_DEFER_AND_FUSE"] = "1"
    if mode == "debug":
        env["TPU_LAUNCH_BLOCKING"] = "1"
    out = subprocess.run([sys.executable, _WORKER], env=env, capture_output=True,
                         text=True, timeout=400)
    tail = out.stdout[-4000:] + out.stderr[-4000:]
    assert out.returncode == 0 and "ALL OK" in out.stdout, tail


_DISK_SCRIPT = """
import torch, torchtpu
from torchtpu.distributed import device_collectives as dc
xs = [torch.arange(8, dtype=torch.int32, device=f"tpu:{i}") * (i + 1) for i in range(2)]
dc.all_reduce(xs, "SUM")
st = torch.tpu._get_cache_stats()
print("RESULT", xs[0].cpu().tolist(), xs[1].cpu().tolist(), st["disk_hits"], st["compiles"])
"""


def test_replicated_executable_from_the_persistent_cache(tmp_path):
    # A second process loads the replicated executable from disk (its device
    # assignment travels with it) and gets the same answer.
    env = dict(os.environ, TORCHTPU_CPU_DEVICES="2", TORCHTPU_CACHE_DIR=str(tmp_path))
    env.pop("TORCH_TPU_DEFER_AND_FUSE", None)
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _DISK_SCRIPT], env=env,
                             capture_output=True, text=True, timeout=300)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")]
        assert line, out.stdout[-2000:] + out.stderr[-2000:]
        runs.append(line[0].split(" ", 1)[1])
    want = str([3 * i for i in range(8)])
    first, second = runs
    assert first.startswith(f"{want} {want} "), first
    assert second.startswith(f"{want} {want} "), second
    hits, compiles = map(int, second.rsplit(" ", 2)[1:])
    assert hits >= 1 and compiles == 0, second
