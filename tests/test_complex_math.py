"""Complex math on tpu, natively: every op here is compared against PyTorch on
the CPU (dtype and values: 1e-5 for complex64, 1e-12 for complex128) and runs
with the CPU fallback set to raise, so none of it leaves the device.

Covers arithmetic with complex Scalars and type promotion, unary math,
abs/angle/sgn, complex/polar, comparisons, reductions, matrix products, data
movement, lazy conj views, autograd, the torch.fft family (through
stablehlo.fft) and RoPE as TorchTitan and Hugging Face write it. Ops that
PyTorch refuses for complex (order comparisons, max/min, clamp, sort) still
raise PyTorch's error.
"""
import math
import warnings

import pytest
import torch

import torchtpu
from torchtpu.testing import native_only

CDT = [torch.complex64, torch.complex128]
TOL = {torch.complex64: 1e-5, torch.float32: 1e-5, torch.complex128: 1e-12,
       torch.float64: 1e-12, torch.bfloat16: 1e-2}


def close(t, ref):
    assert t.device.type == "tpu", t.device
    assert t.dtype == ref.dtype, (t.dtype, ref.dtype)
    tol = TOL.get(ref.dtype, 0)
    torch.testing.assert_close(t.cpu(), ref, rtol=tol, atol=tol, equal_nan=True)


def tpu(*xs):
    return [x.to("tpu") if isinstance(x, torch.Tensor) else x for x in xs]


def check(f, *xs):
    ref = f(*xs)
    with native_only():
        out = f(*tpu(*xs))
    if isinstance(ref, (tuple, list)):
        for o, r in zip(out, ref):
            close(o, r)
    else:
        close(out, ref)


def rand(dt, *shape, noncontig=False):
    torch.manual_seed(len(shape) * 7 + sum(shape))
    if noncontig:  # a transposed view of the same values
        return torch.randn(*reversed(shape), dtype=dt).transpose(0, -1) if len(shape) > 1 \
            else torch.randn(2 * shape[0], dtype=dt)[::2]
    return torch.randn(shape, dtype=dt)


# --- elementwise -------------------------------------------------------------------

UNARY = {
    "neg": torch.neg, "reciprocal": torch.reciprocal, "exp": torch.exp, "expm1": torch.expm1,
    "log": torch.log, "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh,
    "sigmoid": torch.sigmoid, "abs": torch.abs, "angle": torch.angle, "sgn": torch.sgn,
    "conj_physical": torch.conj_physical, "isnan": torch.isnan, "isfinite": torch.isfinite,
    "isinf": torch.isinf, "real": lambda z: z.real + 0, "imag": lambda z: z.imag * 1,
    "square": lambda z: z * z, "pow2": lambda z: torch.pow(z, 2), "pow_half": lambda z: z ** 0.5,
    "pow_c": lambda z: z ** (0.5 + 1j), "exp_inplace": lambda z: z.clone().exp_(),
    "log2": torch.log2, "log10": torch.log10, "exp2": torch.exp2, "logical_not": torch.logical_not,
}


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("layout", ["contig", "noncontig", "0d"])
def test_unary(dt, name, layout):
    x = rand(dt) if layout == "0d" else rand(dt, 3, 5, noncontig=layout == "noncontig")
    check(UNARY[name], x)


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "eq": torch.eq, "ne": torch.ne, "add_alpha": lambda a, b: torch.add(a, b, alpha=2 - 1j),
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=0.5), "rsub": lambda a, b: torch.rsub(a, b),
    "where": lambda a, b: torch.where(a.real > b.real, a, b),
    "mul_": lambda a, b: a.clone().mul_(b), "div_": lambda a, b: a.clone().div_(b),
    "logical_and": torch.logical_and, "logical_xor": torch.logical_xor,
    "logical_or": lambda a, b: torch.logical_or(a * (a.real > 0), b),
    "addcmul": lambda a, b: torch.addcmul(a, a, b, value=2 - 1j),
    "addcdiv": lambda a, b: torch.addcdiv(b, a, b, value=0.5j),
}


@pytest.mark.parametrize("dt", CDT)
def test_equal(dt):
    a, b = rand(dt, 3, 4), rand(dt, 4)
    with native_only():
        t, u = tpu(a, b)
        assert torch.equal(t, t.t().t().clone()) and not torch.equal(t, t + 1j)
        assert torch.equal(t, u) == torch.equal(a, b)


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcast(dt, name):
    a, b = rand(dt, 3, 4, noncontig=True), rand(dt, 4)
    check(BINARY[name], a, b)
    if not name.endswith("_"):
        check(BINARY[name], b, a)
    check(BINARY[name], a, rand(dt))  # a 0-d tensor


SCALAR_OPS = [
    lambda z: z * (1 + 2j), lambda z: (1 + 2j) * z, lambda z: z + 1j, lambda z: 1j - z,
    lambda z: z / (3 - 4j), lambda z: (3 - 4j) / z, lambda z: z * 2.5, lambda z: z - 3,
    lambda z: z == (1 + 1j), lambda z: z ** 2, lambda z: 2 ** z, lambda z: (1 + 1j) ** z,
    lambda z: z.clone().mul_(1 - 1j), lambda z: z.clone().add_(2j, alpha=0.5),
    lambda z: z.masked_fill(z.real > 0, 2 - 3j), lambda z: torch.where(z.real > 0, z, 1j),
]


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("i", range(len(SCALAR_OPS)))
def test_complex_scalars(dt, i):
    check(SCALAR_OPS[i], rand(dt, 2, 3))


@pytest.mark.parametrize("dt", CDT)
def test_scalar_values_never_recompile_wrongly(dt):
    """One program per signature: a different complex value gives its own answer."""
    x = rand(dt, 4)
    with native_only():
        t = x.to("tpu")
        for s in [1 + 2j, -3.5 + 0.25j, 2j, 7.0]:
            close(t * s, x * s)


@pytest.mark.parametrize("dt", CDT)
def test_fill_and_full(dt):
    with native_only():
        close(torch.full((2, 3), 1 + 2j, dtype=dt, device="tpu"), torch.full((2, 3), 1 + 2j, dtype=dt))
        e = torch.empty(4, dtype=dt, device="tpu").fill_(-2.5 + 0.5j)
        close(e, torch.full((4,), -2.5 + 0.5j, dtype=dt))
        close(torch.zeros(3, dtype=dt, device="tpu").fill_(3), torch.full((3,), 3, dtype=dt))


PROMOTIONS = [  # (a dtype, b dtype or Python scalar)
    (torch.float32, torch.complex64), (torch.float64, torch.complex64),
    (torch.int64, torch.complex64), (torch.int32, torch.complex128), (torch.bool, torch.complex64),
    (torch.float32, 1j), (torch.float64, 2 + 1j), (torch.int64, 1 - 1j), (torch.complex64, 2.0),
    (torch.complex128, 3), (torch.complex64, torch.float64), (torch.bfloat16, torch.complex64),
]


@pytest.mark.parametrize("a,b", PROMOTIONS, ids=[f"{a}-{b}" for a, b in PROMOTIONS])
def test_promotion(a, b):
    torch.manual_seed(0)
    x = (torch.randn(3, 4) * 3).to(a)
    if isinstance(b, torch.dtype):
        y = (torch.randn(4, dtype=torch.complex128 if b.is_complex else torch.float64) * 2).to(b)
    else:
        y = b
    for f in [torch.mul, torch.add] + ([torch.sub] if a != torch.bool else []):
        check(f, x, y)
        check(f, y, x) if isinstance(b, torch.dtype) else None


def test_nonfinite_classification():
    v = [complex(math.nan, 0), complex(0, math.nan), complex(math.inf, 1), complex(1, -math.inf),
         1 + 1j, 0j]
    for dt in CDT:
        x = torch.tensor(v, dtype=dt)
        for f in [torch.isnan, torch.isfinite, torch.isinf]:
            check(f, x)
        check(torch.sgn, torch.tensor([0j, 3 + 4j, -2j], dtype=dt))


@pytest.mark.parametrize("dt", CDT)
def test_complex_and_polar(dt):
    real = torch.float32 if dt == torch.complex64 else torch.float64
    a, b = rand(real, 3, 4), rand(real, 4)
    check(torch.complex, a, b)
    check(lambda r, t: torch.polar(r.abs(), t), a, b)
    check(lambda r, t: torch.view_as_real(torch.complex(r, t * 2)), a, rand(real, 3, 4))


# --- reductions, products, data movement ------------------------------------------------

REDUCE = {
    "sum": torch.sum, "sum_dim": lambda z: z.sum(1, keepdim=True), "mean": torch.mean,
    "mean_dim": lambda z: z.mean((0, 2)), "prod": torch.prod, "prod_dim": lambda z: z.prod(2),
    "sum_dtype": lambda z: z.sum(0, dtype=torch.complex128), "cumsum": lambda z: z.cumsum(1),
    "cumprod": lambda z: z.cumprod(2),
}


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reductions(dt, name):
    check(REDUCE[name], rand(dt, 2, 3, 4))
    check(REDUCE[name], rand(dt, 4, 3, 2, noncontig=True))


LINALG = {
    "mm": lambda a, b: a @ b, "matmul_batched": lambda a, b: torch.matmul(a.expand(2, 3, 4), b),
    "bmm": lambda a, b: torch.bmm(a.expand(2, 3, 4), b.expand(2, 4, 5)),
    "addmm": lambda a, b: torch.addmm(torch.ones(3, 5, dtype=a.dtype, device=a.device), a, b,
                                      beta=0.5 - 1j, alpha=2j),
    "mv": lambda a, b: a @ b[:, 0], "dot": lambda a, b: torch.dot(a[0], b[:, 1]),
    "vdot": lambda a, b: torch.vdot(a[0], b[:, 1]),
    "vecdot": lambda a, b: torch.linalg.vecdot(a, b.t()[:3]),
    "conj_mm": lambda a, b: a.conj() @ b, "mH": lambda a, b: a.mH @ a,
    "einsum": lambda a, b: torch.einsum("ij,jk->ik", a, b),
}


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("name", sorted(LINALG))
def test_products(dt, name):
    check(LINALG[name], rand(dt, 3, 4), rand(dt, 4, 5, noncontig=True))


MOVE = {
    "clone": lambda z: z.clone(), "contiguous": lambda z: z.t().contiguous(),
    "expand": lambda z: z[:1].expand(4, 3).contiguous(), "permute": lambda z: z.permute(1, 0) + 0,
    "cat": lambda z: torch.cat([z, z * 2], 1), "stack": lambda z: torch.stack([z, z.conj()]),
    "index_select": lambda z: z.index_select(0, torch.tensor([2, 0], device=z.device)),
    "gather": lambda z: z.gather(1, torch.tensor([[0, 2], [1, 1], [2, 0], [0, 0]], device=z.device)),
    "index": lambda z: z[torch.tensor([1, 3], device=z.device)],
    "index_put": lambda z: z.index_put((torch.tensor([0, 2], device=z.device),),
                                       torch.tensor(1 + 1j, dtype=z.dtype, device=z.device),
                                       accumulate=True),
    "setitem": lambda z: z.clone().__setitem__((slice(None), 1), 2 - 1j) or z,
    "scatter": lambda z: torch.zeros_like(z).scatter_(0, torch.tensor([[1, 0, 2]], device=z.device), z),
    "flip": lambda z: z.flip(0), "roll": lambda z: z.roll(1, 1), "repeat": lambda z: z.repeat(2, 1),
    "tril": lambda z: z.tril(), "pad": lambda z: torch.nn.functional.pad(z, (1, 2)),
    "to_c128": lambda z: z.to(torch.complex128), "to_c64": lambda z: z.to(torch.complex64),
    "view_as_real": lambda z: torch.view_as_real(z) * 2,
    "resolve_conj": lambda z: z.conj().resolve_conj(), "resolve_neg": lambda z: z.conj().imag + 0,
    "conj_mul": lambda z: z.conj() * z,
}


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("name", sorted(MOVE))
def test_data_movement(dt, name):
    check(MOVE[name], rand(dt, 4, 3))


def test_in_place_through_conj_view_is_right():
    """A write into a lazy conj view stores the conjugate (PyTorch's semantics)."""
    x = rand(torch.complex64, 3)
    t = x.to("tpu")
    x.conj().mul_(2j)
    t.conj().mul_(2j)
    close(t, x)


# --- refusals -------------------------------------------------------------------------------

REFUSED = [torch.maximum, torch.minimum, torch.lt, torch.ge, torch.clamp_min,
           lambda a, b: torch.max(a), lambda a, b: torch.sort(a), lambda a, b: a.abs_(),
           lambda a, b: torch.floor_divide(a, b), lambda a, b: torch.sign(a)]


@pytest.mark.parametrize("i", range(len(REFUSED)))
def test_refused_like_the_cpu(i):
    a, b = rand(torch.complex64, 3), rand(torch.complex64, 3)
    with pytest.raises(RuntimeError) as cpu_err:
        REFUSED[i](a, b)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*has no tpu lowering.*")
        with pytest.raises(RuntimeError) as tpu_err:
            REFUSED[i](*tpu(a, b))
    first = str(cpu_err.value).splitlines()[0]
    assert first.split(" (")[0][:40] in str(tpu_err.value), (first, str(tpu_err.value))


# --- autograd -----------------------------------------------------------------------------

GRAD = {
    "mul": lambda a, b: a * b, "div": lambda a, b: a / b, "exp": lambda a, b: a.exp() * b,
    "log": lambda a, b: a.log(), "sqrt": lambda a, b: a.sqrt(), "tanh": lambda a, b: a.tanh(),
    "sigmoid": lambda a, b: torch.sigmoid(a), "sin": lambda a, b: a.sin() + b.cos(),
    "abs": lambda a, b: a.abs(), "angle": lambda a, b: a.angle(), "pow": lambda a, b: a ** 2 + b ** 3,
    "reciprocal": lambda a, b: a.reciprocal(), "mm": lambda a, b: a @ b.t(),
    "sum": lambda a, b: (a * b).sum(1), "mean": lambda a, b: a.mean(0) * b.mean(),
    "real_imag": lambda a, b: a.real * b.imag, "conj": lambda a, b: a.conj() * b,
    "sgn": lambda a, b: a.sgn() * b, "view_as_real": lambda a, b: torch.view_as_real(a * b),
}


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("name", sorted(GRAD))
def test_backward(dt, name):
    a, b = rand(dt, 3, 4), rand(dt, 3, 4) + 0.5
    f = GRAD[name]

    def grads(x, y):
        x, y = x.detach().requires_grad_(), y.detach().requires_grad_()
        out = f(x, y)
        w = torch.linspace(-1, 2, out.numel(), dtype=out.dtype).reshape(out.shape).to(out.device)
        loss = (out * w).real.sum() if out.is_complex() else (out * w).sum()
        loss.backward()
        return out.detach(), x.grad, y.grad if y.grad is not None else torch.zeros_like(y)

    ref = grads(a, b)
    with native_only():
        got = grads(*tpu(a, b))
    for g, r in zip(got, ref):
        close(g, r)


def test_complex_polar_backward():
    r, t = rand(torch.float64, 3, 4).abs() + 0.1, rand(torch.float64, 3, 4)

    def grads(r, t):
        r, t = r.detach().requires_grad_(), t.detach().requires_grad_()
        z = torch.polar(r, t) * torch.complex(t, r)
        (z.real * 2 + z.imag).sum().backward()
        return r.grad, t.grad

    ref = grads(r, t)
    with native_only():
        got = grads(*tpu(r, t))
    for g, w in zip(got, ref):
        close(g, w)


# --- fft --------------------------------------------------------------------------------------

F = torch.fft
NORMS = [None, "ortho", "forward"]
FFT_C = {  # complex input
    "fft": lambda z, n: F.fft(z, norm=n), "fft_dim0_n": lambda z, n: F.fft(z, 5, 0, norm=n),
    "fft_pad": lambda z, n: F.fft(z, 9, norm=n), "ifft": lambda z, n: F.ifft(z, norm=n),
    "fft2": lambda z, n: F.fft2(z, norm=n), "ifft2": lambda z, n: F.ifft2(z, dim=(0, 2), norm=n),
    "fftn": lambda z, n: F.fftn(z, norm=n), "ifftn_s": lambda z, n: F.ifftn(z, s=(2, 4), norm=n),
    "irfft": lambda z, n: F.irfft(z, norm=n), "irfft_n": lambda z, n: F.irfft(z, 7, 1, norm=n),
    "irfft2": lambda z, n: F.irfft2(z, norm=n), "irfftn_s": lambda z, n: F.irfftn(z, (4, 9), (0, 1), norm=n),
    "hfft": lambda z, n: F.hfft(z, norm=n), "fftn_noncontig": lambda z, n: F.fftn(z.transpose(0, 2), norm=n),
}
FFT_R = {  # real input
    "rfft": lambda x, n: F.rfft(x, norm=n), "rfft_dim": lambda x, n: F.rfft(x, 4, 0, norm=n),
    "rfft2": lambda x, n: F.rfft2(x, norm=n), "rfftn": lambda x, n: F.rfftn(x, dim=(2, 0), norm=n),
    "ihfft": lambda x, n: F.ihfft(x, norm=n), "fft_of_real": lambda x, n: F.fft(x, norm=n),
    "fftn_of_real": lambda x, n: F.fftn(x, norm=n),
}


@pytest.mark.parametrize("dt", CDT)
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("name", sorted(FFT_C))
def test_fft_complex_input(dt, norm, name):
    check(lambda z: FFT_C[name](z, norm), rand(dt, 3, 8, 6))


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("name", sorted(FFT_R))
def test_fft_real_input(dt, norm, name):
    check(lambda x: FFT_R[name](x, norm), rand(dt, 5, 8, 3))


@pytest.mark.parametrize("dt", CDT)
def test_fft_many_dims_and_odd_sizes(dt):
    z = rand(dt, 2, 3, 5, 7, 2)
    check(F.fftn, z)  # five dims: stablehlo.fft does three at a time
    check(lambda z: F.ifftn(z, norm="ortho"), z)
    check(lambda z: F.irfftn(z, s=(3, 5, 7, 4)), z)
    check(lambda z: F.fft(z[0, 0, 0, 0, :1]), z)  # a single point


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
def test_stft_and_istft(dt):
    x = rand(dt, 2, 200)

    def stft(x):
        w = torch.hann_window(32, dtype=dt, device=x.device)
        return torch.stft(x, 32, hop_length=8, window=w, return_complex=True)

    def istft(s):
        w = torch.hann_window(32, dtype=dt, device=s.device)
        return torch.istft(s, 32, hop_length=8, window=w, length=200)

    check(stft, x)
    # istft's overlap-add is unfold_backward, a real op with no lowering yet:
    # the values still match, through the fallback.
    s = stft(x)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*has no tpu lowering.*")
        close(istft(s.to("tpu")), istft(s))


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
def test_fft_backward(dt):
    x = rand(dt, 4, 8)

    def grads(x):
        x = x.detach().requires_grad_()
        y = F.irfft(F.fft(F.rfft(x, norm="ortho"), dim=0) * 2j, n=8)
        (y * torch.arange(8, dtype=dt, device=x.device)).sum().backward()
        return y.detach(), x.grad

    ref = grads(x)
    with native_only():
        got = grads(x.to("tpu"))
    for g, r in zip(got, ref):
        close(g, r)


# --- RoPE -------------------------------------------------------------------------------------

def titan_freqs(dim, end, theta=10000.0, device=None):
    """TorchTitan's precompute_freqs_cis: unit complex numbers e^(i t f)."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, device=device)[: dim // 2].float() / dim))
    t = torch.arange(end, device=device).float()
    angles = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(angles), angles)


def titan_rope(xq, xk, freqs_cis):
    """TorchTitan's apply_rotary_emb on [batch, seq, heads, head_dim]."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    f = freqs_cis[: xq.shape[1]].view(1, xq.shape[1], 1, xq_.shape[-1])
    return (torch.view_as_real(xq_ * f).flatten(3).type_as(xq),
            torch.view_as_real(xk_ * f).flatten(3).type_as(xk))


def hf_rope(q, k, freqs_cis):
    """Hugging Face's complex form (Llama-4 style) on [batch, heads, seq, head_dim]:
    pairs as complex numbers times freqs_cis broadcast over heads."""
    q_ = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    k_ = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
    f = freqs_cis[None, None, : q.shape[2], :]
    return (torch.view_as_real(q_ * f).flatten(-2).type_as(q),
            torch.view_as_real(k_ * f).flatten(-2).type_as(k))


@pytest.mark.parametrize("style", ["titan", "hf"])
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_rope_forward_backward_native(style, dt, mode):
    torch.manual_seed(0)
    rope = titan_rope if style == "titan" else hf_rope
    shape = (2, 6, 3, 8) if style == "titan" else (2, 3, 6, 8)
    q, k = torch.randn(*shape).to(dt), torch.randn(*shape).to(dt)
    w = torch.randn(*shape)

    def run(q, k, device):
        q, k = q.detach().requires_grad_(), k.detach().requires_grad_()
        fc = titan_freqs(8, 16, device=device)
        oq, ok = rope(q, k, fc)
        ((oq.float() * w.to(device)).sum() + (ok.float() ** 2).sum()).backward()
        return oq.detach(), ok.detach(), q.grad, k.grad

    ref = run(q, k, "cpu")
    with native_only(), torchtpu.mode(mode):
        got = run(q.to("tpu"), k.to("tpu"), "tpu")
    for g, r in zip(got, ref):
        close(g, r)


def test_rope_compiled_native():
    torch._dynamo.reset()
    q, k = torch.randn(2, 6, 3, 8), torch.randn(2, 6, 3, 8)
    fc = titan_freqs(8, 16)
    ref = titan_rope(q, k, fc)
    with native_only():
        got = torch.compile(titan_rope, backend="tpu")(*tpu(q, k, fc))
    for g, r in zip(got, ref):
        close(g, r)
