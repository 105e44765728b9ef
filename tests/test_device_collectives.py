"""Device collectives (torchtpu.distributed.device_collectives): one process
driving 4 (and 2) XLA CPU-plugin devices runs each StableHLO collective as
one replicated PJRT program; every result is compared with the same
collective computed by torch on CPU copies (exact for integers, <= 1e-6
relative for float32), on dense and strided inputs, in strict and fused
eager. See tests/device_collectives_worker.py."""
import os
import subprocess
import sys

import pytest

_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "device_collectives_worker.py")


@pytest.mark.parametrize("ndev,fused", [(4, False), (2, False), (4, True)])
def test_device_collectives(ndev, fused):
    env = dict(os.environ, TORCHTPU_CPU_DEVICES=str(ndev))
    env.pop("TORCH_TPU_DEFER_AND_FUSE", None)
    if fused:
        env["TORCH_TPU_DEFER_AND_FUSE"] = "1"
    out = subprocess.run([sys.executable, _WORKER], env=env, capture_output=True,
                         text=True, timeout=400)
    tail = out.stdout[-4000:] + out.stderr[-4000:]
    assert out.returncode == 0 and "ALL OK" in out.stdout, tail
