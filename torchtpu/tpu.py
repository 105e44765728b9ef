"""torch.tpu: the "tpu" device module, mirroring torch.cuda's names and
signatures where they make sense for a PJRT device.

Device state (current device) lives in the C++ shim and is reached through
torch's accelerator hooks; counters, the execution mode and the random state
come from the C core. Nothing here runs on the per-op path."""
import struct
import sys
import threading

import torch

from . import _core

__all__ = [
    "is_available", "is_initialized", "init", "device_count", "current_device",
    "set_device", "device", "device_of", "synchronize", "get_device_name",
    "get_device_properties", "is_bf16_supported", "manual_seed", "manual_seed_all",
    "seed", "seed_all", "initial_seed", "get_rng_state", "get_rng_state_all",
    "set_rng_state", "set_rng_state_all", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
    "memory_stats", "empty_cache", "default_generators", "Stream", "Event",
    "current_stream", "default_stream", "set_stream", "stream", "StreamContext",
    "get_device_capability", "get_arch_list", "is_tf32_supported",
    "can_device_access_peer", "OutOfMemoryError", "AcceleratorError",
    "memory_stats_as_nested_dict", "memory_cached", "max_memory_cached",
    "reset_max_memory_allocated", "reset_max_memory_cached",
    "reset_accumulated_memory_stats", "mem_get_info", "device_memory_used",
    "memory_summary", "memory_snapshot", "ipc_collect", "has_half",
    "is_current_stream_capturing", "get_sync_debug_mode", "set_sync_debug_mode",
    "set_per_process_memory_fraction", "get_per_process_memory_fraction", "memory_usage",
    "graph", "graphs", "make_graphed_callables", "TPUGraph", "graph_pool_handle",
]

# --- initialisation ----------------------------------------------------------------

_initialized = False
_init_lock = threading.Lock()


def is_initialized():
    return _initialized


def _lazy_init():
    """Starts the runtime (plugin discovery, client) on first use. Called by
    torch before the first tpu tensor is made; raises RuntimeError with the
    core's message when no plugin can be loaded."""
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if not _initialized:
            _core.runtime()
            _initialized = True


def init():
    _lazy_init()


def _is_in_bad_fork():
    """The runtime holds no fork-unsafe state at import (it starts lazily)."""
    return False


def is_available():
    return _core.device_count() > 0


def device_count():
    return _core.device_count()


# --- devices -------------------------------------------------------------------------

def _index(device, optional=True):
    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        return current_device() if device.index is None else device.index
    return int(device)


def current_device():
    return torch._C._accelerator_hooks_get_current_device()


def set_device(device):
    idx = _index(device)
    if idx >= 0:
        torch._C._accelerator_hooks_set_current_device(idx)


class device:
    """Context manager that makes `device` current (like torch.cuda.device)."""

    def __init__(self, device):
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = torch._C._accelerator_hooks_exchange_device(self.idx)

    def __exit__(self, *exc):
        self.idx = torch._C._accelerator_hooks_maybe_exchange_device(self.prev_idx)
        return False


class device_of(device):
    """Makes the device of tensor `obj` current (CPU tensors: no change)."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "tpu" else None)


def synchronize(device=None):
    """Waits for every program launched so far; raises the first async error."""
    del device  # one queue for all devices
    _lazy_init()
    _core.synchronize()


# --- streams and events ------------------------------------------------------------
#
# Every stream feeds the core's one in-order queue (see shim/device.cpp), so
# work runs in program order whatever stream it is issued on; waits between
# streams are satisfied by construction. Events wait for the device when
# queried or synchronized; timing events record the host clock once the work
# before them has finished.


class _OnTpu(type):
    """isinstance(x, torch.tpu.Stream / Event): a torch.Stream / torch.Event
    on a tpu device (torch's methods take only those exact types, so the
    constructors below return them rather than subclasses)."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._base) and obj.device.type == "tpu"


class Stream(metaclass=_OnTpu):
    """torch.cuda.Stream's counterpart: Stream(device=None, priority=0), a
    torch.Stream on a tpu device (wait_event, wait_stream, record_event,
    query, synchronize)."""

    _base = torch.Stream

    def __new__(cls, device=None, priority=0):
        return torch.Stream(device=torch.device("tpu", _index(device)), priority=priority)


class Event(metaclass=_OnTpu):
    """torch.cuda.Event's counterpart: Event(enable_timing=False, blocking=False,
    interprocess=False), a torch.Event on a tpu device (record, wait, query,
    synchronize, elapsed_time)."""

    _base = torch.Event

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False, device=None):
        return torch.Event(device=torch.device("tpu", _index(device)),
                           enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def current_stream(device=None):
    return torch.accelerator.current_stream(torch.device("tpu", _index(device)))


def default_stream(device=None):
    s = current_stream(device)
    return torch.Stream(stream_id=0, device_index=s.device_index, device_type=s.device_type)


def set_stream(stream):
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """Makes `stream` current on its device for the block (None: no change)."""

    def __init__(self, stream):
        self.stream = stream
        self.prev = None

    def __enter__(self):
        if self.stream is not None:
            self.prev = torch.accelerator.current_stream(self.stream.device)
            torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.prev is not None:
            torch.accelerator.set_stream(self.prev)
        return False


def stream(stream):
    """with torch.tpu.stream(s): ... -- as torch.cuda.stream."""
    return StreamContext(stream)


def get_device_name(device=None):
    del device
    info = _core.info()
    return f"{info['device_kind']} ({info['platform']})"


def _total_memory(idx):
    """Bytes of device memory (the allocator's get_memory_info: host memory
    on the CPU plugin, HBM by device kind on TPUs); 0 when unknown."""
    try:
        return torch.accelerator.get_memory_info(torch.device("tpu", idx))[1]
    except NotImplementedError:
        return 0


class _DeviceProperties:
    """torch.cuda's device properties, where they mean something for a PJRT
    device: name, total_memory (bytes), multi_processor_count (1: one core
    per device), major/minor (0: no CUDA compute capability), is_integrated,
    uuid; and the platform's own (platform, platform_version, supports_f64)."""

    def __init__(self, info, idx):
        self.name = info["device_kind"]
        self.type = "tpu"
        self.platform = info["platform"]
        self.platform_version = info["platform_version"]
        self.index = idx
        self.supports_f64 = info["supports_f64"]
        self.total_memory = _total_memory(idx)
        self.multi_processor_count = 1
        self.major = 0
        self.minor = 0
        self.is_integrated = info["platform"] == "cpu"
        self.is_multi_gpu_board = False
        self.uuid = f"tpu-{info['platform']}-{idx}"

    def __repr__(self):
        return (f"_TpuDeviceProperties(name='{self.name}', platform='{self.platform}', "
                f"index={self.index}, total_memory={self.total_memory // (1 << 20)}MB)")


def get_device_properties(device=None):
    idx = _index(device)
    n = device_count()
    if not 0 <= idx < n:
        raise AssertionError(f"Invalid device id {idx}: {n} tpu device(s)")
    return _DeviceProperties(_core.info(), idx)


def get_device_capability(device=None):
    """(0, 0): no CUDA compute capability; code that gates on it takes its
    generic path."""
    del device
    return (0, 0)


def get_arch_list():
    return []


def is_tf32_supported():
    return False


def can_device_access_peer(device, peer_device):
    """Copies between tpu devices work (through the host where the plugin
    cannot copy directly)."""
    return 0 <= _index(device) < device_count() and 0 <= _index(peer_device) < device_count()


has_half = True


def is_current_stream_capturing():
    """Whether a torch.tpu.graph / TPUGraph capture is under way on this
    thread (tpu has one stream per device)."""
    graphs = sys.modules.get("torchtpu.graphs")
    return graphs is not None and graphs.is_capturing()


def get_sync_debug_mode():
    return 0


def set_sync_debug_mode(debug_mode):
    """Only 0 / "default": host synchronisations are not reported on tpu."""
    if debug_mode not in (0, "default"):
        raise ValueError(f"torch.tpu.set_sync_debug_mode({debug_mode!r}): only 0 / 'default' "
                         f"is supported on tpu")


OutOfMemoryError = torch.OutOfMemoryError
AcceleratorError = torch.AcceleratorError if hasattr(torch, "AcceleratorError") else RuntimeError


def is_bf16_supported(including_emulation=True):
    del including_emulation
    return is_available()


# --- random --------------------------------------------------------------------------
#
# One (seed, offset) per device, held by the core; the shim's default
# torch.Generator objects view the same state.

def _default_generator(idx):
    return torch.ops.torchtpu._default_generator(idx)


class _DefaultGenerators:
    """torch.tpu.default_generators: a lazy tuple-like of torch.Generator."""

    def __getitem__(self, idx):
        n = device_count()
        if idx < 0:
            idx += n
        if not 0 <= idx < n:
            raise IndexError(f"tpu default generator {idx}: {n} device(s)")
        return _default_generator(idx)

    def __len__(self):
        return device_count()

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


def manual_seed(seed):
    """Seeds the current device's generator (silently ignored without a device,
    as torch.cuda does)."""
    seed = int(seed)
    if not is_available():
        return
    _core.set_generator_state(current_device(), seed)


def manual_seed_all(seed):
    seed = int(seed)
    for i in range(device_count()):
        _core.set_generator_state(i, seed)


def seed():
    """Seeds the current device's generator with a non-deterministic number."""
    if is_available():
        default_generators[current_device()].seed()


def seed_all():
    if not is_available():
        return
    s = default_generators[0].seed()
    for i in range(1, device_count()):
        _core.set_generator_state(i, s)


def initial_seed():
    _lazy_init()
    return _core.generator_state(current_device())[0]


def get_rng_state(device="tpu"):
    """The generator state as a CPU uint8 tensor: seed then offset, 8 bytes each."""
    _lazy_init()
    s, off = _core.generator_state(_index(device))
    return torch.frombuffer(bytearray(struct.pack("<QQ", s, off)), dtype=torch.uint8).clone()


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state, device="tpu"):
    _lazy_init()
    if new_state.dtype != torch.uint8 or new_state.numel() != 16:
        raise ValueError("tpu rng state: expected 16 uint8 values (seed, offset)")
    s, off = struct.unpack("<QQ", bytes(new_state.cpu().tolist()))
    _core.set_generator_state(_index(device), s, off)


def set_rng_state_all(new_states):
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# --- memory --------------------------------------------------------------------------
#
# torch.tpu.memory (torchtpu/memory.py) mirrors torch.cuda.memory; its names are
# torch.tpu's too, as torch.cuda's are. Imported here, at the end of what it
# uses of this module.

from . import memory  # noqa: E402
from .memory import (  # noqa: E402,F401
    device_memory_used, empty_cache, get_per_process_memory_fraction, max_memory_allocated,
    max_memory_cached, max_memory_reserved, mem_get_info, memory_allocated, memory_cached,
    memory_reserved, memory_snapshot, memory_stats, memory_stats_as_nested_dict,
    memory_summary, memory_usage, reset_accumulated_memory_stats,
    reset_max_memory_allocated, reset_max_memory_cached, reset_peak_memory_stats,
    set_per_process_memory_fraction)


def ipc_collect():
    """No inter-process memory sharing: nothing to collect."""


# --- compilation cache -------------------------------------------------------------------

def _get_cache_stats():
    """Counters of the eager op cache and the compilation cache.

    requests/hits: program-cache lookups and in-memory hits; compiles and
    compile_seconds: programs actually compiled; sig_hits: eager calls that
    reused a plan without lowering; disk_*: the persistent cache (a miss in
    memory is a disk hit or a disk miss); recompiles: compiles of an op or
    graph already compiled with another signature; causes: compiles by cause
    (see torchtpu.explain_recompiles); live_programs, program_cache_bytes
    (estimated, counted while bounded), program_cache_evictions: the
    in-memory program cache; layout_spills: eager calls whose strided
    inputs were copied dense instead of compiling a program for one more
    layout (TORCHTPU_LAYOUTS_PER_OP); entries: one dict per live program (key,
    label, uses, compile_seconds, from_disk, text_bytes)."""
    st = _core.stats()
    return {
        "requests": st["cache_requests"],
        "hits": st["cache_hits"],
        "compiles": st["compiles"],
        "compile_seconds": st["compile_seconds"],
        "sig_hits": st["sig_hits"],
        "op_calls": st["op_calls"],
        "fallback_calls": st["fallback_calls"],
        "disk_hits": st["disk_hits"],
        "disk_misses": st["disk_misses"],
        "disk_writes": st["disk_writes"],
        "disk_errors": st["disk_errors"],
        "disk_rejected": st["disk_rejected"],
        "disk_evictions": st["disk_evictions"],
        "disk_load_seconds": st["disk_load_seconds"],
        "recompiles": st["recompiles"],
        "live_programs": st["program_cache_entries"],
        "program_cache_bytes": st["program_cache_bytes"],
        "program_cache_evictions": st["program_cache_evictions"],
        "layout_spills": st["layout_spills"],
        "causes": _core.recompile_causes(),
        "entries": _core.cache_entries(),
    }


# --- graphs (torchtpu/graphs.py) ----------------------------------------------------

from . import graphs  # noqa: E402
from .graphs import TPUGraph, graph, graph_pool_handle, make_graphed_callables  # noqa: E402,F401
