"""PyTorch/XLA scripts on torchtpu's "tpu" device, unchanged: the migration layer.

    python -m torchtpu.xla train.py --flags ...   (or: torchtpu-xla train.py ...)

runs a script written against torch_xla; `import torchtpu.xla` before
`import torch_xla` does the same from inside a program. Importing this
package puts an import hook on sys.meta_path (_hook.py) that resolves
`torch_xla` and its submodules to the modules of this package, which mirror
PyTorch/XLA's paths:

    torch_xla                               this module: device, sync, compile, launch
    torch_xla.core.xla_model (xm)           core/xla_model.py
    torch_xla.runtime (xr)                  runtime.py
    torch_xla.distributed.xla_multiprocessing (xmp), .parallel_loader (pl),
    .xla_backend, .spmd (xs)                distributed/
    torch_xla.debug.metrics (met)           debug/metrics.py
    torch_xla.amp (+ syncfree)              amp/
    torch_xla.utils.utils (xu)              utils/utils.py

Nothing named torch_xla is installed, so a real PyTorch/XLA stays importable
in processes that do not import torchtpu.xla. When a script imports
torch_xla, the device string "xla" starts to mean this process's "tpu"
device (_device.py). What maps to what, and what does not:
docs/migrating_from_torch_xla.md."""
import contextlib
import functools

import torch

import torchtpu

from . import _hook, _world

_hook.install()

from .distributed import xla_backend as _xla_backend  # noqa: E402,F401  "xla", xla://

# PyTorch/XLA releases follow PyTorch's version; this layer offers the
# torch_xla API of the PyTorch it runs with.
__version__ = torch.__version__.split("+")[0] + "+torchtpu"

_SUBMODULES = ("core", "runtime", "distributed", "debug", "amp", "utils")


def device(index=None):
    """This process's device: torch.device("tpu", local ordinal); `index`
    picks among the devices of this process."""
    from .core import xla_model as xm
    return xm.xla_device(index)


def devices():
    """The devices this process drives (one per process when launched)."""
    from .core import xla_model as xm
    return [torch.device(d) for d in xm.get_xla_supported_devices()]


def real_devices():
    """Platform-named devices of this process, e.g. ["CPU:0"] on XLA's CPU plugin."""
    from . import runtime
    return [f"{runtime.device_type()}:{d.index}" for d in devices()]


def device_count():
    return len(devices())


def sync(wait=False, reset_scope=True):
    """xm.mark_step: runs fused eager's pending graph, then the step closures."""
    from .core import xla_model as xm
    xm.mark_step(wait=wait, reset_scope=reset_scope)


def manual_seed(seed, device=None):
    from .core import xla_model as xm
    xm.set_rng_state(seed, device)


class _Region(contextlib.ContextDecorator):
    """torch_xla.compile() / torch_xla.step() without a function: the block
    runs in fused eager (one program per region) and ends with sync(); used
    as a decorator it compiles the function instead."""

    def __init__(self, full_graph=False):
        self._full_graph = full_graph
        self._modes = []

    def __enter__(self):
        sync()
        self._modes.append(torchtpu.mode("fused"))
        self._modes[-1].__enter__()
        return self

    def __exit__(self, *exc):
        self._modes.pop().__exit__(*exc)
        sync()
        return False

    def __call__(self, f):
        return compile(f, full_graph=self._full_graph)


def compile(f=None, full_graph=False, name=None, max_different_graphs=None):  # noqa: A001
    """f: torch.compile(f, backend="tpu", fullgraph=full_graph), each call
    followed by sync() (as PyTorch/XLA ends the traced region with one).
    Without f: a context manager whose block runs as one fused-eager program.
    name and max_different_graphs are accepted and not used."""
    del name, max_different_graphs
    if f is None:
        return _Region(full_graph)
    compiled = torch.compile(f, backend="tpu", fullgraph=full_graph)

    @functools.wraps(f)
    def run(*args, **kwargs):
        out = compiled(*args, **kwargs)
        sync()
        return out

    run.compiled = compiled
    return run


def step():
    """Context manager around one training step: torch_xla.compile()."""
    return compile()


def launch(fn, args=(), start_method="spawn", debug_single_process=False):
    """fn(index, *args) on every local device: in this process under torchrun
    (index = LOCAL_RANK), else in one new process per device (xmp.spawn);
    debug_single_process: once, here, with index 0."""
    from . import runtime
    from .distributed import xla_multiprocessing as xmp
    if runtime.is_spmd():
        raise NotImplementedError(
            "torch_xla.launch under SPMD (xr.use_spmd()) is not supported: launch one process "
            "per device with torchrun and shard with DTensor (docs/migrating_from_torch_xla.md)")
    if torch.distributed.is_torchelastic_launched():
        fn(_world.local_rank(), *args)
        return
    xmp.spawn(fn, args=args, nprocs=1 if debug_single_process else None,
              start_method=start_method)


class _XLAC:
    """torch_xla._XLAC, PyTorch/XLA's C++ bindings: none exist here."""

    def __getattr__(self, name):
        raise NotImplementedError(
            f"torch_xla._XLAC.{name}: PyTorch/XLA's C++ internals have no torchtpu equivalent; "
            "see docs/migrating_from_torch_xla.md for the public APIs that map")


_XLAC = _XLAC()


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"torch_xla.{name} is not provided by torchtpu's migration layer "
                         "(docs/migrating_from_torch_xla.md)")


__all__ = ["device", "devices", "real_devices", "device_count", "sync", "step", "compile",
           "manual_seed", "launch"]
