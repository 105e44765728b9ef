"""pow with a Scalar exponent: the exponents PyTorch's CPU kernels special-case
(0, 1, 2, 3, 0.5, -0.5, -1, -2) are computed as they are there (x * x, sqrt,
1 / x ..., bfloat16 rounding each step, half through the general pow), not by
a powf per element; the exponent stays a runtime argument, its class picks the
program (lower/elementwise.c, pow_class). Values, signs of zero, infinities
and NaNs are compared with PyTorch's CPU results; programs are counted."""
import pytest
import torch

from torchtpu.testing import native_only

SPECIAL = [0, 1, 2, 3, 0.5, -0.5, -1, -2, 2.0, -1.0, True, False]
GENERAL = [2.5, -3, 1.5, 4]


def inputs(dtype):
    g = torch.Generator().manual_seed(0)
    edge = torch.tensor([0.0, -0.0, 1.5, -2.0, float("inf"), -float("inf"), float("nan"),
                         1e-3, 3e20, -1e-30])
    return torch.cat([edge, torch.randn(300, generator=g) * 10,
                      torch.rand(300, generator=g)]).to(dtype)


def assert_same(tpu, cpu, dtype, ulps=1):
    assert tpu.dtype == cpu.dtype
    tpu = tpu.cpu()
    nan = cpu.isnan()
    assert torch.equal(tpu.isnan(), nan)
    a, b = tpu[~nan], cpu[~nan]
    assert torch.equal(torch.signbit(a), torch.signbit(b))  # -0.0, -inf
    finite = torch.isfinite(b)
    assert torch.equal(a[~finite], b[~finite])
    # The CPU's own sqrt and powf are not always correctly rounded (its
    # vectorised paths); one unit in the last place of the dtype.
    tol = {torch.float64: 1e-15, torch.float32: 2.4e-7,
           torch.bfloat16: 8e-3, torch.float16: 1e-3}[dtype]
    torch.testing.assert_close(a[finite], b[finite], rtol=ulps * tol, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("exponent", SPECIAL + GENERAL, ids=repr)
def test_pow_scalar_like_cpu(dtype, exponent):
    x = inputs(dtype)
    with native_only():
        assert_same(x.to("tpu").pow(exponent), x.pow(exponent), dtype)
        y = x.to("tpu")
        y.pow_(exponent)
        assert_same(y, x.pow(exponent), dtype)
        out = torch.empty_like(x, device="tpu")
        torch.pow(x.to("tpu"), exponent, out=out)
        assert_same(out, x.pow(exponent), dtype)


def test_integer_tensor_to_special_exponents():
    # An integer tensor keeps the general pow (float exponents promote it).
    x = torch.arange(-4, 5)
    for e in (2.0, 0.5, -1.0, 0, 1, 2, 3):
        want = x.pow(e)
        got = x.to("tpu").pow(e).cpu()
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, equal_nan=True)


def test_exponent_changes_pick_the_right_program_and_general_ones_share_one():
    x = inputs(torch.float32)
    xt = x.to("tpu")
    for e in (2, 2.5, 2, -0.5, 3.25, 2):  # special and general exponents interleaved
        assert_same(xt.pow(e), x.pow(e), torch.float32)
    torch.tpu.synchronize()
    before = torch.tpu._get_cache_stats()["compiles"]
    for e in (1.75, 2.125, 5.5, -2.5):  # general exponents: runtime values, no compile
        assert_same(xt.pow(e), x.pow(e), torch.float32)
    assert torch.tpu._get_cache_stats()["compiles"] == before


def test_fused_trace_follows_exponent_changes():
    from torchtpu import modes
    x = inputs(torch.float32)
    xt = x.to("tpu")
    for e in (2, 2, 2.5, 2, 0.5, 0.5):  # a recorded trace diverges when the class changes
        with modes.mode("fused"):
            got = (xt.pow(e) + 1).pow(e)
        assert_same(got, (x.pow(e) + 1).pow(e), torch.float32, ulps=4)  # two ops' roundings
