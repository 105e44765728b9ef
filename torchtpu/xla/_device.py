"""The device string "xla" inside a PyTorch/XLA script means this process's
"tpu" device.

torch.device("xla") is a valid PyTorch device (XLA is one of PyTorch's own
device types), but a tensor sent there needs PyTorch/XLA's C++ backend, so
`.to("xla")` raises "PyTorch is not linked with support for xla devices".
PyTorch parses device strings in C++ and has no alias table, and PrivateUse1
takes one name (ours is "tpu"), so the mapping is made where the device
reaches a torch function: a TorchFunctionMode, entered when a script imports
torch_xla, replaces a `device=` argument (and `.to(...)`'s device) that is
"xla", "xla:N" or torch.device("xla", N) with torch.device("tpu", local
ordinal). Every other call passes through unchanged (one dict lookup).

What it cannot change: torch.device("xla") itself (a C type, not a torch
function) still prints as xla, and a tensor's `.device.type` is "tpu", so a
check `t.device.type == "xla"` is False (xm.is_xla_tensor(t) is True). The
mode is thread-local, as PyTorch's modes are: threads the script starts do
not map "xla" (xm.xla_device() works everywhere)."""
import torch
from torch.overrides import TorchFunctionMode

from . import _world

_TO = {torch.Tensor.to, torch.Tensor.new_empty, torch.Tensor.new_zeros,
       torch.Tensor.new_ones, torch.Tensor.new_full, torch.Tensor.new_tensor}


def tpu_device():
    """torch.device("tpu", local ordinal): the device of this process."""
    return torch.device("tpu", local_index())


def local_index():
    """The tpu device index of this process: its local rank when launched
    (one process per device), else the current tpu device."""
    if _world.launched():
        return _world.local_rank()
    return torch.tpu.current_device()


def map_device(device):
    """"xla", "xla:N", torch.device("xla"[, N]) -> the tpu device; anything
    else unchanged. An explicit N names the N-th device of this process (one
    per process when launched, so "xla:0" is this process's device)."""
    if isinstance(device, str):
        if device != "xla" and not device.startswith("xla:"):
            return device
        device = torch.device(device)
    if isinstance(device, torch.device) and device.type == "xla":
        if _world.launched() or device.index is None:
            return tpu_device()
        return torch.device("tpu", device.index)
    return device


class XlaDeviceAlias(TorchFunctionMode):
    """Maps the "xla" device to "tpu" in torch function calls (see module doc)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs:
            device = kwargs.get("device")
            if device is not None:
                kwargs = dict(kwargs, device=map_device(device))
        else:
            kwargs = {}
        if func in _TO and len(args) > 1:
            args = (args[0],) + tuple(map_device(a) for a in args[1:])
        return func(*args, **kwargs)


_mode = None


def enable():
    """Enters the alias mode on this thread (once)."""
    global _mode
    if _mode is None:
        _mode = XlaDeviceAlias()
        _mode.__enter__()


def disable():
    """Leaves the alias mode ("xla" then raises as in plain PyTorch)."""
    global _mode
    if _mode is not None:
        _mode.__exit__(None, None, None)
        _mode = None
