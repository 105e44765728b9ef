"""torch.tpu.amp: torch.cuda.amp's names for "tpu" (autocast, GradScaler,
custom_fwd, custom_bwd), as code written for CUDA spells them
(`from torch.cuda.amp import autocast, GradScaler` with "cuda" changed to
"tpu"). As torch.cuda.amp's, they are torch.amp's with the device type
filled in; autocast's dtype defaults to the device's autocast dtype
(bfloat16: torch.get_autocast_dtype("tpu")), not CUDA's float16."""
import torch

__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd"]


class autocast(torch.amp.autocast):
    """torch.autocast("tpu", ...) with torch.cuda.amp.autocast's arguments."""

    def __init__(self, enabled=True, dtype=None, cache_enabled=True):
        super().__init__("tpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """torch.amp.GradScaler("tpu", ...) with torch.cuda.amp.GradScaler's arguments."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        super().__init__("tpu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


def custom_fwd(fwd=None, *, cast_inputs=None):
    """torch.amp.custom_fwd(device_type="tpu")."""
    return torch.amp.custom_fwd(fwd, device_type="tpu", cast_inputs=cast_inputs)


def custom_bwd(bwd=None):
    """torch.amp.custom_bwd(device_type="tpu")."""
    return torch.amp.custom_bwd(bwd, device_type="tpu")
