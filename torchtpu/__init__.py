"""torchtpu: PyTorch on TPUs (and every PJRT device) as the native "tpu" device.

    import torch, torchtpu
    x = torch.randn(3, 4, device="tpu")

Importing registers the device: PyTorch's PrivateUse1 backend is renamed
"tpu", torch.tpu mirrors torch.cuda, Tensor.tpu()/Module.tpu() exist. The
runtime (PJRT plugin, client) starts lazily on first use."""
import torch

from . import _env

_env.validate()  # a bad setting is an error naming it, before anything starts
_env.export_site_packages()  # before the core can start
_env.quiet_plugin_logs()
_env.quiet_autograd_exit()
_env.launched_devices()  # torchrun: LOCAL_WORLD_SIZE CPU-plugin devices

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

from . import _dlpack  # noqa: E402

_dlpack.install()  # torch.from_dlpack / to_dlpack / asarray(capsule) alias tpu tensors

from . import _pickle  # noqa: E402

_pickle.install()  # pickle.dumps of tpu tensors and storages, through a host copy

from . import amp  # noqa: E402

amp.install(tpu)  # torch.autocast("tpu") (bfloat16), torch.tpu.amp

from . import compile as _compile  # noqa: E402,F401  (torchtpu.compile)
from . import distributed  # noqa: E402  c10d backend "tpu" / "tpu_dist"

distributed._register()

from . import _data_dependent  # noqa: E402

_data_dependent.install()  # nonzero, masked_select on the device (their shape is the data's)

from . import _embedding_bag  # noqa: E402

_embedding_bag.install()  # EmbeddingBag's gradients on the device

from . import _sparse  # noqa: E402

_sparse.install()  # sparse COO / CSR kernels (docs/sparse.md)

from . import _flex_attention  # noqa: E402

_flex_attention.install()  # flex_attention accepts "tpu" (TorchTitan's llama3 attention)

# torch.compile(backend="tpu") is found through the package's entry point
# (pyproject.toml); _compile.register() does the same for a source checkout
# that was not pip-installed.


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
    device_kind, supports_f64, asynchronous (launches return before their
    programs end: always on TPU and GPU; on XLA's CPU plugin only with
    TORCHTPU_CPU_ASYNC=1), host_memory_kept (the CPU plugin's freed host
    memory stays in the C heap for reuse: TORCHTPU_CPU_KEEP_MEMORY, on by
    default). Raises RuntimeError if no plugin can start."""
    info = dict(_core.info())
    info["distributed"] = distributed.info()  # backend "tpu", transport "host (gloo)"
    return info


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


from . import modes  # noqa: E402
from .modes import set_mode, get_mode, mode, sync  # noqa: E402,F401
from . import profiler  # noqa: E402,F401  tpu programs in Chrome traces


def set_launch_blocking(flag=True):
    """Debug eager: synchronous after every op, so an error surfaces at the op
    that caused it (like CUDA_LAUNCH_BLOCKING). Env: TPU_LAUNCH_BLOCKING=1.
    Same as set_mode("debug"); False returns from debug to strict."""
    if flag:
        set_mode("debug")
    elif get_mode() == "debug":
        set_mode("strict")


def launch_blocking():
    return get_mode() == "debug"


def synchronize():
    tpu.synchronize()


set_fallback_mode(_env.fallback_mode())
modes._init_from_env()  # TPU_LAUNCH_BLOCKING=1, TORCH_TPU_DEFER_AND_FUSE=1
__all__ += ["set_mode", "get_mode", "mode", "sync"]


# --- compilation cache, recompile explainer, numerics checker ---------------------------

_cache_dir = _env.cache_dir()
_cache_max_bytes = _env.cache_max_bytes()
_program_cache_max_bytes = _env.program_cache_max_bytes()
_explain = _env.explain_recompiles()
_layouts_per_op = _env.layouts_per_op()


def _apply_cache(rt=None):
    del rt
    import warnings
    try:
        _core.set_cache_dir(_cache_dir, _cache_max_bytes)
    except RuntimeError as e:  # a bad or untrusted path: run without the disk cache
        warnings.warn(f"torchtpu: persistent compilation cache off: {e}")
    if _program_cache_max_bytes > 0:
        if _core.has_program_cache_bound():
            _core.set_program_cache_bytes(_program_cache_max_bytes)
        else:
            warnings.warn("torchtpu: TORCHTPU_PROGRAM_CACHE_MAX_BYTES is set, but this build's "
                          "core cannot bound its program cache yet; the setting is ignored")
    _core.set_explain_recompiles(_explain)
    if _layouts_per_op is not None:
        _core.set_layouts_per_op(_layouts_per_op)


def set_cache_dir(path, max_bytes=None):
    """Keeps compiled programs in `path` so later processes load them instead
    of compiling (None: no persistent cache). `max_bytes` bounds the
    directory (least recently used files go first; <= 0: unbounded). The
    default comes from TORCHTPU_CACHE_DIR / TORCHTPU_CACHE_MAX_BYTES, else
    ~/.cache/torchtpu and 2 GiB."""
    global _cache_dir, _cache_max_bytes
    import os
    _cache_dir = os.path.abspath(os.fspath(path)) if path else None
    if max_bytes is not None:
        _cache_max_bytes = int(max_bytes)
    if _core.runtime_or_none() is not None:
        _apply_cache()


def cache_dir():
    """The persistent compilation cache directory, or None when it is off."""
    return _cache_dir


def explain_recompiles(flag=True):
    """Prints to stderr why every program is compiled (the op, and what
    differs from its nearest earlier signature: shape, dtype, layout,
    argument, storage, graph) and a summary of the causes at exit.
    Env: TORCHTPU_EXPLAIN_RECOMPILES=1."""
    global _explain
    _explain = bool(flag)
    if _core.runtime_or_none() is not None:
        _core.set_explain_recompiles(_explain)


def recompile_summary():
    """The explainer's summary: compiles by cause and the most recompiled ops."""
    return _core.recompile_summary()


def _print_recompile_summary():
    if _explain and _core._rt is not None:
        import sys
        sys.stderr.write(_core.recompile_summary())
        sys.stderr.flush()


_core._on_first_runtime.append(_apply_cache)
__all__ += ["set_cache_dir", "cache_dir", "explain_recompiles", "recompile_summary"]


# --- device-side checks ----------------------------------------------------------------

_device_checks = _env.device_checks()


def set_device_checks(flag=True):
    """Device-side checks (on by default): out-of-range indices (index_select,
    gather, scatter, x[idx], index_put_, embedding, take, ...), class targets
    outside [0, C) in nll_loss / cross_entropy and integer division by zero
    are computed inside the programs and raise PyTorch's exception at the
    next synchronisation (a host read, torch.tpu.synchronize(); after the op
    under TPU_LAUNCH_BLOCKING=1), as CUDA's device-side asserts do. Off:
    programs skip them (out-of-range indices are then clamped or dropped).
    Env: TORCHTPU_DEVICE_CHECKS=0."""
    global _device_checks
    _device_checks = bool(flag)
    if _core.runtime_or_none() is not None:
        _core.set_device_checks(_device_checks)


def device_checks():
    """True when device-side checks are on (see set_device_checks)."""
    return _device_checks


_core._on_first_runtime.append(lambda rt=None: _core.set_device_checks(_device_checks))
__all__ += ["set_device_checks", "device_checks"]

# --- cold signatures: the host tier and background compiles ------------------------------

_host_tier = [_env.compile_after(), _env.host_tier_max_bytes()]


def set_host_tier(compile_after=None, max_bytes=None):
    """Strict eager's answer to first runs and new shapes. A new op signature
    (op, shapes, dtypes, layouts) needs an XLA compile, tens of milliseconds
    where the op itself takes microseconds. With the host tier on, its
    program is compiled in a background thread from its `compile_after`-th
    call, and until the program is ready its calls run with PyTorch's own
    CPU kernels on host copies of the tensors (results are tpu tensors, as
    always). A signature called fewer times never compiles; a loop's ops run
    on the device once their programs are ready. Calls whose tensors exceed
    `max_bytes`, random ops, debug and fused eager always run on the device.
    `compile_after=0`: every new signature compiles at its first call (the
    device-only path). Env: TORCHTPU_COMPILE_AFTER (default 2),
    TORCHTPU_HOST_TIER_MAX_BYTES (default 4M)."""
    if compile_after is not None:
        _host_tier[0] = int(compile_after)
    if max_bytes is not None:
        _host_tier[1] = int(max_bytes)
    if _core.runtime_or_none() is not None:
        _core.set_host_tier(*_host_tier)


def host_tier():
    """(compile_after, max_bytes) of the host tier (see set_host_tier)."""
    return tuple(_host_tier)


def wait_compiles():
    """Waits for the background compiles queued so far: afterwards every op
    signature seen enough times runs on the device (benchmarks of the steady
    state call this after their warm-up)."""
    if _core.runtime_or_none() is not None:
        _core.wait_compiles()


def mark_dynamic(t, dim, min=None, max=None):  # noqa: A002 - torch._dynamo's names
    """Says that dim `dim` of `t` changes from call to call (a sequence
    length, a last smaller batch), within [min, max] when given; TorchTPU's
    `mark_dynamic(t, dim, lower, upper)` spelling works positionally.

    torch.compile(backend="tpu") then traces the function once with a
    symbolic size for that dim instead of tracing again for the second
    length (Dynamo's automatic dynamic shapes) and failing over to eager
    after its recompile limit; each length's program is compiled at its
    first call, and every length seen keeps its captured program, replayed
    as one call (`torchtpu.compile.MAX_CAPTURES` lengths per graph).
    Strict eager needs no marks: a new length's ops run on the host tier
    while their programs compile (see set_host_tier). `dim` may be a list."""
    for d in (dim if isinstance(dim, (list, tuple)) else [dim]):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"mark_dynamic: expected a tensor, got {type(t).__name__}")
        if not -t.dim() <= d < t.dim():
            raise IndexError(f"mark_dynamic: dim {d} out of range for a tensor of shape "
                             f"{list(t.shape)}")
        d %= t.dim()
        if min is not None and max is not None and min > max:
            raise ValueError(f"mark_dynamic: min {min} > max {max} for dim {d}")
        size = t.shape[d]
        if (min is not None and size < min) or (max is not None and size > max):
            raise ValueError(f"mark_dynamic: dim {d} has size {size}, outside [{min}, {max}]")
        import torch._dynamo as dynamo
        dynamo.mark_dynamic(t, d, min=min, max=max)


_core._on_first_runtime.append(lambda rt=None: _core.set_host_tier(*_host_tier))
__all__ += ["set_host_tier", "host_tier", "wait_compiles", "mark_dynamic"]


def _finish_at_exit():
    """Shuts down tpu process groups the program did not destroy (their gloo
    worker threads are joined while the interpreter still runs) and waits
    for programs still running (launches are asynchronous) so the plugin's
    worker threads are idle when the interpreter tears down."""
    import sys
    host = sys.modules.get("torchtpu.distributed._host")
    if host is not None:
        try:
            host.release_all()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
    # A profile whose exit raised (a device error at torch.profiler's closing
    # synchronize: PyTorch then never stops Kineto) would still be recording:
    # Kineto's teardown at exit then removes callbacks already gone and
    # crashes.
    try:
        if torch._C._autograd._profiler_enabled():
            torch._C._autograd._disable_profiler()
    except Exception:  # noqa: BLE001 - exiting anyway
        pass
    if _core._rt is not None:
        # A compile still running on the background thread would be inside
        # XLA while the process tears down its static objects.
        _core.stop_compiles()
        try:
            _core.synchronize()
        except (RuntimeError, IndexError):
            pass  # an asynchronous error nobody asked for; exiting anyway
        # An autograd device thread finishing a backward the program already
        # has the results of may still be dropping the graph task, whose
        # thread-local state holds Python objects: it waits for the GIL to
        # decref them, and after finalization has begun, taking the GIL
        # ends the thread inside C++ (std::terminate). Releasing the GIL for
        # a moment here, before finalization, lets it finish.
        import time
        time.sleep(0.02)


FALLBACK_SUMMARY_PREFIX = "torchtpu fallback counts: "


def _print_fallback_summary():
    """TORCHTPU_FALLBACK_SUMMARY=1: the fallback counts as one JSON line on
    stderr at exit ({} when nothing fell back), so a program run unchanged
    (torchrun -m torchtitan.train ...) can be checked for CPU fallbacks."""
    if _env.fallback_summary():
        import json
        import sys
        sys.stderr.write(FALLBACK_SUMMARY_PREFIX
                         + json.dumps(dict(sorted(fallback_counts().items()))) + "\n")
        sys.stderr.flush()


import atexit  # noqa: E402

atexit.register(_print_fallback_summary)
atexit.register(_print_recompile_summary)
atexit.register(_finish_at_exit)

if _env.check_numerics():
    from . import debug  # noqa: E402

    debug.enable_check_numerics()
