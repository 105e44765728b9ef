"""Spatial ops (lower/spatial.c) on "tpu" against the CPU.

The OpInfo entries run natively at float32 (torchtpu.testing.opinfo); the
backward of each family (not covered by the harness) is checked against
CPU autograd, with no op falling back.
"""
import pytest
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu.testing import opinfo

ENTRIES = [
    "nn.functional.interpolate.nearest", "nn.functional.interpolate.nearest-exact",
    "nn.functional.interpolate.linear", "nn.functional.interpolate.bilinear",
    "nn.functional.interpolate.bicubic", "nn.functional.interpolate.trilinear",
    "nn.functional.interpolate.area", "nn.functional.upsample_nearest",
    "nn.functional.upsample_bilinear", "nn.functional.pad.reflect",
    "nn.functional.pad.replicate", "nn.functional.pad.replicate_negative",
    "nn.functional.adaptive_avg_pool3d", "nn.functional.adaptive_max_pool1d",
    "nn.functional.adaptive_max_pool2d", "nn.functional.adaptive_max_pool3d",
    "nn.functional.max_unpool1d", "nn.functional.max_unpool2d", "nn.functional.max_unpool3d",
    "nn.functional.max_unpool2d.grad", "nn.functional.max_pool3d", "nn.functional.avg_pool3d",
    "nn.functional.unfold",
    "nn.functional.nll_loss", "nn.functional.glu",
    "nn.functional.prelu", "nn.functional.grid_sample", "grid_sampler_2d", "grid_sampler_3d",
    "_upsample_bilinear2d_aa",
]
SAMPLES_PER_ENTRY = 4


@pytest.mark.parametrize("key,op", list(zip(ENTRIES, opinfo.entries_by_key(ENTRIES))),
                         ids=ENTRIES)
def test_entry_native_float32(key, op):
    opinfo.assert_native_pass(key, op, limit=SAMPLES_PER_ENTRY)


_TARGET = torch.randint(0, 4, (2, 3, 5), generator=torch.Generator().manual_seed(1))
_WEIGHT = torch.tensor([0.5, 2.0, 1.0, 0.25])

BACKWARD = {
    "nearest2d-scale": (lambda x: F.interpolate(x, scale_factor=1.7, mode="nearest"), (2, 3, 5, 4)),
    "nearest-exact3d": (lambda x: F.interpolate(x, size=(3, 7, 2), mode="nearest-exact"),
                        (1, 2, 5, 4, 3)),
    "linear": (lambda x: F.interpolate(x, size=9, mode="linear"), (2, 3, 5)),
    "bilinear-align": (lambda x: F.interpolate(x, size=(3, 9), mode="bilinear",
                                               align_corners=True), (2, 3, 5, 4)),
    "trilinear-scale": (lambda x: F.interpolate(x, scale_factor=1.5, mode="trilinear"),
                        (1, 2, 3, 4, 3)),
    "bicubic": (lambda x: F.interpolate(x, size=(8, 3), mode="bicubic"), (2, 3, 5, 4)),
    "reflect2d": (lambda x: F.pad(x, (2, 3, 1, 0), mode="reflect"), (2, 3, 5, 4)),
    "reflect3d": (lambda x: F.pad(x, (2, 1, 1, 0, 1, 2), mode="reflect"), (1, 2, 5, 4, 3)),
    "replicate1d": (lambda x: F.pad(x, (2, 3), mode="replicate"), (3, 5)),
    "replicate2d-negative": (lambda x: F.pad(x, (2, -1, 1, 0), mode="replicate"), (2, 3, 5, 4)),
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, (2, 3, 3)), (2, 3, 5, 7, 4)),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (3, 2)), (2, 3, 7, 5)),
    "adaptive_max_pool3d": (lambda x: F.adaptive_max_pool3d(x, (2, 3, 2)), (3, 5, 7, 4)),
    "max_pool3d": (lambda x: F.max_pool3d(x, 2, stride=(1, 2, 2), padding=1, ceil_mode=True),
                   (1, 2, 4, 5, 3)),
    "avg_pool3d-ceil": (lambda x: F.avg_pool3d(x, 3, stride=2, padding=1, ceil_mode=True),
                        (1, 2, 6, 5, 4)),
    "avg_pool3d-exclude-pad": (lambda x: F.avg_pool3d(x, (2, 3, 2), stride=(2, 1, 2), padding=1,
                                                      count_include_pad=False), (2, 4, 5, 3)),
    "avg_pool3d-divisor": (lambda x: F.avg_pool3d(x, 2, divisor_override=3), (1, 2, 4, 4, 5)),
    "unfold": (lambda x: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
               (2, 3, 6, 7)),
    "fold": (lambda x: F.fold(x, (5, 6), (2, 2), dilation=(2, 1), padding=(1, 0), stride=(1, 2)),
             (2, 12, 15)),
    "fold-unbatched": (lambda x: F.fold(x, (4, 4), 2, stride=2), (8, 4)),
    "nll_loss2d-mean": (lambda x: F.nll_loss(x, _TARGET.to(x.device), ignore_index=1,
                                             weight=_WEIGHT.to(x.device)), (2, 4, 3, 5)),
    "nll_loss2d-none": (lambda x: F.nll_loss(x, _TARGET.to(x.device), reduction="none"),
                        (2, 4, 3, 5)),
    "glu": (lambda x: F.glu(x, 1), (2, 4, 3)),
    "prelu": (lambda x: F.prelu(x, torch.linspace(0.1, 0.4, 3, device=x.device)), (2, 3, 4)),
}


@pytest.mark.parametrize("name", list(BACKWARD))
def test_backward_native(name):
    """Outputs and input gradients match CPU autograd, with no fallback."""
    f, shape = BACKWARD[name]
    torch.manual_seed(0)
    x = torch.randn(shape)
    xc = x.clone().requires_grad_()
    yc = f(xc)
    gy = torch.randn_like(yc)
    yc.backward(gy)
    before = dict(torchtpu.fallback_counts())
    xt = x.to("tpu").requires_grad_()
    yt = f(xt)
    yt.backward(gy.to("tpu"))
    fell = {k: v for k, v in torchtpu.fallback_counts().items() if v != before.get(k, 0)}
    assert not fell, f"{name}: fell back: {fell}"
    torch.testing.assert_close(yt.cpu(), yc, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, atol=1e-5, rtol=1e-5)


def test_adaptive_max_pool_ties_pick_first():
    """Equal values: the index of the first in row-major order, like the CPU."""
    x = torch.zeros(1, 2, 5, 6)
    x[0, 1, 2:4, 1:5] = 1.0
    vc, ic = F.adaptive_max_pool2d(x, (2, 3), return_indices=True)
    vt, it = F.adaptive_max_pool2d(x.to("tpu"), (2, 3), return_indices=True)
    torch.testing.assert_close(vt.cpu(), vc)
    torch.testing.assert_close(it.cpu(), ic)


# --- grid_sample (lower/grid_sample.c) ---------------------------------------------------------

def grid_sample_as_on_cpu(input_shape, grid_shape, **kwargs):
    """F.grid_sample(**kwargs) in float64 with grid points well outside
    [-1, 1] (every padding path): output, grad_input and grad_grid on tpu
    against the CPU."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(input_shape, dtype=torch.float64, generator=gen, requires_grad=True)
    g = (torch.rand(grid_shape, dtype=torch.float64, generator=gen) * 3 - 1.5).requires_grad_()
    y = F.grid_sample(x, g, **kwargs)
    go = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    y.backward(go)
    xt = x.detach().to("tpu").requires_grad_()
    gt = g.detach().to("tpu").requires_grad_()
    yt = F.grid_sample(xt, gt, **kwargs)
    yt.backward(go.to("tpu"))
    torch.testing.assert_close(yt.cpu(), y)
    torch.testing.assert_close(xt.grad.cpu(), x.grad)
    torch.testing.assert_close(gt.grad.cpu(), g.grad)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("hw", [(5, 7), (1, 4)])
def test_grid_sample_forward_backward_as_on_cpu(mode, padding, align, hw, no_fallback):
    """4-d, with a size-1 dim (the degenerate reflection)."""
    grid_sample_as_on_cpu((2, 3, *hw), (2, 4, 6, 2), mode=mode, padding_mode=padding,
                          align_corners=align)


def test_spatial_transformer_float32_as_on_cpu(no_fallback):
    """affine_grid + grid_sample, as a spatial transformer network uses them."""
    gen = torch.Generator().manual_seed(0)
    theta = torch.randn(2, 2, 3, generator=gen)
    x = torch.randn(2, 3, 8, 8, generator=gen)
    ref = F.grid_sample(x, F.affine_grid(theta, (2, 3, 8, 8), align_corners=False),
                        align_corners=False)
    out = F.grid_sample(x.to("tpu"), F.affine_grid(theta.to("tpu"), (2, 3, 8, 8),
                                                   align_corners=False), align_corners=False)
    torch.testing.assert_close(out.cpu(), ref)


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_bicubic_as_on_cpu(padding, align, no_fallback):
    """Bicubic: 16 neighbours, each padded on its own; small inputs (2 x 2,
    1 x 4) put most neighbours outside."""
    for hw in ((5, 7), (2, 2), (1, 4)):
        grid_sample_as_on_cpu((2, 3, *hw), (2, 4, 6, 2), mode="bicubic", padding_mode=padding,
                              align_corners=align)


def test_grid_sampler_2d_bad_shapes_raise_like_cpu():
    """check_grid_sampler_common's checks come first, in PyTorch's words."""
    for shape_x, shape_g, match in [((5, 5, 5, 5, 5), (1, 1, 1, 4, 4), "same batch size"),
                                    ((5, 5, 5, 5), (1, 1, 4, 4), "same batch size"),
                                    ((2, 3, 4, 4), (2, 3, 3, 3), "size 2 in last dimension"),
                                    ((2, 3, 0, 4), (2, 3, 3, 2), "non-empty spatial")]:
        for d in ("cpu", "tpu"):
            x = torch.randn(shape_x, dtype=torch.float64, device=d)
            g = torch.rand(shape_g, dtype=torch.float64, device=d)
            with pytest.raises(RuntimeError, match=match):
                torch.grid_sampler_2d(x, g, 0, 0, True)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_3d_as_on_cpu(mode, padding, align, no_fallback):
    """5-d (trilinear / nearest), with a size-1 depth."""
    for sp in ((3, 4, 5), (1, 3, 2)):
        grid_sample_as_on_cpu((2, 3, *sp), (2, 2, 3, 4, 3), mode=mode, padding_mode=padding,
                              align_corners=align)


# --- antialiased interpolation (spatial.c: aa_matrix) ------------------------------------------

@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("sizes", [((16, 12), (5, 7)), ((4, 6), (9, 13)), ((9, 3), (1, 1))])
@pytest.mark.parametrize("by_scale", [False, True])
def test_interpolate_antialias_as_on_cpu(mode, align, sizes, by_scale, no_fallback):
    """interpolate(antialias=True), down and up, by size and by scale factor
    (a runtime scale): float64 output and gradient against the CPU."""
    (h, w), (oh, ow) = sizes
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, h, w, dtype=torch.float64, generator=gen, requires_grad=True)
    kw = {"scale_factor": (oh / h, ow / w)} if by_scale else {"size": (oh, ow)}
    y = F.interpolate(x, mode=mode, align_corners=align, antialias=True, **kw)
    go = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    y.backward(go)
    xt = x.detach().to("tpu").requires_grad_()
    yt = F.interpolate(xt, mode=mode, align_corners=align, antialias=True, **kw)
    yt.backward(go.to("tpu"))
    torch.testing.assert_close(yt.cpu(), y)
    torch.testing.assert_close(xt.grad.cpu(), x.grad)
