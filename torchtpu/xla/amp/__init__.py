"""torch_xla.amp on torchtpu: autocast is torch.autocast("tpu") (bfloat16),
GradScaler is torch.amp.GradScaler("tpu"); syncfree holds the optimizers.

    with torch_xla.amp.autocast(device):      # matmuls and convs in bfloat16
        loss = loss_fn(model(x), y)           # losses, norms, softmax in float32"""
import torch

from .. import _device

__all__ = ["autocast", "GradScaler", "syncfree"]


class autocast(torch.amp.autocast):  # noqa: N801  PyTorch/XLA's name
    """torch.autocast("tpu") with PyTorch/XLA's arguments: `device` (an xla or
    tpu device; its type must map to "tpu"), dtype default bfloat16."""

    def __init__(self, device, enabled=True, dtype=None, cache_enabled=True):
        mapped = _device.map_device(device)
        kind = mapped.type if isinstance(mapped, torch.device) else torch.device(mapped).type
        if kind != "tpu":
            raise ValueError(f"torch_xla.amp.autocast: device {device} is not an xla/tpu device")
        super().__init__("tpu", dtype=dtype or torch.bfloat16, enabled=enabled,
                         cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """torch.amp.GradScaler("tpu") with PyTorch/XLA's arguments (use_zero_grad
    is accepted: gradients are zeroed by the optimizer here)."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True, use_zero_grad=False):
        del use_zero_grad
        super().__init__("tpu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


from . import syncfree  # noqa: E402
