"""Conformance with PyTorch's CPU for what PyTorch's test_ops, test_binary_ufuncs,
test_unary_ufuncs and test_reductions found on "tpu" (issue 16; the runs are
in docs/conformance.md, "test_ops and ufuncs").

Every case runs the same call on "cpu" and "tpu" (assert_like_cpu): both
raise the same exception type, the tpu message starting with the CPU's, or
both succeed with the same dtype and values."""
import pytest
import torch

import torchtpu  # noqa: F401
from test_conformance import assert_like_cpu


def _t(shape, dtype=torch.float32):
    """A fixed tensor of shape and dtype (the same values on every device)."""
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.float64) * 0.37 - 1.1).reshape(shape).to(dtype)


# --- 1. gather / scatter shape and dtype checks (test_ops' noncontiguous samples) ------------

def _idx(shape, dtype=torch.long):
    return torch.zeros(shape, dtype=dtype)


GATHER_SCATTER_CASES = [
    # an empty index skips PyTorch's shape checks: empty result / self unchanged
    ("gather empty index of other rank", lambda d: torch.gather(_t((5,)).to(d), 0, _idx((2, 0)).to(d))),
    ("gather empty index wider than self", lambda d: torch.gather(_t((5, 3)).to(d), 0, _idx((0, 9)).to(d))),
    ("gather empty float index", lambda d: torch.gather(_t((5, 3)).to(d), 0, _idx((0,), torch.float).to(d))),
    ("gather 0-d self, empty index", lambda d: torch.gather(_t(()).to(d), 0, _idx((0, 2)).to(d))),
    ("scatter empty index of other rank", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 0, 4)).to(d), 1.0)),
    ("scatter src, empty index wider than self",
     lambda d: _t((5, 3)).to(d).scatter(0, _idx((0, 9)).to(d), _t((3, 3)).to(d))),
    ("scatter_add, empty index", lambda d: _t((5, 3)).to(d).scatter_add(0, _idx((0, 9)).to(d), _t((3, 3)).to(d))),
    ("scatter_reduce, empty index",
     lambda d: _t((5, 3)).to(d).scatter_reduce(0, _idx((0, 9)).to(d), _t((3, 3)).to(d), "amax")),
    ("scatter_ in place, empty index", lambda d: _t((5, 3)).to(d).scatter_(1, _idx((0, 2)).to(d), 2.0)),
    # PyTorch's texts for the checks that do apply
    ("gather index rank", lambda d: torch.gather(_t((5, 3)).to(d), 0, _idx((2,)).to(d))),
    ("gather index too large", lambda d: torch.gather(_t((5, 3)).to(d), 0, _idx((2, 4)).to(d))),
    ("gather 0-d self, [1, 1] index", lambda d: torch.gather(_t(()).to(d), 0, _idx((1, 1)).to(d))),
    ("gather float index", lambda d: torch.gather(_t((5, 3)).to(d), 0, _idx((2, 2), torch.float).to(d))),
    ("gather int16 index", lambda d: torch.gather(_t((5, 3)).to(d), 1, _idx((2, 2), torch.int16).to(d))),
    ("gather int32 index", lambda d: torch.gather(_t((5, 3)).to(d), 1, _idx((2, 2), torch.int32).to(d))),
    ("scatter index rank", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2,)).to(d), _t((3, 3)).to(d))),
    ("scatter value index too large", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 4)).to(d), 1.0)),
    ("scatter src smaller than index", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 2)).to(d), _t((1, 3)).to(d))),
    ("scatter src narrower than index", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 2)).to(d), _t((3, 1)).to(d))),
    ("scatter src of higher rank", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 2)).to(d), _t((3, 3, 3)).to(d))),
    ("scatter src of lower rank", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 2)).to(d), _t((3,)).to(d))),
    ("scatter src dtype", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 2)).to(d), _t((3, 3), torch.half).to(d))),
    ("scatter src dtype, empty index",
     lambda d: _t((5, 3)).to(d).scatter(0, _idx((0,), torch.float).to(d), _t((3, 3), torch.half).to(d))),
    ("scatter_add float index", lambda d: _t((5, 3)).to(d).scatter_add(0, _idx((2, 2), torch.float).to(d), _t((3, 3)).to(d))),
    ("scatter_reduce float index",
     lambda d: _t((5, 3)).to(d).scatter_reduce(0, _idx((2, 2), torch.float).to(d), _t((3, 3)).to(d), "sum")),
    ("scatter int16 index", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 2), torch.int16).to(d), _t((3, 3)).to(d))),
    ("scatter_add values", lambda d: _t((5, 3)).to(d).scatter_add(
        0, torch.tensor([[0, 4, 1], [2, 2, 0]]).to(d), _t((2, 4)).to(d))),
]


@pytest.mark.parametrize("name,fn", GATHER_SCATTER_CASES, ids=[c[0] for c in GATHER_SCATTER_CASES])
def test_gather_scatter_checks_like_cpu(name, fn):
    """gather/scatter refused every index whose shape did not fit self, even
    an empty one (PyTorch skips its shape checks then: test_ops'
    noncontiguous samples of gather), accepted int16 indices, and raised
    texts of their own (or an HLO builder error for a src smaller than the
    index)."""
    assert_like_cpu(fn)


# --- 2. division: exact quotients, PyTorch's 16-bit rounding (test_binary_ufuncs) ------------

def _num(dt, n=4096, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, generator=g) * 100).to(dt), torch.randn(n, generator=g).to(dt)


def _div_cases():
    cases = []
    for dt in (torch.float64, torch.float32, torch.bfloat16, torch.float16):
        for mode in (None, "trunc", "floor"):
            tag = f"{str(dt)[6:]} {mode}"
            cases += [
                (f"{tag} tensor / tensor", lambda d, dt=dt, m=mode: torch.div(
                    *[t.to(d) for t in _num(dt)], rounding_mode=m)),
                (f"{tag} tensor / python scalar", lambda d, dt=dt, m=mode: torch.div(
                    _num(dt)[0].to(d), 0.37, rounding_mode=m)),
                (f"{tag} tensor / 0-d tensor", lambda d, dt=dt, m=mode: torch.div(
                    _num(dt)[0].to(d), torch.tensor(0.37, dtype=dt).to(d), rounding_mode=m)),
                (f"{tag} tensor / expanded [1]", lambda d, dt=dt, m=mode: torch.div(
                    _num(dt)[0].to(d), torch.tensor([0.37], dtype=dt).to(d).expand(4096), rounding_mode=m)),
                (f"{tag} [4096, 2] / [2] row", lambda d, dt=dt, m=mode: torch.div(
                    _num(dt, 8192)[0].reshape(4096, 2).to(d), torch.tensor([0.37, -1.3], dtype=dt).to(d),
                    rounding_mode=m)),
                (f"{tag} transposed / transposed", lambda d, dt=dt, m=mode: torch.div(
                    *[t.reshape(64, 64).to(d).t() for t in _num(dt)], rounding_mode=m)),
            ]
    return cases


DIV_CASES = _div_cases() + [
    ("k / k trunc, float64", lambda d: torch.div(torch.arange(1., 200., dtype=torch.float64).to(d), 49.0,
                                                   rounding_mode="trunc")),
    ("k / k, float64", lambda d: torch.arange(1., 200., dtype=torch.float64).to(d) / 49.0),
    ("floor_divide by scalar", lambda d: torch.floor_divide(_num(torch.float64)[0].to(d), 0.37)),
    ("floor_divide bfloat16", lambda d: torch.floor_divide(*[t.to(d) for t in _num(torch.bfloat16)])),
    ("div_ in place by scalar", lambda d: _num(torch.float32)[0].to(d).div_(0.37)),
    ("true_divide by 0-d", lambda d: torch.true_divide(_num(torch.float64)[0].to(d),
                                                       torch.tensor(0.37, dtype=torch.float64).to(d))),
    ("addcdiv by a 0-d tensor", lambda d: torch.addcdiv(_num(torch.float64)[1].to(d), _num(torch.float64)[0].to(d),
                                                        torch.tensor(0.37, dtype=torch.float64).to(d))),
]


def _exact(fn):
    rc = fn("cpu")
    rt = fn("tpu").cpu()
    assert rt.dtype == rc.dtype
    same = (rt == rc) | (rt.isnan() & rc.isnan())
    bad = (~same).nonzero()[:3].flatten().tolist()
    assert same.all(), f"{(~same).sum().item()} of {rc.numel()} differ, e.g. tpu " \
        f"{[rt.flatten()[i].item() for i in bad]} cpu {[rc.flatten()[i].item() for i in bad]}"


@pytest.mark.parametrize("name,fn", DIV_CASES, ids=[c[0] for c in DIV_CASES])
def test_division_exactly_like_cpu(name, fn):
    """Quotients equal PyTorch's bit for bit. XLA's simplifier turned x /
    broadcast(y) into x * (1 / y): off by an ulp in ~40% of elements of a
    division by a scalar, and wrong after trunc (torch.div(49., 49.,
    rounding_mode="trunc") gave 0). PyTorch's CPU kernels for float16 and
    bfloat16 divide a varying divisor in 16-bit steps (trunc rounds the
    quotient first: 1 / 0.1 is 10; floor rounds every step), a one-value
    divisor in float; tpu computed every case in float."""
    _exact(fn)


# --- 3. searchsorted / bucketize (test_reductions' test_bucketization) ------------------------

def _search_cases():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(20, 37, generator=g)
    v = torch.randn(20, 11, generator=g)
    s1 = torch.randn(300, generator=g).sort().values
    v1 = torch.randn(7, 9, generator=g)
    v3 = torch.tensor([[[1, 3, 5], [2, 4, 6]], [[1, 2, 3], [4, 5, 6]]])
    nan_s = torch.tensor([0., 1., 2., float("nan")])
    nan_v = torch.tensor([1., float("nan"), 2., -1., 5.])
    ints = torch.tensor([1, 3, 3, 3, 7, 9])
    cases = [
        ("permuted int32 values, float64 rows (unsorted)", lambda d: torch.searchsorted(
            v3.permute(2, 1, 0).to(torch.float64).to(d), v3.permute(2, 1, 0).to(torch.int32).to(d))),
        ("bucketize 2-d boundaries", lambda d: torch.bucketize(v3.to(d), v3[0].to(d))),
        ("scalar value, 2-d boundaries", lambda d: torch.searchsorted(v3[0].to(d), 1)),
        ("0-d boundaries", lambda d: torch.searchsorted(torch.tensor(1.).to(d), v1.to(d))),
        ("rows don't match", lambda d: torch.searchsorted(s.to(d), v1.to(d))),
        ("sorter of another size", lambda d: torch.searchsorted(s.to(d), v.to(d), sorter=s.argsort(-1)[:, :-1].to(d))),
        ("int32 sorter", lambda d: torch.searchsorted(s.to(d), v.to(d), sorter=s.argsort(-1).int().to(d))),
        # checked on the device: raised at the next synchronisation (the .cpu())
        ("sorter out of range", lambda d: torch.searchsorted(s.to(d), v.to(d), sorter=(s.argsort(-1) + 1).to(d)).cpu()),
        ("bad side", lambda d: torch.searchsorted(s1.to(d), v1.to(d), side="bad")),
        ("side left, right=True", lambda d: torch.searchsorted(s1.to(d), v1.to(d), side="left", right=True)),
    ]
    for out_dt, i32 in ((torch.float32, False), (torch.int32, False), (torch.int64, True), (torch.int32, True)):
        cases.append((f"out {out_dt} out_int32={i32}", lambda d, o=out_dt, i=i32: torch.searchsorted(
            ints.to(d), ints.to(d), out=torch.empty(6, dtype=o).to(d), out_int32=i)))
    for right in (False, True):
        r = f" right={right}"
        cases += [
            ("unsorted rows" + r, lambda d, r=right: torch.searchsorted(s.to(d), v.to(d), right=r)),
            ("sorted rows" + r, lambda d, r=right: torch.searchsorted(s.sort(-1).values.to(d), v.to(d), right=r)),
            ("sorter" + r, lambda d, r=right: torch.searchsorted(s.to(d), v.to(d), right=r, sorter=s.argsort(-1).to(d))),
            ("bucketize out_int32" + r, lambda d, r=right: torch.bucketize(v1.to(d), s1.to(d), right=r, out_int32=True)),
            ("one boundary" + r, lambda d, r=right: torch.bucketize(v1.to(d), s1[:1].to(d), right=r)),
            ("no boundaries" + r, lambda d, r=right: torch.bucketize(v1.to(d), s1[:0].to(d), right=r)),
            ("python scalar" + r, lambda d, r=right: torch.searchsorted(s1.to(d), 0.3, right=r)),
            ("NaN" + r, lambda d, r=right: torch.searchsorted(nan_s.to(d), nan_v.to(d), right=r)),
            ("no values" + r, lambda d, r=right: torch.searchsorted(s1.to(d), torch.empty(0, 3).to(d), right=r)),
            ("repeated ints" + r, lambda d, r=right: torch.searchsorted(ints.to(d), torch.arange(11).to(d), right=r)),
        ]
    return cases


SEARCH_CASES = _search_cases()


@pytest.mark.parametrize("name,fn", SEARCH_CASES, ids=[c[0] for c in SEARCH_CASES])
def test_searchsorted_like_cpu(name, fn):
    """searchsorted / bucketize follow PyTorch's binary search step for step
    (a count of smaller entries gave other answers for unsorted rows, and
    compared every value with every boundary: an [N, M] intermediate), use
    the sorter, and make PyTorch's checks with its texts (sorter size and
    dtype, scalar values, out= dtype, bucketize's 1-d boundaries)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's non-contiguous performance warning
        assert_like_cpu(fn)


# --- 4. integer pow (test_binary_ufuncs' int8 / uint8 / int16 edge values) --------------------

def _int_pow_cases():
    cases = []
    for dt in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
        info = torch.iinfo(dt)
        vals = sorted({info.min, info.min + 1, -7, -2, -1, 0, 1, 2, 3, 7, 10, info.max - 1, info.max})
        v = torch.tensor([x for x in vals if info.min <= x <= info.max], dtype=torch.int64).to(dt)
        a, e = v[:, None].expand(-1, len(v)), v[None, :].expand(len(v), -1)
        name = str(dt)[6:]
        cases += [
            (f"{name} every pair", lambda d, a=a, e=e: torch.pow(a.to(d), e.to(d))),
            (f"{name} ** 3 (Scalar)", lambda d, a=v: torch.pow(a.to(d), 3)),
            (f"{name} ** max (Scalar)", lambda d, a=v, m=info.max: torch.pow(a.to(d), m)),
            (f"3 ** {name} (Scalar base)", lambda d, e=v.clamp(min=0): torch.pow(3, e.to(d))),
            (f"{name} pow_ in place", lambda d, a=a, e=e: a.contiguous().to(d).pow_(e.to(d))),
        ]
    return cases


INT_POW_CASES = _int_pow_cases()


@pytest.mark.parametrize("name,fn", INT_POW_CASES, ids=[c[0] for c in INT_POW_CASES])
def test_integer_pow_like_cpu(name, fn):
    """Integer pow wraps in its dtype as PyTorch's powi does (squaring over
    every bit of the exponent); XLA's integer power gave other values for
    large exponents (uint8 3 ** 254: 0, PyTorch 57; int16 3 ** 32767...)."""
    _exact(fn)


# --- 5. out= dtypes of unary ops (test_unary_ufuncs' test_abs_angle_complex_to_float) ---------

ABS_OUT_CASES = [
    (f"{fn.__name__} {src} -> out {od}", (lambda fn, src, od: lambda d: fn(
        torch.tensor([1 + 2j, -3j, 0.5], dtype=src).to(d) if src.is_complex else _t((3,), src).to(d),
        out=torch.empty(3, dtype=od).to(d)))(fn, src, od))
    for fn in (torch.abs, torch.angle)
    for src in (torch.complex64, torch.complex128, torch.float32)
    for od in (torch.float32, torch.float64, torch.complex64, torch.complex128, torch.int64)
]


@pytest.mark.parametrize("name,fn", ABS_OUT_CASES, ids=[c[0] for c in ABS_OUT_CASES])
def test_abs_angle_out_dtypes_like_cpu(name, fn):
    """abs of a complex input writes any out= its real dtype casts to (a
    float64 out of complex64 abs was refused); a real input or a complex out
    still needs the same dtype, with PyTorch's text."""
    assert_like_cpu(fn)


# --- 6. histc's range check (test_reductions' test_histc) --------------------------------------

@pytest.mark.parametrize("vals,kw", [([float("inf")], {}), ([1., 2., float("inf")], {}),
                                     ([float("nan")], {}), ([1., 2.], dict(min=0, max=float("inf")))])
def test_histc_refuses_a_range_that_is_not_finite(vals, kw):
    """PyTorch refuses an infinite or NaN range; tpu binned into it silently.
    The range is data on the device: the check raises at the next
    synchronisation, and cannot print the values as PyTorch does."""
    with pytest.raises(RuntimeError, match=r"^torch\.histc: range of \["):
        torch.histc(torch.tensor(vals), **kw)
    with pytest.raises(RuntimeError, match=r"^torch\.histc: range of \["):
        torch.histc(torch.tensor(vals, device="tpu"), **kw).cpu()


@pytest.mark.parametrize("vals,kw", [([float("inf")], dict(bins=1, min=0, max=3)),
                                     ([1., 2., float("inf")], dict(bins=4, max=3)), ([2., 5.], {})])
def test_histc_finite_range_like_cpu(vals, kw):
    assert_like_cpu(lambda d: torch.histc(torch.tensor(vals, device=d), **kw))


# --- 7. complex special values (test_unary_ufuncs' reference_numerics_extremal) ---------------

def _special_complex(dt):
    import itertools
    vals = [0., 1., -1., 2.5, float("inf"), -float("inf"), float("nan")]
    if dt == torch.complex128:
        vals += [3e38, -3e38]  # in complex64 their log's imaginary parts are subnormal (flushed)
    return torch.tensor([complex(a, b) for a, b in itertools.product(vals, vals)], dtype=dt)


@pytest.mark.parametrize("dt", [torch.complex64, torch.complex128], ids=["complex64", "complex128"])
@pytest.mark.parametrize("fn", [torch.abs, torch.exp, torch.exp2, torch.log, torch.log2, torch.log10,
                                torch.sqrt], ids=lambda f: f.__name__)
def test_complex_special_values_like_cpu(fn, dt):
    """PyTorch's CPU follows C99's special values (std::complex): abs with
    an infinite part is inf, with a NaN part NaN (XLA: abs(1 + iNaN) was
    sqrt(2)); exp(+-inf + i(inf|NaN)), log and sqrt with NaN or infinite
    parts; log2/log10 divide by log(b) by parts (log10(inf) had a NaN
    imaginary part) and exp2 scales by parts."""
    z = _special_complex(dt)
    c, t = fn(z), fn(z.to("tpu")).cpu()
    assert c.dtype == t.dtype
    parts = ((c.real, t.real), (c.imag, t.imag)) if c.is_complex() else ((c, t),)
    for a, b in parts:
        ok = (a == b) | (a.isnan() & b.isnan()) | torch.isclose(a, b, rtol=1e-5, atol=0)
        bad = (~ok).nonzero().flatten()[:3].tolist()
        assert ok.all(), [(z[i].item(), c[i].item(), t[i].item()) for i in bad]


# --- 8. amax/amin scatters propagate NaN (test_scatter_gather_ops' test_scatter_reduce_amax) ----

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("op", ["scatter_reduce", "index_reduce"])
def test_max_min_scatters_propagate_nan(op, include_self, reduce, dtype):
    g = torch.Generator().manual_seed(3)
    self = torch.randn(5, 4, generator=g).to(dtype)
    self[1, 2] = float("nan")   # a NaN in self: kept with include_self, replaced without
    src = torch.randn(6, 4, generator=g).to(dtype)
    src[0, 0] = src[4, 3] = float("nan")
    src[2, 1] = float("inf")
    src[3, 1] = -float("inf")
    idx = torch.tensor([0, 1, 1, 3, 0, 1])
    res = []
    for dev in ("cpu", "tpu"):
        s, x, i = self.to(dev), src.to(dev), idx.to(dev)
        if op == "scatter_reduce":
            r = s.scatter_reduce(0, i[:, None].expand(6, 4), x, reduce, include_self=include_self)
        else:
            r = s.index_reduce(0, i, x, reduce, include_self=include_self)
        res.append(r.cpu())
    torch.testing.assert_close(res[1], res[0], equal_nan=True, rtol=0, atol=0)


# --- 9. sign of NaN and -0 (ATen computes (0 < x) - (x < 0): both give +0) -------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("op", [torch.sign, torch.sgn])
def test_sign_of_nan_and_negative_zero_is_zero(op, dtype):
    # normal values only: the CPU plugin flushes subnormals (README)
    v = torch.tensor([1.5, float("nan"), -2.0, 0.0, -0.0, float("inf"), -float("inf"), -3e-3],
                     dtype=dtype)
    want, got = op(v), op(v.to("tpu")).cpu()
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
    assert torch.equal(got.view(bits), want.view(bits)), (got, want)
