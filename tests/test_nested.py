"""NestedTensors on "tpu" (shim/nested.cpp) and the inference fast paths of
PyTorch's transformer modules, which use them.

nn.TransformerEncoder in eval mode under no_grad with a src_key_padding_mask
turns its input into a NestedTensor (torch._nested_tensor_from_mask) and runs
torch._transformer_encoder_layer_fwd on it; nn.MultiheadAttention's fast path
calls torch._native_multi_head_attention. Before shim/nested.cpp the first
failed on tpu ("Could not run 'aten::_to_copy' with arguments from the
'NestedTensortpu' backend") and the others ran whole on the CPU fallback.
Everything here is compared with the same code on the CPU: values, nested
structure, and errors (type and message)."""
import copy
import re
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu
from torchtpu.testing import native_only

warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")


def gen(seed):
    return torch.Generator().manual_seed(seed)


def fallbacks_during(fn):
    """fn()'s result and the ops that ran on the CPU fallback meanwhile."""
    before = dict(torchtpu.fallback_counts())
    out = fn()
    after = torchtpu.fallback_counts()
    return out, {k for k, v in after.items() if v != before.get(k, 0)}


def padded_mask(lengths, L):
    return torch.arange(L)[None, :] >= torch.tensor(lengths)[:, None]


def encoder(d=8, heads=2, ff=16, layers=2, **kw):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, **kw)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=True).eval()


def assert_same_error(fn, *args):
    """fn(*args) on the CPU and on tpu raise the same exception type with the
    same message (device names aside)."""
    errors = []
    for dev in ("cpu", "tpu"):
        moved = [a.to(dev) if isinstance(a, torch.Tensor) else a for a in args]
        with pytest.raises(Exception) as info:
            fn(*moved)
        errors.append(info.value)
    cpu, tpu = errors
    assert type(tpu) is type(cpu), (type(tpu), tpu, cpu)

    def first_line(e):
        s = str(e).split("\n")[0]
        s = s.replace("NestedTensorCPU", "NestedTensor<dev>").replace("NestedTensortpu",
                                                                       "NestedTensor<dev>")
        return re.sub(r"\b(cpu|tpu)(:0)?\b", "<dev>", s)

    assert first_line(tpu) == first_line(cpu)


# --- nn.TransformerEncoder's fast paths ------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(batch_first=True),
    dict(batch_first=True, norm_first=True, activation="gelu"),
    dict(batch_first=False),
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
@pytest.mark.parametrize("lengths", [[5, 3], [2, 5, 1]], ids=["2seq", "3seq"])
def test_encoder_padding_mask_like_cpu(kw, lengths):
    """The sparsity fast path: nested input, nested layers, padded output with
    zeros where the mask pads, as on the CPU."""
    m = encoder(**kw)
    mt = copy.deepcopy(m).to("tpu")
    B, L = len(lengths), 5
    x = torch.randn(B, L, 8, generator=gen(1))
    if not kw["batch_first"]:
        x = x.transpose(0, 1).contiguous()
    mask = padded_mask(lengths, L)
    with torch.no_grad():
        want = m(x, src_key_padding_mask=mask)
        got = mt(x.to("tpu"), src_key_padding_mask=mask.to("tpu"))
    assert got.device.type == "tpu" and not got.is_nested
    assert got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_encoder_padding_mask_output_shorter_than_input():
    """When every sequence is padded at the end, the fast path's output is
    shorter than the input on the CPU (to_padded_tensor to the longest
    sequence): the same on tpu."""
    m = encoder(batch_first=True)
    mt = copy.deepcopy(m).to("tpu")
    x = torch.randn(2, 6, 8, generator=gen(2))
    mask = padded_mask([4, 2], 6)
    with torch.no_grad():
        want = m(x, src_key_padding_mask=mask)
        got = mt(x.to("tpu"), src_key_padding_mask=mask.to("tpu"))
    assert got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_encoder_padding_mask_runs_on_tpu():
    """The nested path's work stays on tpu: what reaches the CPU fallback is
    only the data-dependent masked_select that builds the nested buffer."""
    m = encoder(batch_first=True)
    mt = copy.deepcopy(m).to("tpu")
    x = torch.randn(3, 5, 8, generator=gen(3)).to("tpu")
    mask = padded_mask([5, 3, 4], 5).to("tpu")
    with torch.no_grad():
        out, fell_back = fallbacks_during(lambda: mt(x, src_key_padding_mask=mask).cpu())
    assert fell_back <= {"aten::masked_select"}, fell_back


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_no_mask_runs_natively(norm_first):
    """Without a mask the eval fast path calls _transformer_encoder_layer_fwd on
    dense tensors: PyTorch's composition runs on tpu, nothing on the CPU."""
    m = encoder(batch_first=True, norm_first=norm_first)
    mt = copy.deepcopy(m).to("tpu")
    x = torch.randn(2, 5, 8, generator=gen(4))
    with torch.no_grad():
        want = m(x)
        with native_only():
            got = mt(x.to("tpu")).cpu()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_encoder_layer_fast_path_with_float_mask():
    """A layer alone with a float src_key_padding_mask (merged into an
    additive mask: no nested tensor) as on the CPU."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    lt = copy.deepcopy(layer).to("tpu")
    x = torch.randn(2, 5, 8, generator=gen(5))
    mask = torch.zeros(2, 5).masked_fill(padded_mask([5, 3], 5), float("-inf"))
    with torch.no_grad():
        want = layer(x, src_key_padding_mask=mask)
        got = lt(x.to("tpu"), src_key_padding_mask=mask.to("tpu"))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_encoder_mask_not_left_aligned_like_cpu():
    """A padding mask with a gap: the CPU's encoder leaves the sparsity path
    (the left-aligned check fails); so does tpu's, with the same numbers."""
    m = encoder(batch_first=True)
    mt = copy.deepcopy(m).to("tpu")
    x = torch.randn(2, 5, 8, generator=gen(6))
    mask = torch.tensor([[False, True, False, False, False], [False] * 3 + [True] * 2])
    with torch.no_grad():
        want = m(x, src_key_padding_mask=mask)
        got = mt(x.to("tpu"), src_key_padding_mask=mask.to("tpu"))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5, equal_nan=True)


# --- nn.MultiheadAttention's fast path -------------------------------------------

@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "padmask"])
def test_mha_fast_path_like_cpu(need_weights, average, masked):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    mt = copy.deepcopy(mha).to("tpu")
    x = torch.randn(3, 5, 8, generator=gen(7))
    mask = padded_mask([5, 2, 4], 5) if masked else None
    with torch.no_grad():
        want = mha(x, x, x, key_padding_mask=mask, need_weights=need_weights,
                   average_attn_weights=average)
        xt = x.to("tpu")
        got = mt(xt, xt, xt, key_padding_mask=None if mask is None else mask.to("tpu"),
                 need_weights=need_weights, average_attn_weights=average)
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=1e-5, atol=1e-5)
    if need_weights:
        torch.testing.assert_close(got[1].cpu(), want[1], rtol=1e-5, atol=1e-5)
    else:
        assert got[1] is None and want[1] is None


def test_mha_fast_path_attn_mask_like_cpu():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    mt = copy.deepcopy(mha).to("tpu")
    x = torch.randn(2, 4, 8, generator=gen(8))
    causal = torch.triu(torch.ones(4, 4, dtype=torch.bool), 1)
    with torch.no_grad():
        want = mha(x, x, x, attn_mask=causal)
        got = mt(x.to("tpu"), x.to("tpu"), x.to("tpu"), attn_mask=causal.to("tpu"))
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1].cpu(), want[1], rtol=1e-5, atol=1e-5)


def test_native_mha_nested_query_like_cpu():
    """torch._native_multi_head_attention on a nested query (the encoder's
    sparsity path calls it so)."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    parts = [torch.randn(n, 8, generator=gen(9 + n)) for n in (4, 2, 3)]
    outs = []
    for dev in ("cpu", "tpu"):
        q = torch.nested.nested_tensor([p.to(dev) for p in parts])
        w = [t.detach().to(dev) for t in (mha.in_proj_weight, mha.in_proj_bias,
                                          mha.out_proj.weight, mha.out_proj.bias)]
        with torch.no_grad():
            out, _ = torch._native_multi_head_attention(q, q, q, 8, 2, *w, None, False)
        assert out.is_nested and out.device.type == dev
        outs.append(out)
    for a, b in zip(outs[1].unbind(), outs[0].unbind()):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)


# --- nested tensors: construction, conversion, padding ---------------------------

def parts3():
    return [torch.randn(2, 3, generator=gen(10)), torch.randn(4, 3, generator=gen(11)),
            torch.randn(1, 3, generator=gen(12))]


def assert_nested_equal(got, want, **tol):
    assert got.is_nested and want.is_nested
    assert got.device.type == "tpu"
    assert got.dtype == want.dtype and got.dim() == want.dim()
    assert got.size(0) == want.size(0)
    torch.testing.assert_close(got._nested_tensor_size(), want._nested_tensor_size())
    for a, b in zip(got.unbind(), want.unbind()):
        assert a.device.type == "tpu"
        torch.testing.assert_close(a.cpu(), b, **tol)


def test_construct_on_tpu_like_cpu():
    ps = parts3()
    want = torch.nested.nested_tensor(ps)
    assert_nested_equal(torch.nested.nested_tensor(ps, device="tpu"), want)
    assert_nested_equal(torch.nested.as_nested_tensor([p.to("tpu") for p in ps]), want)
    assert_nested_equal(torch.nested.nested_tensor([p.tolist() for p in ps], device="tpu"),
                        torch.nested.nested_tensor([p.tolist() for p in ps]))
    dense = torch.randn(3, 4, 5, generator=gen(13))
    assert_nested_equal(torch.nested.as_nested_tensor(dense.to("tpu")),
                        torch.nested.as_nested_tensor(dense))


def test_move_between_devices():
    ps = parts3()
    nt = torch.nested.nested_tensor(ps)
    moved = nt.to("tpu")
    assert_nested_equal(moved, nt)
    back = moved.cpu()
    assert back.is_nested and back.device.type == "cpu"
    for a, b in zip(back.unbind(), ps):
        torch.testing.assert_close(a, b)
    assert_nested_equal(moved.to(torch.float64), nt.to(torch.float64))
    assert_nested_equal(moved.clone(), nt)


@pytest.mark.parametrize("padding,output_size", [(0.0, None), (-1.5, None), (2.0, (3, 6, 4))])
def test_to_padded_tensor_like_cpu(padding, output_size):
    nt = torch.nested.nested_tensor(parts3())
    want = torch.nested.to_padded_tensor(nt, padding, output_size)
    got = torch.nested.to_padded_tensor(nt.to("tpu"), padding, output_size)
    assert got.device.type == "tpu" and not got.is_nested
    torch.testing.assert_close(got.cpu(), want)


def test_from_padded_round_trip_like_cpu():
    x = torch.randn(2, 5, 4, generator=gen(14))
    mask = ~padded_mask([5, 3], 5)
    want = torch._nested_tensor_from_mask(x, mask)
    got = torch._nested_tensor_from_mask(x.to("tpu"), mask.to("tpu"))
    assert_nested_equal(got, want)
    assert torch._nested_tensor_from_mask_left_aligned(x.to("tpu"), mask.to("tpu"))
    torch.testing.assert_close(got.to_padded_tensor(0.0).cpu(), want.to_padded_tensor(0.0))


def test_unbind_and_views():
    nt = torch.nested.nested_tensor(parts3())
    ntt = nt.to("tpu")
    for a, b in zip(ntt.unbind(), nt.unbind()):
        torch.testing.assert_close(a.cpu(), b)
    torch.testing.assert_close(ntt[1].cpu(), nt[1])
    assert_nested_equal(ntt.transpose(1, 2), nt.transpose(1, 2))
    assert_nested_equal(ntt.unsqueeze(1), nt.unsqueeze(1))
    assert_nested_equal(ntt.reshape(3, -1, 3), nt.reshape(3, -1, 3))
    assert_nested_equal(ntt.transpose(1, 2).contiguous(), nt.transpose(1, 2).contiguous())
    assert_nested_equal(torch.nested.nested_tensor([p.t() for p in parts3()]).to("tpu"),
                        torch.nested.nested_tensor([p.t() for p in parts3()]))


def test_values_is_a_view_of_the_buffer():
    want = torch.nested.nested_tensor(parts3()).values()
    nt = torch.nested.nested_tensor(parts3(), device="tpu")
    v = nt.values()
    assert v.device.type == "tpu" and v.shape == want.shape
    torch.testing.assert_close(v.cpu(), want)
    v.zero_()
    assert all((t.cpu() == 0).all() for t in nt.unbind())


@pytest.mark.parametrize("op", [
    lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b, lambda a, b: a / (b.abs() + 1),
    lambda a, b: a * 2.5, lambda a, b: a.relu(), lambda a, b: F.gelu(a), lambda a, b: a.sin(),
    lambda a, b: a.tanh(), lambda a, b: F.silu(a), lambda a, b: -a, lambda a, b: a.abs().sqrt(),
    lambda a, b: (a > 0) * a, lambda a, b: a.softmax(-1),
    lambda a, b: F.layer_norm(a, (3,), torch.ones(3, device=a.device) * 1.5,
                              torch.ones(3, device=a.device) * 0.25),
    lambda a, b: a.masked_fill(a > 0, 0.5),
], ids=["add", "mul", "sub", "div", "mul_scalar", "relu", "gelu", "sin", "tanh", "silu", "neg",
        "sqrt", "gt_mul", "softmax", "layer_norm", "masked_fill"])
def test_pointwise_ops_like_cpu(op):
    a = torch.nested.nested_tensor(parts3())
    b = torch.nested.nested_tensor([p.flip(0) * 0.5 for p in parts3()])
    with native_only():
        got = op(a.to("tpu"), b.to("tpu"))
    assert_nested_equal(got, op(a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("normalized", [(3, 2, 4), (2, 4)], ids=["all_trailing", "last_two"])
def test_layer_norm_multi_dim_like_cpu(normalized):
    """LayerNorm over several trailing dims of a nested tensor (PyTorch's
    test_layer_norm): weight and bias of the normalized shape reach the dense
    op flattened to [N] (the builder refused them as given), forward and
    backward."""
    g = gen(7)
    parts = [torch.randn(n, 3, 2, 4, generator=g, dtype=torch.float64) for n in (2, 5, 3)]
    ln = nn.LayerNorm(normalized, dtype=torch.float64)
    with torch.no_grad():
        ln.weight.copy_(torch.rand(normalized, generator=g, dtype=torch.float64))
        ln.bias.copy_(torch.rand(normalized, generator=g, dtype=torch.float64))
    lt = copy.deepcopy(ln).to("tpu")
    got = {}
    for dev, mod in (("cpu", ln), ("tpu", lt)):
        nt = torch.nested.nested_tensor([p.to(dev) for p in parts], requires_grad=True)
        out = mod(nt)
        out.backward(torch.nested.nested_tensor([torch.ones_like(p).to(dev) for p in parts]))
        got[dev] = (out, nt.grad, mod.weight.grad.cpu(), mod.bias.grad.cpu())
    assert_nested_equal(got["tpu"][0], got["cpu"][0], rtol=1e-6, atol=1e-6)
    assert_nested_equal(got["tpu"][1], got["cpu"][1], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got["tpu"][2], got["cpu"][2])
    torch.testing.assert_close(got["tpu"][3], got["cpu"][3])


def test_in_place_ops_like_cpu():
    a = torch.nested.nested_tensor(parts3())
    at = a.to("tpu")
    with native_only():
        at.mul_(3.0).add_(at).relu_()
    a.mul_(3.0).add_(a).relu_()
    assert_nested_equal(at, a)


def test_linear_matmul_bmm_like_cpu():
    torch.manual_seed(0)
    lin = nn.Linear(3, 5)
    a = torch.nested.nested_tensor(parts3())
    at = a.to("tpu")
    assert_nested_equal(F.linear(at, lin.weight.to("tpu"), lin.bias.to("tpu")),
                        F.linear(a, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
    bt = torch.nested.nested_tensor([p.t() for p in parts3()])
    assert_nested_equal(torch.bmm(at, bt.to("tpu")), torch.bmm(a, bt), rtol=1e-5, atol=1e-5)
    assert_nested_equal(torch.matmul(at, bt.to("tpu")), torch.matmul(a, bt), rtol=1e-5, atol=1e-5)


def test_sum_through_the_cpu_like_cpu():
    """sum.dim_IntList's nested kernel reads the buffer on the host
    (NestedTensorCPU only): it runs through the CPU, with the CPU's result."""
    a = torch.nested.nested_tensor(parts3())
    got, fell_back = fallbacks_during(lambda: a.to("tpu").sum(-1, keepdim=True))
    assert fell_back == {"aten::sum.dim_IntList"}
    assert_nested_equal(got, a.sum(-1, keepdim=True))


def test_autograd_through_nested_like_cpu():
    grads = []
    for dev in ("cpu", "tpu"):
        ps = [p.to(dev).requires_grad_() for p in parts3()]
        nt = torch.nested.as_nested_tensor(ps)
        out = torch.nested.to_padded_tensor((nt * 2).relu(), 0.0)
        (out * torch.arange(out.numel(), device=dev).reshape(out.shape)).sum().backward()
        grads.append([p.grad.cpu() for p in ps])
    for a, b in zip(grads[1], grads[0]):
        torch.testing.assert_close(a, b)


def test_sdpa_on_nested_like_cpu():
    qs = [torch.randn(2, n, 4, generator=gen(20 + n)) for n in (3, 5)]
    outs = []
    for dev in ("cpu", "tpu"):
        q = torch.nested.nested_tensor([x.to(dev) for x in qs])
        outs.append(F.scaled_dot_product_attention(q, q, q))
    assert_nested_equal(outs[1], outs[0], rtol=1e-5, atol=1e-5)


def test_printing():
    nt = torch.nested.nested_tensor(parts3())
    text = repr(nt.to("tpu"))
    assert text.startswith("nested_tensor(") and "device='tpu:0'" in text
    assert repr(nt) == text.replace(", device='tpu:0'", "")


# --- the core's rules for the fast paths' dense kernels (lower/transformer.c) -----

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_transform_bias_rescale_qkv_like_cpu(dtype):
    qkv = torch.randn(2, 5, 24, generator=gen(30)).to(dtype)
    bias = torch.randn(24, generator=gen(31)).to(dtype)
    want = torch._transform_bias_rescale_qkv(qkv, bias, 4)
    with native_only():
        got = torch._transform_bias_rescale_qkv(qkv.to("tpu"), bias.to("tpu"), 4)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w)


@pytest.mark.parametrize("mask_type,mask_shape", [(0, (5, 5)), (1, (2, 5)), (2, (2, 3, 5, 5))])
def test_masked_softmax_like_cpu(mask_type, mask_shape):
    """Each mask type, with a row masked whole (NaN, as on the CPU)."""
    x = torch.randn(2, 3, 5, 5, generator=gen(32))
    mask = torch.rand(mask_shape, generator=gen(33)) > 0.6
    mask[(0,) * (len(mask_shape) - 1)] = True
    want = torch._masked_softmax(x, mask, -1, mask_type)
    with native_only():
        got = torch._masked_softmax(x.to("tpu"), mask.to("tpu"), -1, mask_type)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("use_gelu", [False, True])
@pytest.mark.parametrize("beta", [1.0, 0.0])
def test_addmm_activation_like_cpu(use_gelu, beta):
    s = torch.randn(6, generator=gen(34))
    if beta == 0.0:
        s[0] = float("nan")  # beta == 0 ignores self
    a, b = torch.randn(4, 3, generator=gen(35)), torch.randn(3, 6, generator=gen(36))
    want = torch._addmm_activation(s, a, b, beta=beta, alpha=0.5, use_gelu=use_gelu)
    with native_only():
        got = torch._addmm_activation(s.to("tpu"), a.to("tpu"), b.to("tpu"), beta=beta,
                                      alpha=0.5, use_gelu=use_gelu)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)


# --- errors as on the CPU -----------------------------------------------------------

def test_errors_like_cpu():
    a, b = torch.randn(2, 3), torch.randn(4)
    assert_same_error(lambda x, y: torch.nested.as_nested_tensor([x, y]), a, b)
    nt = torch.nested.nested_tensor(parts3())
    other = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(1, 3)])
    assert_same_error(lambda x: torch.exp(x), nt)
    assert_same_error(lambda x, y: x + y, nt, other)
    assert_same_error(lambda x: x.size(1), nt)
    assert_same_error(lambda x: torch.nested.to_padded_tensor(x, 0.0, (3, 2, 3)), nt)
    assert_same_error(lambda x: x.view(3, 4, 3), nt)
    assert_same_error(lambda x: torch.where(x > 0, x, x), nt)
    assert_same_error(lambda x: x.sum(-1), nt)
    x = torch.randn(2, 5, 4)
    gap = torch.tensor([[True, False, True, True, True], [True] * 5])
    assert_same_error(lambda t, m: torch._nested_tensor_from_mask(t, m), x, gap)
    assert_same_error(lambda t, m: torch._nested_tensor_from_mask(t, m), x, gap[:, :4])
    assert_same_error(lambda t, m: torch._nested_tensor_from_mask(t, m.float()), x, gap)
    assert_same_error(lambda t, w: torch._native_multi_head_attention(
        t, t, t, 4, 3, w, w[:, 0], w[:4], w[:4, 0]), x, torch.randn(12, 4))
