"""torch.tpu: the "tpu" device module, mirroring torch.cuda's names and
signatures where they make sense for a PJRT device.

Device state (current device) lives in the C++ shim and is reached through
torch's accelerator hooks; counters, the execution mode and the random state
come from the C core. Nothing here runs on the per-op path."""
import struct
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
    "current_stream", "default_stream",
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


# One stream per device: the core orders work itself. torch.Stream/Event work
# on "tpu"; events record nothing and waiting on one waits for the device.
Stream = torch.Stream
Event = torch.Event


def current_stream(device=None):
    return torch.accelerator.current_stream(torch.device("tpu", _index(device)))


def default_stream(device=None):
    return current_stream(device)


def get_device_name(device=None):
    del device
    info = _core.info()
    return f"{info['device_kind']} ({info['platform']})"


class _DeviceProperties:
    def __init__(self, info, idx):
        self.name = info["device_kind"]
        self.platform = info["platform"]
        self.platform_version = info["platform_version"]
        self.index = idx
        self.supports_f64 = info["supports_f64"]

    def __repr__(self):
        return (f"_TpuDeviceProperties(name='{self.name}', platform='{self.platform}', "
                f"index={self.index})")


def get_device_properties(device=None):
    return _DeviceProperties(_core.info(), _index(device))


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
# Device buffers are counted by the core for all devices together; there is no
# caching allocator, so "reserved" equals "allocated".

def memory_stats(device=None):
    del device
    if not is_initialized() and not is_available():
        return {}
    st = _core.stats()
    cur, peak = st["bytes_in_use"], st["peak_bytes_in_use"]
    out = {}
    for what in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
        out[f"{what}.all.current"] = cur
        out[f"{what}.all.peak"] = peak
    out["allocation.all.current"] = st["buffers_in_use"]
    out["active.all.current"] = st["buffers_in_use"]
    out["host_to_device_bytes"] = st["host_to_device_bytes"]
    out["device_to_host_bytes"] = st["device_to_host_bytes"]
    out["num_alloc_retries"] = 0
    out["num_ooms"] = 0
    return dict(sorted(out.items()))


def memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    del device
    _lazy_init()
    _core.reset_peak()


def empty_cache():
    """Nothing is cached: device buffers are freed with their storages."""


# --- compilation cache -------------------------------------------------------------------

def _get_cache_stats():
    """Counters of the eager op cache and the compilation cache.

    requests/hits: program-cache lookups and in-memory hits; compiles and
    compile_seconds: programs actually compiled; sig_hits: eager calls that
    reused a plan without lowering; disk_*: the persistent cache (a miss in
    memory is a disk hit or a disk miss); recompiles: compiles of an op or
    graph already compiled with another signature; causes: compiles by cause
    (see torchtpu.explain_recompiles); entries: one dict per program (key,
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
        "causes": _core.recompile_causes(),
        "entries": _core.cache_entries(),
    }

