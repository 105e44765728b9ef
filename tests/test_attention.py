"""Attention and dropout on "tpu" (lower/attention.c, lower/dropout.c).

F.scaled_dot_product_attention reaches the core as one fused op each way
(_scaled_dot_product_flash_attention_for_cpu and its backward, chosen by the
shim's SDPA backend stub); dropout_p > 0 and masks that need a gradient take
PyTorch's math path, whose ops (_safe_softmax, native_dropout, ...) lower
natively too. Results are compared with PyTorch's CPU results, under fallback
mode "error" so that nothing silently runs on the host."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

import torchtpu
from torchtpu import _core
from torchtpu import compile as tpu_compile
from torchtpu.testing import native_only

T = lambda t: t.to("tpu")  # noqa: E731


class OpRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.name())
        return func(*args, **(kwargs or {}))


def close(tpu, cpu, tol):
    torch.testing.assert_close(tpu.cpu(), cpu, atol=tol, rtol=tol)


def qkv(b, hq, hk, l, s, e, ev=None, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    mk = lambda *shape: torch.randn(*shape, generator=g, dtype=dtype)  # noqa: E731
    return mk(b, hq, l, e), mk(b, hk, s, e), mk(b, hk, s, ev or e)


def run_both(q, k, v, grad_mask=False, **kw):
    """SDPA forward + backward on CPU and on tpu; returns both (out, grads)."""
    res = []
    for dev in ("cpu", "tpu"):
        ins = [t.detach().to(dev).requires_grad_() for t in (q, k, v)]
        extra = dict(kw)
        if isinstance(kw.get("attn_mask"), torch.Tensor):
            extra["attn_mask"] = kw["attn_mask"].detach().to(dev)
            if grad_mask:
                extra["attn_mask"].requires_grad_()
        out = F.scaled_dot_product_attention(*ins, **extra)
        gen = torch.Generator().manual_seed(1)
        out.backward(torch.randn(out.shape, generator=gen, dtype=out.dtype).to(dev))
        grads = [t.grad for t in ins]
        if grad_mask:
            grads.append(extra["attn_mask"].grad)
        res.append((out, grads))
    return res


# --- scaled_dot_product_attention ------------------------------------------------------------

def _bool_mask(l, s):
    m = torch.rand(l, s, generator=torch.Generator().manual_seed(2)) > 0.3
    m[1] = False  # a fully masked row: output and gradients 0
    return m


CASES = {
    "plain": (dict(b=2, hq=3, hk=3, l=6, s=6, e=8), {}),
    "causal": (dict(b=2, hq=3, hk=3, l=6, s=6, e=8), dict(is_causal=True)),
    "causal_l_ne_s": (dict(b=1, hq=2, hk=2, l=5, s=9, e=4, ev=6), dict(is_causal=True)),
    "bool_mask": (dict(b=2, hq=2, hk=2, l=5, s=7, e=8), dict(attn_mask=_bool_mask(5, 7))),
    "float_mask": (dict(b=2, hq=2, hk=2, l=4, s=6, e=8),
                   dict(attn_mask=torch.randn(2, 1, 4, 6, generator=torch.Generator().manual_seed(3)))),
    "scale": (dict(b=1, hq=2, hk=2, l=5, s=5, e=16), dict(scale=0.3, is_causal=True)),
    "gqa": (dict(b=2, hq=6, hk=2, l=5, s=5, e=8), dict(enable_gqa=True, is_causal=True)),
    "gqa_mask": (dict(b=1, hq=4, hk=1, l=3, s=5, e=8),
                 dict(enable_gqa=True, attn_mask=_bool_mask(3, 5))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sdpa_fused_matches_cpu(case):
    shape, kw = CASES[case]
    q, k, v = qkv(**shape)
    rec = OpRecorder()
    with native_only(), rec:
        (out, grads), (out_t, grads_t) = run_both(q, k, v, **kw)
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in rec.ops
    assert "aten::_scaled_dot_product_flash_attention_for_cpu_backward" in rec.ops
    close(out_t, out, 1e-5)
    for gt, gc in zip(grads_t, grads):
        close(gt, gc, 1e-4)


@pytest.mark.parametrize("layout", ["contiguous", "bshd"])
def test_flash_results_have_cpu_layouts(layout):
    # The CPU kernels lay the output out like query, logsumexp as [B, L, H]
    # memory and the gradients as [B, L, H, E] memory; traced graphs rely on
    # it (the meta kernels say the same).
    q, k, v = qkv(2, 3, 3, 5, 5, 4)
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
    for dev in ("cpu", "tpu"):
        ins = [t.to(dev) for t in (q, k, v)]
        out, lse = flash(*ins, 0.0, True)
        grads = backward(torch.ones_like(out), *ins, out, lse, 0.0, True)
        if dev == "cpu":
            want = [(x, x.stride()) for x in (out, lse, *grads)]
            continue
        for got, (ref, stride) in zip((out, lse, *grads), want):
            assert got.stride() == stride
            close(got, ref, 1e-5)


def test_sdpa_bfloat16():
    q, k, v = qkv(2, 2, 2, 8, 8, 16, dtype=torch.bfloat16)
    with native_only():
        (out, grads), (out_t, grads_t) = run_both(q, k, v, is_causal=True)
    assert out_t.dtype == torch.bfloat16
    close(out_t, out, 2e-2)
    for gt, gc in zip(grads_t, grads):
        close(gt, gc, 5e-2)


def test_sdpa_math_path_native():
    # The math path (forced here; taken for dropout or a mask needing a
    # gradient): its _safe_softmax is one rule, the rest lower too.
    q, k, v = qkv(2, 2, 2, 5, 7, 8)
    rec = OpRecorder()
    with native_only(), sdpa_kernel([SDPBackend.MATH]), rec:
        (out, grads), (out_t, grads_t) = run_both(q, k, v, attn_mask=_bool_mask(5, 7))
    assert "aten::_safe_softmax" in rec.ops
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" not in rec.ops
    close(out_t, out, 1e-5)
    for gt, gc in zip(grads_t, grads):
        close(gt, gc, 1e-4)


def test_sdpa_mask_gradient_takes_math_path():
    q, k, v = qkv(1, 2, 2, 4, 6, 8)
    mask = torch.randn(1, 2, 4, 6, generator=torch.Generator().manual_seed(4))
    with native_only():
        (out, grads), (out_t, grads_t) = run_both(q, k, v, grad_mask=True, attn_mask=mask)
    close(out_t, out, 1e-5)
    for gt, gc in zip(grads_t, grads):
        close(gt, gc, 1e-4)


def test_safe_softmax_rows_of_neg_inf():
    x = torch.randn(3, 5)
    x[1] = float("-inf")
    x[2, :2] = float("-inf")
    with native_only():
        got = torch.ops.aten._safe_softmax(T(x), -1)
    close(got, torch.ops.aten._safe_softmax(x, -1), 1e-6)
    assert got.cpu()[1].eq(0).all()


def test_sdpa_dropout_runs_natively():
    q, k, v = qkv(2, 2, 2, 16, 16, 8)
    ins = [T(t).requires_grad_() for t in (q, k, v)]
    with native_only():
        torch.manual_seed(5)
        out = F.scaled_dot_product_attention(*ins, dropout_p=0.5)
        out.sum().backward()
        torch.manual_seed(5)
        again = F.scaled_dot_product_attention(*ins, dropout_p=0.5)
    ref = F.scaled_dot_product_attention(q, k, v)
    assert torch.isfinite(ins[0].grad.cpu()).all()
    assert not torch.allclose(out.detach().cpu(), ref, atol=1e-3)  # dropout did happen
    torch.testing.assert_close(out.detach().cpu(), again.detach().cpu())


# --- dropout -------------------------------------------------------------------------------------

def test_dropout_statistics_and_backward():
    p, n = 0.3, 200_000
    x = T(torch.ones(n)).requires_grad_()
    rec = OpRecorder()
    with native_only(), rec:
        y = nn.Dropout(p).train()(x)
        g = T(torch.rand(n))
        y.backward(g)
    assert "aten::native_dropout" in rec.ops and "aten::native_dropout_backward" in rec.ops
    y, g, gx = y.detach().cpu(), g.cpu(), x.grad.cpu()
    kept = y != 0
    assert abs(1 - kept.float().mean().item() - p) < 0.01
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / (1 - p)))
    # The backward uses the forward's mask and scale.
    torch.testing.assert_close(gx, g * kept / (1 - p))


def test_dropout_seeded_and_p_is_runtime():
    x = T(torch.randn(4096))
    with native_only():
        torch.manual_seed(7)
        a = F.dropout(x, 0.5)
        b = F.dropout(x, 0.5)
        torch.manual_seed(7)
        a2 = F.dropout(x, 0.5)
        torch.tpu.synchronize()
        before = [e for e in _core.cache_entries() if e["label"] == "aten::native_dropout"]
        fracs = [(F.dropout(x, p) == 0).float().mean().item() for p in (0.1, 0.25, 0.6, 0.9)]
        after = [e for e in _core.cache_entries() if e["label"] == "aten::native_dropout"]
    assert torch.equal(a.cpu(), a2.cpu())
    assert not torch.equal(a.cpu(), b.cpu())
    assert len(after) == len(before)  # p changes never recompile
    for f, p in zip(fracs, (0.1, 0.25, 0.6, 0.9)):
        assert abs(f - p) < 0.04


def test_native_dropout_edges():
    x = torch.randn(3, 7, dtype=torch.bfloat16)
    with native_only():
        out, mask = torch.ops.aten.native_dropout(T(x), 0.5, False)
        zeros, none_kept = torch.ops.aten.native_dropout(T(x), 1.0, True)
        half, hmask = torch.ops.aten.native_dropout(T(x), 0.5, True)
    assert mask.dtype == torch.bool and mask.cpu().all()
    torch.testing.assert_close(out.cpu(), x)
    assert zeros.cpu().eq(0).all() and not none_kept.cpu().any()
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.cpu(), x * hmask.cpu() * 2)


@pytest.mark.parametrize("checkpointed", [False, True])
def test_sdpa_under_torch_compile(checkpointed, monkeypatch):
    # AOTAutograd's traced calls take the fused op too (its results' layouts
    # are the meta kernel's), forward and backward, also when activation
    # checkpointing recomputes it (its random-state wrappers are dropped: no
    # dropout, nothing drawn).
    def attend(q, k, v):
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), is_causal=True)
        return out.transpose(1, 2).reshape(q.shape[0], q.shape[1], -1)

    def f(q, k, v):
        if checkpointed:
            return torch.utils.checkpoint.checkpoint(attend, q, k, v, use_reentrant=False)
        return attend(q, k, v)

    q, k, v = (t.transpose(1, 2).contiguous() for t in qkv(2, 2, 2, 6, 6, 8))
    ins = [T(t).requires_grad_() for t in (q, k, v)]
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    graphs = []
    drop = tpu_compile._drop_rng_wrappers

    def spy(gm):  # sees each graph the backend compiles
        graphs.append(gm.code)
        return drop(gm)

    monkeypatch.setattr(tpu_compile, "_drop_rng_wrappers", spy)
    torch._dynamo.reset()
    with native_only():
        out = torch.compile(f, backend="tpu")(*ins)
        out.sum().backward()
    assert any("_scaled_dot_product_flash_attention_for_cpu.default" in g for g in graphs)
    assert any("_scaled_dot_product_flash_attention_for_cpu_backward" in g for g in graphs)
    expect = f(*ref)
    expect.sum().backward()
    close(out.detach(), expect.detach(), 1e-5)
    for a, b in zip(ins, ref):
        close(a.grad, b.grad, 1e-4)


@pytest.mark.parametrize("backend", [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION])
def test_cuda_fused_backends_take_the_fused_op(backend):
    # CUDA code that asks for one fused backend still gets a fused kernel on
    # tpu (the CPU would have none of these).
    q, k, v = qkv(1, 2, 2, 5, 5, 8)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    rec = OpRecorder()
    with native_only(), sdpa_kernel([backend]), rec:
        got = F.scaled_dot_product_attention(T(q), T(k), T(v), is_causal=True)
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in rec.ops
    close(got, want, 1e-5)
