"""Our C attention kernels on XLA's CPU plugin (kernels/cpu_attention.c,
registered by runtime/attention_kernel.c): scaled_dot_product_attention
without a mask lowers to one custom call each way. Checked against PyTorch's
CPU results on shapes that reach every edge of the kernel's tiling (key
tiles of 32, forward row blocks of 64, backward row blocks of 8, head dims
that are not multiples of 16), and against our StableHLO lowering (the path
TPU and GPU plugins take) run with the kernel turned off."""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu.testing import native_only


def _cpu_has_kernel_isa():
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return False
    return "avx2" in flags and "fma" in flags


pytestmark = pytest.mark.skipif(
    torchtpu.runtime_info()["platform"] != "cpu" or not _cpu_has_kernel_isa(),
    reason="the attention kernels run on XLA's CPU plugin, on x86-64 with AVX2 and FMA")


def test_kernel_is_registered_on_this_cpu():
    assert torchtpu.runtime_info()["cpu_attention_kernel"] is True


def _run(dev, q, k, v, go, **kw):
    ins = [t.detach().to(dev).requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*ins, **kw)
    out.backward(go.to(dev))
    return [t.detach().cpu() for t in [out] + [x.grad for x in ins]]


# (batch dims, hq, hk, l, s, e, ev), keyword arguments
CASES = {
    "tiles_and_blocks": (((2,), 3, 3, 130, 70, 16, 16), dict(is_causal=True)),
    "plain_partial_tiles": (((2,), 2, 2, 13, 45, 16, 16), {}),
    "gqa": (((2,), 6, 2, 20, 33, 16, 16), dict(is_causal=True, enable_gqa=True)),
    "head_dims_not_16": (((1,), 2, 1, 9, 37, 40, 24), dict(enable_gqa=True, scale=0.2)),
    "small_head_dim": (((2,), 2, 2, 17, 17, 8, 4), dict(is_causal=True)),
    "causal_l_gt_s": (((1,), 2, 2, 70, 40, 16, 16), dict(is_causal=True)),
    "causal_l_lt_s": (((1,), 2, 2, 20, 90, 16, 16), dict(is_causal=True)),
    "no_batch_dim": (((), 4, 4, 21, 21, 16, 16), dict(is_causal=True)),
    "two_batch_dims": (((2, 3), 2, 2, 11, 11, 16, 16), {}),
    "one_query": (((3,), 2, 2, 1, 50, 16, 16), {}),
}


def _inputs(bd, hq, hk, l, s, e, ev, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    mk = lambda *shape: torch.randn(*bd, *shape, generator=g).to(dtype)  # noqa: E731
    return mk(hq, l, e), mk(hk, s, e), mk(hk, s, ev), mk(hq, l, ev)


@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_matches_cpu(case):
    shape, kw = CASES[case]
    q, k, v, go = _inputs(*shape)
    cpu = _run("cpu", q, k, v, go, **kw)
    with native_only():
        tpu = _run("tpu", q, k, v, go, **kw)
    for name, t, c in zip(("out", "dq", "dk", "dv"), tpu, cpu):
        torch.testing.assert_close(t, c, atol=2e-5, rtol=2e-5, msg=lambda m: f"{name}: {m}")


def test_kernel_bfloat16_runs_in_float32():
    q, k, v, go = _inputs((2,), 4, 2, 40, 40, 16, 16, dtype=torch.bfloat16)
    kw = dict(is_causal=True, enable_gqa=True)
    ref = _run("cpu", q.float(), k.float(), v.float(), go.float(), **kw)
    with native_only():
        tpu = _run("tpu", q, k, v, go, **kw)
    for t, r in zip(tpu, ref):
        assert t.dtype == torch.bfloat16
        torch.testing.assert_close(t.float(), r, atol=2e-2, rtol=2e-2)


def test_kernel_under_torch_compile():
    q, k, v, go = _inputs((2,), 4, 4, 48, 48, 16, 16)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(-1)

    ref = f(q, k, v)
    out = torch.compile(f, backend="tpu")(q.to("tpu"), k.to("tpu"), v.to("tpu"))
    torch.testing.assert_close(out.cpu(), ref, atol=2e-5, rtol=2e-5)


_XLA_CHILD = r"""
import json, sys, torch, torchtpu, torch.nn.functional as F
q, k, v, go = torch.load(sys.argv[1])
ins = [t.to("tpu").requires_grad_() for t in (q, k, v)]
out = F.scaled_dot_product_attention(*ins, is_causal=True, enable_gqa=True)
out.backward(go.to("tpu"))
torch.save([t.detach().cpu() for t in [out] + [x.grad for x in ins]], sys.argv[2])
print(json.dumps(torchtpu.runtime_info()["cpu_attention_kernel"]))
"""


def test_kernel_matches_the_stablehlo_lowering(tmp_path):
    """TORCHTPU_CPU_ATTENTION_KERNEL=0 turns the kernel off (attention then
    lowers to XLA's own ops, as on TPU and GPU); both agree."""
    q, k, v, go = _inputs((2,), 4, 2, 70, 70, 16, 16)
    torch.save([q, k, v, go], tmp_path / "in.pt")
    env = dict(os.environ, TORCHTPU_CPU_ATTENTION_KERNEL="0")
    out = subprocess.run([sys.executable, "-c", _XLA_CHILD, str(tmp_path / "in.pt"),
                          str(tmp_path / "out.pt")], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) is False
    xla = torch.load(tmp_path / "out.pt")
    ours = _run("tpu", q, k, v, go, is_causal=True, enable_gqa=True)
    for a, b in zip(ours, xla):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)


def test_bad_setting_is_a_clear_error():
    env = dict(os.environ, TORCHTPU_CPU_ATTENTION_KERNEL="yes")
    out = subprocess.run([sys.executable, "-c", "import torch, torchtpu; torch.ones(1, device='tpu')"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "TORCHTPU_CPU_ATTENTION_KERNEL=yes" in out.stderr
