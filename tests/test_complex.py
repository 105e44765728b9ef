"""complex64 / complex128 on tpu, compared against PyTorch on the CPU.

Storage, copies, factories, views (view_as_real/complex, .real/.imag, conj)
run natively, and so does most complex math (tests/test_complex_math.py);
an op whose rule is not marked complex-capable runs on the CPU through the
fallback (correct numbers, with a warning), never through a real-dtype rule.
"""
import warnings

import pytest
import torch

import torchtpu

DT = [torch.complex64, torch.complex128]


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*has no tpu lowering.*")
        yield


def pair(dt, shape=(3, 4), noncontig=False):
    x = torch.randn(*shape, dtype=dt)
    t = x.to("tpu")
    if noncontig:
        x, t = x.t(), t.t()
    return x, t


def close(a, b):
    torch.testing.assert_close(a.cpu(), b)


@pytest.mark.parametrize("dt", DT)
def test_roundtrip_and_factories(dt):
    x, t = pair(dt)
    assert t.dtype == dt and t.is_complex()
    close(t, x)
    close(torch.zeros(2, 3, dtype=dt, device="tpu"), torch.zeros(2, 3, dtype=dt))
    close(torch.ones(2, dtype=dt, device="tpu"), torch.ones(2, dtype=dt))
    close(torch.full((2,), 1 + 2j, dtype=dt, device="tpu"), torch.full((2,), 1 + 2j, dtype=dt))
    e = torch.empty(3, dtype=dt, device="tpu")
    e.fill_(2.5)
    close(e, torch.full((3,), 2.5, dtype=dt))
    assert torch.randn(5, dtype=dt, device="tpu").dtype == dt
    assert "j" in repr(t)


@pytest.mark.parametrize("dt", DT)
@pytest.mark.parametrize("noncontig", [False, True])
def test_copies_between_dtypes(dt, noncontig):
    x, t = pair(dt, noncontig=noncontig)
    close(t.clone(), x.clone())
    r = torch.randn(3, 4)
    close(r.to("tpu").to(dt), r.to(dt))  # real -> complex: imag 0
    f = t.to(torch.float32)  # runs on the CPU: PyTorch's (once-only) warning
    close(f, x.real.float())
    other = torch.complex128 if dt == torch.complex64 else torch.complex64
    close(t.to(other), x.to(other))
    d = torch.empty(x.shape, dtype=dt, device="tpu")
    d.copy_(t)
    close(d, x)


@pytest.mark.parametrize("dt", DT)
@pytest.mark.parametrize("noncontig", [False, True])
def test_views(dt, noncontig):
    x, t = pair(dt, noncontig=noncontig)
    close(torch.view_as_real(t), torch.view_as_real(x))
    close(t.real, x.real)
    close(t.imag, x.imag)
    v = torch.view_as_real(t.contiguous())
    close(torch.view_as_complex(v), x.contiguous())
    assert torch.view_as_real(t).data_ptr() == t.data_ptr()  # a view


@pytest.mark.parametrize("dt", DT)
def test_write_through_real_imag(dt):
    x, t = pair(dt)
    t.real.mul_(2)
    x.real.mul_(2)
    close(t, x)
    t.imag.add_(1)
    x.imag.add_(1)
    close(t, x)
    torch.view_as_real(t)[:, 0, 1].zero_()
    torch.view_as_real(x)[:, 0, 1].zero_()
    close(t, x)


@pytest.mark.parametrize("dt", DT)
def test_conj(dt):
    x, t = pair(dt)
    c = t.conj()
    assert c.is_conj()
    close(c, x.conj())
    close(c.resolve_conj(), x.conj().resolve_conj())
    close(torch.conj_physical(t), torch.conj_physical(x))
    close(c * 2, x.conj() * 2)
    d = torch.empty_like(t)
    d.copy_(c)
    close(d, x.conj())


@pytest.mark.parametrize("dt", DT)
@pytest.mark.parametrize("noncontig", [False, True])
def test_math(dt, noncontig):
    x, t = pair(dt, shape=(4, 4), noncontig=noncontig)
    y, u = pair(dt, shape=(4, 4))
    for f in [torch.abs, torch.angle, torch.exp, torch.log, torch.sqrt, torch.sin,
              torch.cos, torch.tanh, torch.neg, torch.reciprocal, torch.sum, torch.mean,
              torch.prod, torch.isfinite, lambda a: a.real + 0]:
        close(f(t), f(x))
    for f in [torch.add, torch.sub, torch.mul, torch.div, torch.eq, torch.ne, torch.mm,
              torch.matmul, lambda a, b: a * b.real, lambda a, b: a * 1j + b,
              lambda a, b: torch.pow(a, 2), lambda a, b: torch.einsum("ij,jk->ik", a, b)]:
        close(f(t, u), f(x, y))
    close(torch.complex(t.real, t.imag), torch.complex(x.real, x.imag))
    close(torch.polar(t.real.abs(), t.imag), torch.polar(x.real.abs(), x.imag))
    assert torch.allclose(t.cpu(), x)


def rope(xq, freqs):
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    return torch.view_as_real(xq_ * freqs_cis).flatten(3)


def rope_check(fn):
    torch.manual_seed(0)
    xq = torch.randn(2, 5, 3, 8, requires_grad=True)
    freqs = torch.randn(5, 1, 4, requires_grad=True)
    out = rope(xq, freqs)
    out.backward(torch.ones_like(out))
    xt = xq.detach().to("tpu").requires_grad_()
    ft = freqs.detach().to("tpu").requires_grad_()
    ot = fn(xt, ft)
    ot.backward(torch.ones_like(ot))
    close(ot, out.detach())
    close(xt.grad, xq.grad)
    close(ft.grad, freqs.grad)


def test_rope_strict():
    rope_check(rope)


def test_rope_fused():
    with torchtpu.mode("fused"):
        rope_check(rope)


def test_rope_compile():
    torch._dynamo.reset()
    rope_check(torch.compile(rope, backend="tpu") if "tpu" in torch._dynamo.list_backends()
               else torch.compile(rope))


def test_complex_not_routed_to_real_rules():
    x, t = pair(torch.complex64)
    with pytest.raises(RuntimeError):
        torch.maximum(t, t)  # no order on complex, on the CPU either
