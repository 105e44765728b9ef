"""torchtpu: PyTorch on TPUs (and every PJRT device) as the native "tpu" device.

    import torch, torchtpu
    x = torch.randn(3, 4, device="tpu")

Importing registers the device: PyTorch's PrivateUse1 backend is renamed
"tpu", torch.tpu mirrors torch.cuda, Tensor.tpu()/Module.tpu() exist. The
runtime (PJRT plugin, client) starts lazily on first use."""
import torch

from . import _env

_env.export_site_packages()  # before the core can start
_env.quiet_plugin_logs()

from . import _core  # noqa: E402

_core.load()

from . import tpu  # noqa: E402

__version__ = "0.1.0"
__all__ = ["runtime_info", "fallback_counts", "set_fallback_mode", "fallback_mode",
           "set_launch_blocking", "launch_blocking", "synchronize", "tpu"]

# --- registration with PyTorch -------------------------------------------------------

torch.utils.rename_privateuse1_backend("tpu")
torch._register_device_module("tpu", tpu)
torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)


def _patch_printing():
    """Tensor printing runs many small ops (abs, isfinite, masked_select ...)
    on the tensor's device; for tpu, print from one host copy instead, as
    PyTorch does for XLA."""
    import torch._tensor_str as ts

    original = ts._tensor_str

    def _tensor_str(self, indent):
        if self.device.type == "tpu":
            self = self.cpu()
        return original(self, indent)

    ts._tensor_str = _tensor_str


_patch_printing()


# --- runtime information and modes -------------------------------------------------------

def runtime_info():
    """What backs the "tpu" device: platform ("cpu", "tpu", "cuda"),
    platform_version, plugin_path, api_version (major, minor), device_count,
    device_kind, supports_f64. Raises RuntimeError if no plugin can start."""
    return _core.info()


def fallback_counts():
    """{op name: calls} for ops that ran on the CPU for lack of a tpu lowering."""
    return _core.fallback_counts()


def set_fallback_mode(mode):
    """"warn" (default): ops without a tpu lowering run on the CPU, with one
    warning per op; "silent": the same without warnings; "error": raise
    NotImplementedError instead."""
    _core.set_fallback_mode(mode)


def fallback_mode():
    return _core.fallback_mode()


_launch_blocking = False


def _apply_mode(rt=None):
    del rt
    _core.set_mode(_core.TT_MODE_DEBUG if _launch_blocking else _core.TT_MODE_STRICT)


def set_launch_blocking(flag=True):
    """Debug eager: synchronous after every op, so an error surfaces at the op
    that caused it (like CUDA_LAUNCH_BLOCKING). Env: TPU_LAUNCH_BLOCKING=1."""
    global _launch_blocking
    _launch_blocking = bool(flag)
    if _core.runtime_or_none() is not None:
        _apply_mode()


def launch_blocking():
    return _launch_blocking


def synchronize():
    tpu.synchronize()


_core._on_first_runtime.append(_apply_mode)
set_fallback_mode(_env.fallback_mode())
if _env.launch_blocking():
    set_launch_blocking(True)
