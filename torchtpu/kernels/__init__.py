"""Custom kernels: JAX and Pallas functions as torch ops (and C functions
through XLA's FFI, torchtpu.kernels.c_op).

    import torchtpu.kernels as K

    @K.jax_op("mylib::gelu_tanh")
    def gelu_tanh(x):                      # a jittable JAX function
        return jax.nn.gelu(x, approximate=True)

    y = gelu_tanh(torch.randn(8, device="tpu", requires_grad=True))

`jax_op` defines a torch.library operator "mylib::gelu_tanh" whose "tpu"
calls reach the core through the shim's one boxed fallback, like every aten
op: the core holds a lowering rule under the op's name. For each input
signature the function is exported once with `jax.export` (StableHLO) and the
rule splices that module into the program that calls it: in strict eager it
is its own program, in fused eager and under torch.compile(backend="tpu") it
sits in one program with its neighbours. A fake implementation comes from
`jax.eval_shape` (or `out_shapes`), autograd from JAX's VJP of the function,
exported the same way (or from `vjp=`, a JAX function
(*primals, *cotangents) -> grads).

JAX is an optional dependency: `pip install torchtpu[kernels]`.
"""
import ctypes
import inspect
import threading

import torch

from .. import _core

__all__ = ["jax_op", "c_op", "KernelError", "kernels"]


class KernelError(RuntimeError):
    """A kernel could not be exported, registered or run; the message names
    the kernel and the cause."""


# tt_dtype numbers (core/include/torchtpu_types.h) and the short names the
# core's signatures use ("f32[4,8],i32[8]").
_SHORT = ["b1", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64",
          "u16", "u32", "u64"]
_TORCH = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
          torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64, torch.uint16, torch.uint32, torch.uint64]
_NUMPY = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16",
          "bfloat16", "float32", "float64", "uint16", "uint32", "uint64"]

_EXPORT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p,
                              ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)
_bound = False
_lock = threading.Lock()
_libs = {}     # namespace -> torch.library.Library (kept alive)
kernels = {}   # "ns::name" -> _JaxKernel (or CKernel)


def _bind():
    global _bound
    if _bound:
        return
    core = _core.core
    core.tt_kernel_register.restype = ctypes.c_void_p
    core.tt_kernel_register.argtypes = [ctypes.c_char_p, _EXPORT_FN, ctypes.c_void_p,
                                        ctypes.POINTER(ctypes.c_int32)]
    core.tt_kernel_add_variant.restype = ctypes.c_void_p
    core.tt_kernel_add_variant.argtypes = [
        ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int32,
        ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
        ctypes.POINTER(ctypes.c_int64)]
    core.tt_kernel_num_variants.restype = ctypes.c_int32
    core.tt_kernel_num_variants.argtypes = [ctypes.c_char_p]
    _bound = True


def _check(status, kernel):
    try:
        _core.check(status)
    except RuntimeError as e:
        raise KernelError(f"kernel {kernel}: {e}") from None


def _library(ns):
    if ns not in _libs:
        _libs[ns] = torch.library.Library(ns, "FRAGMENT")
    return _libs[ns]


def signature_of(tensors):
    """The core's signature string of a list of tensors (or (dtype, shape))."""
    parts = []
    for t in tensors:
        dtype, shape = (t.dtype, tuple(t.shape)) if isinstance(t, torch.Tensor) else t
        parts.append(f"{_SHORT[_TORCH.index(dtype)]}[{','.join(str(int(d)) for d in shape)}]")
    return ",".join(parts)


def _parse_signature(sig):
    """"f32[4,8],i32[]" -> [("float32", (4, 8)), ("int32", ())]."""
    out, rest = [], sig
    while rest:
        name, rest = rest.split("[", 1)
        dims, rest = rest.split("]", 1)
        rest = rest[1:] if rest.startswith(",") else rest
        out.append((_NUMPY[_SHORT.index(name)], tuple(int(d) for d in dims.split(",") if d)))
    return out


def num_variants(name):
    """How many signatures the core holds an exported module for."""
    _bind()
    return _core.core.tt_kernel_num_variants(name.encode())


# --- exporting a JAX function ------------------------------------------------------------

def _jax():
    try:
        import jax  # noqa: F401
        from jax import export  # noqa: F401
    except ImportError as e:
        raise KernelError("torchtpu.kernels.jax_op needs JAX: pip install "
                          "'torchtpu[kernels]' (jax and jaxlib, pinned)") from e
    return jax


def _jax_platform():
    platform = _core.info()["platform"] if hasattr(_core, "info") else "cpu"
    return {"cpu": "cpu", "tpu": "tpu", "cuda": "cuda", "gpu": "cuda",
            "rocm": "rocm"}.get(str(platform).lower(), "cpu")


def export_text(fn, avals, platform=None):
    """`fn` exported for `avals` (jax.ShapeDtypeStruct) as StableHLO text
    without locations, plus its output avals."""
    jax = _jax()
    from jax import export
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    exp = export.export(jax.jit(fn), platforms=[platform or _jax_platform()])(*avals)
    with mlir.make_ir_context() as ctx:
        module = ir.Module.parse(exp.mlir_module(), context=ctx)
        text = module.operation.get_asm(enable_debug_info=False)
    return text, list(exp.out_avals)


class _JaxKernel:
    def __init__(self, name, fn, nin, nout, out_shapes):
        self.name, self.fn, self.nin, self.nout = name, fn, nin, nout
        self.out_shapes = out_shapes
        self.exports = 0  # variants exported by this process
        self.last_error = None
        self._cb = _EXPORT_FN(self._export_cb)  # kept alive with the kernel

    def register(self):
        _bind()
        op = ctypes.c_int32(-1)
        _check(_core.core.tt_kernel_register(self.name.encode(), self._cb, None,
                                             ctypes.byref(op)), self.name)

    def _avals(self, sig):
        jax = _jax()
        import jax.numpy as jnp
        return [jax.ShapeDtypeStruct(shape, jnp.dtype(dt)) for dt, shape in _parse_signature(sig)]

    def fake_shapes(self, specs):
        """[(torch dtype, shape)] of the results for input specs [(dtype, shape)]."""
        if self.out_shapes is not None:
            shapes = self.out_shapes(*specs) if callable(self.out_shapes) else self.out_shapes
            shapes = [shapes] if isinstance(shapes, tuple) and shapes and isinstance(shapes[0], torch.dtype) else shapes
            return [(d, tuple(s)) for d, s in shapes]
        jax = _jax()
        import jax.numpy as jnp
        avals = [jax.ShapeDtypeStruct(tuple(s), jnp.dtype(_NUMPY[_TORCH.index(d)])) for d, s in specs]
        try:
            out = jax.eval_shape(self.fn, *avals)
        except Exception as e:  # noqa: BLE001 - the user's function
            raise KernelError(f"kernel {self.name}: jax.eval_shape failed for "
                              f"({signature_of(specs)}): {type(e).__name__}: {e}") from e
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != self.nout:
            raise KernelError(f"kernel {self.name}: the function returns {len(outs)} "
                              f"results, the op was declared with {self.nout}")
        return [(_TORCH[_NUMPY.index(str(o.dtype))], tuple(o.shape)) for o in outs]

    def export(self, sig):
        """Exports the variant for `sig` and hands it to the core."""
        avals = self._avals(sig)
        try:
            text, outs = export_text(self.fn, avals)
        except Exception as e:  # noqa: BLE001 - the user's function
            raise KernelError(f"kernel {self.name}: jax.export failed for ({sig}): "
                              f"{type(e).__name__}: {e}") from e
        got = [(_TORCH[_NUMPY.index(str(o.dtype))], tuple(o.shape)) for o in outs]
        want = self.fake_shapes([(_TORCH[_NUMPY.index(str(a.dtype))], a.shape) for a in avals])
        if got != want:
            raise KernelError(f"kernel {self.name}: the fake implementation gives "
                              f"({signature_of(want)}) but the exported function returns "
                              f"({signature_of(got)}) for ({sig})")
        n = len(got)
        dtypes = (ctypes.c_int32 * n)(*[_TORCH.index(d) for d, _ in got])
        ranks = (ctypes.c_int32 * n)(*[len(s) for _, s in got])
        flat = [int(x) for _, s in got for x in s]
        dims = (ctypes.c_int64 * max(len(flat), 1))(*flat)
        _check(_core.core.tt_kernel_add_variant(self.name.encode(), sig.encode(), text.encode(),
                                                n, dtypes, ranks, dims), self.name)
        self.exports += 1

    def _export_cb(self, _ctx, _name, sig, err, cap):
        try:
            self.export(sig.decode())
            return 0
        except BaseException as e:  # noqa: BLE001 - never let it cross into C
            self.last_error = e
            msg = str(e).encode("utf-8", "replace")[: max(cap - 1, 0)]
            ctypes.memmove(err, msg + b"\0", len(msg) + 1)
            return 1


# --- the torch op -------------------------------------------------------------------------

def _hint(d):
    return d.node.hint if isinstance(d, torch.SymInt) else int(d)


def _fake_outputs(kernel, args):
    """Fake results: shapes from the kernel with concrete sizes; a symbolic
    input size that reappears in a result stays symbolic there."""
    specs = [(a.dtype, tuple(_hint(d) for d in a.shape)) for a in args]
    sym = {}
    for a in args:
        for d in a.shape:
            if isinstance(d, torch.SymInt):
                sym.setdefault(_hint(d), d)
    outs = []
    for dtype, shape in kernel.fake_shapes(specs):
        shape = [sym.get(int(d), int(d)) for d in shape]
        outs.append(args[0].new_empty(shape, dtype=dtype) if args else torch.empty(shape, dtype=dtype))
    return outs[0] if kernel.nout == 1 else tuple(outs)


def _define(name, argnames, nout, kernel):
    ns, op = name.split("::", 1)
    lib = _library(ns)
    ret = "Tensor" if nout == 1 else "(" + ", ".join(["Tensor"] * nout) + ")"
    lib.define(f"{op}({', '.join('Tensor ' + a for a in argnames)}) -> {ret}")
    torch.library.register_fake(name, lambda *args: _fake_outputs(kernel, args), lib=lib)

    def cpu_impl(*args):  # the reference path: JAX on the host
        import numpy as np
        jax = _jax()
        out = jax.jit(kernel.fn)(*[np.asarray(a.detach().contiguous()) for a in args])
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        res = [torch.from_numpy(np.array(o)) for o in outs]
        return res[0] if nout == 1 else tuple(res)

    lib.impl(op, cpu_impl, "CPU")
    return getattr(getattr(torch.ops, ns), op).default


def jax_op(name, fn=None, *, out_shapes=None, vjp=None, num_outputs=None, _grad=True):
    """Makes the JAX function `fn` (tensors in, a tensor or tuple out) the
    torch op `name` ("ns::name") and returns the op. As a decorator:
    `@jax_op("ns::name")`.

    out_shapes: results' (dtype, shape) pairs, or a function of the inputs'
    (dtype, shape) pairs giving them (default: jax.eval_shape of fn).
    vjp: JAX function (*inputs, *cotangents) -> one gradient per input
    (default: jax.vjp of fn). num_outputs: how many results fn returns (the
    schema is fixed before any call: give it for functions returning a
    tuple; default 1, or len(out_shapes))."""
    if fn is None:
        return lambda f: jax_op(name, f, out_shapes=out_shapes, vjp=vjp, num_outputs=num_outputs)
    if "::" not in name:
        raise KernelError(f"kernel name {name!r} must be 'namespace::name'")
    _jax()
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    argnames = [p.name for p in params]
    nin = len(argnames)
    if out_shapes is not None and not callable(out_shapes):
        nout = len(out_shapes) if isinstance(out_shapes, list) else 1
    else:
        nout = num_outputs or 1
    with _lock:
        if name in kernels:
            raise KernelError(f"kernel {name} is already defined")
        kernel = _JaxKernel(name, fn, nin, nout, out_shapes)
        kernel.register()  # before the op's first call: the shim reads ids once
        op = _define(name, argnames, nout, kernel)
        kernels[name] = kernel
    kernel.op = op
    if _grad:
        _attach_autograd(name, fn, nin, nout, vjp, op)
    return op


def _attach_autograd(name, fn, nin, nout, vjp, op):
    def bwd_fn(*args):
        primals, cts = args[:nin], args[nin:]
        if vjp is not None:
            grads = vjp(*primals, *cts)
            grads = tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)
        else:  # differentiate the floating inputs; the others get zeros
            jax = _jax()
            import jax.numpy as jnp
            diff = [i for i, p in enumerate(primals) if jnp.issubdtype(p.dtype, jnp.inexact)]

            def f(*xs):
                full = list(primals)
                for i, x in zip(diff, xs):
                    full[i] = x
                return fn(*full)

            _, pull = jax.vjp(f, *[primals[i] for i in diff])
            got = dict(zip(diff, pull(tuple(cts) if nout > 1 else cts[0])))
            grads = tuple(got.get(i, jnp.zeros(p.shape, p.dtype)) for i, p in enumerate(primals))
        return grads if nin > 1 else grads[0]

    # The backward is a kernel too: exported per signature, fused alike.
    ns, short = name.split("::", 1)
    params = [inspect.Parameter(f"x{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(nin)]
    params += [inspect.Parameter(f"g{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(nout)]
    bwd_fn.__signature__ = inspect.Signature(params)
    bwd = jax_op(f"{ns}::{short}_bwd", bwd_fn, num_outputs=nin,
                 out_shapes=lambda *specs: list(specs[:nin]), _grad=False)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, *grads):
        inputs = ctx.saved_tensors
        outs = _fake_like(op, inputs)
        grads = [g if g is not None else torch.zeros_like(o) for g, o in zip(grads, outs)]
        res = bwd(*inputs, *grads)
        res = res if isinstance(res, tuple) else (res,)
        # Integer inputs (group sizes, indices) get no gradient.
        return tuple(r if i.is_floating_point() else None for r, i in zip(res, inputs))

    torch.library.register_autograd(name, backward, setup_context=setup_context)


def _fake_like(op, inputs):
    """Result metas only needed for None cotangents: shapes from the kernel."""
    kernel = kernels[op.name()]
    specs = [(a.dtype, tuple(a.shape)) for a in inputs]
    return [torch.empty(s, dtype=d, device=inputs[0].device) for d, s in kernel.fake_shapes(specs)]


def c_op(*args, **kwargs):  # defined in torchtpu/kernels/ffi.py
    from .ffi import c_op as impl
    return impl(*args, **kwargs)
