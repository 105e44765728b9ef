"""Device collectives across the "tpu" devices of this process.

Each call takes one tensor per device (tensor i on tpu:i, i = 0..N-1) and
runs ONE replicated StableHLO program (all_reduce, all_gather,
reduce_scatter, all_to_all) launched by PJRT on all N devices at once — the
transport the design's `tpu_dist` backend uses where the plugin runs
collectives across devices (core/src/runtime/collective.c). Programs are
compiled once per signature through the runtime's program cache.

Strided or offset inputs are copied to dense tensors first; results land in
the given tensors (in place for all_reduce and broadcast), through a dense
temporary when an output is a view. Mismatched shapes or dtypes across the
devices raise RuntimeError naming the collective, the device and the shapes.

The bindings of tt_collective_run live here (not in torchtpu/_core.py)."""
import ctypes

import torch

from torchtpu import _core

__all__ = ["available", "all_reduce", "all_gather_into_tensor",
           "reduce_scatter_tensor", "all_to_all_single", "broadcast"]

# tt_collective_kind
_ALL_REDUCE, _ALL_GATHER, _REDUCE_SCATTER, _ALL_TO_ALL, _BROADCAST = range(5)

# tt_dtype
_TT_DTYPES = {
    torch.bool: 0, torch.uint8: 1, torch.int8: 2, torch.int16: 3,
    torch.int32: 4, torch.int64: 5, torch.float16: 6, torch.bfloat16: 7,
    torch.float32: 8, torch.float64: 9,
}


class _Tensor(ctypes.Structure):  # tt_tensor
    _fields_ = [
        ("storage", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int32),
        ("sizes", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("offset", ctypes.c_int64),
    ]


class _Desc(ctypes.Structure):  # tt_collective_desc
    _fields_ = [("kind", ctypes.c_int), ("op", ctypes.c_int),
                ("root", ctypes.c_int), ("ndevices", ctypes.c_int)]


_bound = False


def _lib():
    global _bound
    _core.load()
    if not _bound:
        fn = _core.core.tt_collective_run
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Desc),
                       ctypes.POINTER(_Tensor), ctypes.POINTER(_Tensor)]
        _bound = True
    return _core.core


def _op_code(op):
    """tt_reduce_op of a torch.distributed.ReduceOp (or its name)."""
    name = op if isinstance(op, str) else str(op).rsplit(".", 1)[-1]
    codes = {"SUM": 0, "AVG": 1, "PRODUCT": 2, "MIN": 3, "MAX": 4}
    if name.upper() not in codes:
        raise ValueError(f"device collectives: unsupported reduce op {op!r}")
    return codes[name.upper()]


def _whole_dense(t):
    return (t.is_contiguous() and t.storage_offset() == 0 and
            t.untyped_storage().nbytes() == t.numel() * t.element_size())


def _dense(t):
    return t if _whole_dense(t) else t.clone(memory_format=torch.contiguous_format)


def _check_devices(what, tensors):
    if not tensors:
        raise ValueError(f"{what}: no tensors")
    for i, t in enumerate(tensors):
        if t.device.type != "tpu" or (t.device.index or 0) != i:
            raise RuntimeError(
                f"{what}: tensor {i} is on {t.device}; tensor i must be on tpu:{i}")
        if t.dtype not in _TT_DTYPES:
            raise RuntimeError(f"{what}: dtype {t.dtype} is not supported")


def _desc_of(t, keep):
    sizes = (ctypes.c_int64 * max(1, t.dim()))(*t.shape)
    strides = (ctypes.c_int64 * max(1, t.dim()))(*t.stride())
    keep.append((sizes, strides, t))
    return _Tensor(t.untyped_storage().data_ptr(), _TT_DTYPES[t.dtype], t.dim(),
                   sizes, strides, t.storage_offset())


def _run(kind, op, root, ins, outs):
    n = len(ins)
    keep = []
    cin = (_Tensor * n)(*[_desc_of(t, keep) for t in ins])
    cout = (_Tensor * n)(*[_desc_of(t, keep) for t in outs])
    desc = _Desc(kind, op, root, n)
    _core.check(_lib().tt_collective_run(_core.runtime(), ctypes.byref(desc), cin, cout))


def _into(what, kind, op, root, outs, ins):
    """Runs into `outs`, through dense temporaries where an output is a view."""
    _check_devices(what, ins)
    _check_devices(what, outs)
    if len(outs) != len(ins):
        raise RuntimeError(f"{what}: {len(ins)} inputs and {len(outs)} outputs")
    dins = [_dense(t) for t in ins]
    douts = [o if _whole_dense(o) else torch.empty(o.shape, dtype=o.dtype, device=o.device)
             for o in outs]
    _run(kind, op, root, dins, douts)
    for o, d in zip(outs, douts):
        if o is not d:
            o.copy_(d)


# --- the collectives ---------------------------------------------------------------

def all_reduce(tensors, op="SUM"):
    """In place: every tensors[i] becomes the reduction (SUM, AVG, PRODUCT,
    MIN, MAX) of all of them."""
    _into("all_reduce", _ALL_REDUCE, _op_code(op), 0, tensors, tensors)


def all_gather_into_tensor(outs, ins):
    """outs[i] (N times ins[0]'s elements) gets every device's input in device
    order, as torch.distributed.all_gather_into_tensor."""
    _into("all_gather", _ALL_GATHER, 0, 0, outs, ins)


def reduce_scatter_tensor(outs, ins, op="SUM"):
    """outs[i] gets block i (along dim 0, flat) of the reduction of the ins."""
    _into("reduce_scatter", _REDUCE_SCATTER, _op_code(op), 0, outs, ins)


def all_to_all_single(outs, ins):
    """Even splits along dim 0: outs[i]'s block j is ins[j]'s block i."""
    _into("all_to_all", _ALL_TO_ALL, 0, 0, outs, ins)


def broadcast(tensors, src=0):
    """In place: every tensors[i] becomes tensors[src] (bit-exact)."""
    _into("broadcast", _BROADCAST, 0, int(src), tensors, tensors)


_available = None


def available():
    """True when this process's plugin runs a collective across its devices
    (probed once: a 1-element all_reduce over every device)."""
    global _available
    if _available is None:
        try:
            n = _core.device_count()
            ts = [torch.ones(1, device=f"tpu:{i}") for i in range(n)]
            all_reduce(ts)
            _available = n >= 1 and all(float(t.cpu()[0]) == n for t in ts)
        except Exception:  # noqa: BLE001 - any failure means "not available"
            _available = False
    return _available
