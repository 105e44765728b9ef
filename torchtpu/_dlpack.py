"""DLPack for tpu tensors: torch.from_dlpack, torch.utils.dlpack.to_dlpack /
from_dlpack, Tensor.__dlpack__ / __dlpack_device__ and torch.asarray of a
capsule alias a tpu tensor as they alias a CUDA one (copy=True and other
devices copy, as there).

PyTorch cannot do two things for a renamed PrivateUse1 backend, so install()
wraps them once, at import:

  - Tensor.__dlpack_device__ compares device.type with "privateuse1", which
    "tpu" never is: tpu tensors answer (kDLExtDev, index), what PyTorch's C++
    side (torchDeviceToDLDevice) gives PrivateUse1;
  - a capsule of a tpu tensor must name its storage handle, not PyTorch's
    data_ptr() (shim/dlpack.cpp says why): torch._C._to_dlpack and
    _to_dlpack_versioned, which Tensor.__dlpack__ and
    torch.utils.dlpack.to_dlpack call, hand each capsule they make from a tpu
    tensor to the shim (torchtpu::_dlpack_export) before returning it.

Everything else (Tensor.__dlpack__'s checks, imports, copies to other
devices) stays PyTorch's. Exports are not a hot path; ops never come here.
"""
import ctypes
import functools
import numbers

import torch
from torch.overrides import has_torch_function_unary

_KDL_EXT_DEV = 12  # DLDeviceType.kDLExtDev: PrivateUse1 in PyTorch's DLConvertor

# Our own prototype: ctypes.pythonapi's function objects are shared.
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def _backend():
    return torch._C._get_privateuse1_backend_name()


def _source(tensor, dl_device, copy):
    """The tpu tensor the capsule will hold, deciding as PyTorch's
    at::maybeCopyTensor does (a move to dl_device's device, else a clone when
    copy is True), or None when it will hold no tpu tensor or PyTorch is to
    raise (a move with copy=False, malformed arguments)."""
    if copy is not None and not isinstance(copy, bool):
        return None
    if dl_device is None:
        target = tensor.device
    else:
        if not (isinstance(dl_device, (tuple, list)) and len(dl_device) == 2 and all(
                isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in dl_device)):
            return None  # PyTorch's parser says what is wrong
        if int(dl_device[0]) != _KDL_EXT_DEV:
            return None
        target = torch.device(_backend(), int(dl_device[1]))
    if target.type != _backend():
        return None
    if target != tensor.device:
        return None if copy is False else tensor.to(target)
    return tensor.clone().detach() if copy else tensor


def _wrap_export(original, name):
    versioned = name == b"dltensor_versioned"

    @functools.wraps(original)
    def to_dlpack(data, *args, dl_device=None, copy=None):
        source = None
        if not args and isinstance(data, torch.Tensor):
            source = _source(data, dl_device, copy)
        if source is None:
            return original(data, *args, dl_device=dl_device, copy=copy)
        capsule = original(source)
        managed = _capsule_pointer(capsule, name)
        torch.ops.torchtpu._dlpack_export(source, managed, versioned)
        return capsule

    to_dlpack._torchtpu_original = original
    return to_dlpack


def _wrap_device(original):
    @functools.wraps(original)
    def __dlpack_device__(self):
        if not has_torch_function_unary(self) and self.device.type == _backend():
            from torch.utils.dlpack import DLDeviceType
            index = self.device.index
            return (DLDeviceType.kDLExtDev, index if index is not None else 0)
        return original(self)

    __dlpack_device__._torchtpu_original = original
    return __dlpack_device__


def install():
    if hasattr(torch._C._to_dlpack, "_torchtpu_original"):
        return  # installed already
    from torch.utils import dlpack
    torch._C._to_dlpack = _wrap_export(torch._C._to_dlpack, b"dltensor")
    torch._C._to_dlpack_versioned = _wrap_export(torch._C._to_dlpack_versioned,
                                                 b"dltensor_versioned")
    dlpack.to_dlpack = torch._C._to_dlpack  # bound there when it was imported
    torch.Tensor.__dlpack_device__ = _wrap_device(torch.Tensor.__dlpack_device__)
