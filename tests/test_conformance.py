"""Conformance with PyTorch's CPU where PyTorch's own device-generic suites
look (issue 16): out= dtype rules, error texts (tests there match them with
assertRaisesRegex("^...")), source-dtype checks of the index-writing ops,
uint16/32/64 tensors and integer convolutions.

Every case runs the same call on "cpu" and "tpu": both must raise, or both
succeed with the same dtype and values. Where both raise, the tpu message
must START with the CPU's (our context follows it)."""
import math
import random
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

import torchtpu  # noqa: F401


def outcome(fn, dev):
    """('ok', result on the CPU) or ('raise', exception)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = fn(dev)
    except Exception as e:  # noqa: BLE001 - compared with the CPU's below
        return "raise", e
    if isinstance(r, (tuple, list)):
        r = r[0]
    return "ok", r.cpu() if isinstance(r, torch.Tensor) else r


def first_line(e):
    return str(e).split("\n")[0]


def assert_like_cpu(fn, values=True):
    kc, rc = outcome(fn, "cpu")
    kt, rt = outcome(fn, "tpu")
    assert kc == kt, f"cpu {kc}: {rc!r}; tpu {kt}: {rt!r}"
    if kc == "raise":
        assert type(rt) is type(rc), f"cpu raised {type(rc)}, tpu {type(rt)}: {rt}"
        want = first_line(rc)
        assert re.match("^" + re.escape(want), first_line(rt)), \
            f"tpu message {first_line(rt)!r} does not start with PyTorch's {want!r}"
        return rc
    if isinstance(rc, torch.Tensor):
        assert rt.dtype == rc.dtype, (rt.dtype, rc.dtype)
        if values:
            torch.testing.assert_close(rt, rc, rtol=1e-5, atol=1e-5, equal_nan=True)
    return rc


# --- 1. out= dtype rules --------------------------------------------------------------------

def t(dev, *shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(sum(shape) + 1)
    return torch.randn(*shape, generator=g).to(dtype).to(dev)


def o(dev, *shape, dtype):
    return torch.empty(*shape, dtype=dtype, device=dev)


I = lambda dev, *v: torch.tensor(list(v), device=dev)  # noqa: E731

# (name, fn(dev, out_dtype)): float32 inputs, out= of another dtype.
OUT_CASES = [
    ("neg", lambda d, od: torch.neg(t(d, 3), out=o(d, 3, dtype=od))),
    ("abs", lambda d, od: torch.abs(t(d, 3), out=o(d, 3, dtype=od))),
    ("floor", lambda d, od: torch.floor(t(d, 3), out=o(d, 3, dtype=od))),
    ("sign", lambda d, od: torch.sign(t(d, 3), out=o(d, 3, dtype=od))),
    ("sin", lambda d, od: torch.sin(t(d, 3), out=o(d, 3, dtype=od))),
    ("exp", lambda d, od: torch.exp(t(d, 3), out=o(d, 3, dtype=od))),
    ("add", lambda d, od: torch.add(t(d, 3), t(d, 3), out=o(d, 3, dtype=od))),
    ("mul", lambda d, od: torch.mul(t(d, 3), 2.0, out=o(d, 3, dtype=od))),
    ("mm", lambda d, od: torch.mm(t(d, 2, 3), t(d, 3, 4), out=o(d, 2, 4, dtype=od))),
    ("bmm", lambda d, od: torch.bmm(t(d, 2, 2, 3), t(d, 2, 3, 2), out=o(d, 2, 2, 2, dtype=od))),
    ("addmm", lambda d, od: torch.addmm(t(d, 2, 2), t(d, 2, 3), t(d, 3, 2),
                                        out=o(d, 2, 2, dtype=od))),
    ("matmul", lambda d, od: torch.matmul(t(d, 2, 3), t(d, 3, 4), out=o(d, 2, 4, dtype=od))),
    ("gather", lambda d, od: torch.gather(t(d, 3), 0, I(d, 0, 2), out=o(d, 2, dtype=od))),
    ("tril", lambda d, od: torch.tril(t(d, 3, 3), out=o(d, 3, 3, dtype=od))),
    ("sort", lambda d, od: torch.sort(t(d, 4), out=(o(d, 4, dtype=od),
                                                    o(d, 4, dtype=torch.int64)))),
    ("amax", lambda d, od: torch.amax(t(d, 2, 3), 1, out=o(d, 2, dtype=od))),
    ("sum", lambda d, od: torch.sum(t(d, 2, 3), 1, out=o(d, 2, dtype=od))),
    ("where", lambda d, od: torch.where(t(d, 3) > 0, t(d, 3), t(d, 3),
                                        out=o(d, 3, dtype=od))),
    ("softmax", lambda d, od: torch.softmax(t(d, 2, 3), 1, out=o(d, 2, 3, dtype=od))),
    ("index_select", lambda d, od: torch.index_select(t(d, 3), 0, I(d, 1),
                                                      out=o(d, 1, dtype=od))),
    ("clamp", lambda d, od: torch.clamp(t(d, 3), -0.5, 0.5, out=o(d, 3, dtype=od))),
    ("maximum", lambda d, od: torch.maximum(t(d, 3), t(d, 3), out=o(d, 3, dtype=od))),
    ("clamp_tensor", lambda d, od: torch.clamp(t(d, 3), t(d, 3), out=o(d, 3, dtype=od))),
    ("cat", lambda d, od: torch.cat([t(d, 2), t(d, 3)], out=o(d, 5, dtype=od))),
    ("mv", lambda d, od: torch.mv(t(d, 2, 3), t(d, 3), out=o(d, 2, dtype=od))),
    ("norm", lambda d, od: torch.linalg.vector_norm(t(d, 2, 3), out=o(d, (), dtype=od))),
    ("argmax", lambda d, od: torch.argmax(t(d, 4), out=o(d, (), dtype=od))),
]
OUT_DTYPES = [torch.float64, torch.int64, torch.bfloat16]


@pytest.mark.parametrize("od", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("name,fn", OUT_CASES, ids=[c[0] for c in OUT_CASES])
def test_out_dtype(name, fn, od):
    assert_like_cpu(lambda d: fn(d, od))


def test_out_dtype_messages():
    # The two families of refusals, with PyTorch's own texts.
    with pytest.raises(RuntimeError, match=r"^Found dtype Double but expected Float"):
        torch.neg(t("tpu", 3), out=o("tpu", 3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"^Expected out tensor to have dtype float, but got "
                                           r"double instead"):
        torch.mm(t("tpu", 2, 2), t("tpu", 2, 2), out=o("tpu", 2, 2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"^result type Float can't be cast to the desired "
                                           r"output type Long"):
        torch.add(t("tpu", 3), 1, out=o("tpu", 3, dtype=torch.int64))


# A sweep over PyTorch's OpInfo database: every op with out= that lowers to
# one of the ops whose rule the table above names, float32 inputs (first
# sample), three out dtypes. Small on purpose: the full sweep is in the
# report of the change that added this file.
OPDB_NAMES = ["neg", "ceil", "round", "mm", "addmv", "baddbmm", "topk", "scatter",
              "index_add", "take", "nan_to_num", "atan2", "pow", "lerp", "cumsum"]


def opdb_cases():
    from torch.testing._internal.common_methods_invocations import op_db
    return [op for op in op_db
            if op.supports_out and op.name in OPDB_NAMES and op.variant_test_name == ""]


@pytest.mark.parametrize("od", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("op", opdb_cases(), ids=lambda op: op.name)
def test_out_dtype_opinfo(op, od):
    sample = next(iter(op.sample_inputs("cpu", torch.float32)))

    def call(dev):
        s = sample.transform(lambda x: x.to(dev) if isinstance(x, torch.Tensor) else x)
        ref = op(s.input, *s.args, **s.kwargs)
        if isinstance(ref, torch.Tensor):
            out = torch.empty_like(ref, dtype=od)
        else:
            out = tuple(torch.empty_like(r, dtype=od if i == 0 else r.dtype)
                        for i, r in enumerate(ref))
        return op(s.input, *s.args, out=out, **s.kwargs)

    assert_like_cpu(call)


# --- 2. error texts ----------------------------------------------------------------------------

def test_cast_error_text_starts_with_pytorchs():
    with pytest.raises(RuntimeError) as e:
        torch.sin(t("tpu", 3), out=o("tpu", 3, dtype=torch.int64))
    msg = str(e.value)
    assert re.match(r"^result type Float can't be cast to the desired output type Long", msg)
    assert "sin" in msg  # our context follows PyTorch's text


def test_inplace_cast_error_text():
    assert_like_cpu(lambda d: torch.ones(3, dtype=torch.int64, device=d).add_(t(d, 3)))


def test_broadcast_error_text():
    err = assert_like_cpu(lambda d: t(d, 2, 3) + t(d, 2, 4))
    assert first_line(err).startswith("The size of tensor a (3) must match")
    assert_like_cpu(lambda d: t(d, 5, 1, 3) * t(d, 4, 2))


def test_matmul_error_texts():
    assert_like_cpu(lambda d: t(d, 2, 3) @ t(d, 4, 5))
    assert_like_cpu(lambda d: torch.mm(t(d, 2, 2), t(d, 2, 2, dtype=torch.float64)))


def test_device_error_text():
    with pytest.raises(RuntimeError, match=r"^Expected all tensors to be on the same device"):
        torch.ones(3, device="tpu") + torch.ones(3)


# Reductions over nothing: PyTorch's exception type and text (or its result:
# median() of an empty tensor is NaN), for each way of asking.
E = (0, 3)
EMPTY_REDUCTIONS = [
    ("max()", lambda d: torch.empty(E, device=d).max()),
    ("min()", lambda d: torch.empty(E, device=d).min()),
    ("amax()", lambda d: torch.empty(E, device=d).amax()),
    ("amax(0)", lambda d: torch.empty(E, device=d).amax(0)),
    ("amin(1)", lambda d: torch.empty(E, device=d).amin(1)),
    ("max(0)", lambda d: torch.empty(E, device=d).max(0)),
    ("min(-2)", lambda d: torch.empty(E, device=d).min(-2)),
    ("argmax()", lambda d: torch.empty(E, device=d).argmax()),
    ("argmin(0)", lambda d: torch.empty(E, device=d).argmin(0)),
    ("argmax(1)", lambda d: torch.empty(E, device=d).argmax(1)),
    ("aminmax()", lambda d: torch.aminmax(torch.empty(E, device=d))),
    ("aminmax(0)", lambda d: torch.aminmax(torch.empty(E, device=d), dim=0)),
    ("median()", lambda d: torch.empty(E, device=d).median()),
    ("nanmedian()", lambda d: torch.empty(0, device=d).nanmedian()),
    ("median(0)", lambda d: torch.empty(E, device=d).median(0)),
    ("nanmedian(0)", lambda d: torch.empty(E, device=d).nanmedian(0)),
    ("kthvalue(1, 0)", lambda d: torch.empty(E, device=d).kthvalue(1, 0)),
    ("kthvalue k big", lambda d: torch.ones(3, 2, device=d).kthvalue(4, 0)),
    ("kthvalue k 0", lambda d: torch.ones(3, 2, device=d).kthvalue(0, 1)),
    ("histc bins 0", lambda d: torch.histc(torch.ones(3, device=d), bins=0)),
]


@pytest.mark.parametrize("name,fn", EMPTY_REDUCTIONS, ids=[c[0] for c in EMPTY_REDUCTIONS])
def test_reduction_over_nothing(name, fn):
    def first(d):
        r = fn(d)
        return r[0] if isinstance(r, tuple) else r
    assert_like_cpu(first)


# --- 3. index writes with a source of another dtype ---------------------------------------

F64 = torch.float64
INDEX_WRITE_CASES = [
    ("index_put_", lambda d: torch.zeros(3, device=d).index_put_(
        (I(d, 0),), torch.tensor([1.], dtype=F64, device=d))),
    ("index_put_accumulate", lambda d: torch.zeros(3, device=d).index_put_(
        (I(d, 0),), torch.tensor([1.], dtype=F64, device=d), accumulate=True)),
    ("setitem", lambda d: torch.zeros(3, device=d).__setitem__(
        I(d, 0), torch.tensor([1.], dtype=F64, device=d))),
    ("index_put_long", lambda d: torch.zeros(3, dtype=torch.int64, device=d).index_put_(
        (I(d, 0),), torch.tensor([1.], device=d))),
    ("index_add_", lambda d: torch.zeros(3, device=d).index_add_(
        0, I(d, 0), torch.tensor([1.], dtype=F64, device=d))),
    ("index_copy_", lambda d: torch.zeros(3, device=d).index_copy_(
        0, I(d, 0), torch.tensor([1.], dtype=F64, device=d))),
    ("index_reduce_", lambda d: torch.zeros(3, device=d).index_reduce_(
        0, I(d, 0), torch.tensor([1.], dtype=F64, device=d), "prod")),
    ("scatter_", lambda d: torch.zeros(3, device=d).scatter_(
        0, I(d, 0), torch.tensor([1.], dtype=F64, device=d))),
    ("scatter_add_", lambda d: torch.zeros(3, device=d).scatter_add_(
        0, I(d, 0), torch.tensor([1.], dtype=F64, device=d))),
    ("scatter_reduce_", lambda d: torch.zeros(3, device=d).scatter_reduce_(
        0, I(d, 0), torch.tensor([1.], dtype=F64, device=d), "sum")),
    ("masked_scatter_", lambda d: torch.zeros(3, device=d).masked_scatter_(
        torch.tensor([True, False, False], device=d), torch.tensor([1.], dtype=F64, device=d))),
    ("put_", lambda d: torch.zeros(3, device=d).put_(
        I(d, 0), torch.tensor([1.], dtype=F64, device=d))),
    # Same dtypes still work.
    ("index_put_same", lambda d: torch.zeros(3, device=d).index_put_(
        (I(d, 1),), torch.tensor([2.], device=d))),
    ("scatter_value", lambda d: torch.zeros(3, device=d).scatter_(0, I(d, 2), 1.5)),
]


@pytest.mark.parametrize("name,fn", INDEX_WRITE_CASES, ids=[c[0] for c in INDEX_WRITE_CASES])
def test_index_write_dtypes(name, fn):
    assert_like_cpu(fn)


def test_index_put_text():
    with pytest.raises(RuntimeError, match=r"^Index put requires the source and destination "
                                           r"dtypes match, got Float for the destination and "
                                           r"Double for the source\."):
        torch.zeros(3, device="tpu").index_put_((I("tpu", 0),),
                                                torch.tensor([1.], dtype=F64, device="tpu"))


# --- 5. uint16 / uint32 / uint64 ------------------------------------------------------------

UINTS = [torch.uint16, torch.uint32, torch.uint64]


def u(dev, dt, vals=(1, 2, 3, 40000)):
    return torch.tensor(list(vals), dtype=torch.int64).to(dt).to(dev)


UINT_CASES = [
    ("roundtrip", lambda d, dt: u(d, dt)),
    ("big_values", lambda d, dt: torch.tensor([torch.iinfo(dt).max, 0, 7], dtype=dt).to(d)),
    ("view_slice", lambda d, dt: u(d, dt)[1:3]),
    ("view_reshape", lambda d, dt: u(d, dt).view(2, 2).t().contiguous()),
    ("to_float", lambda d, dt: u(d, dt).float()),
    ("from_float", lambda d, dt: torch.tensor([1.0, 7.0, 300.0], device=d).to(dt)),
    ("clone", lambda d, dt: u(d, dt).clone()),
    ("cat", lambda d, dt: torch.cat([u(d, dt), u(d, dt)])),
    ("mul", lambda d, dt: u(d, dt) * u(d, dt)),
    ("bitwise_and", lambda d, dt: u(d, dt) & u(d, dt, (3, 3, 3, 3))),
    ("bitwise_xor", lambda d, dt: u(d, dt) ^ u(d, dt, (3, 3, 3, 3))),
    ("eq", lambda d, dt: u(d, dt) == u(d, dt, (1, 0, 3, 0))),
    ("sum", lambda d, dt: u(d, dt).sum()),
    ("cumsum", lambda d, dt: u(d, dt).cumsum(0)),
    ("sort", lambda d, dt: u(d, dt, (5, 1, 4, 2)).sort()),
    ("zeros", lambda d, dt: torch.zeros(3, dtype=dt, device=d)),
    ("fill_", lambda d, dt: torch.empty(3, dtype=dt, device=d).fill_(5)),
    ("index", lambda d, dt: u(d, dt)[torch.tensor([2, 0], device=d)]),
    # CPU raises "... not implemented for 'UInt16'": so must we.
    ("add", lambda d, dt: u(d, dt) + u(d, dt)),
    ("lt", lambda d, dt: u(d, dt) < u(d, dt)),
    ("neg", lambda d, dt: -u(d, dt)),
    ("max", lambda d, dt: u(d, dt).max()),
]


@pytest.mark.parametrize("dt", UINTS, ids=str)
@pytest.mark.parametrize("name,fn", UINT_CASES, ids=[c[0] for c in UINT_CASES])
def test_wide_uint(name, fn, dt):
    assert_like_cpu(lambda d: fn(d, dt))


# --- 6. integer convolution -----------------------------------------------------------------

def ri(dev, *shape, dtype, lo=-3, hi=4):
    g = torch.Generator().manual_seed(sum(shape))
    return torch.randint(lo, hi, shape, generator=g).to(dtype).to(dev)


CONV_CASES = [
    ("conv1d", lambda d, dt, lo: F.conv1d(ri(d, 2, 3, 9, dtype=dt, lo=lo),
                                          ri(d, 4, 3, 3, dtype=dt, lo=lo),
                                          ri(d, 4, dtype=dt, lo=lo), stride=2, padding=1)),
    ("conv2d", lambda d, dt, lo: F.conv2d(ri(d, 1, 4, 6, 5, dtype=dt, lo=lo),
                                          ri(d, 6, 2, 3, 3, dtype=dt, lo=lo),
                                          groups=2, dilation=(1, 2))),
    ("conv3d", lambda d, dt, lo: F.conv3d(ri(d, 1, 2, 4, 4, 4, dtype=dt, lo=lo),
                                          ri(d, 3, 2, 2, 2, 2, dtype=dt, lo=lo), padding=1)),
    ("conv_transpose1d", lambda d, dt, lo: F.conv_transpose1d(
        ri(d, 1, 2, 5, dtype=dt, lo=lo), ri(d, 2, 3, 3, dtype=dt, lo=lo), stride=2)),
]


@pytest.mark.parametrize("dt", [torch.int64, torch.int32, torch.int8, torch.uint8], ids=str)
@pytest.mark.parametrize("name,fn", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_integer_conv(name, fn, dt):
    lo = 0 if dt == torch.uint8 else -3
    kc, rc = outcome(lambda d: fn(d, dt, lo), "cpu")
    if kc == "raise":
        # The CPU's dilated and transposed kernels take int64 only
        # ("slow_conv_dilated<>" not implemented for 'Int'); CUDA takes no
        # integer dtype. tpu convolves every integer dtype: check it against
        # the CPU's int64 result wrapped to the dtype (integer arithmetic is
        # modular, so that is the exact answer).
        assert isinstance(rc, NotImplementedError), rc
        want = fn("cpu", torch.int64, lo).to(dt)
        got = fn("tpu", dt, lo)
        assert got.dtype == dt and torch.equal(got.cpu(), want)
    else:
        # Exact: integer arithmetic (wrapping for int8/uint8, as on the CPU).
        assert_like_cpu(lambda d: fn(d, dt, lo))


def test_integer_conv_wraps_like_cpu():
    x = torch.full((1, 1, 8), 100, dtype=torch.int8)
    w = torch.full((1, 1, 3), 3, dtype=torch.int8)
    assert torch.equal(F.conv1d(x.to("tpu"), w.to("tpu")).cpu(), F.conv1d(x, w))


# --- 6. indexing and promotion, from PyTorch's test_indexing / test_type_promotion ---------

INDEXING_CASES = [
    ("index shapes don't broadcast", lambda d: torch.zeros(5, 5, device=d)[[0, 1], [0, 1, 2]]),
    ("setitem shapes don't broadcast", lambda d: torch.zeros(5, 5, device=d).__setitem__(
        ([0, 1], [0, 1, 2]), 0)),
    ("False with a list index", lambda d: torch.ones(2, 3, 4, device=d)[False, [0, 1], ...]),
    ("bools and lists", lambda d: torch.ones(2, 3, 4, device=d)[True, [0, 1], True, True,
                                                              [1], [[2]]]),
    ("float index", lambda d: torch.tensor([1, 2, 3], device=d)[torch.tensor([], device=d)]),
    ("index into an empty dim", lambda d: torch.empty(10, 0, device=d)[:, [0, 1]]),
    ("empty index of an empty dim", lambda d: torch.empty(10, 0, device=d)[[1, 2]]),
    ("2-d empty index", lambda d: torch.randn(5, device=d)[
        torch.empty(0, 2, dtype=torch.int64, device=d)]),
    ("take_along_dim of nothing", lambda d: torch.take_along_dim(
        torch.randn(0, device=d), torch.empty(0, 2, dtype=torch.long, device=d))),
    ("bf16 + complex", lambda d: torch.tensor(5.5, dtype=torch.bfloat16, device=d) + 1j),
    ("cat promotes with an empty", lambda d: torch.cat(
        [torch.ones(3, device=d), torch.tensor([], dtype=torch.float64, device=d)])),
    ("cat of empties promotes", lambda d: torch.cat(
        [torch.tensor([], device=d), torch.tensor([], dtype=torch.int64, device=d),
         torch.tensor([], dtype=torch.float64, device=d)])),
]


@pytest.mark.parametrize("name,fn", INDEXING_CASES, ids=[c[0] for c in INDEXING_CASES])
def test_indexing_and_promotion(name, fn):
    assert_like_cpu(fn)


# --- 7. factories and conversions, from PyTorch's test_tensor_creation_ops ------------------

def _narrow_out(d):
    return torch.zeros(2, 3, device=d).narrow(1, 1, 2)


F32_LIMITS = (torch.finfo(torch.float).min, -2, -1.5, -0.5, 0, 0.5, 1.5, 2,
              torch.finfo(torch.float).max, 3e9, -3e9, 300.0, -300.0)
CREATION_CASES = [
    # out= of the right element count keeps its shape (and writes only its view)
    ("linspace out view", lambda d: torch.linspace(0, 3, 4, out=_narrow_out(d))._base),
    ("arange out view", lambda d: torch.arange(4.0, out=_narrow_out(d))._base),
    ("logspace out view", lambda d: torch.logspace(0, 3, 4, base=2, out=_narrow_out(d))._base),
    ("random_ from out of int8", lambda d: torch.empty(4, dtype=torch.int8, device=d)
     .random_(-129, 0)),
    ("random_ to - 1 out of uint8", lambda d: torch.empty(4, dtype=torch.uint8, device=d)
     .random_(0, 257)),
    ("random_ to out of int16", lambda d: torch.empty(4, dtype=torch.int16, device=d)
     .random_(40000)),
    ("random_ bool to 3", lambda d: torch.empty(4, dtype=torch.bool, device=d).random_(0, 3)),
    ("random_ from > to", lambda d: torch.empty(4, device=d).random_(5, 2)),
    ("eye n < 0", lambda d: torch.eye(-1, device=d)),
    ("eye m < 0", lambda d: torch.eye(2, -1, device=d)),
    ("roll without shifts", lambda d: torch.roll(torch.ones(3, device=d), [])),
    ("roll shifts != dims", lambda d: torch.roll(torch.ones(3, device=d), [1, 2], [0])),
    ("roll 2 shifts no dims", lambda d: torch.roll(torch.ones(3, device=d), [1, 2])),
    ("complex parts differ", lambda d: torch.complex(
        torch.ones(2, device=d), torch.ones(2, dtype=torch.float64, device=d))),
    ("complex out real", lambda d: torch.complex(
        torch.ones(2, device=d), torch.ones(2, device=d), out=torch.empty(2, device=d))),
    ("polar out complex128", lambda d: torch.polar(
        torch.ones(2, device=d), torch.ones(2, device=d),
        out=torch.empty(2, dtype=torch.complex128, device=d))),
] + [
    (f"float32 to {dt}", (lambda dt: lambda d: torch.tensor(F32_LIMITS, device=d).to(dt))(dt))
    for dt in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)
] + [
    (f"float64 to {dt}", (lambda dt: lambda d: torch.tensor(F32_LIMITS, dtype=torch.float64,
                                                            device=d).to(dt))(dt))
    for dt in (torch.int8, torch.int32, torch.int64)
]


@pytest.mark.parametrize("name,fn", CREATION_CASES, ids=[c[0] for c in CREATION_CASES])
def test_creation_and_conversion(name, fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_like_cpu(fn)


# --- 8. more dims than the core's programs take (PyTorch allows 64) ----------------------

HIGH_RANK_CASES = [
    ("rank 30 add_", lambda d: torch.ones([1] * 29 + [2], device=d).add_(1)),
    ("rank 9 ones", lambda d: torch.ones([1] * 9, device=d)),
    ("rank 9 upload", lambda d: torch.arange(2.0).reshape([1] * 8 + [2]).to(d) * 3),
    ("rank 20 repeat", lambda d: torch.arange(4.0, device=d).view(2, 2).repeat([1] * 18 + [2, 1])),
    ("rank 12 view exp", lambda d: torch.linspace(0, 1, 4096, device=d).view([2] * 12).exp()),
    ("rank 10 transposed", lambda d: torch.arange(48.0, device=d).view(2, 1, 3, 1, 1, 2, 1, 1, 1, 4)
     .transpose(0, 9).contiguous()),
    ("rank 65 randn shape", lambda d: torch.zeros([1] * 65, device=d).sum()),
    ("rank 65 reduce dim", lambda d: torch.zeros([1] * 65, device=d).sum(dim=64)),
    ("rank 65 mean dim 0", lambda d: torch.zeros([1] * 65, device=d).mean(dim=0)),
]


@pytest.mark.parametrize("name,fn", HIGH_RANK_CASES, ids=[c[0] for c in HIGH_RANK_CASES])
def test_high_rank_like_cpu(name, fn):
    """Ops on tensors above TT_MAX_RANK dims run on the CPU (a documented
    fallback), tensors of any rank copy between host and device, and what
    PyTorch refuses (reductions over > 64 dims) raises its error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_like_cpu(fn)


def test_mode_out_like_cpu():
    """mode.values (out=) runs on the device, with PyTorch's exact-dtype
    checks (PyTorch's composite kernel refuses devices other than CPU/CUDA/XPU)."""
    x = lambda d: torch.tensor([[1., 2, 2], [3, 3, 1]], device=d)  # noqa: E731
    assert_like_cpu(lambda d: torch.mode(x(d), 1, out=(torch.empty(0, device=d),
                                                       torch.empty(0, dtype=torch.long, device=d))))
    assert_like_cpu(lambda d: torch.mode(x(d), 1, out=(torch.empty(0, dtype=torch.long, device=d),
                                                       torch.empty(0, dtype=torch.long, device=d))))
    assert_like_cpu(lambda d: torch.mode(x(d), 1, out=(torch.empty(0, device=d),
                                                       torch.empty(0, device=d))))


# --- 9. pooling, from PyTorch's nn/test_pooling --------------------------------------------

def _adaptive_zero_backward(fn):
    def run(d):
        x = torch.randn(1, 4, 10, 9, device=d, requires_grad=True)
        fn(x, 0).sum().backward()
        return x.grad
    return run


POOLING_CASES = [
    ("max_pool2d empty channels", lambda d: F.max_pool2d(torch.randn(1, 0, 6, 5, device=d), 3, 2)),
    ("max_pool2d empty batch", lambda d: F.max_pool2d(torch.randn(0, 4, 6, 5, device=d), 3, 2)),
    ("avg_pool2d empty channels", lambda d: F.avg_pool2d(torch.randn(2, 0, 6, 5, device=d), 3, 2)),
    ("avg_pool1d empty channels", lambda d: F.avg_pool1d(torch.randn(1, 0, 5, device=d), 3, 2)),
    ("avg_pool3d empty channels", lambda d: F.avg_pool3d(torch.randn(1, 0, 5, 5, 5, device=d), 3)),
    ("avg_pool3d unbatched empty", lambda d: F.avg_pool3d(torch.randn(0, 5, 5, 5, device=d), 3)),
    ("adaptive_max_pool2d empty channels", lambda d: F.adaptive_max_pool2d(
        torch.randn(1, 0, 6, 5, device=d), 3)),
    ("adaptive_max_pool3d empty channels", lambda d: F.adaptive_max_pool3d(
        torch.randn(1, 0, 6, 5, 4, device=d), 3)),
    ("adaptive_avg_pool3d empty channels", lambda d: F.adaptive_avg_pool3d(
        torch.randn(1, 0, 6, 5, 4, device=d), 3)),
    ("adaptive_avg_pool2d empty channels", lambda d: F.adaptive_avg_pool2d(
        torch.randn(1, 0, 6, 5, device=d), 3)),
    ("adaptive_avg_pool2d empty height", lambda d: F.adaptive_avg_pool2d(
        torch.randn(1, 2, 0, 5, device=d), 3)),
] + [
    (f"{op}_pool{n}d stride 0", (lambda op, n: lambda d: getattr(F, f"{op}_pool{n}d")(
        torch.ones([1, 2] + n * [4], device=d), kernel_size=2, stride=0))(op, n))
    for op in ("max", "avg") for n in (2, 3)
] + [
    ("max_pool2d negative stride", lambda d: F.max_pool2d(torch.ones(1, 2, 4, 4, device=d), 2, -1)),
    ("max_pool2d pad > half kernel", lambda d: F.max_pool2d(torch.ones(1, 2, 4, 4, device=d), 2, 1, 2)),
    ("max_pool2d kernel 0", lambda d: F.max_pool2d(torch.ones(1, 2, 4, 4, device=d), 0, 1)),
    ("max_pool2d dilation 0", lambda d: F.max_pool2d(torch.ones(1, 2, 4, 4, device=d), 2, 1, 0, 0)),
    ("avg_pool3d negative pad", lambda d: F.avg_pool3d(torch.ones(1, 2, 4, 4, 4, device=d), 2, 1, -1)),
] + [
    (f"adaptive_{p}_pool{n}d of {dt}", (lambda p, n, dt: lambda d: getattr(F, f"adaptive_{p}_pool{n}d")(
        torch.randn((4,) * (n + 1), device=d).to(dt), 2))(p, n, dt))
    for p in ("max", "avg") for n in (2, 3) for dt in (torch.int64, torch.uint8)
] + [
    (f"{fn.__name__} to size 0", (lambda fn: lambda d: fn(torch.randn(1, 4, 10, 9, device=d), 0))(fn))
    for fn in (F.adaptive_avg_pool2d, F.adaptive_avg_pool3d, F.adaptive_max_pool2d,
               F.adaptive_max_pool3d)
] + [
    (f"{fn.__name__} to size 0 backward", _adaptive_zero_backward(fn))
    for fn in (F.adaptive_avg_pool2d, F.adaptive_avg_pool3d, F.adaptive_max_pool2d,
               F.adaptive_max_pool3d)
]


@pytest.mark.parametrize("name,fn", POOLING_CASES, ids=[c[0] for c in POOLING_CASES])
def test_pooling_like_cpu(name, fn):
    r = assert_like_cpu(fn)
    if isinstance(r, torch.Tensor):  # empty results: the shapes must agree too
        assert tuple(fn("tpu").shape) == tuple(r.shape)


def test_max_pool3d_empty_channels_refused():
    # PyTorch's text names its CPU template; ours names the op.
    with pytest.raises(RuntimeError, match="Expected input's non-batch dimensions to have "
                                           "positive length"):
        F.max_pool3d(torch.ones(1, 0, 5, 4, 3, device="tpu"), 3)


LAYOUT_CASES = [
    ("max_pool2d", lambda t: F.max_pool2d(t, 2)),
    ("max_pool2d indices", lambda t: F.max_pool2d(t, 2, return_indices=True)[1]),
    ("avg_pool2d", lambda t: F.avg_pool2d(t, 2)),
    ("adaptive_max_pool2d", lambda t: F.adaptive_max_pool2d(t, 3)),
    ("adaptive_avg_pool2d", lambda t: F.adaptive_avg_pool2d(t, 3)),
    ("conv2d", lambda t: F.conv2d(t, torch.ones(4, 3, 3, 3, device=t.device))),
    ("batch_norm", lambda t: F.batch_norm(t, None, None, training=True)),
    ("interpolate", lambda t: F.interpolate(t, scale_factor=2)),
    ("max_pool2d backward", lambda t: torch.autograd.grad(
        F.max_pool2d(t.requires_grad_(), 2).sum(), t)[0]),
] + [
    (f"{fn.__name__}", (lambda fn: lambda t: fn(t.unsqueeze(2).expand(-1, -1, 2, -1, -1)
                                                .contiguous(memory_format=torch.channels_last_3d), 1))(fn))
    for fn in (F.max_pool3d, F.avg_pool3d, F.adaptive_avg_pool3d, F.adaptive_max_pool3d)
]


@pytest.mark.parametrize("name,fn", LAYOUT_CASES, ids=[c[0] for c in LAYOUT_CASES])
def test_channels_last_results_like_cpu(name, fn):
    """Convolution, pooling, upsampling and batch norm give channels_last
    results for channels_last inputs, as PyTorch's kernels do; values equal."""
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    want = fn(x.clone())
    got = fn(x.to("tpu"))
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def _permuted(perm):
    inv = [perm.index(i) for i in range(len(perm))]
    return lambda d: torch.arange(120.0, device=d).view(2, 3, 4, 5).permute(perm).contiguous() \
        .permute(inv)


POINTWISE_LAYOUT_CASES = [
    (f"relu of dims {''.join(map(str, p))}", (lambda p: lambda d: torch.relu(_permuted(p)(d)))(p))
    for p in ((0, 2, 3, 1), (3, 2, 1, 0), (1, 0, 2, 3), (2, 0, 3, 1))
] + [
    ("sliced permuted exp", lambda d: torch.exp(_permuted((1, 0, 2, 3))(d)[1:, :, 1:] / 100)),
    ("permuted + contiguous", lambda d: _permuted((0, 2, 3, 1))(d) + torch.ones(2, 3, 4, 5, device=d)),
    ("contiguous + permuted", lambda d: torch.ones(2, 3, 4, 5, device=d) + _permuted((0, 2, 3, 1))(d)),
    ("permuted * broadcast row", lambda d: _permuted((3, 1, 0, 2))(d) * torch.arange(5.0, device=d)),
    ("transposed add", lambda d: torch.arange(12.0, device=d).view(3, 4).t() + 1),
    ("expanded mul", lambda d: torch.arange(4.0, device=d).view(1, 4).expand(3, 4) * 2),
    ("channels_last where", lambda d: torch.where(_permuted((0, 2, 3, 1))(d) > 50,
                                                  _permuted((0, 2, 3, 1))(d), 0.0)),
    ("channels_last 3d sigmoid", lambda d: torch.sigmoid(torch.arange(240.0, device=d)
                                                         .view(2, 3, 2, 4, 5) / 100)
     .contiguous(memory_format=torch.channels_last_3d).sigmoid()),
    ("channels_last, one channel", lambda d: torch.arange(40.0, device=d).view(2, 1, 4, 5)
     .contiguous(memory_format=torch.channels_last).neg()),
    ("dropout keeps the dim order", lambda d: F.dropout(_permuted((2, 0, 3, 1))(d), 1e-10)),
    ("ambiguous channels_last * 5", lambda d: torch.arange(3.0, device=d).view(1, 3, 1, 1)
     .expand(10, 3, 1, 1).contiguous(memory_format=torch.channels_last) * 5),
    ("abs (through abs.out)", lambda d: torch.abs(_permuted((0, 2, 3, 1))(d))),
    ("add into an empty out=", lambda d: torch.add(_permuted((1, 3, 0, 2))(d), 1,
                                                   out=torch.empty(0, device=d))),
    ("unsqueezed + 3", lambda d: _permuted((0, 2, 3, 1))(d)[0].unsqueeze(0) + 3),
    ("cat of channels_last along dim 1", lambda d: torch.cat(
        [_permuted((0, 2, 3, 1))(d), _permuted((0, 2, 3, 1))(d)], dim=1)),
    ("cat of channels_last along dim 3", lambda d: torch.cat(
        [_permuted((0, 2, 3, 1))(d), _permuted((0, 2, 3, 1))(d)], dim=3)),
    ("cat of channels_last and contiguous", lambda d: torch.cat(
        [_permuted((0, 2, 3, 1))(d), torch.ones(2, 3, 4, 5, device=d)])),
    ("max_pool2d into an empty out=", lambda d: torch.ops.aten.max_pool2d_with_indices.out(
        _permuted((0, 2, 3, 1))(d), [2, 2], [2, 2], [0, 0], [1, 1], False,
        out=torch.empty(0, device=d), indices=torch.empty(0, dtype=torch.long, device=d))[0]),
]


@pytest.mark.parametrize("name,fn", POINTWISE_LAYOUT_CASES, ids=[c[0] for c in POINTWISE_LAYOUT_CASES])
def test_pointwise_results_keep_the_inputs_dim_order(name, fn):
    """TensorIterator's rule: a pointwise result is dense, its dims ordered as
    the inputs' strides order them; the same strides and values as the CPU's."""
    want = fn("cpu")
    got = fn("tpu")
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    torch.testing.assert_close(got.cpu(), want)


# --- 10. samplers' parameter checks (values are runtime arguments: checked each call) ------

SAMPLER_CASES = [
    ("uniform_ from > to", lambda d: torch.empty(3, device=d).uniform_(2, 1)),
    ("uniform_ span too wide", lambda d: torch.empty(3, device=d).uniform_(-3e38, 3e38)),
    ("uniform_ float64 span too wide", lambda d: torch.empty(3, dtype=torch.float64, device=d)
     .uniform_(-1.7e308, 1.7e308)),
    ("uniform_ from out of half", lambda d: torch.empty(3, dtype=torch.half, device=d)
     .uniform_(-7e4, 1)),
    ("uniform_ nan from", lambda d: torch.empty(3, device=d).uniform_(float("nan"), 1)),
    ("uniform_ from == to", lambda d: torch.empty(3, device=d).uniform_(1, 1)),
    ("normal_ negative std", lambda d: torch.empty(3, device=d).normal_(0, -1)),
    ("normal_ zero std", lambda d: torch.empty(3, device=d).normal_(0.5, 0)),
    ("normal tensor mean, negative float std", lambda d: torch.normal(torch.zeros(3, device=d), -1.0)),
    ("normal negative tensor std", lambda d: torch.normal(torch.zeros(3, device=d),
                                                          -torch.ones(3, device=d)).cpu()),
    ("exponential_ negative", lambda d: torch.empty(3, device=d).exponential_(-1)),
    ("exponential_ zero", lambda d: torch.empty(3, device=d).exponential_(0)),
    ("geometric_ p = 1", lambda d: torch.empty(3, device=d).geometric_(1)),
    ("geometric_ p = 2", lambda d: torch.empty(3, device=d).geometric_(2)),
    ("cauchy_ sigma 0", lambda d: torch.empty(3, device=d).cauchy_(0, 0)),
    ("log_normal_ std -1", lambda d: torch.empty(3, device=d).log_normal_(0, -1)),
    ("bernoulli_ p = 2", lambda d: torch.empty(3, device=d).bernoulli_(2.0)),
    ("bernoulli p = 1.5", lambda d: torch.bernoulli(torch.empty(3, device=d), 1.5)),
]


@pytest.mark.parametrize("name,fn", SAMPLER_CASES, ids=[c[0] for c in SAMPLER_CASES])
def test_sampler_parameters_like_cpu(name, fn):
    """PyTorch refuses bad sampler parameters with its texts; before, tpu
    returned NaNs or values outside the range. Values are compared only for
    the deterministic cases (from == to, std 0)."""
    assert_like_cpu(fn, values=name in ("uniform_ from == to", "normal_ zero std"))


# --- 11. integer arithmetic edge cases, from PyTorch's test_binary_ufuncs ------------------

INT_EDGE_CASES = [
    (f"{fn.__name__} of empty {dt}", (lambda fn, dt: lambda d: fn(
        torch.empty(0, dtype=dt, device=d), torch.empty(0, dtype=dt, device=d)))(fn, dt))
    for fn in (torch.fmod, torch.remainder, torch.floor_divide, torch.lcm, torch.gcd)
    for dt in (torch.int32, torch.int64, torch.uint8)
] + [
    ("trunc div of empty int32", lambda d: torch.div(torch.empty(0, dtype=torch.int32, device=d),
                                                     torch.empty(0, dtype=torch.int32, device=d),
                                                     rounding_mode="trunc")),
    ("int ** -1", lambda d: torch.tensor([2, 3], device=d) ** -1),
    ("uint8 ** -2", lambda d: torch.tensor([2, 3], dtype=torch.uint8, device=d) ** -2),
    ("bool ** -1", lambda d: torch.tensor([True], device=d) ** -1),
    ("int pow_ -1", lambda d: torch.tensor([2, 3], device=d).pow_(-1)),
    ("int ** -1.0 (float)", lambda d: torch.tensor([2, 3], device=d) ** -1.0),
    ("int ** tensor of negatives", lambda d: torch.tensor([2, 3], device=d) ** torch.tensor([-1, 2], device=d)),
] + [  # ATen's alpha_check, in its order (test_binary_ufuncs' test_add)
    (f"{fn.__name__} {dt} alpha={alpha!r}", (lambda fn, dt, alpha: lambda d: fn(
        torch.tensor([1, 2], device=d).to(dt), torch.tensor([3, 1], device=d).to(dt),
        alpha=alpha))(fn, dt, alpha))
    for fn in (torch.add, torch.sub)
    for dt in (torch.int8, torch.float32, torch.bool)
    for alpha in (True, 1.5, 0.5j, 2)
]


@pytest.mark.parametrize("name,fn", INT_EDGE_CASES, ids=[c[0] for c in INT_EDGE_CASES])
def test_integer_edge_cases_like_cpu(name, fn):
    """Integer division and remainder of empty [0] tensors crashed the
    process (XLA's CPU compiler, SIGFPE); an integer to a negative integer
    power returned zeros where PyTorch raises."""
    assert_like_cpu(fn)


def test_cpu_fallback_results_stay_on_tpu_with_a_host_scalar_first():
    """PyTorch's CPU fallback returns results on its first tensor argument's
    device; with a host scalar first (as torch._refs / prims call ops) they
    stayed on the CPU. They come back to tpu."""
    shape = (5,) + (1,) * 15  # more dims than the core's programs: the CPU fallback
    x = torch.arange(5.0).view(shape)
    got = torch.mul(torch.tensor(1e-5, dtype=torch.float64), x.to("tpu"))
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), torch.mul(torch.tensor(1e-5, dtype=torch.float64), x))


# --- 12. element-by-element host reads and writes (test_tensor_creation_ops' linspace) ------

def test_iterating_a_tensor_reads_its_storage_once():
    """`all(t)` / `for x in t` read one element per step; each read copied the
    whole storage to the host, so a million elements took minutes
    (test_linspace timed out). The storage's bytes are kept for the next read
    while its buffer is unchanged: one transfer for the whole iteration."""
    n = 20000
    cpu = torch.linspace(0, 1, n) * torch.linspace(1, 2, n)
    t = cpu.to("tpu")
    before = torch.tpu.memory_stats()["device_to_host_bytes"]
    got = [float(x) for x in t]
    moved = torch.tpu.memory_stats()["device_to_host_bytes"] - before
    assert got == cpu.tolist()
    assert moved <= 2 * t.nbytes, f"{moved} bytes read for a {t.nbytes}-byte tensor"
    assert all(t[1:] >= t[:-1]) == all(cpu[1:] >= cpu[:-1])


def test_element_reads_see_every_kind_of_write():
    """The kept bytes must never be stale: element writes from the host, ops
    writing in place, out=, views of another dtype and resizes each change
    what the next element read returns."""
    for dev in ("cpu", "tpu"):
        x = torch.arange(12.0, device=dev).reshape(3, 4)
        seen = [x[0, 1].item()]
        x[0, 1] = 40.0
        seen.append(x[0, 1].item())
        x.add_(1)
        seen += [x[0, 1].item(), x[2, 3].item()]
        torch.mul(x, 2, out=x)
        seen.append(x[1, 2].item())
        x.view(torch.int32)[0, 0] = 0  # the float's bits
        seen.append(x[0, 0].item())
        x[:, 1].fill_(-1)
        seen += [e.item() for e in x[:, 1]] + [x[2, 2].item()]
        x.resize_(20)
        x[15] = 5.0
        seen += [x[15].item(), x[3].item()]
        if dev == "cpu":
            want = seen
        else:
            assert seen == want


# --- 13. arange and embedding_bag, from test_tensor_creation_ops and nn/test_embedding ------

W = 1449629115440469
ARANGE_CASES = [
    ("int64 count past 2^53", lambda d: torch.arange(0, 100 * W, W, device=d)),
    ("int64 bounds past 2^53", lambda d: torch.arange(2**62, 2**62 + 10, 3, device=d)),
    ("int32 count from the untruncated bounds", lambda d: torch.arange(0.5, 10.7, 2, dtype=torch.int32, device=d)),
    ("float32 points computed in double", lambda d: torch.arange(-3.7, 4.2, 1.5, device=d)),
    ("descending", lambda d: torch.arange(10, 0.5, -2.5, device=d)),
]


@pytest.mark.parametrize("name,fn", ARANGE_CASES, ids=[c[0] for c in ARANGE_CASES])
def test_arange_like_cpu(name, fn):
    cpu = assert_like_cpu(fn)
    assert torch.equal(fn("tpu").cpu(), cpu)


def test_range_factories_resize_out_as_pytorch():
    """arange resizes a mis-sized out= with its own warning; linspace quietly,
    and an out of the right count keeps its shape."""
    for dev in ("cpu", "tpu"):
        line = torch.zeros(1, 49, device=dev)
        with pytest.warns(UserWarning, match="The out tensor will be resized"):
            torch.arange(-1, 1, 2.0 / 49, out=line)
        assert line.shape == (50,)
        grid = torch.zeros(2, 3, device=dev)
        torch.linspace(0, 1, 6, out=grid)
        assert grid.shape == (2, 3)


EMBEDDING_BAG_ERRORS = [
    ("5-D input", lambda d: torch.embedding_bag(torch.zeros(2, 6, device=d, dtype=torch.float64),
                                                 torch.full((2, 0, 0, 6, 6), 2, device=d),
                                                 torch.zeros(2, 0, 0, 6, 6, dtype=torch.long, device=d))),
    ("5-D offsets", lambda d: torch.embedding_bag(torch.zeros(2, 2, device=d), torch.ones(2, dtype=torch.long, device=d),
                                                   torch.zeros(2, 0, 0, 6, 6, dtype=torch.long, device=d))),
    ("3-D weight", lambda d: torch._embedding_bag(torch.zeros(2, 2, 2, device=d), torch.ones(2, dtype=torch.long, device=d),
                                                   torch.zeros(2, dtype=torch.long, device=d))),
]


@pytest.mark.parametrize("name,fn", EMBEDDING_BAG_ERRORS, ids=[c[0] for c in EMBEDDING_BAG_ERRORS])
def test_embedding_bag_errors_like_cpu(name, fn):
    assert_like_cpu(fn)


def test_embedding_bag_with_gradients_is_native_and_checks_indices():
    """_embedding_bag (the op a weight needing a gradient takes) ran on the
    CPU; it is native, with PyTorch's index dtypes (int32 when indices and
    offsets are) and a bounds check (the gather would clamp an index that is
    out of range and return another row's values)."""
    w = torch.randn(10, 3, dtype=torch.float64)
    for it in (torch.int32, torch.int64):
        idx, offs = torch.tensor([1, 2, 9, 4], dtype=it), torch.tensor([0, 1], dtype=it)
        for mode in (0, 1, 2):
            cpu = torch.ops.aten._embedding_bag(w, idx, offs, False, mode, False, None, False, -1)
            tpu = torch.ops.aten._embedding_bag(w.to("tpu"), idx.to("tpu"), offs.to("tpu"), False, mode,
                                                False, None, False, -1)
            torch.testing.assert_close(tpu[0].cpu(), cpu[0])
            assert [t.dtype for t in tpu[1:]] == [t.dtype for t in cpu[1:]]
            assert tpu[3].shape == cpu[3].shape
    before = torch.tpu._get_cache_stats()["fallback_calls"]
    wt = w.to("tpu").requires_grad_()
    F.embedding_bag(idx.to("tpu"), wt, offs.to("tpu"), mode="mean").sum().cpu()
    assert torch.tpu._get_cache_stats()["fallback_calls"] == before, "the forward ran on the CPU"
    out = F.embedding_bag(torch.tensor([[11, 8]], device="tpu"), w.to("tpu"), mode="sum")
    with pytest.raises(RuntimeError, match="Expected idx >= 0 && idx < num_embeddings"):
        out.cpu()
    psw = torch.randn(4, dtype=torch.float32)
    kc, rc = outcome(lambda d: F.embedding_bag(idx.to(d), w.to(d), offs.to(d), mode="sum", per_sample_weights=psw.to(d)), "tpu")
    assert kc == "raise" and "expected scalar type Double but found Float" in str(rc)


# --- 14. overlapping writes, from test_torch's *_mem_overlap tests ---------------------------
# The indexed writes and the gathers into out= refuse any alias between the
# written tensor and an input, a full one too (ATen's assert_no_overlap);
# index_fill_, index_put_ and masked_fill_ only warn about an expanded self;
# masked_fill_'s 0-dim value may alias self.

def _ind(d):
    return torch.tensor([2, 1, 0], device=d)


def _mask(d):
    return torch.tensor([True, False, True, True, False, False], device=d)


def _r(d, *shape):
    return torch.arange(float(torch.Size(shape).numel()), device=d).reshape(shape)


def _bmask(d):
    m = _mask(d)
    return m[1:].masked_fill_(m[:-1], False)


OVERLAP_CASES = [
    ("index_add_self_is_index", lambda d: (lambda i: i.index_add_(0, i, i.clone()))(_ind(d))),
    ("index_add_self_is_source", lambda d: (lambda i: i.index_add_(0, i.clone(), i))(_ind(d))),
    ("index_add_expanded", lambda d: _r(d, 1).expand(6).index_add_(0, _ind(d), _r(d, 3))),
    ("index_copy_self_is_index", lambda d: (lambda i: i.index_copy_(0, i, i.clone()))(_ind(d))),
    ("index_copy_partial", lambda d: (lambda y: y.index_copy_(0, _ind(d), y[:3]))(_r(d, 6))),
    ("index_fill_self_is_index", lambda d: (lambda i: i.index_fill_(0, i, 0))(_ind(d))),
    ("index_fill_value_aliases_self", lambda d: (lambda y: y.index_fill_(0, _ind(d), y[0]))(_r(d, 6))),
    ("index_reduce_self_is_source", lambda d: (lambda y: y.index_reduce_(0, _ind(d), y, "prod"))(_r(d, 3))),
    ("put_self_is_index", lambda d: (lambda i: i.put_(i, i))(_ind(d))),
    ("put_partial", lambda d: (lambda y: y.put_(_ind(d), y[:3]))(_r(d, 6))),
    ("index_put_self_is_index", lambda d: (lambda i: i.index_put_((i,), i.clone()))(_ind(d))),
    ("index_put_self_is_values", lambda d: (lambda i: i.index_put_((i.clone(),), i))(_ind(d))),
    ("index_put_0dim_value", lambda d: (lambda y: y.index_put_((_ind(d),), y[0]))(_r(d, 6))),
    ("scatter_self_is_src", lambda d: (lambda s: s.scatter_(0, _ind(d), s))(_r(d, 3))),
    ("scatter_self_is_index", lambda d: (lambda i: i.scatter_(0, i, 5))(_ind(d))),
    ("scatter_add_self_is_src", lambda d: (lambda s: s.scatter_add_(0, _ind(d), s))(_r(d, 3))),
    ("scatter_expanded", lambda d: _r(d, 1).expand(6).scatter_(0, _ind(d), _r(d, 3))),
    ("masked_fill_partial_mask", _bmask),
    ("masked_fill_full_mask", lambda d: (lambda m: m.masked_fill_(m, False))(_mask(d))),
    ("masked_fill_value_aliases_self", lambda d: (lambda y: y.masked_fill_(_mask(d), y[0]))(_r(d, 6))),
    ("masked_scatter_expanded", lambda d: _r(d, 1).expand(6).masked_scatter_(_mask(d), _r(d, 6))),
    ("masked_scatter_self_is_mask", lambda d: (lambda m: m.masked_scatter_(m, m.clone()))(_mask(d))),
    ("gather_out_is_self", lambda d: (lambda s: torch.gather(s, 0, _ind(d), out=s))(_r(d, 3))),
    ("gather_out_is_index", lambda d: (lambda i: torch.gather(i.clone(), 0, i, out=i))(_ind(d))),
    ("index_select_out_is_index", lambda d: (lambda i: torch.index_select(i.clone(), 0, i, out=i))(_ind(d))),
    ("take_out_is_self", lambda d: (lambda s: torch.take(s, _ind(d), out=s))(_r(d, 3))),
    ("masked_select_out_is_self", lambda d: (lambda s: torch.masked_select(s, s > 2, out=s))(_r(d, 6))),
    ("cat_out_is_input", lambda d: (lambda s: torch.cat([s], out=s))(_r(d, 6))),
    ("add_inplace_full_overlap_allowed", lambda d: (lambda s: s.add_(s))(_r(d, 6))),
]


@pytest.mark.parametrize("name,fn", OVERLAP_CASES, ids=[c[0] for c in OVERLAP_CASES])
def test_overlapping_writes_like_cpu(name, fn):
    assert_like_cpu(fn)


EXPANDED_WARNING_CASES = [
    ("index_fill_", lambda d: _r(d, 1).expand(6).index_fill_(0, _ind(d), 1.0)),
    ("index_put_", lambda d: _r(d, 1).expand(6).index_put_((_ind(d),), _r(d, 3))),
    ("index_put_", lambda d: _r(d, 1).expand(6).__setitem__(_ind(d), 1.0)),
    ("masked_fill_", lambda d: _r(d, 1).expand(6).masked_fill_(_mask(d), 0.0)),
]


@pytest.mark.parametrize("op,fn", EXPANDED_WARNING_CASES, ids=[c[0] for c in EXPANDED_WARNING_CASES])
def test_writes_into_expanded_tensors_warn_like_cpu(op, fn):
    for d in ("cpu", "tpu"):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fn(d)
        texts = [str(x.message) for x in w]
        assert any(t.startswith(f"Use of {op} on expanded tensors is deprecated") for t in texts), (d, texts)


# --- 15. complex32 and float8 tensors: stored as bytes, their ops on the CPU ------------------
# PyTorch's CPU covers few ops for these dtypes (copies, fills, randn for
# complex32, views); the core has no programs for them, so their ops run on
# the CPU and the bytes live on tpu: test_torch's test_copy_ copies from every
# dtype, complex32 included.

LOWP_DTYPES = [torch.complex32, torch.float8_e4m3fn, torch.float8_e5m2]


def _lowp(d, dt):
    return torch.linspace(-2, 2, 24).reshape(4, 6).to(dt).to(d)


def _wide(dt):
    return torch.complex64 if dt.is_complex else torch.float32


LOWP_CASES = [
    ("roundtrip", lambda d, dt: _lowp(d, dt)),
    ("strided_view_read", lambda d, dt: _lowp(d, dt).t()[1::2, ::3].contiguous()),
    ("copy_to_float32", lambda d, dt: torch.zeros(4, 6, device=d, dtype=_wide(dt)).copy_(_lowp(d, dt))),
    ("copy_from_float32", lambda d, dt: torch.empty(4, 6, device=d, dtype=dt).copy_(torch.linspace(-2, 2, 24, device=d).reshape(4, 6))),
    ("copy_into_view", lambda d, dt: (lambda x: (x[1:3, ::2].copy_(_lowp(d, dt)[:2, :3]), x)[1])(torch.zeros(4, 6, device=d, dtype=dt))),
    ("to_int", lambda d, dt: _lowp(d, dt).to(torch.int64) if not dt.is_complex else _lowp(d, dt).real.to(torch.int64)),
    ("fill", lambda d, dt: torch.full((3,), 1.5, device=d, dtype=dt)),
    ("cat", lambda d, dt: torch.cat([_lowp(d, dt), _lowp(d, dt)[:1]])),
    ("add", lambda d, dt: _lowp(d, dt) + _lowp(d, dt)),
    ("item", lambda d, dt: torch.tensor(_lowp(d, dt)[1, 2].item())),
]


@pytest.mark.parametrize("dt", LOWP_DTYPES, ids=str)
@pytest.mark.parametrize("name,fn", LOWP_CASES, ids=[c[0] for c in LOWP_CASES])
def test_bytes_only_dtypes_like_cpu(name, fn, dt):
    kc, rc = outcome(lambda d: fn(d, dt), "cpu")
    kt, rt = outcome(lambda d: fn(d, dt), "tpu")
    assert kc == kt, f"cpu {kc}: {rc!r}; tpu {kt}: {rt!r}"
    if kc == "raise":
        assert type(rt) is type(rc) and first_line(rt).startswith(first_line(rc)), (rc, rt)
    elif isinstance(rc, torch.Tensor):
        assert rt.dtype == rc.dtype and rt.shape == rc.shape
        assert torch.equal(rt.view(torch.uint8) if rt.dim() else rt, rc.view(torch.uint8) if rc.dim() else rc)


# A half tensor with a complex operand promotes to complex32 (test_type_promotion's
# test_complex_promotion and test_result_type): the op runs on the CPU as well.
HALF_COMPLEX_CASES = [
    ("python_complex", lambda d: _lowp(d, torch.half) * (2 + 1j)),
    ("complex64_0dim", lambda d: _lowp(d, torch.half) + torch.tensor(1 - 2j, device=d)),
    ("complex128_0dim", lambda d: torch.tensor(1 + 1j, dtype=torch.complex128, device=d) + _lowp(d, torch.half)),
    ("complex32_0dim", lambda d: torch.tensor(1 + 1j, dtype=torch.complex32, device=d) * _lowp(d, torch.half)),
    ("matmul_refused", lambda d: _lowp(d, torch.half) @ _lowp(d, torch.complex64).t()),
]


@pytest.mark.parametrize("name,fn", HALF_COMPLEX_CASES, ids=[c[0] for c in HALF_COMPLEX_CASES])
def test_half_with_complex_promotes_like_cpu(name, fn):
    rc = assert_like_cpu(fn, values=False)  # outcome, error type and text, dtype
    if isinstance(rc, torch.Tensor):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = fn("tpu")
        assert got.device.type == "tpu"
        torch.testing.assert_close(got.cpu().to(torch.complex64), rc.to(torch.complex64))


def test_complex32_randn_on_tpu():
    r = torch.randn(64, device="tpu", dtype=torch.complex32)
    assert r.device.type == "tpu" and r.dtype == torch.complex32
    assert r.to(torch.complex64).abs().mean().item() > 0.3


# --- 16. index_reduce and index_add in self's dtype (test_torch's test_index_reduce, test_put)
# ATen's kernels reduce in self's dtype, so a 16-bit sum or product is
# rounded at each step; reducing in float32 and rounding once differs by an
# ulp, past the suite's float16 tolerance.

def _index_reduce_case(reduce, dt, include_self):
    def fn(d):
        g = torch.Generator().manual_seed(7)
        x = (torch.rand(3, 4, 5, generator=g) * 8 - 4).to(dt)
        src = (torch.rand(3, 9, 5, generator=g) * 8 - 4).to(dt)
        idx = torch.tensor([0, 3, 1, 3, 3, 2, 0, 1, 3])
        return x.to(d).index_reduce_(1, idx.to(d), src.to(d), reduce, include_self=include_self)
    return fn


def _index_add_case(dt, shape, dim):
    # ATen's CPU kernel rounds a 16-bit sum at each step for a 1-d self or a
    # middle dim, once (a float accumulator) along a matrix's first/last dim.
    def fn(d):
        g = torch.Generator().manual_seed(3)
        x = (torch.rand(*shape, generator=g) * 18 - 9).to(dt)
        ss = list(shape)
        ss[dim] = 12
        src = (torch.rand(*ss, generator=g) * 18 - 9).to(dt)
        idx = torch.randint(0, 2, (12,), generator=g)
        return x.to(d).index_add_(dim, idx.to(d), src.to(d))
    return fn


INDEX_REDUCE_CASES = [(f"{r}_{str(dt)[6:]}_{s}", _index_reduce_case(r, dt, s))
                      for r in ("mean", "prod", "amax", "amin")
                      for dt in (torch.float16, torch.bfloat16, torch.float32)
                      for s in (True, False)]
INDEX_REDUCE_CASES += [(f"index_add_{str(dt)[6:]}_{len(shape)}d_dim{dim}", _index_add_case(dt, shape, dim))
                       for dt in (torch.float16, torch.bfloat16, torch.float32, torch.int8)
                       for shape, dim in (((40,), 0), ((5, 3), 0), ((3, 5), 1), ((4, 5, 3), 1),
                                          ((4, 5, 3), 2))]


@pytest.mark.parametrize("name,fn", INDEX_REDUCE_CASES, ids=[c[0] for c in INDEX_REDUCE_CASES])
def test_index_reduce_rounds_like_cpu(name, fn):
    rc, rt = fn("cpu"), fn("tpu").cpu()
    torch.testing.assert_close(rt, rc, rtol=0, atol=0)


# --- 17. torch.use_deterministic_algorithms, from test_torch's nondeterministic alerts ---------
# ATen raises for put_ (accumulate=False) and max_unpool2d/3d on every device,
# and fills fresh memory (empty, empty_strided, what resize_ adds) with NaN or
# the integer maximum; the core's rules stand in for that ATen code.

@pytest.fixture
def deterministic():
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


DETERMINISTIC_CASES = [
    ("put_", lambda d: torch.zeros(10, device=d).put_(torch.tensor([0, 0], device=d), torch.ones(2, device=d))),
    ("put", lambda d: torch.zeros(10, device=d).put(torch.tensor([0, 0], device=d), torch.ones(2, device=d))),
    ("put_accumulate", lambda d: torch.zeros(10, device=d).put_(torch.tensor([0, 0], device=d), torch.ones(2, device=d), accumulate=True)),
    ("max_unpool1d", lambda d: F.max_unpool1d(torch.ones(1, 1, 7, device=d), torch.zeros(1, 1, 7, dtype=torch.long, device=d), 3, 1)),
    ("max_unpool2d", lambda d: F.max_unpool2d(torch.ones(1, 1, 4, 4, device=d), torch.zeros(1, 1, 4, 4, dtype=torch.long, device=d), 2)),
    ("max_unpool3d", lambda d: F.max_unpool3d(torch.ones(1, 1, 2, 2, 2, device=d), torch.zeros(1, 1, 2, 2, 2, dtype=torch.long, device=d), 2)),
    ("index_put_", lambda d: torch.zeros(10, device=d).index_put_((torch.tensor([0, 0], device=d),), torch.ones(2, device=d))),
    ("empty_float", lambda d: torch.empty(3, device=d)),
    ("empty_int", lambda d: torch.empty(3, dtype=torch.int16, device=d)),
    ("empty_bool", lambda d: torch.empty(3, dtype=torch.bool, device=d)),
    ("empty_complex", lambda d: torch.empty(3, dtype=torch.complex64, device=d)),
    ("empty_strided", lambda d: torch.empty_strided((2, 3), (1, 2), device=d)),
    ("empty_like", lambda d: torch.empty_like(torch.ones(2, 2, device=d))),
    ("resize_grows", lambda d: torch.arange(3.0, device=d).resize_(6)),
    ("resize_grows_int", lambda d: torch.arange(3, device=d).resize_(2, 3)),
]


@pytest.mark.parametrize("name,fn", DETERMINISTIC_CASES, ids=[c[0] for c in DETERMINISTIC_CASES])
def test_deterministic_mode_like_cpu(name, fn, deterministic):
    rc = assert_like_cpu(fn)
    if isinstance(rc, torch.Tensor):  # NaN payloads, the integer maximum: bit for bit
        rt = fn("tpu").cpu()
        assert torch.equal(rt.contiguous().view(torch.uint8), rc.contiguous().view(torch.uint8)), (rt, rc)


# --- 18. margin losses' shape checks (test_torch's test_scalar_check) ------------------------
# PyTorch's multi_margin_loss / multilabel_margin_loss check the target's
# rank as well as its element count: a [1, 1] target of a 1-element input is
# refused, not flattened.

def _margin(fn, xs, ys, **kw):
    def run(d):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(xs, generator=g).to(d)
        y = (torch.arange(max(1, torch.Size(ys).numel())) % 2)[:torch.Size(ys).numel()].reshape(ys).to(d)
        return fn(x, y, **kw)
    return run


MARGIN_CASES = []
for red in ("none", "mean", "sum"):
    for xs in ((), (1,), (2,), (1, 1), (2, 2)):
        for ys in ((), (1,), (2,), (1, 1), (2, 2), (1, 2)):
            MARGIN_CASES.append((f"multilabel_{red}_{xs}_{ys}",
                                 _margin(F.multilabel_margin_loss, xs, ys, reduction=red)))
            MARGIN_CASES.append((f"multi_{red}_{xs}_{ys}",
                                 _margin(F.multi_margin_loss, xs, ys, reduction=red)))
MARGIN_CASES += [
    ("multi_empty_classes", _margin(F.multi_margin_loss, (2, 0), (2,))),
    ("multilabel_empty_classes", _margin(F.multilabel_margin_loss, (0,), (0,))),
    ("multi_empty_batch", _margin(F.multi_margin_loss, (0, 3), (0,), reduction="none")),
    # (an empty batch's sum or mean is uninitialised memory on PyTorch's CPU)
    ("multi_weight_2d", lambda d: F.multi_margin_loss(torch.ones(2, 3, device=d), torch.zeros(2, dtype=torch.long, device=d),
                                                      weight=torch.ones(1, 3, device=d))),
    ("multi_weight_size", lambda d: F.multi_margin_loss(torch.ones(2, 3, device=d), torch.zeros(2, dtype=torch.long, device=d),
                                                        weight=torch.ones(2, device=d))),
]


@pytest.mark.parametrize("name,fn", MARGIN_CASES, ids=[c[0] for c in MARGIN_CASES])
def test_margin_loss_shapes_like_cpu(name, fn):
    assert_like_cpu(fn)


# --- 19. a host tensor indexed with tpu indices (test_torch's test_advancedindex_mixed_devices_error)

@pytest.mark.parametrize("how", ["getitem", "getitem_mixed", "setitem", "index_put_"])
def test_host_tensor_indexed_with_tpu_indices(how):
    """ATen's indexing check, in its words (as with CUDA indices)."""
    x, i = torch.randn(3, 4, 5), torch.tensor([0, 2, 1], device="tpu")
    fn = {"getitem": lambda: x[i], "getitem_mixed": lambda: x[:, i.cpu()[:2], None, i[:2]],
          "setitem": lambda: x.__setitem__(i, 1.0),
          "index_put_": lambda: x.index_put_((i,), torch.tensor(1.0))}[how]
    with pytest.raises(RuntimeError, match=r"^indices should be either on cpu or on the same "
                                           r"device as the indexed tensor \(cpu\)"):
        fn()


# --- 20. linspace/logspace points bit for bit (the bfloat16 OpInfo sweep's wrong results) -----

def _spaced_args(seed):
    g = random.Random(seed)
    args = []
    for _ in range(12):
        s = g.uniform(-100, 100) if g.random() < 0.7 else g.randint(-20, 20)
        e = g.uniform(-100, 100) if g.random() < 0.7 else g.randint(-20, 20)
        args.append((s, e, g.choice([1, 2, 3, 5, 17, 50, 255, 300, 1000])))
    return args


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16, torch.float32, torch.int32],
                         ids=str)
@pytest.mark.parametrize("fn", ["linspace", "logspace", "logspace_base2"])
def test_spaced_points_exactly_like_cpu(fn, dt):
    """PyTorch's CPU kernels: 16-bit dtypes round each operation (bounds, end -
    start, the step divided by steps - 1 in that dtype, step * i, the sum);
    float32 takes start + step * i in one FMA; logspace raises the base in
    double (steps == 1: the unrounded start)."""
    for s, e, n in _spaced_args(f"{fn} {dt}"):
        if fn == "linspace":
            make = lambda d: torch.linspace(s, e, n, dtype=dt, device=d)
        else:
            base = 2.0 if fn.endswith("2") else 10.0
            make = lambda d: torch.logspace(s / 40, e / 40, n, base=base, dtype=dt, device=d)
        cpu, tpu = make("cpu"), make("tpu").cpu()
        assert torch.equal(cpu, tpu), (fn, dt, s, e, n, (cpu != tpu).nonzero()[:4].flatten().tolist())


@pytest.mark.parametrize("dt", [torch.float64, torch.int64, torch.int16, torch.uint8], ids=str)
def test_linspace_double_arithmetic_exactly_like_cpu(dt):
    """float64 (and the integer dtypes, which step in double): the CPU's step is
    a correctly rounded quotient and each point one FMA; XLA divides by a
    constant through its reciprocal and rounds product and sum apart, which
    error-free transformations undo. uint8 takes its bounds wrapped (-10 is
    246), as the CPU's Scalar conversion does."""
    g = random.Random(f"linspace {dt}")
    args = [(-10, 10, 21), (0, 100, 1000), (-3.3, 10.7, 101), (1, -7.25, 77),
            (-232.62073421992022, 713.8982537461206, 2101), (0, 255, 256), (3.7, 200.2, 999)]
    args += [(g.uniform(-1e3, 1e3), g.uniform(-1e3, 1e3), g.randint(2, 3000)) for _ in range(10)]
    checked = 0
    for s, e, n in args:
        try:
            cpu = torch.linspace(s, e, n, dtype=dt)
        except RuntimeError:  # a bound outside the dtype (the CPU's Scalar check)
            continue
        tpu = torch.linspace(s, e, n, dtype=dt, device="tpu").cpu()
        assert torch.equal(cpu, tpu), (dt, s, e, n, (cpu != tpu).nonzero()[:4].flatten().tolist())
        checked += 1
    assert checked >= 3


# --- 21. hash_tensor natively (the float32 OpInfo sweep's CPU fallback) ------------------------

@pytest.mark.parametrize("dt", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
                                torch.int32, torch.int8, torch.uint8, torch.bool], ids=str)
def test_hash_tensor_like_cpu(dt):
    """The XOR of each element's 64-bit pattern (floats as double, integers as
    int64), uint64, over all dims or the given ones, computed on the device."""
    x = (torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(1)) * 50).to(dt)
    if dt.is_floating_point:
        x[0, 0, :3] = torch.tensor([float("nan"), -0.0, float("inf")])
    for kw in ({}, {"dim": 1}, {"dim": (0, 2)}, {"dim": -1, "keepdim": True}, {"dim": []}):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no CPU fallback
            got = torch.hash_tensor(x.to("tpu"), **kw)
        assert got.device.type == "tpu" and torch.equal(got.cpu(), torch.hash_tensor(x, **kw)), kw


@pytest.mark.parametrize("name,fn", [
    ("empty_all", lambda d: torch.hash_tensor(torch.ones(0, 3, device=d))),
    ("empty_dim", lambda d: torch.hash_tensor(torch.ones(0, 3, device=d), dim=0)),
    ("empty_rows", lambda d: torch.hash_tensor(torch.ones(0, 3, device=d), dim=1)),
    ("mode", lambda d: torch.hash_tensor(torch.ones(2, device=d), mode=1)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_hash_tensor_edges_like_cpu(name, fn):
    assert_like_cpu(fn)


# --- 22. addr's bool beta/alpha checks (test_linalg's test_addr_float_and_complex) ------------

def _addr(d, dtype, **kw):
    m, a, b = t(d, 3, 4, dtype=dtype), t(d, 3, dtype=dtype), t(d, 4, dtype=dtype)
    return torch.addr(m, a, b, **kw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("kw", [{"beta": True, "alpha": 1}, {"beta": 2, "alpha": True},
                                {"beta": 0, "alpha": 2}, {"beta": 0.5, "alpha": 2}], ids=str)
def test_addr_scalars_like_cpu(dtype, kw):
    """A bool beta or alpha raises ATen's text unless the result is bool;
    beta 0 ignores self (NaN too)."""
    if dtype == torch.bool and not isinstance(kw["beta"], bool):
        kw = {"beta": True, "alpha": False}
    if dtype == torch.int64 and isinstance(kw["beta"], float):
        kw = {"beta": 2, "alpha": 3}
    assert_like_cpu(lambda d: _addr(d, dtype, **kw))
    assert_like_cpu(lambda d: _addr(d, dtype, **kw).addr_(t(d, 3, dtype=dtype), t(d, 4, dtype=dtype), **kw))


# --- 23. CPU-fallback results written into lazy conj views (test_linalg's test_linalg_solve_triangular)

@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("layout", ["plain", "transposed", "expanded"])
def test_fallback_out_into_conj_view_like_cpu(left, layout):
    """out= a conj view of B, as test_linalg does: the CPU fallback's result
    goes through the view's conj bit (it was left unwritten)."""
    g = torch.Generator().manual_seed(3)
    a = (torch.randn(2, 4, 4, generator=g) + 1j * torch.randn(2, 4, 4, generator=g)).triu() + 4 * torch.eye(4)
    b0 = torch.randn(2, 4, 3, generator=g) + 1j * torch.randn(2, 4, 3, generator=g)
    b0 = b0.to(torch.complex64) if left else b0.mT.to(torch.complex64)
    got = {}
    for d in ("cpu", "tpu"):
        b = b0.to(d).clone()
        if layout == "transposed":
            b = b.mT.contiguous().mT
        if layout == "expanded":
            b = b[:1].expand_as(b).clone()
        out = b.conj()
        x = torch.linalg.solve_triangular(a.to(torch.complex64).to(d), out, upper=True, left=left)
        r = torch.linalg.solve_triangular(a.to(torch.complex64).to(d), out, upper=True, left=left, out=out)
        assert r is out and out.is_conj()
        torch.testing.assert_close(out.cpu().resolve_conj(), x.cpu())
        got[d] = out.cpu().resolve_conj()
    torch.testing.assert_close(got["tpu"], got["cpu"])


# --- 24. linear algebra out= dtypes (test_linalg's *_errors_and_warnings) ---------------------

_SPD = torch.tensor([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
_RHS = torch.tensor([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0]])


def _e(d, dtype=torch.int32):
    return torch.empty(0, dtype=dtype, device=d)


@pytest.mark.parametrize("name,fn", [
    ("cholesky", lambda d: torch.linalg.cholesky(_SPD.to(d), out=_e(d))),
    ("cholesky_ex_info", lambda d: torch.linalg.cholesky_ex(_SPD.to(d), out=(_e(d, torch.float32),
                                                                              _e(d, torch.int64)))),
    ("inv", lambda d: torch.linalg.inv(_SPD.to(d), out=_e(d))),
    ("inv_double_out", lambda d: torch.linalg.inv(_SPD.to(d), out=_e(d, torch.float64))),
    ("eigvalsh", lambda d: torch.linalg.eigvalsh(_SPD.to(d), out=_e(d))),
    ("eigh", lambda d: torch.linalg.eigh(_SPD.to(d), out=(_e(d, torch.float32), _e(d)))),
    ("det", lambda d: torch.linalg.det(_SPD.to(d), out=_e(d))),
    ("slogdet", lambda d: torch.linalg.slogdet(_SPD.to(d), out=(_e(d), _e(d, torch.float32)))),
    ("lu_factor", lambda d: torch.linalg.lu_factor(_SPD.to(d), out=(_e(d), _e(d)))),
    ("svd", lambda d: torch.linalg.svd(_SPD.to(d), out=(_e(d), _e(d, torch.float32), _e(d, torch.float32)))),
    ("qr", lambda d: torch.linalg.qr(_SPD.to(d), out=(_e(d), _e(d, torch.float32)))),
    ("solve", lambda d: torch.linalg.solve(_SPD.to(d), _RHS.to(d), out=_e(d))),
    ("triangular_solve", lambda d: torch.triangular_solve(_RHS.to(d), _SPD.to(d), out=(_e(d), _e(d, torch.float32)))),
    ("legacy_cholesky", lambda d: torch.cholesky(_SPD.to(d), out=_e(d))),
    ("legacy_cholesky_double_out", lambda d: torch.cholesky(_SPD.to(d), out=_e(d, torch.float64))),
    ("cholesky_inverse", lambda d: torch.cholesky_inverse(_SPD.to(d), out=_e(d))),
    ("lstsq_0d_other", lambda d: torch.linalg.lstsq(_RHS.to(d), torch.tensor(1.0, device=d))),
])
def test_linalg_out_dtype_like_cpu(name, fn):
    """Structured linalg ops refuse any other out= dtype ("Expected out tensor
    to have dtype float, but got int instead"); cholesky and
    cholesky_inverse take any dtype the result casts to, and refuse the
    others in their own words."""
    assert_like_cpu(fn, values=False)


# --- 25. reflection/replication pads of empty non-batch dims (test_nn's test_ReflectionPad_empty)

@pytest.mark.parametrize("mod,shape", [
    (lambda: torch.nn.ReflectionPad1d(2), (3, 0, 10)),
    (lambda: torch.nn.ReflectionPad2d(2), (3, 0, 10, 10)),
    (lambda: torch.nn.ReflectionPad3d(3), (3, 0, 10, 10, 10)),
    (lambda: torch.nn.ReplicationPad2d(2), (2, 3, 0, 4)),
    (lambda: torch.nn.ReflectionPad1d(2), (0, 10)),
    (lambda: torch.nn.ReflectionPad1d(2), (0, 3, 10)),  # an empty batch is allowed
    (lambda: torch.nn.ReplicationPad3d(1), (0, 2, 3, 3, 3)),
], ids=str)
def test_pad_empty_dims_like_cpu(mod, shape):
    """Only the batch dim may be empty: ATen's "Expected 2D or 3D (batch mode)
    tensor with possibly 0 batch size and other non-zero dimensions"."""
    m = mod()
    assert_like_cpu(lambda d: m(torch.ones(shape, device=d)))


# --- 26. test_nn's checks on activations, losses, unfold and one_hot --------------------------

_NEG = torch.tensor([-1.0, 1.0])


def _inplace_backward(fn):
    """The backward of an in-place activation whose forward ran on a copy."""
    def run(d):
        a = torch.tensor([-1.0, 1.0], device=d, requires_grad=True)
        b = fn(a.clone())
        b.backward(torch.ones(2, device=d))
        return a.grad
    return run


@pytest.mark.parametrize("name,fn", [
    ("elu_neg_alpha", _inplace_backward(lambda x: F.elu_(x, alpha=-2))),
    ("celu_neg_alpha", _inplace_backward(lambda x: F.celu_(x, alpha=-2))),
    ("leaky_relu_neg_slope", _inplace_backward(lambda x: F.leaky_relu_(x, -2))),
    ("rrelu_neg_slope", _inplace_backward(lambda x: F.rrelu_(x, -5.0, 1.0))),
    ("leaky_relu_zero_slope", _inplace_backward(lambda x: F.leaky_relu_(x, 0.0))),
    ("elu_out_of_place_neg_alpha", _inplace_backward(lambda x: F.elu(x, alpha=-2))),
    ("softshrink_neg", lambda d: F.softshrink(_NEG.to(d), -1)),
    ("softshrink_half_too_big", lambda d: F.softshrink(_NEG.to(d).half(), 1e6)),
    ("softshrink_ok", lambda d: F.softshrink(_NEG.to(d), 0.5)),
    ("unfold_empty_channels", lambda d: torch.nn.Unfold((2, 3))(torch.ones(3, 0, 3, 4, device=d))),
    ("unfold_empty_batch", lambda d: torch.nn.Unfold((2, 3))(torch.ones(0, 3, 3, 4, device=d))),
    ("fold_empty", lambda d: torch.nn.Fold((3, 4), (2, 3))(torch.ones(3, 0, 6, device=d))),
    ("reflect_pad_too_big", lambda d: F.pad(torch.ones(1, 1, 2, 2, device=d), (3, 0, 0, 0), mode="reflect")),
    ("replicate_pad_too_small", lambda d: F.pad(torch.ones(1, 2, 2, device=d), (-2, 0), mode="replicate")),
], ids=lambda v: v if isinstance(v, str) else "")
def test_nn_checks_like_cpu(name, fn):
    """ATen's checks with its texts: in-place activations with a negative
    slope refuse their backward, softshrink's lambda range, unfold/fold of
    empty non-batch dims, pads past the input."""
    assert_like_cpu(fn)


def test_threshold_inplace_on_expanded_tensor():
    """threshold_ is idempotent: ATen skips the overlap check, so an expanded
    tensor is accepted and every alias gets the same value."""
    got = {}
    for d in ("cpu", "tpu"):
        x = torch.tensor([[-1.0, 0.2, 0.7, 2.0]]).to(d).expand(3, 4)
        F.threshold_(x, 0.5, 0.5)
        F.threshold(x, 0.5, 0.5, inplace=True)
        got[d] = x.cpu()
    torch.testing.assert_close(got["tpu"], got["cpu"])


@pytest.mark.parametrize("xs,ts,red", [
    (xs, ts, red)
    for xs, ts in [((3,), (1,)), ((3,), ()), ((2, 3), ()), ((2, 3), (2,)), ((2, 3), (3,)),
                   ((10, 3), (10, 2)), ((2, 3, 4), (2,))]
    for red in (0, 1, 2)
], ids=str)
def test_nll_loss_shapes_like_cpu(xs, ts, red):
    """nll_loss_forward's shape rules and texts: a 1D input is a batch of one
    (0-d loss, its weight as total_weight, whatever the reduction), a 0D
    target only with a 1D input, "0D or 1D target tensor expected"."""
    def run(d):
        x = torch.arange(float(torch.Size(xs).numel())).reshape(xs).to(d)
        t = torch.ones(ts, dtype=torch.long).to(d)
        out, total = torch.ops.aten.nll_loss_forward(x, t, None, red, -100)
        return torch.cat([torch.tensor([out.dim()], device=d), out.reshape(-1), total.reshape(-1)])
    assert_like_cpu(run)


def test_nll_loss_target_dtype_like_cpu():
    assert_like_cpu(lambda d: torch.ops.aten.nll_loss_forward(
        torch.ones(2, 3, device=d), torch.zeros(2, dtype=torch.int32, device=d), None, 1, -100))


@pytest.mark.parametrize("name,fn", [
    ("negative", lambda d: F.one_hot(torch.tensor([3, 4, -1, 0], device=d), -1)),
    ("too_big", lambda d: F.one_hot(torch.tensor([3, 4, 1, 0], device=d), 3)),
    ("inferred", lambda d: F.one_hot(torch.tensor([[3, 4], [1, 0]], device=d))),
    ("given", lambda d: F.one_hot(torch.tensor([3, 4, 1, 0], device=d), 6)),
    ("scalar", lambda d: F.one_hot(torch.tensor(4, device=d))),
    ("empty", lambda d: F.one_hot(torch.empty(4, 0, dtype=torch.long, device=d), 100)),
    ("empty_inferred", lambda d: F.one_hot(torch.empty(4, 0, dtype=torch.long, device=d))),
    ("int32", lambda d: F.one_hot(torch.tensor([1, 0], dtype=torch.int32, device=d), 3)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_one_hot_like_cpu(name, fn):
    """one_hot checks its classes at the call, as on the CPU (ATen skips the
    check for PrivateUse1 and a bad class was a deferred scatter error)."""
    assert_like_cpu(fn)


def test_lstm_backward_with_undefined_grads():
    """gradcheck's undefined-grad check: a fused LSTM cell's backward with
    neither grad_hy nor grad_cy defined gives zeros (it fell back to a CPU
    kernel that does not exist)."""
    from torch.autograd import gradcheck
    mod = torch.nn.LSTM(3, 3).to("tpu").double()
    inp = torch.rand(1, 2, 3, device="tpu", dtype=torch.double, requires_grad=True)

    def flat(x):
        out, (h, c) = mod(x)
        return out, h, c
    assert gradcheck(flat, inp, check_batched_grad=False, check_undefined_grad=True)


# --- 27. segment_reduce (test_segment_reductions) ----------------------------------------------

_SEG_DATA = [1.0, float("nan"), 3.0, 4.0, 5.0, 5.0]


@pytest.mark.parametrize("reduce", ["sum", "mean", "prod", "max", "min", "amax", "amin", "foo"])
@pytest.mark.parametrize("initial", [None, 2.0])
def test_segment_reduce_like_cpu(reduce, initial):
    """amax/amin are max/min's names too; an empty segment's mean is 0 / 0
    (NaN) without `initial`, `initial` with one; ATen's text for a bad name."""
    assert_like_cpu(lambda d: torch.segment_reduce(
        torch.tensor(_SEG_DATA, device=d), reduce, lengths=torch.tensor([1, 2, 3, 0], device=d),
        axis=0, initial=initial))


@pytest.mark.parametrize("lengths", [[0, 2, 3, 0], [-1, 4, 3, 0]])
def test_segment_reduce_unsafe_checks(lengths):
    """unsafe=False checks the lengths: on tpu device-side, raised at the
    next synchronisation with the CPU's text."""
    def run(d):
        r = torch.segment_reduce(torch.arange(6.0, device=d), "sum",
                                 lengths=torch.tensor(lengths, device=d), axis=0, unsafe=False)
        return r.cpu()
    with pytest.raises(RuntimeError) as cpu:
        run("cpu")
    with pytest.raises(RuntimeError) as tpu:
        run("tpu")
    assert str(tpu.value).startswith(str(cpu.value).splitlines()[0])
    assert torch.ones(2, device="tpu").sum().item() == 2  # the device is usable after


# --- 28. uniform_ in 16-bit floats (test_testing's test_low_high_smoke) ------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.complex32])
def test_uniform_16_bit_stays_below_high(dtype):
    """make_tensor(low=-9, high=9) draws uniform_(-9, 9): from + span * u in
    float, rounded to the 16-bit type, and a value that rounds to `to` is
    `from`, as PyTorch's CPU kernel does (9.0 came out about once in 2,000
    draws before). The upper half [0.5, 1) of uniform_(0, 1) takes every
    16-bit value there, as on the CPU."""
    for _ in range(10):
        t = torch.testing.make_tensor(10_000, dtype=dtype, device="tpu", low=-9, high=9)
        if dtype.is_complex:
            t = torch.view_as_real(t)
        assert bool(((t >= -9) & (t < 9)).all())
    part = torch.float16 if dtype.is_complex else dtype
    got = torch.empty(200_000, dtype=part, device="tpu").uniform_(0, 1).cpu()
    want = torch.empty(200_000, dtype=part).uniform_(0, 1)
    assert bool(((got >= 0) & (got < 1)).all())
    upper = [set(x[x >= 0.5].unique().tolist()) for x in (got, want)]
    assert upper[0] == upper[1] and len(upper[0]) == (1024 if part == torch.float16 else 128)


# --- 29. abs of complex numbers bit for bit (test_testing's test_isclose_complex) ------------

@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("scale", [1.0, 1e-30, 1e30])
def test_complex_abs_exactly_like_cpu(dtype, scale):
    """PyTorch's CPU abs of a complex number is glibc's hypotf/hypot; XLA's
    own abs was an ulp off for about a third of random values, which decided
    isclose's boundary cases (|a - b| == atol + |rtol * b|). Subnormal parts
    are out: XLA's CPU backend flushes them to zero."""
    g = torch.Generator().manual_seed(7)
    z = torch.complex(torch.randn(20_000, generator=g), torch.randn(20_000, generator=g))
    z = (z.to(dtype) * scale)
    z[:4] = torch.tensor([complex(3, 4), complex(0, 0), complex(-1e-3, 2.5), complex(7, -0.0)])
    assert torch.equal(z.to("tpu").abs().cpu(), z.abs())


def test_complex_abs_special_values_and_isclose_boundaries():
    nan, inf = float("nan"), float("inf")
    special = [complex(1, nan), complex(inf, nan), complex(nan, -inf), complex(nan, 1),
               complex(-inf, 2), complex(1e308, 1e308), complex(3e38, 3e38)]
    for dtype in (torch.complex64, torch.complex128):
        z = torch.tensor(special, dtype=dtype)
        assert torch.equal(z.to("tpu").abs().cpu().nan_to_num(), z.abs().nan_to_num())
    a = torch.tensor([complex(2, 4), complex(-2 ** 0.5, 2 ** 0.5)])
    b = torch.tensor([complex(1.0, 8.8523607), complex(-0.5 ** 0.5, 0.5 ** 0.5)])
    for dtype in (torch.complex64, torch.complex128):
        want = torch.isclose(a.to(dtype), b.to(dtype), atol=0.5, rtol=0.5)
        got = torch.isclose(a.to(dtype).to("tpu"), b.to(dtype).to("tpu"), atol=0.5, rtol=0.5)
        assert torch.equal(got.cpu(), want)


# --- 30. linear algebra results laid out as LAPACK's (test_linalg's test_ormqr) ----------------

def _linalg_cases(dev):
    g = torch.Generator().manual_seed(30)
    a = torch.randn(2, 4, 4, generator=g)
    a = a @ a.mT + 4 * torch.eye(4)
    r = torch.randn(2, 5, 3, generator=g)
    b = torch.randn(2, 4, 3, generator=g)
    v = torch.randn(2, 4, generator=g)
    c = torch.randn(2, 5, 2, generator=g)
    a, r, b, v, c = (t.to(dev) for t in (a, r, b, v, c))
    low = torch.linalg.cholesky(a)
    lu, piv = torch.linalg.lu_factor(a)
    refl, tau = torch.geqrf(r)
    return {
        "cholesky_ex": lambda: torch.linalg.cholesky_ex(a),
        "cholesky": lambda: torch.cholesky(a),
        "inv_ex": lambda: torch.linalg.inv_ex(a),
        "lu_factor_ex": lambda: torch.linalg.lu_factor_ex(a),
        "lu": lambda: torch.linalg.lu(r),
        "lu_solve": lambda: torch.linalg.lu_solve(lu, piv, b),
        "qr": lambda: torch.linalg.qr(r),
        "qr complete": lambda: torch.linalg.qr(r, mode="complete"),
        "geqrf": lambda: torch.geqrf(r),
        "householder_product": lambda: torch.linalg.householder_product(refl, tau),
        "ormqr": lambda: torch.ormqr(refl, tau, c),
        "eigh": lambda: torch.linalg.eigh(a),
        "svd": lambda: torch.linalg.svd(r),
        "svd thin": lambda: torch.linalg.svd(r, full_matrices=False),
        "torch.svd": lambda: torch.svd(r),
        "solve": lambda: torch.linalg.solve(a, b),
        "solve vector": lambda: torch.linalg.solve(a, v),
        "solve_ex": lambda: torch.linalg.solve_ex(a, b),
        "solve_triangular": lambda: torch.linalg.solve_triangular(low, b, upper=False),
        "triangular_solve": lambda: torch.triangular_solve(b, low, upper=False),
        "cholesky_solve": lambda: torch.cholesky_solve(b, low),
        "cholesky_inverse": lambda: torch.cholesky_inverse(low),
        "lstsq solution": lambda: torch.linalg.lstsq(a, b).solution,
        "_linalg_det": lambda: torch.ops.aten._linalg_det(a),
        "_linalg_slogdet": lambda: torch.ops.aten._linalg_slogdet(a),
        "matrix_power -1": lambda: torch.linalg.matrix_power(a, -1),
        "inv out=": lambda: torch.linalg.inv(a, out=torch.empty(0, device=dev)),
        "qr out=": lambda: torch.linalg.qr(r, out=(torch.empty(0, device=dev),
                                                    torch.empty(0, device=dev))),
    }


def _layouts(out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [(tuple(t.shape), t.stride()) for t in outs]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_linalg_results_laid_out_like_lapack():
    """ATen's LAPACK-backed results are batched column-major (its meta
    functions' f_contig strides; geqrf's reflectors `.mT.is_contiguous()`
    in test_ormqr), their vectors row-major; the core's results are
    row-major, so the shim lays these out as the CPU does, values unchanged."""
    cpu, tpu = _linalg_cases("cpu"), _linalg_cases("tpu")
    for name in cpu:
        want, got = cpu[name](), tpu[name]()
        assert _layouts(got) == _layouts(want), name
        outs = (want, got) if isinstance(want, torch.Tensor) else (tuple(want), tuple(got))
        for w, t in zip(*(o if isinstance(o, tuple) else (o,) for o in outs)):
            if name.startswith(("svd", "torch.svd", "eigh", "qr", "geqrf", "householder")):
                continue  # factors are unique only up to signs: the layout is the point here
            torch.testing.assert_close(t.cpu(), w, atol=1e-4, rtol=1e-4, msg=name)
    # The factors, laid out anew, still multiply back to the input.
    x = torch.randn(3, 6, 4, generator=torch.Generator().manual_seed(31))
    q, rr = torch.linalg.qr(x.to("tpu"))
    assert q.mT.is_contiguous() and rr.mT.is_contiguous()
    torch.testing.assert_close((q @ rr).cpu(), x, atol=1e-5, rtol=1e-5)
    u, s, vh = torch.linalg.svd(x.to("tpu"), full_matrices=False)
    assert u.mT.is_contiguous() and vh.mT.is_contiguous() and s.is_contiguous()
    torch.testing.assert_close((u * s.unsqueeze(-2) @ vh).cpu(), x, atol=1e-5, rtol=1e-5)


# --- 31. matrix products' errors in PyTorch's words and order (test_ops' test_errors_dot) -------

def _t(*shape, dt=torch.float32):
    return torch.ones(*shape, dtype=dt)


_H = torch.float16
_PRODUCT_ERRORS = {
    "mm rank": lambda: torch.mm(_t(3), _t(3, 3)),
    "mm mat2 rank": lambda: torch.mm(_t(3, 3), _t(3)),
    "mm dtype": lambda: torch.mm(_t(3, 3), _t(3, 3, dt=_H)),
    "mm shape before dtype": lambda: torch.mm(_t(3, 4), _t(3, 3, dt=_H)),
    "bmm ranks": lambda: torch.bmm(_t(3, 3), _t(2, 3, 3)),
    "bmm batch2 rank": lambda: torch.bmm(_t(2, 3, 3), _t(3, 3)),
    "bmm dtype": lambda: torch.bmm(_t(2, 3, 3, dt=_H), _t(2, 3, 3)),
    "bmm sizes": lambda: torch.bmm(_t(2, 3, 4), _t(3, 4, 3)),
    "matmul sizes": lambda: torch.matmul(_t(2, 3, 4), _t(2, 3, 3)),
    "baddbmm self dtype": lambda: torch.baddbmm(_t(2, 3, 3, dt=_H), _t(2, 3, 4), _t(2, 3, 3)),
    "baddbmm batch2 dtype": lambda: torch.baddbmm(_t(2, 3, 3), _t(2, 3, 3), _t(2, 3, 3, dt=_H)),
    "mv ranks": lambda: torch.mv(_t(3, 3), _t(3, 3)),
    "mv dtype": lambda: torch.mv(_t(3, 3), _t(3, dt=_H)),
    "mv sizes before dtype": lambda: torch.mv(_t(3, 4), _t(3, dt=_H)),
    "addmv self rank": lambda: torch.addmv(_t(3, 3), _t(3, 3), _t(3)),
    "addmv self size": lambda: torch.addmv(_t(2), _t(3, 4), _t(4)),
    "addmv dtype": lambda: torch.addmv(_t(3), _t(3, 3), _t(3, dt=_H)),
    "addmm self dtype": lambda: torch.addmm(_t(3, 3, dt=_H), _t(3, 3), _t(3, 3)),
    "addmm mat1 dtype": lambda: torch.addmm(_t(3, 3), _t(3, 3, dt=_H), _t(3, 3)),
    "addmm dtype before rank": lambda: torch.addmm(_t(3, 3), _t(3), _t(3, 3, dt=_H)),
    "addmm mat2 rank": lambda: torch.addmm(_t(3, 3), _t(3, 3), _t(3)),
    "addbmm batches": lambda: torch.addbmm(_t(3, 3), _t(2, 3, 4), _t(3, 4, 3)),
    "addbmm sizes before dtype": lambda: torch.addbmm(_t(3, 3), _t(2, 3, 4, dt=_H), _t(2, 3, 3)),
    "addbmm dtype": lambda: torch.addbmm(_t(3, 3), _t(2, 3, 3, dt=_H), _t(2, 3, 3)),
    "dot ranks": lambda: torch.dot(_t(3), _t(3, 1)),
    "dot dtype before size": lambda: torch.dot(_t(3), _t(4, dt=_H)),
    "vdot dtype": lambda: torch.vdot(_t(3, dt=torch.complex64), _t(3, dt=torch.complex128)),
    "dot size": lambda: torch.dot(_t(3), _t(4)),
}


@pytest.mark.parametrize("case", list(_PRODUCT_ERRORS))
def test_product_errors_as_pytorch(case):
    """mm, bmm, baddbmm, mv, addmv, addmm, addbmm, dot and vdot raise the
    CPU's text, checks in ATen's order (which of two faults is reported);
    ours gave one generic text for all ("expected m1 and m2 to have the same
    dtype" for dot, which PyTorch's error_inputs for dot match)."""
    fn = _PRODUCT_ERRORS[case]
    with pytest.raises(RuntimeError) as want:
        fn()
    with torch.device("tpu"), pytest.raises(RuntimeError) as got:
        fn()
    assert str(got.value).startswith(str(want.value)), (str(got.value), str(want.value))


# --- 32. an out= that is also an input is not resized (test_ops' ldexp_ variant consistency) ----

def test_out_that_is_an_input_keeps_its_shape():
    """TensorIterator resizes an out= tensor only when it is not also an
    input: `x.ldexp_(y)` (mul.out(x, 2**y, out=x)) with x [5, 1] and y [5]
    raises instead of turning x into [5, 5]; a separate out= is resized."""
    for dev in ("cpu", "tpu"):
        x, y = torch.ones(5, 1, device=dev), torch.arange(5.0, device=dev)
        with pytest.raises(RuntimeError, match=r"output with shape \[5, 1\] doesn't match "
                                               r"the broadcast shape \[5, 5\]"):
            x.ldexp_(y)
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            torch.add(x, y, out=x)
        assert x.shape == (5, 1) and bool((x == 1).all())
        out = torch.empty(0, device=dev)
        torch.mul(x, y, out=out)
        assert out.shape == (5, 5)
        torch.testing.assert_close(out.cpu(), torch.ones(5, 1) * torch.arange(5.0))


# --- 33. logaddexp refuses integer operands (test_ops' test_dtypes_masked_logaddexp) ----------

@pytest.mark.parametrize("fn", [torch.logaddexp, torch.logaddexp2])
def test_logaddexp_of_integers_raises_as_cpu(fn):
    for dt in (torch.int32, torch.int64, torch.uint8, torch.bool):
        a = torch.ones(3, dtype=dt)
        with pytest.raises(RuntimeError, match="not implemented for"):
            fn(a, a)
        with pytest.raises(RuntimeError, match="not implemented for"):
            fn(a.to("tpu"), a.to("tpu"))
    # An integer beside a float operand promotes to float, as on the CPU.
    a, b = torch.arange(3, dtype=torch.int32), torch.linspace(-1, 1, 3)
    torch.testing.assert_close(fn(a.to("tpu"), b.to("tpu")).cpu(), fn(a, b))


# --- 34. complex pow as glibc's cpow (test_binary_ufuncs' float_power large/extremal values) --

@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_pow_special_values_like_cpu(dtype):
    """PyTorch's CPU complex pow is glibc's cpow: cexp(e * clog(a)) with C's
    complex product. XLA's power gave NaN where the result over- or
    underflows, (-1.1e4-2.9e3j) ** (-7.7e3+1.4e4j) is -0-0j on the CPU; and
    zeros, infinities and NaNs follow clog's and cexp's special cases.
    Results the CPU gives as subnormals are left out (XLA's CPU backend
    flushes them to zero)."""
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -3.5, 1e-30, 1e30, 1e300, math.inf, -math.inf, math.nan]
    comps = [complex(a, b) for a in vals for b in vals]
    a = torch.tensor([x for x in comps for _ in comps], dtype=dtype)
    e = torch.tensor([y for _ in comps for y in comps], dtype=dtype)
    g = torch.Generator().manual_seed(34)
    for scale in (1.0, 1e4, 1e10):
        r = [torch.randn(4000, generator=g, dtype=torch.float64) * scale for _ in range(4)]
        a = torch.cat([a, torch.complex(r[0], r[1]).to(dtype)])
        e = torch.cat([e, torch.complex(r[2], r[3]).to(dtype)])
    want = torch.view_as_real(torch.pow(a, e))
    got = torch.view_as_real(torch.pow(a.to("tpu"), e.to("tpu")).cpu())
    tiny = torch.finfo(want.dtype).tiny
    keep = ~((want.abs() < tiny) & (want != 0)).any(-1)
    want, got = want[keep], got[keep]
    same_class = (want.isnan() == got.isnan()) & (want.isinf() == got.isinf())
    assert bool(same_class.all()), (a[keep][~same_class.all(-1)][:4], e[keep][~same_class.all(-1)][:4])
    finite = torch.isfinite(want)
    assert torch.equal(torch.signbit(got[~finite & ~want.isnan()]),
                       torch.signbit(want[~finite & ~want.isnan()]))
    # Finite parts: within the product's rounding, relative to |result|.
    mag = want.nan_to_num(0, 0, 0).abs().amax(-1, keepdim=True).expand_as(want)
    err = (got - want).abs()[finite]
    tol = (4e-6 if dtype == torch.complex64 else 1e-12) * mag[finite] + 2 ** 10 * tiny
    bad = ~(err <= tol)
    assert not bool(bad.any()), (err[bad][:4], want[finite][bad][:4], got[finite][bad][:4])


# --- 35. integer linspace over spans past 2^63 (test_tensor_creation_ops' test_large_linspace) --

def test_integer_linspace_wide_spans_like_cpu():
    """PyTorch's CPU kernel takes an integer linspace's step in double from
    double(end) - double(start); end - start in int64 overflowed for
    linspace(int64 min, max, 15) and gave all points equal to start. With one
    step the start is itself, not rounded through double."""
    for dt in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        info = torch.iinfo(dt)
        end = info.max & ~0xFFF if dt == torch.int64 else info.max
        for steps in (2, 3, 15, 100):
            want = torch.linspace(info.min, end, steps, dtype=dt)
            assert torch.equal(torch.linspace(info.min, end, steps, dtype=dt, device="tpu").cpu(), want)
    rng = random.Random(35)
    for _ in range(200):
        dt = rng.choice([torch.int64, torch.int32, torch.int16, torch.uint8])
        lo, hi = torch.iinfo(dt).min, torch.iinfo(dt).max
        s, e, n = rng.randint(lo, hi), rng.randint(lo, hi), rng.randint(0, 40)
        want = torch.linspace(s, e, n, dtype=dt)
        assert torch.equal(torch.linspace(s, e, n, dtype=dt, device="tpu").cpu(), want), (dt, s, e, n)


# --- 36. mask and operand dtypes refused as on the CPU (test_ops' test_errors_masked_scatter, ---
# --- test_dtypes_nn_functional_threshold) ----------------------------------------------------

MASKED = [
    ("masked_scatter", lambda d, m: torch.ones(1, 3, device=d).masked_scatter(m, torch.ones(3, 4, device=d))),
    ("masked_scatter_", lambda d, m: torch.ones(2, 3, device=d).masked_scatter_(m, torch.ones(6, device=d))),
    ("masked_fill_", lambda d, m: torch.ones(2, 3, device=d).masked_fill_(m, 0.0)),
    ("masked_fill", lambda d, m: torch.ones(2, 3, device=d).masked_fill(m, 2.0)),
]


@pytest.mark.filterwarnings("ignore:masked_scatter_ received a mask with dtype torch.uint8")
@pytest.mark.parametrize("name,fn", MASKED, ids=[n for n, _ in MASKED])
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.uint8, torch.float32, torch.int64])
def test_mask_dtypes_like_cpu(name, fn, mask_dtype):
    """Only boolean masks: the CPU refuses a float, integer or (after a
    deprecation warning) uint8 mask with "only supports boolean masks"; a
    boolean mask works. The message names the dtype as PyTorch does."""
    assert_like_cpu(lambda d: fn(d, (torch.arange(6, device=d).reshape(2, 3)[:1] % 2 == 0)
                                 .to(mask_dtype)))


@pytest.mark.parametrize("fn", [
    lambda x: torch.nn.functional.threshold(x, 0.5, 2.0),
    lambda x: torch.threshold(x, 0, 1),
    lambda x: torch.nn.functional.threshold_(x.clone(), 0.5, 2.0),
])
@pytest.mark.parametrize("dtype", [torch.bool, torch.int8, torch.uint8, torch.int64, torch.float16,
                                   torch.bfloat16, torch.float32])
def test_threshold_dtypes_like_cpu(fn, dtype):
    """threshold takes every number type and refuses bool, as the CPU's kernel:
    the rule leaves bool to the CPU, which raises its own NotImplementedError
    ("threshold_cpu" not implemented for 'Bool'), as relu of bool does."""
    x = torch.tensor([-2, 0, 1, 3, 1]).to(dtype)
    if dtype == torch.bool:
        with pytest.raises(NotImplementedError, match="threshold.*not implemented for 'Bool'"):
            fn(x)
    assert_like_cpu(lambda d: fn(x.to(d)))


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_masked_fill_complex_device_value_into_real(dtype):
    """masked_fill.Tensor with a complex 0-dim value on the device into a real
    self (test_ops' test_errors_masked_fill): the CPU reads the value and
    refuses a non-zero imaginary part. The tpu op checks it on the device and
    raises at the next synchronisation; it never drops the imaginary part."""
    for v in (1j, 3 + 1e-30j):
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.ones(2, dtype=dtype).masked_fill(torch.tensor([True, False]), torch.tensor(v))
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.ones(2, dtype=dtype, device="tpu").masked_fill(
                torch.tensor([True, False], device="tpu"), torch.tensor(v, device="tpu")).cpu()
    assert_like_cpu(lambda d: torch.ones(2, dtype=dtype, device=d).masked_fill(
        torch.tensor([True, False], device=d), torch.tensor(2 + 0j, device=d)))
