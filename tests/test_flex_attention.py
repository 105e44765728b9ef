"""FlexAttention (torch.nn.attention.flex_attention) on "tpu" (torchtpu/_flex_attention.py).

PyTorch's front end refuses devices outside {cuda, cpu, xpu, hpu, mps};
torchtpu widens that check to "tpu" (TorchTitan's llama3 attention is
`torch.compile(flex_attention)` with a causal document BlockMask made by a
compiled create_block_mask). Results, forward and backward, are compared with
plain masked softmax attention on the CPU; no op may fall back to the CPU."""
import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import torchtpu

B, H, L, D = 2, 2, 64, 8


def _inputs():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, L, D, generator=g) for _ in range(3))
    # two documents per row (positions restart at 0), as TorchTitan packs them
    pos = torch.cat([torch.arange(24), torch.arange(L - 24)]).expand(B, L)
    return q, k, v, (pos == 0).cumsum(-1)


def _reference(q, k, v, docs, scale=None):
    i = torch.arange(L)
    allowed = (i[:, None] >= i[None, :]) & (docs[:, :, None] == docs[:, None, :])
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else D ** -0.5)
    s = s.masked_fill(~allowed[:, None], float("-inf"))
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_flex_attention_document_causal_matches_cpu(compiled):
    q, k, v, docs = _inputs()
    qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
    ref = _reference(qc, kc, vc, docs)
    ref.square().sum().backward()

    docs_t = docs.to("tpu")

    def mask_mod(b, h, qi, ki):
        return (qi >= ki) & (docs_t[b, qi] == docs_t[b, ki])

    make_mask = torch.compile(create_block_mask) if compiled else create_block_mask
    fa = torch.compile(flex_attention) if compiled else flex_attention
    before = dict(torchtpu.fallback_counts())
    mask = make_mask(mask_mod, B, None, L, L, device="tpu", BLOCK_SIZE=16)
    qt, kt, vt = (t.to("tpu").requires_grad_() for t in (q, k, v))
    out = fa(qt, kt, vt, block_mask=mask)
    out.square().sum().backward()
    assert out.device.type == "tpu"
    torch.testing.assert_close(out.cpu(), ref.detach(), atol=1e-5, rtol=1e-5)
    for got, want in ((qt, qc), (kt, kc), (vt, vc)):
        torch.testing.assert_close(got.grad.cpu(), want.grad, atol=1e-5, rtol=1e-5)
    assert dict(torchtpu.fallback_counts()) == before, "an op ran on the CPU fallback"


def test_flex_attention_score_mod_and_lse():
    q, k, v, _ = _inputs()

    def score_mod(score, b, h, qi, ki):
        return score + 0.1 * (qi - ki).abs()  # a relative-position bias

    out, lse = torch.compile(flex_attention)(*(t.to("tpu") for t in (q, k, v)),
                                             score_mod=score_mod, return_lse=True)
    i = torch.arange(L)
    s = q @ k.transpose(-1, -2) * D ** -0.5 + 0.1 * (i[:, None] - i[None, :]).abs()
    torch.testing.assert_close(out.cpu(), torch.softmax(s, -1) @ v, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.cpu(), torch.logsumexp(s, -1), atol=1e-5, rtol=1e-5)


def test_other_devices_keep_pytorchs_check():
    """Only "tpu" is let through: a CPU tensor needing a gradient is still
    refused by PyTorch's own check, with its own message."""
    q = torch.randn(1, 1, 16, 8, requires_grad=True)
    with pytest.raises(NotImplementedError, match="backward on CPU"):
        flex_attention(q, q, q)
