"""torch.autocast("tpu", dtype=torch.bfloat16): automatic mixed precision on
the tpu device (bfloat16 is also the default dtype: torch.autocast("tpu")).

PyTorch 2.13 needs two things from an out-of-tree (PrivateUse1) backend before
autocast works on it:

1. the device module (torch.tpu) must have get_amp_supported_dtype(); without
   it torch.autocast("tpu") raises;
2. kernels under the AutocastPrivateUse1 dispatch key: a fallthrough for every
   op, plus, for the ops autocast changes, a kernel that casts the inputs and
   redispatches below the autocast key. PyTorch registers these for CUDA, CPU,
   XPU, MPS... but not for PrivateUse1, so without them every op raises
   "Could not run ... with arguments from the 'Autocasttpu' backend".

The op lists follow PyTorch's own CUDA autocast policy: matmul-like ops run in
the autocast dtype; ops that lose accuracy in low precision (exp, log, pow,
softmax, norms, losses, sums) run in float32; ops mixing dtypes (cat, stack,
addcmul ...) run in the widest input type.

The kernels here are Python (one cast + redispatch per call, only while an
autocast region is active on "tpu"; the fallthrough costs nothing otherwise).
The same registration belongs in the C++ shim eventually (as PyTorch's
open_registration example does with KERNEL_PRIVATEUSEONE); install() skips
every op that already has a C++ kernel, so the two never collide.
"""
import sys

import torch

_KEY = "AutocastPrivateUse1"
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

# Ops (all overloads) that run in the autocast dtype (bfloat16 or float16).
LOWER_PRECISION = [
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "convolution", "prelu", "addmm", "addmv",
    "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm",
    "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell", "scaled_dot_product_attention",
]

# Ops that run in float32.
FP32 = [
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "group_norm",
    "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist",
    "renorm", "logsumexp", "prod", "softmax", "log_softmax", "cumprod", "cumsum",
    "linalg_vector_norm", "linalg_matrix_norm", "sum", "norm", "cross_entropy_loss",
]

# Ops that run in the widest floating type among their inputs.
PROMOTE = [
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler",
    "index_put", "scatter_add", "tensordot", "stack", "cat", "index_copy",
]

_LOW_FLOATS = (torch.float16, torch.bfloat16)


def get_amp_supported_dtype():
    """The dtypes torch.autocast("tpu", dtype=...) accepts."""
    return [torch.bfloat16, torch.float16]


# --- casting ------------------------------------------------------------------------

def _is_tpu_float(x):
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.device.type == "tpu"


def _map(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_map(v, fn) for v in value)
    return value


def _cast_all(args, kwargs, dtype, only=None):
    def cast(t):
        if _is_tpu_float(t) and t.dtype != dtype and t.dtype != torch.float64:
            if only is None or t.dtype in only:
                return t.to(dtype)
        return t
    return _map(args, cast), {k: _map(v, cast) for k, v in kwargs.items()}


def _widest(args, kwargs):
    found = []
    _map(list(args) + list(kwargs.values()),
         lambda t: found.append(t.dtype) if _is_tpu_float(t) else None)
    if not found:
        return None
    if torch.float32 in found:
        return torch.float32
    return found[0] if all(d == found[0] for d in found) else torch.float32


def _redispatch(op, args, kwargs):
    with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
        return op(*args, **kwargs)


def _lower_kernel(op):
    def kernel(*args, **kwargs):
        dtype = torch.get_autocast_dtype("tpu")
        args, kwargs = _cast_all(args, kwargs, dtype)
        return _redispatch(op, args, kwargs)
    return kernel


def _fp32_kernel(op):
    def kernel(*args, **kwargs):
        args, kwargs = _cast_all(args, kwargs, torch.float32, only=_LOW_FLOATS)
        return _redispatch(op, args, kwargs)
    return kernel


def _promote_kernel(op):
    def kernel(*args, **kwargs):
        dtype = _widest(args, kwargs)
        if dtype is not None:
            args, kwargs = _cast_all(args, kwargs, dtype, only=_LOW_FLOATS + (torch.float32,))
        return _redispatch(op, args, kwargs)
    return kernel


# --- registration -------------------------------------------------------------------

_libs = []  # keep the registrations alive


def _overloads(name):
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return []
    return [getattr(packet, o) for o in packet.overloads()]


def install(device_module):
    """Makes autocast work on "tpu" (idempotent). device_module is torch.tpu."""
    if _libs:
        return
    device_module.get_amp_supported_dtype = get_amp_supported_dtype
    # torch.tpu.amp: torch.cuda.amp's names (also `from torch.tpu.amp import ...`).
    from . import tpu_amp
    device_module.amp = tpu_amp
    sys.modules["torch.tpu.amp"] = tpu_amp
    # torch.autocast("tpu") without a dtype: bfloat16, the TPU's matrix-unit
    # type (PyTorch's default for a PrivateUse1 device is CUDA's float16;
    # PyTorch/XLA's for TPUs is bfloat16 too). A dtype passed still wins.
    torch.set_autocast_dtype("tpu", torch.bfloat16)
    if not torch._C._dispatch_has_backend_fallback(torch._C.DispatchKey.AutocastPrivateUse1):
        fallback = torch.library.Library("_", "IMPL")
        fallback.fallback(torch.library.fallthrough_kernel, _KEY)
        _libs.append(fallback)
    lib = torch.library.Library("aten", "IMPL")
    _libs.append(lib)
    for names, make in ((LOWER_PRECISION, _lower_kernel), (FP32, _fp32_kernel),
                        (PROMOTE, _promote_kernel)):
        for name in names:
            for op in _overloads(name):
                schema = op._schema
                qualified = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
                try:
                    if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, _KEY):
                        continue  # a C++ kernel exists (the shim's), keep it
                except RuntimeError:
                    continue  # listed by Python, unknown to the dispatcher
                if "out" in schema.overload_name or schema.name.endswith("_"):
                    continue  # out= and in-place variants keep the caller's dtypes
                lib.impl(op, make(op), _KEY)
