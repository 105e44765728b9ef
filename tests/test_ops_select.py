"""Selection, indexing and sampling ops of lower/select.c on "tpu".

Their OpInfo entries must run natively (no CPU fallback) and match the CPU
at float32. The harness checks random entries for shape and dtype only, so
the samplers' distributions are checked here too, with loose statistical
tolerances and a fixed seed.
"""
import math

import pytest
import torch

from torchtpu.testing import native_only, opinfo

ENTRIES = [
    "index_reduce.prod", "index_reduce.mean", "index_reduce.amax", "index_reduce.amin",
    "index_copy", "take", "put", "masked_scatter", "kthvalue", "median", "nanmedian",
    "masked.median", "mode", "cummax", "cummin", "cross", "linalg.cross", "cdist",
    "_segment_reduce.lengths", "_segment_reduce.offsets", "nn.functional.embedding",
    "histc", "cauchy", "exponential", "geometric", "log_normal", "normal",
    "normal.number_mean", "multinomial", "nonzero_static",
]
SAMPLES_PER_ENTRY = 3


@pytest.mark.parametrize("key,op", list(zip(ENTRIES, opinfo.entries_by_key(ENTRIES))),
                         ids=ENTRIES)
def test_entry_native_float32(key, op):
    opinfo.assert_native_pass(key, op, limit=SAMPLES_PER_ENTRY)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_nonzero_static_matches_cpu(dtype):
    torch.manual_seed(0)
    inputs = [(torch.rand(3, 4, 2) > 0.5).to(dtype), (torch.rand(7) > 0.3).to(dtype),
              torch.tensor(1, dtype=dtype), torch.tensor(0, dtype=dtype),
              torch.zeros(0, 3, dtype=dtype), torch.zeros(2, 5, dtype=dtype)]
    if dtype.is_floating_point:
        inputs.append(torch.tensor([[float("nan"), 0.0], [-0.0, 2.5]], dtype=dtype))
    for x in inputs:
        count = int(torch.count_nonzero(x))
        # sizes below, at and above the count; both fill values across them
        for i, size in enumerate(sorted({0, max(count - 1, 0), count, count + 3})):
            for fill in ((-1, 9) if i == 0 else ((-1, 9)[i % 2],)):
                want = torch.nonzero_static(x, size=size, fill_value=fill)
                with native_only():
                    got = torch.nonzero_static(x.to("tpu"), size=size, fill_value=fill).cpu()
                assert got.dtype == want.dtype and torch.equal(got, want), (x, size, fill)


def test_nonzero_static_out_and_bad_size():
    x = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    out = torch.empty(0, 2, dtype=torch.long, device="tpu")
    with native_only():
        torch.nonzero_static(x.to("tpu"), size=3, fill_value=-5, out=out)
    assert torch.equal(out.cpu(), torch.nonzero_static(x, size=3, fill_value=-5))
    with pytest.raises(RuntimeError, match="nonzero_static: 'size' must be an non-negative"):
        torch.nonzero_static(x.to("tpu"), size=-1)


def test_nonzero_static_under_compile():
    def f(x):
        return torch.nonzero_static(x > 0.5, size=5, fill_value=-2) + 1
    cf = torch.compile(f, backend="tpu")
    torch.manual_seed(0)
    for shape in [(4, 3), (6,)]:
        x = torch.rand(shape)
        with native_only():
            got = cf(x.to("tpu")).cpu()
        assert torch.equal(got, f(x)), shape


def test_order_statistics_with_nan():
    x = torch.tensor([[3.0, float("nan"), 1.0, 2.0], [4.0, 1.0, 1.5, float("nan")],
                      [float("nan")] * 4])
    d = x.to("tpu")
    for fn in (torch.median, torch.nanmedian):
        v, i = fn(d, dim=1)
        ev, ei = fn(x, dim=1)
        torch.testing.assert_close(v.cpu(), ev, equal_nan=True)
        # The all-NaN row's index is whatever the CPU's nth_element leaves.
        assert torch.equal(i.cpu()[:2], ei[:2]), fn
    torch.testing.assert_close(torch.nanmedian(d[:2]).cpu(), torch.nanmedian(x[:2]))


def test_cummax_ties_take_last_index():
    x = torch.tensor([1.0, 3.0, 3.0, -math.inf, 5.0, 5.0])
    v, i = torch.cummax(x.to("tpu"), 0)
    ev, ei = torch.cummax(x, 0)
    assert torch.equal(v.cpu(), ev) and torch.equal(i.cpu(), ei)
    x = torch.tensor([-math.inf, -math.inf, 2.0])
    v, i = torch.cummin(x.to("tpu"), 0)
    ev, ei = torch.cummin(x, 0)
    assert torch.equal(v.cpu(), ev) and torch.equal(i.cpu(), ei)


def test_sampler_moments():
    torch.manual_seed(0)
    n = 200_000
    t = torch.empty(n, device="tpu")
    e = t.exponential_(2.0).cpu()
    assert e.min() >= 0 and abs(e.mean().item() - 0.5) < 0.01
    g = t.geometric_(0.25).cpu()
    assert g.min() >= 1 and torch.equal(g, g.round()) and abs(g.mean().item() - 4.0) < 0.05
    ln = t.log_normal_(0.0, 0.5).cpu().log()
    assert abs(ln.mean().item()) < 0.01 and abs(ln.std().item() - 0.5) < 0.01
    c = t.cauchy_(1.0, 2.0).cpu()
    assert abs(c.median().item() - 1.0) < 0.05
    assert abs((c - 1.0).abs().median().item() - 2.0) < 0.05  # half the IQR is sigma
    mean = torch.full((n,), 3.0, device="tpu")
    std = torch.full((n,), 2.0, device="tpu")
    z = torch.normal(mean, std).cpu()
    assert abs(z.mean().item() - 3.0) < 0.03 and abs(z.std().item() - 2.0) < 0.03
    z = torch.normal(mean, 0.5).cpu()
    assert abs(z.std().item() - 0.5) < 0.01


def test_multinomial_distribution():
    torch.manual_seed(0)
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 0.0, 2.0]], device="tpu")
    s = torch.multinomial(p, 20_000, replacement=True).cpu()
    assert s.shape == (2, 20_000) and s.dtype == torch.int64
    freq = torch.stack([torch.bincount(r, minlength=4).float() / r.numel() for r in s])
    want = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.25, 0.25, 0.0, 0.5]])
    torch.testing.assert_close(freq, want, atol=0.02, rtol=0)
    w = torch.multinomial(p, 3, replacement=False).cpu()
    for row, q in zip(w, p.cpu()):
        assert len(set(row.tolist())) == 3 and all(q[j] > 0 for j in row.tolist())
    # Without replacement the first draw follows p.
    firsts = torch.stack([torch.multinomial(p[0], 2).cpu()[0] for _ in range(400)])
    assert abs((firsts == 2).float().mean().item() - 0.6) < 0.1
