"""Cholesky, triangular solves, LU and what PyTorch builds on LU (solve, inv,
det, slogdet) and matrix_exp, natively on tpu (core/src/lower/linalg_lu.c).

Every result is compared with PyTorch on the CPU (LAPACK) with the CPU
fallback set to raise, so none of it leaves the device: well-conditioned and
ill-conditioned inputs (condition number 1e5 in float32, where both sides are
held to the error the CPU itself makes against a float64 reference),
batched, zero-size and non-contiguous inputs, singular and not positive
definite ones (`info`, LAPACK's partial factor), gradients, and PyTorch's
errors for bad input.
"""
import warnings

import pytest
import torch

import torchtpu
from torchtpu.testing import native_only

DT = [torch.float32, torch.float64]
TOL = {torch.float32: 2e-5, torch.float64: 1e-12}


def close(out, ref, tol=None):
    if isinstance(ref, torch.Tensor):
        out, ref = (out,), (ref,)
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.device.type == "tpu", o.device
        assert o.dtype == r.dtype and o.shape == r.shape, (o.dtype, r.dtype, o.shape, r.shape)
        t = TOL.get(r.dtype, 0) if tol is None else tol
        torch.testing.assert_close(o.cpu(), r, rtol=t, atol=t, equal_nan=True)


def check(f, *xs, tol=None):
    ref = f(*xs)
    with native_only():
        out = f(*[x.to("tpu") for x in xs])
    close(out, ref, tol)


def spd(*shape, dtype):
    a = torch.randn(*shape, dtype=dtype)
    n = shape[-1]
    return a @ a.mT + n * torch.eye(n, dtype=dtype)


def general(*shape, dtype):
    # Diagonally weighted so that pivoting order is unambiguous yet exercised.
    return torch.randn(*shape, dtype=dtype) + 0.5 * torch.eye(shape[-1], dtype=dtype)


def ill_conditioned(n, cond, dtype, symmetric=False):
    """A float64 matrix U diag(s) V^T with singular values from 1 to 1/cond."""
    g = torch.Generator().manual_seed(7)
    u, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=g))
    v = u if symmetric else torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=g))[0]
    s = torch.logspace(0, -torch.log10(torch.tensor(float(cond))).item(), n, dtype=torch.float64)
    return (u * s) @ v.mT


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    warnings.simplefilter("ignore")  # torch.cholesky / triangular_solve are deprecated


# --- Cholesky ------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", DT)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(dt, upper):
    s = spd(3, 6, 6, dtype=dt)
    check(lambda a: torch.linalg.cholesky_ex(a, upper=upper), s)
    check(lambda a: torch.linalg.cholesky(a, upper=upper), s)
    check(lambda a: torch.cholesky(a, upper), s[0])


@pytest.mark.parametrize("dt", DT)
def test_cholesky_solve_and_inverse(dt):
    s, b = spd(2, 5, 5, dtype=dt), torch.randn(2, 5, 3, dtype=dt)
    for upper in (False, True):
        f = torch.linalg.cholesky(s, upper=upper)
        check(lambda l, x: torch.cholesky_solve(x, l, upper), f, b)
        check(lambda l: torch.cholesky_inverse(l, upper), f)
    # cholesky_solve broadcasts the factor's batch against B's
    check(lambda l, x: torch.cholesky_solve(x, l), torch.linalg.cholesky(s[0]), b)


def test_cholesky_not_positive_definite():
    # LAPACK's info and partial factor: the failing diagonal holds its
    # value, the columns after it are the input's.
    a = torch.tensor([[1., 2, 3], [2, 1, 6], [3, 6, 1]])
    batch = torch.stack([torch.eye(3), a, torch.diag(torch.tensor([1., 1, -1])), -torch.eye(3)])
    check(torch.linalg.cholesky_ex, batch)
    check(lambda x: torch.linalg.cholesky_ex(x, upper=True), batch)
    with pytest.raises(torch.linalg.LinAlgError, match="leading minor of order 2 is not positive"):
        torch.linalg.cholesky(a.to("tpu"))


# --- triangular solves -----------------------------------------------------------------------


@pytest.mark.parametrize("dt", DT)
def test_triangular_solves(dt):
    a = general(2, 5, 5, dtype=dt) + 3 * torch.eye(5, dtype=dt)
    b = torch.randn(2, 5, 3, dtype=dt)
    for upper in (False, True):
        for unit in (False, True):
            check(lambda m, x: torch.linalg.solve_triangular(m, x, upper=upper,
                                                             unitriangular=unit), a, b)
            check(lambda m, x: torch.linalg.solve_triangular(m, x, upper=upper, left=False,
                                                             unitriangular=unit), a, b.mT)
            for tr in (False, True):
                check(lambda m, x: torch.triangular_solve(x, m, upper, tr, unit), a, b)
    # batch broadcasting: one A for a batch of B
    check(lambda m, x: torch.linalg.solve_triangular(m, x, upper=True), a[0], b)


# --- LU ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", DT)
@pytest.mark.parametrize("shape", [(3, 5, 5), (4, 6), (2, 3, 5), (2, 5, 3)])
def test_lu_factor(dt, shape):
    a = torch.randn(*shape, dtype=dt)
    check(torch.linalg.lu_factor_ex, a)
    check(torch.linalg.lu, a)
    check(lambda x: torch.lu_unpack(*torch.linalg.lu_factor(x)), a)
    check(lambda x: torch.lu_unpack(*torch.linalg.lu_factor(x), unpack_data=False), a)
    check(lambda x: torch.lu_unpack(*torch.linalg.lu_factor(x), unpack_pivots=False), a)


def test_lu_singular():
    # zero pivots: info names the first one, the column is left unscaled
    sing = torch.tensor([[1., 2, 3], [2, 4, 6], [1, 1, 1]])
    batch = torch.stack([sing, torch.zeros(3, 3), torch.eye(3)])
    check(torch.linalg.lu_factor_ex, batch)
    # det and slogdet factor A^T: a matrix singular without rounding either way
    # (multipliers that are powers of two), else both sides leave a rounding
    # residue of their own on U's diagonal.
    exact = torch.tensor([[4., 2, 2], [2, 1, 1], [1, 3, 5]])
    batch = torch.stack([exact, torch.zeros(3, 3), torch.eye(3)])
    check(torch.linalg.lu_factor_ex, batch)
    check(torch.linalg.det, batch)
    check(torch.linalg.slogdet, batch)
    check(lambda x: torch.linalg.inv_ex(x).info, batch)
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.solve(sing.to("tpu"), torch.ones(3, device="tpu"))


@pytest.mark.parametrize("dt", DT)
def test_lu_solve(dt):
    a, b = general(2, 5, 5, dtype=dt), torch.randn(2, 5, 3, dtype=dt)
    for left in (True, False):
        for adjoint in (False, True):
            rhs = b if left else b.mT
            check(lambda m, x: torch.linalg.lu_solve(*torch.linalg.lu_factor(m), x, left=left,
                                                     adjoint=adjoint), a, rhs, tol=TOL[dt] * 10)


@pytest.mark.parametrize("dt", DT)
def test_solve_inv_det(dt):
    a, b = general(3, 5, 5, dtype=dt), torch.randn(3, 5, 2, dtype=dt)
    tol = TOL[dt] * 10
    check(torch.linalg.solve, a, b, tol=tol)
    check(lambda m, x: torch.linalg.solve(m, x, left=False), a, b.mT, tol=tol)
    check(torch.linalg.solve, a, b[..., 0], tol=tol)     # a batch of vectors
    check(torch.linalg.solve, a[0], b, tol=tol)          # A broadcast over B's batch
    check(lambda m, x: torch.ops.aten._linalg_solve_ex(m, x), a, b, tol=tol)  # LU, pivots, info
    check(torch.linalg.inv_ex, a, tol=tol)
    check(torch.linalg.det, a, tol=tol)
    check(torch.linalg.slogdet, a, tol=tol)
    check(torch.logdet, spd(3, 5, 5, dtype=dt), tol=tol)
    # the LU and pivots det returns (of A^T for a contiguous A, as PyTorch's)
    check(lambda m: torch.ops.aten._linalg_det(m), a, tol=tol)
    check(lambda m: torch.ops.aten._linalg_det(m), a.mT, tol=tol)
    check(lambda m: torch.ops.aten._linalg_slogdet(m), a, tol=tol)


def test_matrix_exp():
    """float64 natively (float32 runs on the CPU: see lower_matrix_exp)."""
    dt = torch.float64
    # norms from below theta13 (no squaring) to ones that need several
    # squarings, a different count per batch item
    a = torch.randn(4, 5, 5, dtype=dt) * torch.tensor([0.01, 0.5, 3, 20], dtype=dt)[:, None, None]
    ref = torch.linalg.matrix_exp(a)
    with native_only():
        out = torch.linalg.matrix_exp(a.to("tpu"))
    rel = ((out.cpu() - ref).flatten(1).norm(dim=1) / ref.flatten(1).norm(dim=1)).max().item()
    assert rel < 1e-13, rel
    check(torch.linalg.matrix_exp, torch.zeros(2, 3, 3, dtype=dt))
    check(torch.linalg.matrix_exp, torch.zeros(0, 3, 3, dtype=dt))


def test_zero_size_and_non_contiguous():
    for shape in [(0, 3, 3), (2, 0, 0)]:
        e = torch.randn(*shape)
        check(torch.linalg.lu_factor_ex, e)
        check(torch.linalg.cholesky_ex, e)
        check(torch.linalg.inv, e)
        check(torch.linalg.det, e)
        check(lambda m: torch.linalg.solve(m, torch.ones(*shape[:-1], 2, device=m.device)), e)
    a = torch.randn(5, 5, 3).permute(2, 0, 1)  # a transposed batch
    check(torch.linalg.lu_factor_ex, a)
    check(torch.linalg.solve, a, torch.randn(3, 2, 5).mT, tol=1e-4)
    check(torch.linalg.inv, a.mT, tol=1e-4)
    check(torch.linalg.cholesky, spd(5, 5, dtype=torch.float32).mT)


# --- ill-conditioned inputs -------------------------------------------------------------------


@pytest.mark.parametrize("cond", [1e4, 1e6])
def test_ill_conditioned_float32(cond):
    """Forward errors against the float64 truth stay under cond * eps (as
    LAPACK's do: its own float32 errors here reach 4e-3 at cond 1e6), and
    backward errors (residuals, reconstructions) stay near eps whatever the
    condition: the factorisations are backward stable."""
    m = ill_conditioned(6, cond, torch.float64)
    s = ill_conditioned(6, cond, torch.float64, symmetric=True)
    ones = torch.ones(6, 1, dtype=torch.float64)
    with native_only():
        mt, st, ot = m.float().to("tpu"), s.float().to("tpu"), ones.float().to("tpu")
        x = torch.linalg.solve(mt, ot)
        inv = torch.linalg.inv(mt)
        det = torch.linalg.det(mt)
        p, l, u = torch.linalg.lu(mt)
        c = torch.linalg.cholesky(st)
        y = torch.cholesky_solve(ot, c)
    eps = torch.finfo(torch.float32).eps
    d = lambda t: t.cpu().double()
    rel = lambda got, want: ((d(got) - want).norm() / want.norm()).item()
    exact = [(x, torch.linalg.solve(m, ones)), (inv, torch.linalg.inv(m)),
             (det, torch.linalg.det(m)), (y, torch.cholesky_solve(ones, torch.linalg.cholesky(s)))]
    for got, want in exact:
        assert rel(got, want) < 10 * cond * eps, (rel(got, want), cond)
    m32, s32 = m.float().double(), s.float().double()
    assert rel(p @ l @ u, m32) < 50 * eps
    assert rel(c @ c.mT, s32) < 50 * eps
    assert ((m32 @ d(x) - 1).norm() / (m32.norm() * d(x).norm())).item() < 50 * eps
    assert ((m32 @ d(inv) - torch.eye(6, dtype=torch.float64)).norm()
            / (m32.norm() * d(inv).norm())).item() < 50 * eps


# --- gradients ------------------------------------------------------------------------------------


GRADS = {
    "cholesky": lambda a, s, b: torch.linalg.cholesky(s).sum(),
    "cholesky_solve": lambda a, s, b: (torch.cholesky_solve(b, torch.linalg.cholesky(s)) ** 2).sum(),
    "cholesky_inverse": lambda a, s, b: (torch.cholesky_inverse(torch.linalg.cholesky(s)) ** 2).sum(),
    "solve_triangular": lambda a, s, b: (torch.linalg.solve_triangular(s, b, upper=True) ** 2).sum(),
    "lu": lambda a, s, b: sum((x ** 2).sum() for x in torch.linalg.lu(a)[1:]),
    "lu_solve": lambda a, s, b: (torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b) ** 2).sum(),
    "solve": lambda a, s, b: (torch.linalg.solve(a, b) ** 2).sum(),
    "inv": lambda a, s, b: (torch.linalg.inv(a) ** 2).sum(),
    "matrix_exp": lambda a, s, b: (torch.linalg.matrix_exp(a) ** 2).sum(),
    "det": lambda a, s, b: torch.linalg.det(a).sum(),
    "slogdet": lambda a, s, b: torch.linalg.slogdet(a)[1].sum(),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_backward(name):
    """PyTorch's backward formulas call these ops again: the whole backward
    runs natively and matches the CPU's gradients."""
    dt = torch.float64
    xs = [general(2, 4, 4, dtype=dt), spd(2, 4, 4, dtype=dt), torch.randn(2, 4, 3, dtype=dt)]
    ref = [x.clone().requires_grad_() for x in xs]
    GRADS[name](*ref).backward()
    tp = [x.to("tpu").requires_grad_() for x in xs]
    with native_only():
        GRADS[name](*tp).backward()
    for t, r in zip(tp, ref):
        if r.grad is None:
            assert t.grad is None
        else:
            torch.testing.assert_close(t.grad.cpu(), r.grad, rtol=1e-10, atol=1e-10)


# --- bad input ------------------------------------------------------------------------------------


def test_bad_input_errors():
    t = lambda *s, **k: torch.randn(*s, device="tpu", **k)
    cases = [
        (lambda: torch.linalg.cholesky(t(2, 3)), "linalg.cholesky: A must be batches of square "
         "matrices, but they are 2 by 3 matrices"),
        (lambda: torch.linalg.cholesky(t(3)), "linalg.cholesky: The input tensor A must have at "
         "least 2 dimensions."),
        (lambda: torch.linalg.cholesky(torch.ones(3, 3, dtype=torch.long, device="tpu")),
         "linalg.cholesky: Expected a floating point or complex tensor as input. Got Long"),
        (lambda: torch.linalg.inv(t(2, 3)), "linalg.inv: A must be batches of square matrices"),
        (lambda: torch.linalg.det(torch.ones(3, 3, dtype=torch.long, device="tpu")),
         "linalg.det: Expected a floating point or complex tensor as input. Got Long"),
        (lambda: torch.linalg.slogdet(t(2, 3)), "linalg.slogdet: A must be batches of square"),
        (lambda: torch.linalg.solve(t(3, 3), t(3, 3, dtype=torch.float64)),
         "linalg.solve: Expected A and B to have the same dtype, but found A of type Float and "
         "B of type Double instead"),
        (lambda: torch.linalg.solve(t(3, 3), t(4, 2)), r"linalg.solve: Incompatible shapes of A "
         r"and B for the equation AX = B \(3x3 and 4x2\)"),
        (lambda: torch.linalg.solve_triangular(t(3, 3), t(4, 2), upper=True),
         r"linalg.solve_triangular: Incompatible shapes of A and B for the equation AX = B "
         r"\(3x3 and 4x2\)"),
        (lambda: torch.linalg.lu_solve(*torch.linalg.lu_factor(t(3, 3)), t(4, 2)),
         r"linalg.lu_solve: Incompatible shapes of A and B for the equation AX = B"),
        (lambda: torch.linalg.lu_factor(t(3)), r"torch.lu_factor: Expected tensor with 2 or more "
         r"dimensions. Got size: \[3\] instead"),
        (lambda: torch.cholesky_inverse(t(2, 3)), "cholesky_inverse: A must be batches of square"),
    ]
    for f, msg in cases:
        with pytest.raises(RuntimeError, match="^" + msg):
            with native_only():
                f()
    # PyTorch's device-side check of lu_unpack's pivots
    with pytest.raises(RuntimeError, match="pivots passed to lu_unpack must be between 1"):
        p, l, u = torch.lu_unpack(t(3, 3), torch.tensor([5, 1, 1], dtype=torch.int32, device="tpu"))
        p.cpu()


def test_unlowered_variants_fall_back():
    """Half precision and LU without pivoting are not lowered: the CPU
    serves them and raises its own errors."""
    with pytest.raises(NotImplementedError, match="Half"):
        torch.linalg.cholesky(torch.eye(3, dtype=torch.half, device="tpu"))
    with pytest.raises(RuntimeError, match="LU without pivoting is not implemented on the CPU"):
        torch.linalg.lu_factor(torch.eye(3, device="tpu"), pivot=False)
