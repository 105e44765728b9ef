"""C kernels through XLA's FFI: torchtpu.kernels.c_op.

    rms = c_op("mylib::rmsnorm", "build/examples/librmsnorm_ffi.so", "rmsnorm_forward",
               inputs=["x", "w"], out_shapes=lambda x, w: [x],
               backward=c_op("mylib::rmsnorm_bwd", lib, "rmsnorm_backward",
                             inputs=["x", "w", "dy"], out_shapes=lambda x, w, dy: [x, w]))

The symbol is a plain C function (tt_kernel_buffer ins/outs, returns NULL or an
error message; see core/include/torchtpu_types.h and examples/rmsnorm_ffi.c).
The core registers its FFI handler with the plugin's PJRT FFI extension and
lowers the op to a typed-FFI stablehlo.custom_call naming the kernel, so it
runs in strict eager, fused eager and under torch.compile alike. out_shapes
maps the inputs' (dtype, shape) pairs to the results' (the fake
implementation). backward: an op taking (*inputs, *output grads) and returning
one gradient per input (None-able for integer inputs)."""
import ctypes
import os

import torch

from .. import _core
from . import (_EXPORT_FN, _NUMPY, _TORCH, KernelError, _bind, _check, _library, _lock,
               _parse_signature, kernels, signature_of)


class CKernel:
    def __init__(self, name, nout, out_shapes):
        self.name, self.nout, self.out_shapes = name, nout, out_shapes
        self._cb = _EXPORT_FN(self._shape_cb)

    def fake_shapes(self, specs):
        shapes = self.out_shapes(*specs)
        if len(shapes) != self.nout:
            raise KernelError(f"kernel {self.name}: out_shapes gave {len(shapes)} results, "
                              f"the op has {self.nout}")
        return [(d, tuple(int(x) for x in s)) for d, s in shapes]

    def _shape_cb(self, _ctx, _name, sig, err, cap):
        try:
            sig = sig.decode()
            specs = [(_TORCH[_NUMPY.index(dt)], shape) for dt, shape in _parse_signature(sig)]
            got = self.fake_shapes(specs)
            n = len(got)
            dtypes = (ctypes.c_int32 * n)(*[_TORCH.index(d) for d, _ in got])
            ranks = (ctypes.c_int32 * n)(*[len(s) for _, s in got])
            flat = [x for _, s in got for x in s]
            dims = (ctypes.c_int64 * max(len(flat), 1))(*flat)
            _check(_core.core.tt_kernel_add_variant(self.name.encode(), sig.encode(), None, n,
                                                    dtypes, ranks, dims), self.name)
            return 0
        except BaseException as e:  # noqa: BLE001 - never let it cross into C
            msg = str(e).encode("utf-8", "replace")[: max(cap - 1, 0)]
            ctypes.memmove(err, msg + b"\0", len(msg) + 1)
            return 1


class _Buffer(ctypes.Structure):  # tt_kernel_buffer
    _fields_ = [("dtype", ctypes.c_int), ("rank", ctypes.c_int32),
                ("dims", ctypes.POINTER(ctypes.c_int64)), ("data", ctypes.c_void_p)]


_C_FN = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.POINTER(_Buffer), ctypes.c_int32,
                         ctypes.POINTER(_Buffer), ctypes.c_int32)


def _cpu_impl(kernel, library, symbol, nout):
    """The op on CPU tensors: the same C function called directly (the
    reference path, and what opcheck's CPU checks run)."""
    fn = _C_FN((symbol, ctypes.CDLL(library)))

    def describe(ts):
        bufs = (_Buffer * max(len(ts), 1))()
        keep = []
        for b, t in zip(bufs, ts):
            dims = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
            keep.append(dims)
            b.dtype, b.rank, b.dims, b.data = _TORCH.index(t.dtype), t.dim(), dims, t.data_ptr()
        return bufs, keep

    def impl(*args):
        ins = [a.detach().contiguous() for a in args]
        outs = [torch.empty(s, dtype=d) for d, s in
                kernel.fake_shapes([(a.dtype, tuple(a.shape)) for a in ins])]
        ib, k1 = describe(ins)
        ob, k2 = describe(outs)
        err = fn(ib, len(ins), ob, len(outs))
        if err:
            raise KernelError(f"C kernel {kernel.name} failed: {err.decode()}")
        return outs[0] if nout == 1 else tuple(outs)

    return impl


def _bind_c():
    _bind()
    core = _core.core
    core.tt_kernel_register_c.restype = ctypes.c_void_p
    core.tt_kernel_register_c.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.c_char_p, _EXPORT_FN, ctypes.c_void_p,
                                          ctypes.POINTER(ctypes.c_int32)]


def c_op(name, library, symbol, *, inputs, out_shapes, backward=None):
    """Makes C function `symbol` of shared library `library` the torch op
    `name` ("ns::name") taking tensors named `inputs`; returns the op."""
    if "::" not in name:
        raise KernelError(f"kernel name {name!r} must be 'namespace::name'")
    _bind_c()
    library = os.path.abspath(library) if os.path.sep in library else library
    probe = [(torch.float32, (1,))] * len(inputs)
    try:
        nout = len(out_shapes(*probe))
    except Exception:  # noqa: BLE001 - shape functions may reject the probe
        nout = 1
    with _lock:
        if name in kernels:
            raise KernelError(f"kernel {name} is already defined")
        kernel = CKernel(name, nout, out_shapes)
        op_id = ctypes.c_int32(-1)
        _check(_core.core.tt_kernel_register_c(_core.runtime(), name.encode(), library.encode(),
                                               symbol.encode(), kernel._cb, None,
                                               ctypes.byref(op_id)), name)
        ns, short = name.split("::", 1)
        lib = _library(ns)
        ret = "Tensor" if nout == 1 else "(" + ", ".join(["Tensor"] * nout) + ")"
        lib.define(f"{short}({', '.join('Tensor ' + a for a in inputs)}) -> {ret}")

        def fake(*args):
            specs = [(a.dtype, tuple(a.shape)) for a in args]
            outs = [args[0].new_empty(s, dtype=d) for d, s in kernel.fake_shapes(specs)]
            return outs[0] if nout == 1 else tuple(outs)

        torch.library.register_fake(name, fake, lib=lib)
        lib.impl(short, _cpu_impl(kernel, library, symbol, nout), "CPU")
        kernels[name] = kernel
    op = getattr(getattr(torch.ops, ns), short).default
    kernel.op = op
    if backward is not None:
        def setup_context(ctx, inputs, output):  # noqa: F811 - torch passes these names
            ctx.save_for_backward(*inputs)

        def bwd(ctx, *grads):
            xs = ctx.saved_tensors
            grads = [g.contiguous() if g is not None else torch.zeros(s, dtype=d, device=xs[0].device)
                     for g, (d, s) in zip(grads, kernel.fake_shapes([(x.dtype, tuple(x.shape)) for x in xs]))]
            res = backward(*xs, *grads)
            res = res if isinstance(res, tuple) else (res,)
            return tuple(r if x.is_floating_point() else None for r, x in zip(res, xs))

        torch.library.register_autograd(name, bwd, setup_context=setup_context)
    return op


def example_library():
    """The path of the example C kernels' library (built by `make`)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "build", "examples", "librmsnorm_ffi.so")


_rmsnorm = None


def rmsnorm_example():
    """The example RMSNorm ("torchtpu_examples::rmsnorm", forward and backward in
    C, examples/rmsnorm_ffi.c) as an op with autograd; eps 1e-6."""
    global _rmsnorm
    if _rmsnorm is None:
        lib = example_library()
        bwd = c_op("torchtpu_examples::rmsnorm_bwd", lib, "rmsnorm_backward",
                   inputs=["x", "w", "dy"], out_shapes=lambda x, w, dy: [x, w])
        _rmsnorm = c_op("torchtpu_examples::rmsnorm", lib, "rmsnorm_forward",
                        inputs=["x", "w"], out_shapes=lambda x, w: [x], backward=bwd)
    return _rmsnorm
