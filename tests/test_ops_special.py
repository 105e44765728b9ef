"""Special functions and misc ops of core/src/lower/special.c on "tpu".

Their OpInfo entries must run natively (no CPU fallback) and match the CPU;
the edge cases below check values the OpInfo samples don't reach (poles,
tails, subnormals) against PyTorch's CPU kernels.
"""
import pytest
import torch

import torchtpu  # noqa: F401
from torchtpu.testing import opinfo

ENTRIES = [
    "lgamma", "mvlgamma.mvlgamma_p_3", "digamma", "polygamma.polygamma_n_0",
    "polygamma.polygamma_n_1", "polygamma.polygamma_n_2", "polygamma.polygamma_n_4",
    "special.polygamma.special_polygamma_n_0", "i0", "special.i0e", "special.i1",
    "special.i1e", "erfinv", "erfc", "special.ndtri", "special.log_ndtr", "nextafter",
    "frexp", "angle", "equal", "aminmax", "isin", "bucketize", "searchsorted",
    "igamma", "igammac",
]
SAMPLES_PER_ENTRY = 4
FEWER_SAMPLES = {"igamma": 2, "igammac": 2}  # ~1 s to compile each shape


@pytest.mark.parametrize("key,op", list(zip(ENTRIES, opinfo.entries_by_key(ENTRIES))),
                         ids=ENTRIES)
def test_entry_native_float32(key, op):
    opinfo.assert_native_pass(key, op, limit=FEWER_SAMPLES.get(key, SAMPLES_PER_ENTRY))


def _same(fn, *args, **kw):
    exp = fn(*args, **kw)
    dev = lambda a: a.to("tpu") if isinstance(a, torch.Tensor) else a  # noqa: E731
    got = fn(*[dev(a) for a in args], **{k: dev(v) for k, v in kw.items()})
    exp = exp if isinstance(exp, tuple) else (exp,)
    got = got if isinstance(got, tuple) else (got,)
    for e, g in zip(exp, got):
        assert g.device.type == "tpu"
        torch.testing.assert_close(g.cpu(), e, rtol=2e-5, atol=1e-6, equal_nan=True)


X = torch.tensor([8.0, 0.5, -3.0, -2.5, 0.0, -0.0, 1e-3, 20.0, -8.4784, float("nan"),
                  float("inf")])


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_polygamma_poles_and_negative_x(n):
    _same(torch.polygamma, n, X)


def test_tails():
    _same(torch.erfc, torch.tensor([-3.0, 0.5, 5.0, 9.0, 10.0]))
    _same(torch.special.log_ndtr, torch.tensor([-40.0, -12.0, -9.0, -2.0, 0.0, 3.0]))
    _same(torch.special.i0e, torch.tensor([-30.0, -14.9, 15.0, 40.0, 0.0]))
    _same(torch.special.ndtri, torch.tensor([1e-30, 1e-6, 1e-3, 0.049, 0.3, 0.98, 0.0, 1.0]))


def test_igamma_edges():
    a = torch.tensor([0.0, 0.0, 1e-3, 0.5, float("inf"), 3.0, -1.0, 2.0, 30.0, 0.7])
    x = torch.tensor([0.0, 2.0, 5.0, 0.0, 1.0, float("inf"), 1.0, -1.0, 31.0, 0.3])
    _same(torch.igamma, a, x)
    _same(torch.igammac, a, x)


def test_frexp_subnormal_and_specials():
    x = torch.tensor([1e-40, -3e-42, 0.0, -0.0, 6.5, -0.75, float("inf"), float("nan")])
    _same(torch.frexp, x)


def test_equal_shapes_and_nan():
    a = torch.tensor([1.0, 2.0])
    assert torch.equal(a.to("tpu"), a.clone().to("tpu"))
    assert not torch.equal(a.to("tpu"), torch.tensor([1.0, 2.0, 3.0]).to("tpu"))
    n = torch.tensor([float("nan")])
    assert not torch.equal(n.to("tpu"), n.to("tpu"))


def test_searchsorted_sorter_and_nan():
    seq = torch.tensor([3.0, 1.0, 2.0, 5.0])
    sorter = torch.argsort(seq)
    v = torch.tensor([[0.0, 2.0, float("nan")], [5.0, 4.0, 1.0]])
    for right in (False, True):
        _same(torch.searchsorted, seq, v, sorter=sorter, right=right)


# --- polynomials, zeta, entr, erfcx, Bessel ---------------------------------------------

POLYNOMIALS = [
    "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
    "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
    "laguerre_polynomial_l", "legendre_polynomial_p",
]
MORE_ENTRIES = ["special." + p for p in POLYNOMIALS] + [
    "special.zeta", "special.entr", "special.erfcx", "special.modified_bessel_i0",
    "special.modified_bessel_i1", "special.spherical_bessel_j0", "special.modified_bessel_k0",
    "special.modified_bessel_k1", "special.scaled_modified_bessel_k0",
    "special.scaled_modified_bessel_k1", "special.bessel_j0", "special.bessel_j1",
    "special.bessel_y0", "special.bessel_y1", "special.airy_ai",
]
FLOAT64_ENTRIES = ["special.bessel_y0", "special.bessel_y1", "special.airy_ai"]


@pytest.mark.parametrize("key,op", list(zip(MORE_ENTRIES, opinfo.entries_by_key(MORE_ENTRIES))),
                         ids=MORE_ENTRIES)
def test_more_entries_native_float32(key, op):
    opinfo.assert_native_pass(key, op, limit=SAMPLES_PER_ENTRY)


@pytest.mark.parametrize("key,op", list(zip(FLOAT64_ENTRIES, opinfo.entries_by_key(
    FLOAT64_ENTRIES, torch.float64))), ids=FLOAT64_ENTRIES)
def test_entries_native_float64(key, op):
    opinfo.assert_native_pass(key, op, dtype=torch.float64, limit=SAMPLES_PER_ENTRY)


# x at the edges (|x| = 1, 0) and inside/outside [-1, 1]; n negative, fractional,
# and in the closed-form range (> 8). (The CPU's NaN x gives garbage: left out.)
PX = torch.tensor([-1.5, -1.0, -0.999, -0.5, -0.1, 0.0, 0.3, 0.5, 0.9, 1.0, 1.2, 2.0])
PN = torch.tensor([-3.0, -0.5, 0.0, 0.7, 1.0, 2.0, 3.9, 7.0, 9.0, 12.0, float("nan")])


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomial_edges(name):
    f = getattr(torch.special, name)
    x, n = torch.meshgrid(PX, PN, indexing="ij")
    if name.startswith("shifted"):
        x = (x + 1) / 2
    _same(f, x, n)
    _same(f, PX, 5)
    _same(f, 0.3, PN)
    # Larger n against float64: cos(n acos x) amplifies acos's last bit n times,
    # on the CPU too, so the tolerance grows with n.
    x, n = torch.meshgrid(PX, torch.tensor([25.0, 40.0, 100.0]), indexing="ij")
    if name.startswith("shifted"):
        x = (x + 1) / 2
    got = f(x.to("tpu"), n.to("tpu")).cpu().double()
    exp = f(x.double(), n.double())
    fits = exp.abs() < 1e30  # float32 overflows beyond (inf - inf: NaN, as on the CPU)
    torch.testing.assert_close(got[fits], exp[fits], rtol=2e-4, atol=2e-4)


def test_polynomial_large_n_loop():
    n = torch.arange(33.0) * 30  # up to 960 steps of the recurrence
    _same(torch.special.legendre_polynomial_p, torch.linspace(-1, 1, 33), n)
    _same(torch.special.laguerre_polynomial_l, torch.linspace(0, 5, 33), n)


def test_zeta_domain_like_cpu():
    """PyTorch's zeta: x == 1 gives inf, x < 1 NaN (we gave inf at q's poles
    for x < 1: the int64 OpInfo sweep's one wrong result), a NaN x at a
    pole inf, x = inf inf/1/NaN as q is below/at/above 1."""
    v = torch.tensor([-3.0, -2.5, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 7.5,
                      float("nan"), float("inf"), -float("inf")])
    x, q = torch.meshgrid(v, v, indexing="ij")
    for dt in (torch.float32, torch.float64):
        _same(torch.special.zeta, x.to(dt), q.to(dt))
    xi, qi = torch.meshgrid(torch.arange(-3, 6), torch.arange(-3, 6), indexing="ij")
    _same(torch.special.zeta, xi, qi)


def test_zeta_entr_erfcx_j0_edges():
    x, q = torch.meshgrid(torch.tensor([0.5, 1.0, 1.5, 2.0, 3.0, 4.5, 10.0]),
                          torch.tensor([-2.0, -1.5, 0.0, 0.5, 1.0, 3.0, 100.0]), indexing="ij")
    _same(torch.special.zeta, x, q)
    _same(torch.special.entr, torch.tensor([-1.0, 0.0, -0.0, 1e-30, 0.5, 10.0, float("inf"),
                                            float("nan")]))
    _same(torch.special.erfcx, torch.tensor([-30.0, -9.3, -5.0, -0.5, 0.0, 1e-3, 2.0, 4.99, 5.0,
                                             7.0, 30.0, 1e10, 1e20, float("inf"),
                                             -float("inf"), float("nan")]))
    _same(torch.special.erfcx, torch.linspace(-9.3, 50, 2001))
    _same(torch.special.spherical_bessel_j0, torch.tensor([0.0, 1e-8, 0.3, -0.49, 0.5, -3.0,
                                                           100.0, float("inf"), float("nan")]))


@pytest.mark.parametrize("name", ["modified_bessel_k0", "modified_bessel_k1",
                                  "scaled_modified_bessel_k0", "scaled_modified_bessel_k1"])
def test_bessel_k_ranges(name):
    # Each method (series, integral, asymptotic) and their seams; 0 and below.
    x = torch.tensor([-1.0, 0.0, 1e-35, 1e-10, 1e-3, 0.5, 1.0, 1.001, 5.0, 11.99, 12.0, 12.01,
                      50.0, 100.0, 700.0, 1e4, float("inf"), float("nan")])
    _same(getattr(torch.special, name), x)
    _same(getattr(torch.special, name), torch.logspace(-6, 2.5, 501))


@pytest.mark.parametrize("name", ["bessel_j0", "bessel_j1"])
def test_bessel_j_against_float64(name):
    # Absolute accuracy (both sides of 25, near the zeros too); the CPU's
    # float32 kernel is itself off by up to 2e-5 at 1e6.
    f = getattr(torch.special, name)
    x = torch.cat([torch.tensor([0.0, 1e-30, 2.404825, 3.8317, 24.99, 25.0, 25.01, 1e4, 1e6]),
                   torch.linspace(-60, 60, 2001)])
    got = f(x.to("tpu")).cpu().double()
    torch.testing.assert_close(got, f(x.double()), rtol=0, atol=2e-6)
    _same(f, torch.tensor([float("inf"), -float("inf"), float("nan"), -3.0, 30.0]))


# --- Bessel Y0 / Y1 and Airy Ai against SciPy (PyTorch's float64 kernels are
# off by up to 9e-7 (y1 near 5) and 3e-6 (airy_ai near -2.1): not a reference
# to 1e-12) and the CPU at the edges.

def _against_scipy(f, ref, x, tol32, tol64):
    x64 = x.double()
    exp = torch.from_numpy(ref(x64.numpy()))
    got = f(x64.to("tpu")).cpu()
    torch.testing.assert_close(got, exp, rtol=tol64, atol=tol64, equal_nan=True)
    got = f(x.float().to("tpu")).cpu().double()
    exp = torch.from_numpy(ref(x.float().double().numpy()))
    torch.testing.assert_close(got, exp, rtol=tol32[1], atol=tol32[0], equal_nan=True)


@pytest.mark.parametrize("name", ["bessel_y0", "bessel_y1"])
def test_bessel_y_against_scipy(name):
    sp = pytest.importorskip("scipy.special")
    # Both methods and their seams (12 in float32, 18 in float64); small x,
    # where Y1 ~ -2 / (pi x).
    x = torch.cat([torch.tensor([1e-6, 1e-3, 0.8936, 3.9577, 5.0008, 11.999, 12.0, 12.001,
                                 17.999, 18.0, 18.001, 24.999, 25.0, 80.0,
                                 1e3]), torch.linspace(0.01, 40, 1001)])
    _against_scipy(getattr(torch.special, name), getattr(sp, name[-2:]), x,
                   (3e-6, 2e-6), 1e-12)
    _same(getattr(torch.special, name),
          torch.tensor([-1.0, -1e-30, -0.0, 0.0, 1e-30, 2.0, 30.0, float("inf"),
                        -float("inf"), float("nan")]))
    _same(getattr(torch.special, name), torch.arange(-2, 6))  # ints: default float dtype


def test_airy_ai_against_scipy():
    sp = pytest.importorskip("scipy.special")
    # Each range (series, K_1/3 integral, the two expansions) and the seams at
    # -7, 1, 9.5; the decay to 1e-300 (relative) and the oscillating side.
    x = torch.cat([torch.tensor([-200.0, -7.0001, -7.0, -2.1, 1.0, 1.0001, 9.4999, 9.5, 30.0,
                                 100.0]), torch.linspace(-40, 12, 1001)])
    _against_scipy(torch.special.airy_ai, lambda v: sp.airy(v)[0], x, (1e-7, 2e-6), 1e-11)
    _same(torch.special.airy_ai, torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0,
                                               -0.0, 103.8, 103.9, 1e4, -1.0, 2.0, 50.0]))
    _same(torch.special.airy_ai, torch.tensor([103.8, 103.9, 1e4], dtype=torch.float64))
    _same(torch.special.airy_ai, torch.arange(-3, 4))
