"""First lowering rules against PyTorch's CPU results: elementwise math with
type promotion and broadcasting, comparisons, where, matmuls, reductions,
softmax, cat, embedding, dtype conversion."""
import pytest
import torch
import torch.nn.functional as F

import torchtpu


def same(fn, *inputs, atol=1e-5, rtol=1e-5):
    cpu = fn(*inputs)
    dev = fn(*[x.to("tpu") if isinstance(x, torch.Tensor) else x for x in inputs])
    outs_c = cpu if isinstance(cpu, tuple) else (cpu,)
    outs_d = dev if isinstance(dev, tuple) else (dev,)
    for c, d in zip(outs_c, outs_d):
        assert d.device.type == "tpu"
        assert d.dtype == c.dtype, (d.dtype, c.dtype)
        assert d.shape == c.shape
        torch.testing.assert_close(d.cpu(), c, atol=atol, rtol=rtol, equal_nan=True)


@pytest.fixture(autouse=True)
def strict_native():
    """These ops must run natively: any CPU fallback is an error here."""
    torchtpu.set_fallback_mode("error")
    yield
    torchtpu.set_fallback_mode("warn")


A = torch.randn(3, 4)
B = torch.randn(4)
I = torch.randint(-5, 5, (3, 4))


@pytest.mark.parametrize("fn", [
    lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
    lambda a, b: a / b, lambda a, b: torch.add(a, b, alpha=2.5),
    lambda a, b: torch.maximum(a, b), lambda a, b: torch.minimum(a, b),
    lambda a, b: a ** 2, lambda a, b: torch.pow(a.abs(), b),
    lambda a, b: a + 1, lambda a, b: 2 * a, lambda a, b: 1 - a,
    lambda a, b: a / 3, lambda a, b: torch.where(a > 0, a, b),
])
def test_binary_float(fn):
    same(fn, A, B)


@pytest.mark.parametrize("fn", [
    torch.neg, torch.abs, torch.exp, torch.tanh, torch.sigmoid, torch.relu,
    torch.sin, torch.cos, lambda x: torch.sqrt(x.abs()),
    lambda x: torch.log(x.abs() + 1), lambda x: torch.rsqrt(x.abs() + 1),
    F.gelu, F.silu, lambda x: torch.clamp(x, -0.5, 0.5),
])
def test_unary(fn):
    same(fn, A)


@pytest.mark.parametrize("fn", [
    lambda a, b: a == b, lambda a, b: a != b, lambda a, b: a < b,
    lambda a, b: a <= b, lambda a, b: a > b, lambda a, b: a >= 0.5,
    lambda a, b: torch.logical_not(a > 0),
])
def test_comparisons(fn):
    same(fn, A, B)


def test_type_promotion():
    same(lambda i, a: i + a, I, A)          # int + float -> float
    same(lambda i: i * 2, I)                # stays int64
    same(lambda i: i * 2.5, I)              # int * python float -> float32
    same(lambda i: i / 2, I)                # true division -> float
    same(lambda i: i.to(torch.int32) + i, I)  # int32 + int64 -> int64
    h = A.half()
    same(lambda h: h * 3.0, h, atol=1e-3, rtol=1e-3)  # stays half
    same(lambda h, a: h + a, h, A, atol=1e-3, rtol=1e-3)  # half + float -> float
    same(lambda i: torch.div(i, 3, rounding_mode="floor"), I)
    same(lambda i: torch.div(i, 3, rounding_mode="trunc"), I)


def test_matmul_family():
    x, w, b = torch.randn(5, 4), torch.randn(3, 4), torch.randn(3)
    same(lambda x, w: x @ w.t(), x, w, atol=1e-4)
    same(F.linear, x, w, b, atol=1e-4)
    same(lambda b1, b2: torch.bmm(b1, b2), torch.randn(2, 3, 4), torch.randn(2, 4, 5), atol=1e-4)
    same(lambda c, x, w: torch.addmm(c, x, w.t(), beta=0.5, alpha=2), torch.randn(5, 3), x, w, atol=1e-4)


def test_reductions():
    x = torch.randn(3, 4, 5)
    same(torch.sum, x, atol=1e-4)
    same(lambda x: x.sum(dim=1), x)
    same(lambda x: x.sum(dim=(0, 2), keepdim=True), x, atol=1e-4)
    same(lambda x: x.mean(dim=-1), x)
    same(lambda x: x.amax(dim=1), x)
    same(lambda x: x.argmax(dim=2), x)
    same(lambda x: x.argmax(), x)
    same(lambda i: i.sum(), I)  # int sum stays int64
    same(lambda x: torch.softmax(x, dim=-1), x)
    same(lambda x: torch.log_softmax(x, dim=1), x)


def test_cat_embedding_index_select():
    same(lambda a, b: torch.cat([a, b], dim=0), torch.randn(2, 3), torch.randn(4, 3))
    same(lambda a, b: torch.cat([a, b], dim=1), torch.randn(2, 3), torch.randn(2, 1))
    w = torch.randn(10, 4)
    idx = torch.tensor([[1, 2, 9], [0, 0, 3]])
    same(F.embedding, idx, w)
    same(lambda w, i: torch.index_select(w, 0, i), w, torch.tensor([3, 1, 3]))


def test_dtype_conversion():
    x = torch.randn(3, 4) * 100
    for dt in (torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.bool, torch.uint8):
        same(lambda x: x.to(dt), x)


def test_cpu_zero_dim_tensors_mix_with_tpu_tensors():
    """PyTorch lets 0-dim CPU tensors stand beside device tensors (as
    scalars), also inside tensor lists (AdamW's step counts)."""
    x = torch.randn(4)
    same(lambda x: x + torch.tensor(1.5), x)
    same(lambda x: x * torch.tensor(3, dtype=torch.int32), x)
    xs = [torch.randn(3), torch.randn(2)]
    cpu = torch._foreach_div(xs, [torch.tensor(2.0), torch.tensor(4.0)])
    dev = torch._foreach_div([t.to("tpu") for t in xs], [torch.tensor(2.0), torch.tensor(4.0)])
    for c, d in zip(cpu, dev):
        torch.testing.assert_close(d.cpu(), c)


def test_many_scalar_values():
    """Scalars are runtime arguments held in a small device-side cache: many
    distinct values (which collide in the cache, also within one call) must
    all give PyTorch's results."""
    x = torch.randn(8)
    d = x.to("tpu")
    for i in range(600):
        a, b = i * 0.37 - 50.0, (i % 7) - 3.5
        torch.testing.assert_close(torch.ops.aten.add.Scalar(d, a, b).cpu(),
                                   torch.ops.aten.add.Scalar(x, a, b))
