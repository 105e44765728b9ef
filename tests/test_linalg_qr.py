"""QR, the symmetric eigendecomposition and the SVD natively on tpu
(core/src/lower/linalg_qr.c), against PyTorch on the CPU, with the CPU
fallback set to raise.

QR follows LAPACK's reflector convention, so geqrf / linalg_qr / orgqr /
ormqr are compared element for element. Eigenvectors and singular vectors
are defined only up to sign: those are checked by reconstruction,
orthogonality and sign-invariant quantities, the values element for element.
Inputs: random, batched, non-contiguous, 0-size, and ill-conditioned
(condition number 1e6 in float32, 1e12 in float64).
"""

import pytest
import torch

import torchtpu
from torchtpu.testing import opinfo
from torchtpu.testing import native_only

DT = [torch.float32, torch.float64]
EPS = {torch.float32: 1.2e-7, torch.float64: 2.3e-16}


def tol(dt, scale=1.0):
    return 50 * EPS[dt] * scale


def close(t, ref, atol):
    assert t.device.type == "tpu" and t.dtype == ref.dtype and t.shape == ref.shape
    torch.testing.assert_close(t.cpu(), ref, atol=atol, rtol=0)


def eye_like(x, n):
    return torch.eye(n, dtype=x.dtype, device=x.device)


def orthonormal_cols(q, dt):
    q = q.cpu()
    n = q.shape[-1]
    torch.testing.assert_close(q.mT @ q, torch.eye(n, dtype=dt).expand_as(q.mT @ q),
                               atol=tol(dt, q.shape[-2]), rtol=0)


def ill_conditioned(shape, cond, dt, gen):
    """U diag(logspace(0, -log10(cond))) V^T with random orthogonal U, V."""
    m, n = shape[-2:]
    k = min(m, n)
    u, _ = torch.linalg.qr(torch.randn(*shape[:-2], m, m, dtype=torch.float64, generator=gen))
    v, _ = torch.linalg.qr(torch.randn(*shape[:-2], n, n, dtype=torch.float64, generator=gen))
    s = torch.logspace(0, -torch.log10(torch.tensor(cond)).item(), k, dtype=torch.float64)
    return (u[..., :k] * s) @ v[..., :, :k].mT


# --- QR --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", DT)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_qr_matches_lapack(dt, shape):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(*shape, dtype=dt, generator=g)
    with native_only():
        t = a.to("tpu")
        geq = torch.geqrf(t)
        qrs = {mode: torch.linalg.qr(t, mode=mode) for mode in ("reduced", "complete", "r")}
    for x, r in zip(geq, torch.geqrf(a)):
        close(x, r, tol(dt))
    for mode, (q, r) in qrs.items():
        q0, r0 = torch.linalg.qr(a, mode=mode)
        close(q, q0, tol(dt))
        close(r, r0, tol(dt))


def test_qr_noncontiguous_ill_conditioned():
    g = torch.Generator().manual_seed(2)
    a = ill_conditioned((6, 5), 1e6, torch.float32, g).to(torch.float32).mT  # [5, 6] view
    with native_only():
        q, r = torch.linalg.qr(a.to("tpu"))
    # Q's trailing columns follow R's tiny trailing entries (ill-determined
    # in float32): check R against LAPACK, Q by orthogonality and Q R = A.
    _, r0 = torch.linalg.qr(a)
    close(r, r0, 1e-5)
    orthonormal_cols(q, torch.float32)
    torch.testing.assert_close((q @ r).cpu(), a, atol=1e-6, rtol=0)


@pytest.mark.parametrize("dt", DT)
def test_householder_product_and_ormqr(dt):
    g = torch.Generator().manual_seed(3)
    a = torch.randn(2, 5, 3, dtype=dt, generator=g)
    h, tau = torch.geqrf(a)
    c_left = torch.randn(2, 5, 4, dtype=dt, generator=g)
    c_right = torch.randn(2, 4, 5, dtype=dt, generator=g)
    with native_only():
        th, ttau = h.to("tpu"), tau.to("tpu")
        q = torch.linalg.householder_product(th, ttau)
        q2 = torch.linalg.householder_product(th, ttau[..., :2])
        outs = {(left, tr): torch.ormqr(th, ttau, (c_left if left else c_right).to("tpu"),
                                        left=left, transpose=tr)
                for left in (True, False) for tr in (True, False)}
    close(q, torch.linalg.householder_product(h, tau), tol(dt))
    close(q2, torch.linalg.householder_product(h, tau[..., :2]), tol(dt))
    for (left, tr), o in outs.items():
        close(o, torch.ormqr(h, tau, c_left if left else c_right, left=left, transpose=tr),
              tol(dt, 5))


def test_qr_empty_and_batch_zero():
    with native_only():
        q, r = torch.linalg.qr(torch.zeros(0, 4, 3, device="tpu"))
        qc, rc = torch.linalg.qr(torch.zeros(3, 0, device="tpu"), mode="complete")
    assert q.shape == (0, 4, 3) and r.shape == (0, 3, 3)
    assert qc.shape == (3, 3) and rc.shape == (3, 0)
    torch.testing.assert_close(qc.cpu(), torch.eye(3))


# --- eigh ------------------------------------------------------------------------------------

def check_eigh(a, w, v, dt, scale):
    w0 = torch.linalg.eigvalsh(a)
    close(w, w0, tol(dt, scale))
    assert (w.cpu().diff(dim=-1) >= 0).all()  # ascending
    orthonormal_cols(v, dt)
    rec = (v.cpu() * w.cpu().unsqueeze(-2)) @ v.cpu().mT
    torch.testing.assert_close(rec, a, atol=tol(dt, 4 * scale), rtol=0)


@pytest.mark.parametrize("dt", DT)
@pytest.mark.parametrize("shape", [(2, 5, 5), (4, 4)])
def test_eigh_random(dt, shape):
    g = torch.Generator().manual_seed(4)
    a = torch.randn(*shape, dtype=dt, generator=g)
    sym = torch.tril(a) + torch.tril(a, -1).mT
    with native_only():
        w, v = torch.linalg.eigh(a.to("tpu"))  # reads the lower triangle only
        wu, vu = torch.linalg.eigh(a.to("tpu"), UPLO="U")
        wv = torch.linalg.eigvalsh(a.to("tpu"))
    scale = sym.abs().max().item() * shape[-1]
    check_eigh(sym, w, v, dt, scale)
    check_eigh(torch.triu(a) + torch.triu(a, 1).mT, wu, vu, dt, scale)
    close(wv, torch.linalg.eigvalsh(a), tol(dt, scale))


@pytest.mark.parametrize("dt,cond", [(torch.float32, 1e6), (torch.float64, 1e12)])
def test_eigh_ill_conditioned(dt, cond):
    g = torch.Generator().manual_seed(5)
    b = ill_conditioned((6, 6), cond, dt, g)
    spd = (b @ b.mT + b.mT @ b) / 2  # eigenvalues down to ~1/cond^2, clustered
    a = spd.to(dt)
    with native_only():
        w, v = torch.linalg.eigh(a.to("tpu"))
    check_eigh(a, w, v, dt, 2.0)


def test_eigh_edge_shapes():
    with native_only():
        w0, v0 = torch.linalg.eigh(torch.zeros(0, 3, 3, device="tpu"))
        w1, v1 = torch.linalg.eigh(torch.full((2, 1, 1), 3.0, device="tpu"))
    assert w0.shape == (0, 3) and v0.shape == (0, 3, 3)
    torch.testing.assert_close(w1.cpu(), torch.full((2, 1), 3.0))
    torch.testing.assert_close(v1.cpu(), torch.ones(2, 1, 1))


# --- SVD -------------------------------------------------------------------------------------

def check_svd(a, u, s, vh, dt, full, scale):
    m, n = a.shape[-2:]
    k = min(m, n)
    close(s, torch.linalg.svdvals(a), tol(dt, scale))
    assert (s.cpu().diff(dim=-1) <= 0).all()  # descending
    assert u.shape[-2:] == (m, m if full else k) and vh.shape[-2:] == (n if full else k, n)
    orthonormal_cols(u, dt)
    orthonormal_cols(vh.mT, dt)
    rec = (u.cpu()[..., :k] * s.cpu().unsqueeze(-2)) @ vh.cpu()[..., :k, :]
    torch.testing.assert_close(rec, a, atol=tol(dt, 4 * scale), rtol=0)


@pytest.mark.parametrize("dt", DT)
@pytest.mark.parametrize("shape", [(6, 4), (2, 3, 5)])
@pytest.mark.parametrize("full", [False, True])
def test_svd_random(dt, shape, full):
    g = torch.Generator().manual_seed(6)
    a = torch.randn(*shape, dtype=dt, generator=g)
    with native_only():
        u, s, vh = torch.linalg.svd(a.to("tpu"), full_matrices=full)
    check_svd(a, u, s, vh, dt, full, a.abs().max().item() * max(shape))
    # Sign-invariant: |U| and |Vh| agree with LAPACK's (distinct values here).
    u0, _, vh0 = torch.linalg.svd(a, full_matrices=False)
    k = min(shape[-2:])
    torch.testing.assert_close(u.cpu()[..., :k].abs(), u0.abs(), atol=tol(dt, 100), rtol=0)
    torch.testing.assert_close(vh.cpu()[..., :k, :].abs(), vh0.abs(), atol=tol(dt, 100), rtol=0)


@pytest.mark.parametrize("dt,cond", [(torch.float32, 1e6), (torch.float64, 1e12)])
def test_svd_ill_conditioned_and_rank_deficient(dt, cond):
    g = torch.Generator().manual_seed(7)
    a64 = ill_conditioned((7, 5), cond, dt, g)
    a = a64.to(dt)
    lowrank = (torch.randn(7, 2, dtype=dt, generator=g) @ torch.randn(2, 5, dtype=dt, generator=g))
    with native_only():
        u, s, vh = torch.linalg.svd(a.to("tpu"), full_matrices=False)
        ul, sl, vhl = torch.linalg.svd(lowrank.to("tpu"), full_matrices=True)
    check_svd(a, u, s, vh, dt, False, 1.0)
    if dt == torch.float32:
        # The smallest singular value (1e-6) to 1% (a float32 LAPACK bound is
        # eps / 1e-6 = 10%): one-sided Jacobi, against float64 LAPACK.
        ref = torch.linalg.svdvals(a.to(torch.float64))
        rel = ((s.cpu().to(torch.float64) - ref) / ref).abs().max().item()
        assert rel < 1e-2, rel
    check_svd(lowrank, ul, sl, vhl, dt, True, lowrank.abs().max().item() * 7)
    assert (sl.cpu()[2:] <= tol(dt, lowrank.abs().max().item() * 7)).all()


def test_svd_edge_shapes_and_values_only():
    g = torch.Generator().manual_seed(8)
    a = torch.randn(3, 4, 1, generator=g)
    with native_only():
        u0, s0, vh0 = torch.linalg.svd(torch.zeros(0, 3, 2, device="tpu"))
        u1, s1, vh1 = torch.linalg.svd(a.to("tpu"), full_matrices=False)
        sv = torch.linalg.svdvals(a.mT.to("tpu"))
    ref = torch.linalg.svd(torch.zeros(0, 3, 2))
    assert [u0.shape, s0.shape, vh0.shape] == [r.shape for r in ref]  # full_matrices
    check_svd(a, u1, s1, vh1, torch.float32, False, 4.0)
    close(sv, torch.linalg.svdvals(a.mT), 1e-5)


# --- ops PyTorch builds on them ---------------------------------------------------------------

def test_derived_ops_run_natively():
    g = torch.Generator().manual_seed(9)
    a = torch.randn(5, 4, dtype=torch.float64, generator=g)
    spd = a.mT @ a
    fns = {
        "pinv": lambda x, h: torch.linalg.pinv(x),
        "pinv_hermitian": lambda x, h: torch.linalg.pinv(h, hermitian=True),
        "matrix_rank": lambda x, h: torch.linalg.matrix_rank(x),
        "matrix_rank_hermitian": lambda x, h: torch.linalg.matrix_rank(h, hermitian=True),
        "nuc": lambda x, h: torch.linalg.matrix_norm(x, "nuc"),
        "norm2": lambda x, h: torch.linalg.matrix_norm(x, 2),
        "cond": lambda x, h: torch.linalg.cond(x),
        "svd_old": lambda x, h: torch.svd(x)[1],
        "orgqr": lambda x, h: torch.orgqr(*torch.geqrf(x)),
    }
    for name, f in fns.items():
        ref = f(a, spd)
        with native_only():
            out = f(a.to("tpu"), spd.to("tpu"))
        assert out.dtype == ref.dtype, name
        torch.testing.assert_close(out.cpu(), ref, atol=1e-10, rtol=1e-10, msg=name)


def test_backward_matches_cpu():
    g = torch.Generator().manual_seed(10)
    a = torch.randn(5, 4, dtype=torch.float64, generator=g)
    c = torch.randn(5, 4, dtype=torch.float64, generator=g)
    s = torch.randn(4, 4, dtype=torch.float64, generator=g)
    s = s + s.mT

    def svd_loss(x):  # sign-invariant in the vectors
        u, sv, vh = torch.linalg.svd(x, full_matrices=False)
        return sv.sum() + ((u ** 2) * c[:, :4].to(x.device)).sum() + (vh ** 2).sum(0)[0]

    def eigh_loss(x):
        w, v = torch.linalg.eigh(x)
        return (w * torch.arange(4.0, dtype=x.dtype, device=x.device)).sum() + (v[:, 1] ** 2 * w).sum()

    for f, x in ((svd_loss, a), (eigh_loss, s)):
        xc = x.clone().requires_grad_()
        f(xc).backward()
        xt = x.to("tpu").requires_grad_()
        with native_only():
            f(xt).backward()
        torch.testing.assert_close(xt.grad.cpu(), xc.grad, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("ashape,bshape", [((2, 5, 3), (2, 5, 2)), ((2, 3, 5), (2, 3, 2)),
                                           ((5, 3), (5,))])
def test_lstsq_gels(ashape, bshape):
    """Driver gels (the default off the CPU): over- and underdetermined,
    vector right-hand side; residuals when m > n, rank / singular values empty."""
    g = torch.Generator().manual_seed(11)
    a = torch.randn(*ashape, dtype=torch.float64, generator=g)
    b = torch.randn(*bshape, dtype=torch.float64, generator=g)
    with native_only():
        out = torch.linalg.lstsq(a.to("tpu"), b.to("tpu"))
        sol32 = torch.linalg.lstsq(a.float().to("tpu"), b.float().to("tpu"), driver="gels")[0]
    ref = torch.linalg.lstsq(a, b, driver="gels")
    for o, r in zip(out, ref):
        assert o.shape == r.shape and o.dtype == r.dtype
        torch.testing.assert_close(o.cpu(), r, atol=1e-12, rtol=0)
    torch.testing.assert_close(sol32.cpu(), ref[0].float(), atol=1e-5, rtol=1e-5)


ENTRIES = ["geqrf", "ormqr", "linalg.qr", "linalg.householder_product", "linalg.eigh",
           "linalg.eigvalsh", "linalg.svd", "linalg.svdvals", "linalg.pinv",
           "linalg.matrix_rank", "linalg.matrix_norm"]


@pytest.mark.parametrize("key,op", list(zip(ENTRIES, opinfo.entries_by_key(ENTRIES))),
                         ids=ENTRIES)
def test_entry_native_float32(key, op):
    """PyTorch's OpInfo samples (vectors compared through the samples' own
    sign-invariant output_process_fn_grad, as test_compare_cpu does)."""
    opinfo.assert_native_pass(key, op, limit=2)


# --- errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("f,x,msg", [
    (torch.linalg.eigh, torch.ones(3, 4), "linalg.eigh: A must be batches of square matrices, "
     "but they are 3 by 4 matrices"),
    (torch.linalg.qr, torch.ones(3), "linalg.qr: The input tensor A must have at least 2 dimensions"),
    (torch.linalg.svd, torch.ones(3), "linalg.svd: The input tensor A must have at least 2 dimensions"),
    (torch.linalg.svd, torch.ones(3, 3, dtype=torch.long),
     "linalg.svd: Expected a floating point or complex tensor as input. Got Long"),
    (torch.linalg.qr, torch.ones(3, 3, dtype=torch.long),
     "linalg.qr: Expected a floating point or complex tensor as input. Got Long"),
    (lambda x: torch.linalg.qr(x, mode="x"), torch.ones(3, 3),
     "qr received unrecognized mode 'x' but expected one of 'reduced'"),
    (lambda x: torch.linalg.eigh(x, UPLO="x"), torch.ones(3, 3),
     "Expected UPLO argument to be 'L' or 'U', but got x"),
    (lambda x: torch.linalg.lstsq(x, x[:2], driver="gels"), torch.ones(3, 3),
     "torch.linalg.lstsq: input.size(-2) should match other.size(-2)"),
])
def test_bad_inputs_raise_pytorchs_errors(f, x, msg):
    import re
    with pytest.raises(RuntimeError, match="^" + re.escape(msg)):
        f(x)  # the CPU's own text...
    with native_only(), pytest.raises(RuntimeError, match="^" + re.escape(msg)):
        f(x.to("tpu"))  # ...raised natively on tpu
