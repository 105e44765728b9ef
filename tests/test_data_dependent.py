"""nonzero, argwhere and masked_select on "tpu" (torchtpu/_data_dependent.py),
against PyTorch's CPU results: every shape (0-d and empty ones too), dtype and
selection density, out= variants, error texts, autograd through masked_select,
and no CPU fallback."""
import warnings

import pytest
import torch

import torchtpu  # noqa: F401

SHAPES = [(), (0,), (1,), (7,), (3, 4), (2, 3, 4), (0, 3), (1, 1, 5), (64, 33)]
DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool, torch.complex64]


def sample(shape, dtype, density, seed):
    g = torch.Generator().manual_seed(seed)
    keep = torch.rand(shape, generator=g) < density
    vals = torch.randn(shape, generator=g) * 10 + 20
    if dtype.is_floating_point and len(shape) and shape[0] > 1:
        vals.view(-1)[0] = float("nan")  # NaN counts as nonzero
    return (vals * keep).to(dtype)


def no_fallback(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a CPU fallback warns
        return fn()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("density", [0.0, 0.3, 1.0])
def test_nonzero_like_cpu(dtype, density):
    for i, shape in enumerate(SHAPES):
        x = sample(shape, dtype, density, i)
        xt = x.to("tpu")
        for fn in (torch.nonzero, torch.argwhere):
            got = no_fallback(lambda: fn(xt))
            want = fn(x)
            assert got.device.type == "tpu" and got.dtype == torch.long
            assert got.shape == want.shape and torch.equal(got.cpu(), want), (fn, shape)
            # PyTorch's layout: the transpose of a contiguous [ndim, count]
            assert want.numel() == 0 or got.stride() == want.stride(), (fn, shape)
        for a, b in zip(no_fallback(lambda: torch.nonzero(xt, as_tuple=True)),
                        torch.nonzero(x, as_tuple=True)):
            assert torch.equal(a.cpu(), b)


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != torch.complex64], ids=str)
def test_masked_select_like_cpu(dtype):
    for i, shape in enumerate(SHAPES):
        x = sample(shape, dtype, 1.0, i)
        for mshape in (shape, shape[1:]):  # the mask broadcast against self too
            m = torch.rand(mshape, generator=torch.Generator().manual_seed(i)) < 0.4
            got = no_fallback(lambda: torch.masked_select(x.to("tpu"), m.to("tpu")))
            want = torch.masked_select(x, m)
            assert got.device.type == "tpu", (shape, mshape)
            torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)


def test_masked_select_grad_like_cpu():
    x = torch.randn(3, 4, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    m = torch.tensor([True, False, True, True])
    (torch.masked_select(x, m) * torch.arange(9.)).sum().backward()
    (torch.masked_select(xt, m.to("tpu")) * torch.arange(9., device="tpu")).sum().backward()
    assert torch.equal(xt.grad.cpu(), x.grad)


def test_out_variants_like_cpu():
    x = sample((5, 6), torch.float32, 0.5, 3)
    out = torch.empty(2, dtype=torch.long, device="tpu")
    r = torch.nonzero(x.to("tpu"), out=out)
    assert r is out and torch.equal(out.cpu(), torch.nonzero(x))
    m = x > 20
    out = torch.empty(0, device="tpu")
    torch.masked_select(x.to("tpu"), m.to("tpu"), out=out)
    assert torch.equal(out.cpu(), torch.masked_select(x, m))


@pytest.mark.parametrize("name,fn", [
    ("nonzero_out_dtype", lambda d: torch.nonzero(torch.ones(2, device=d), out=torch.empty(0, device=d))),
    ("mask_dtype", lambda d: torch.masked_select(torch.ones(3, 4, device=d), torch.ones(3, 4, device=d).int())),
    ("mask_shape", lambda d: torch.masked_select(torch.ones(3, 4, device=d), torch.ones(5, device=d, dtype=torch.bool))),
    ("out_dtype", lambda d: torch.masked_select(torch.ones(3, device=d), torch.ones(3, device=d, dtype=torch.bool),
                                                 out=torch.empty(0, dtype=torch.long, device=d))),
])
def test_errors_like_cpu(name, fn):
    raises_like_cpu(fn, RuntimeError)


def raises_like_cpu(fn, exc):
    """fn("tpu") raises exc with the text fn("cpu") raises (the core may add
    the op's name and its place after it)."""
    with pytest.raises(exc) as cpu:
        fn("cpu")
    with pytest.raises(exc) as tpu:
        fn("tpu")
    assert str(tpu.value).startswith(str(cpu.value)), (str(tpu.value), str(cpu.value))


def test_same_count_compiles_nothing_new():
    """One program set per (shape, count): a second input of the same shape
    and count reuses it; results own exactly their storage."""
    xs = [(torch.arange(40) % k == 0).float().to("tpu") for k in (3, 3)]
    xs[1] = xs[1].roll(1)
    torch.nonzero(xs[0]), torch.masked_select(xs[0], xs[0] > 0)
    before = torch.tpu._get_cache_stats()["compiles"]
    got = torch.nonzero(xs[1])
    sel = torch.masked_select(xs[1], xs[1] > 0)
    assert torch.tpu._get_cache_stats()["compiles"] == before
    assert torch.equal(got.cpu(), torch.nonzero(xs[1].cpu()))
    assert got.untyped_storage().nbytes() == got.numel() * 8
    assert sel.untyped_storage().nbytes() == sel.numel() * 4


MASK_INDEXING = [
    ("all", lambda a, m: a[m]),
    ("leading", lambda a, m: a[m[:, :, 0]]),
    ("middle", lambda a, m: a[:, m[0, :, 0]]),
    ("then_slice", lambda a, m: a[m[..., 0, 0], 1:3]),
    ("after_ellipsis", lambda a, m: a[..., m[0, 0]]),
    ("with_long", lambda a, m: a[torch.tensor([0, 2], device=a.device), m[0, :, 0]]),
    ("split_by_slice", lambda a, m: a[m[:, 0, 0], :, torch.tensor([1], device=a.device)]),
]


@pytest.mark.parametrize("name,fn", MASK_INDEXING, ids=[c[0] for c in MASK_INDEXING])
def test_bool_mask_indexing_like_cpu(name, fn):
    """x[mask] (aten::index with bool indices) on the device: the masks
    become their nonzero() columns, as ATen's expandTensors does."""
    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(2))
    m = x > -0.2
    got = no_fallback(lambda: fn(x.to("tpu"), m.to("tpu")))
    assert got.device.type == "tpu" and torch.equal(got.cpu(), fn(x, m))


def test_bool_mask_writes_and_grad_like_cpu():
    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(4))
    m = x[:, :, 0] > 0
    xt, mt = x.to("tpu"), m.to("tpu")
    want = x.clone()
    want[m] += torch.arange(5.)
    got = xt.clone()
    no_fallback(lambda: got.__setitem__(mt, got[mt] + torch.arange(5., device="tpu")))
    assert torch.equal(got.cpu(), want)
    y, yt = x.clone().requires_grad_(), xt.clone().requires_grad_()
    (y[m] * 3).sum().backward()
    no_fallback(lambda: (yt[mt] * 3).sum().backward())  # index_put with the mask, accumulating
    assert torch.equal(yt.grad.cpu(), y.grad)


@pytest.mark.parametrize("name,fn", [
    ("mask_shape", lambda d: torch.ones(3, 4, device=d)[torch.ones(4, dtype=torch.bool, device=d)]),
    ("too_many", lambda d: torch.ones(3, 4, device=d)[:, :, torch.ones(2, dtype=torch.bool, device=d)]),
])
def test_bool_mask_index_errors_like_cpu(name, fn):
    raises_like_cpu(fn, IndexError)


def test_uint8_mask_warns_like_cpu():
    x = torch.arange(6.).reshape(2, 3)
    m = torch.tensor([[1, 0, 1], [0, 1, 1]], dtype=torch.uint8)
    with pytest.warns(UserWarning, match="indexing with dtype torch.uint8 is now deprecated"):
        got = x.to("tpu")[m.to("tpu")]
    assert torch.equal(got.cpu(), x[m.bool()])


def test_mask_assign_host_scalar_of_other_dtype_like_cpu():
    """x[mask] = torch.tensor(v) with a one-element host value of another
    dtype is ATen's masked_fill (the value cast), not an index_put that
    refuses the dtype; a value of the wrong shape is PyTorch's shape error."""
    def f(d):
        x = torch.arange(6, device=d).half()
        x[x > 3] = torch.tensor(-7.5)
        x[x < 1] = torch.tensor([9])
        return x
    assert torch.equal(f("tpu").cpu(), f("cpu"))

    def g(d, v):
        x = torch.arange(4, device=d)
        x[x > -1] = torch.tensor(v).to(d)
    for v in ([], [1, 2, 3]):
        raises_like_cpu(lambda d: g(d, v), RuntimeError)


UNIQUE_SHAPES = [(), (0,), (1,), (7,), (3, 4), (2, 3, 4), (0, 3), (50,)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool],
                         ids=str)
def test_unique_like_cpu(dtype):
    """torch.unique (no dim) and unique_consecutive on the device: values,
    inverse and counts as the CPU gives them. NaNs are each their own value,
    as on the CPU; which NaN's group comes first is left to the sort (the
    CPU's std::sort leaves it unspecified), so with NaNs the inverse is
    checked by rebuilding the input from it."""
    g = torch.Generator().manual_seed(5)
    for shape in UNIQUE_SHAPES:
        x = torch.randint(0, 4, shape, generator=g).to(dtype)
        nan = dtype.is_floating_point and x.numel() > 2
        if nan:
            x.view(-1)[1] = x.view(-1)[-1] = float("nan")
        for flags in [(True, False, False), (True, True, True), (False, True, False), (False, False, True)]:
            want = torch.ops.aten._unique2(x, *flags)
            got = no_fallback(lambda: torch.ops.aten._unique2(x.to("tpu"), *flags))
            check_unique(got, want, x, nan and flags[1])
        for flags in [(False, False), (True, True), (True, False)]:
            want = torch.ops.aten.unique_consecutive(x, *flags)
            got = no_fallback(lambda: torch.ops.aten.unique_consecutive(x.to("tpu"), *flags))
            check_unique(got, want, x, False)


def check_unique(got, want, x, inverse_up_to_nan_order):
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.device.type == "tpu" and g.shape == w.shape and g.dtype == w.dtype, (i, g, w)
        if i == 1 and inverse_up_to_nan_order:
            torch.testing.assert_close(got[0].cpu()[g.cpu()], x, rtol=0, atol=0, equal_nan=True)
        else:
            torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0, equal_nan=True)


def test_unique_over_dim_and_complex_stay_on_cpu():
    x = torch.tensor([[1, 2], [1, 2], [0, 5]])
    got = torch.unique(x.to("tpu"), dim=0, return_counts=True)
    for g, w in zip(got, torch.unique(x, dim=0, return_counts=True)):
        assert g.device.type == "tpu" and torch.equal(g.cpu(), w)
    z = torch.tensor([1 + 1j, 1 + 1j, 2j])
    raises_like_cpu(lambda d: torch.unique_consecutive(z.to(d), return_counts=True),
                    NotImplementedError)  # the CPU's "not implemented for 'ComplexFloat'"


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=str)
def test_repeat_interleave_like_cpu(dtype):
    g = torch.Generator().manual_seed(0)
    cases = [[2, 0, 3], [0, 0], [], [5], [1, 1, 1], [0, 4, 0, 0, 2, 0]]
    cases.append(torch.randint(0, 4, (50,), generator=g).tolist())
    for reps in cases:
        r = torch.tensor(reps, dtype=dtype)
        got = no_fallback(lambda: torch.repeat_interleave(r.to("tpu")))
        want = torch.repeat_interleave(r)
        assert got.device.type == "tpu" and got.dtype == want.dtype, reps
        assert torch.equal(got.cpu(), want), reps
        if reps:  # output_size given: the same, checked as the CPU checks it
            got = torch.repeat_interleave(r.to("tpu"), output_size=int(r.sum()))
            assert torch.equal(got.cpu(), want), reps
    # the index list of repeat_interleave(x, repeats, dim), and its gradient
    x = torch.randn(4, 3, requires_grad=True)
    reps = torch.tensor([1, 0, 2, 3], dtype=dtype)
    xt = x.detach().to("tpu").requires_grad_()
    for d in (0, 1):
        rr = reps if d == 0 else reps[:3]
        got = no_fallback(lambda: torch.repeat_interleave(xt, rr.to("tpu"), dim=d))
        want = torch.repeat_interleave(x, rr, dim=d)
        assert torch.equal(got.detach().cpu(), want.detach())
        got.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(xt.grad.cpu(), x.grad)


@pytest.mark.parametrize("name,fn,exc", [
    ("float_repeats", lambda d: torch.repeat_interleave(torch.tensor([1., 2.], device=d)), NotImplementedError),
    ("2d_repeats", lambda d: torch.repeat_interleave(torch.tensor([[1, 2]], device=d)), RuntimeError),
    ("negative", lambda d: torch.repeat_interleave(torch.tensor([1, -2], device=d)), RuntimeError),
    ("negative_sized", lambda d: torch.repeat_interleave(torch.tensor([2, -1, 3], device=d), output_size=4),
     RuntimeError),
    ("wrong_output_size", lambda d: torch.repeat_interleave(torch.tensor([2, 0, 3], device=d), output_size=4),
     RuntimeError),
    ("repeats_size", lambda d: torch.repeat_interleave(torch.ones(2, 3, device=d), torch.tensor([1, 2, 3], device=d),
                                                        dim=0), RuntimeError),
])
def test_repeat_interleave_errors_like_cpu(name, fn, exc):
    raises_like_cpu(fn, exc)


# --- bincount -----------------------------------------------------------------------------------

BINCOUNT_CASES = [
    (torch.tensor([1, 1, 3, 0, 7]), None, 0),
    (torch.tensor([1, 1, 3], dtype=torch.int8), None, 10),
    (torch.tensor([2, 0, 2]), torch.tensor([0.5, 1.0, 2.0]), 0),
    (torch.tensor([2, 0, 2]), torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64), 5),
    (torch.tensor([2, 0, 2]), torch.tensor([1, 2, 3]), 0),
    (torch.tensor([], dtype=torch.long), None, 3),
    (torch.tensor([], dtype=torch.long), torch.tensor([]), 2),
    (torch.randint(0, 50, (1000,), generator=torch.Generator().manual_seed(0)), None, 0),
]


@pytest.mark.parametrize("case", range(len(BINCOUNT_CASES)))
def test_bincount_like_cpu(case):
    """Counts and weighted sums on the device, with the CPU's result dtypes
    (int64; float32 for float32 weights, float64 for others; int64 zeros for
    an empty input)."""
    x, w, minlength = BINCOUNT_CASES[case]
    want = torch.bincount(x, w, minlength)
    got = no_fallback(lambda: torch.bincount(x.to("tpu"), None if w is None else w.to("tpu"),
                                             minlength))
    assert got.device.type == "tpu" and got.dtype == want.dtype
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("fn", [
    lambda d: torch.bincount(torch.tensor([-1, 2], device=d)),
    lambda d: torch.bincount(torch.tensor([[1]], device=d)),
    lambda d: torch.bincount(torch.tensor([1.0], device=d)),
    lambda d: torch.bincount(torch.tensor([1], device=d), minlength=-1),
    lambda d: torch.bincount(torch.tensor([1, 2], device=d), torch.tensor([1.0], device=d)),
])
def test_bincount_errors_like_cpu(fn):
    with pytest.raises(Exception) as want:
        fn("cpu")
    with pytest.raises(type(want.value), match=str(want.value).split("\n")[0][:40]):
        fn("tpu")
