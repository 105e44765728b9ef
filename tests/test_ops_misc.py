"""Ops of lower/misc.c on "tpu": trace, renorm, logcumsumexp, channel_shuffle,
index_fill, index_add, pdist, multi_margin_loss, multilabel_margin_loss,
rrelu and embedding_bag.

Their OpInfo entries must run natively (no CPU fallback) and match the CPU
at float32. The harness checks rrelu (random in training) for shape and
dtype only, so its slopes and extreme logcumsumexp inputs are checked here.
"""
import pytest
import torch

from torchtpu.testing import opinfo

ENTRIES = [
    "trace", "renorm", "logcumsumexp", "nn.functional.channel_shuffle", "index_fill",
    "index_add", "nn.functional.pdist", "nn.functional.multi_margin_loss",
    "nn.functional.multilabel_margin_loss", "nn.functional.rrelu", "nn.functional.embedding_bag",
]
SAMPLES_PER_ENTRY = 3


@pytest.mark.parametrize("key,op", list(zip(ENTRIES, opinfo.entries_by_key(ENTRIES))),
                         ids=ENTRIES)
def test_entry_native_float32(key, op):
    opinfo.assert_native_pass(key, op, limit=SAMPLES_PER_ENTRY)


def test_logcumsumexp_extremes():
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[-1000., 0., 1000., -inf, 3.], [-inf] * 5, [1., inf, 2., 3., nan]])
    got = torch.logcumsumexp(x.to("tpu"), 1).cpu()
    torch.testing.assert_close(got, torch.logcumsumexp(x, 1), equal_nan=True)


def test_rrelu_training_slopes():
    torch.manual_seed(0)
    x = torch.randn(4000)
    noise = torch.empty(4000, device="tpu")
    out = torch.ops.aten.rrelu_with_noise(x.to("tpu"), noise, 0.1, 0.3, True).cpu()
    noise = noise.cpu()
    neg = x < 0
    assert bool((noise[~neg] == 1).all())
    slopes = noise[neg]
    assert slopes.min() >= 0.1 and slopes.max() < 0.3
    assert abs(slopes.mean().item() - 0.2) < 0.01
    torch.testing.assert_close(out, x * noise)
    # eval: the mean slope, noise untouched
    ev = torch.nn.functional.rrelu(x.to("tpu"), 0.1, 0.3, training=False).cpu()
    torch.testing.assert_close(ev, torch.nn.functional.rrelu(x, 0.1, 0.3, training=False))


def test_multilabel_margin_targets_stop_at_minus_one():
    t = torch.tensor([[3, 0, -1, 1], [0, 1, 2, 3], [-1, 2, 1, 0]])
    y = torch.randn(3, 4)
    got = torch.ops.aten.multilabel_margin_loss_forward(y.to("tpu"), t.to("tpu"), 0)
    want = torch.ops.aten.multilabel_margin_loss_forward(y, t, 0)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w)
