"""Execution modes of the "tpu" device.

    "strict"  asynchronous eager, one compiled program per op (default)
    "debug"   the same, synchronous after every op: errors name the op
              (env TPU_LAUNCH_BLOCKING=1)
    "fused"   ops are recorded into a deferred graph and run as one program
              when a value is needed (.item(), .cpu(), printing), at
              torchtpu.sync(), or when the graph grows past its bound; a
              training loop compiles its step once
              (env TORCH_TPU_DEFER_AND_FUSE=1)

    torchtpu.set_mode("fused"); ...; torchtpu.sync()
    with torchtpu.mode("fused"): loss = step(batch)

The mode is one setting of the process-wide runtime (the core's
tt_runtime_set_mode); asked for before the runtime starts, it applies when
it does."""
import contextlib

from . import _core, _env

_CODES = {"strict": _core.TT_MODE_STRICT, "debug": _core.TT_MODE_DEBUG,
          "fused": _core.TT_MODE_FUSED}
_NAMES = {v: k for k, v in _CODES.items()}

_wanted = "strict"  # applied when the runtime starts


def set_mode(name):
    """Switches to "strict", "debug" or "fused". Leaving fused mode runs the
    pending graph first; its error, if any, raises here."""
    global _wanted
    if name not in _CODES:
        raise ValueError(f"mode {name!r}: expected one of {', '.join(_CODES)}")
    _wanted = name
    if _core._rt is not None:
        _core.flush()
        _core.set_mode(_CODES[name])


def get_mode():
    """The current mode: "strict", "debug" or "fused"."""
    if _core._rt is None:
        return _wanted
    return _NAMES.get(_core.mode(), "strict")


@contextlib.contextmanager
def mode(name):
    """Runs the block in mode `name`, then restores the previous mode (the
    block's pending graph runs on the way out)."""
    previous = get_mode()
    set_mode(name)
    try:
        yield
    finally:
        set_mode(previous)


def sync():
    """Runs the pending fused graph: compiles it when its text is new and
    launches it without waiting (torch.tpu.synchronize() waits). Outside
    fused mode there is nothing to run."""
    if _core._rt is not None:
        _core.flush()


def set_fuse_limit(max_ops=None, max_bytes=None, max_instructions=None):
    """Bounds a fused graph: it runs before it would exceed `max_ops` ops,
    `max_instructions` StableHLO instructions (its compile-cost estimate:
    XLA's compile time grows faster than linearly with them) or `max_bytes`
    bytes of text. None: the default (10000 ops, 64 MiB, and
    TORCHTPU_FUSE_MAX_INSTRUCTIONS or 20000 instructions). The first graph
    split by a bound is reported once on stderr; fused_stats() counts them."""
    if max_instructions is None:
        max_instructions = _env.fuse_max_instructions()
    _core.set_fuse_limit(max_ops or 0, max_bytes or 0, max_instructions or 0)


def fused_stats():
    """Counters of fused eager: graphs run, ops recorded, ops pending, the
    size (ops, instructions, parameters, outputs, text bytes) of the last
    graph, and how many graphs a bound split (bound_splits)."""
    return _core.fused_stats()


def _apply(rt=None):
    del rt
    _core.set_mode(_CODES[_wanted])
    if _env.fuse_max_instructions():
        _core.set_fuse_limit(0, 0, _env.fuse_max_instructions())


def _init_from_env():
    if _env.launch_blocking():
        set_mode("debug")
    elif _env.defer_and_fuse():
        set_mode("fused")


_core._on_first_runtime.append(_apply)
