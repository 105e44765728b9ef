"""ctypes bindings of the part of the core's C API (core/include/torchtpu.h)
that Python uses: runtime info, counters, execution mode, generators' state,
plus the shim's fallback-mode switch.

Structs mirror the header field for field. A non-NULL tt_status becomes a
RuntimeError carrying the core's message (and is freed)."""
import contextlib
import ctypes
import os
import threading

# TORCHTPU_LIB_DIR: another build of the two libraries (the sanitized core
# of `make pytest-asan`); by default the ones beside this package.
_LIB_DIR = (os.environ.get("TORCHTPU_LIB_DIR")
            or os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
CORE_PATH = os.path.join(_LIB_DIR, "libtorchtpu_core.so")
SHIM_PATH = os.path.join(_LIB_DIR, "libtorchtpu_shim.so")

# tt_code
TT_OK = 0
TT_INVALID_ARGUMENT = 1
TT_UNIMPLEMENTED = 2
TT_NOT_FOUND = 3
TT_FAILED_PRECONDITION = 4
TT_INTERNAL = 5
TT_RESOURCE_EXHAUSTED = 6
TT_OUT_OF_RANGE = 7
TT_TYPE_ERROR = 9

# tt_exec_mode
TT_MODE_STRICT = 0
TT_MODE_DEBUG = 1
TT_MODE_FUSED = 2


class RuntimeInfo(ctypes.Structure):  # tt_runtime_info
    _fields_ = [
        ("platform", ctypes.c_char_p),
        ("platform_version", ctypes.c_char_p),
        ("plugin_path", ctypes.c_char_p),
        ("api_major", ctypes.c_int),
        ("api_minor", ctypes.c_int),
        ("device_count", ctypes.c_int),
        ("device_kind", ctypes.c_char_p),
        ("supports_f64", ctypes.c_bool),
        ("asynchronous", ctypes.c_bool),
        ("host_memory_kept", ctypes.c_bool),
        ("cpu_attention_kernel", ctypes.c_bool),
    ]


class GraphStats(ctypes.Structure):  # tt_graph_stats
    _fields_ = [(name, ctypes.c_int64) for name in (
        "captures", "capture_failures", "replays", "replay_mismatches",
        "donated_buffers", "donated_bytes")]


class Stats(ctypes.Structure):  # tt_stats
    _fields_ = [
        ("op_calls", ctypes.c_int64),
        ("sig_hits", ctypes.c_int64),
        ("compiles", ctypes.c_int64),
        ("cache_requests", ctypes.c_int64),
        ("cache_hits", ctypes.c_int64),
        ("compile_seconds", ctypes.c_double),
        ("fallback_calls", ctypes.c_int64),
        ("bytes_in_use", ctypes.c_int64),
        ("peak_bytes_in_use", ctypes.c_int64),
        ("buffers_in_use", ctypes.c_int64),
        ("host_to_device_bytes", ctypes.c_int64),
        ("device_to_host_bytes", ctypes.c_int64),
        ("disk_hits", ctypes.c_int64),
        ("disk_misses", ctypes.c_int64),
        ("disk_writes", ctypes.c_int64),
        ("disk_errors", ctypes.c_int64),
        ("disk_load_seconds", ctypes.c_double),
        ("disk_rejected", ctypes.c_int64),
        ("disk_evictions", ctypes.c_int64),
        ("recompiles", ctypes.c_int64),
        ("device_checks_pending", ctypes.c_int64),
        ("device_check_reads", ctypes.c_int64),
        ("program_cache_entries", ctypes.c_int64),
        ("program_cache_bytes", ctypes.c_int64),
        ("program_cache_evictions", ctypes.c_int64),
        ("layout_spills", ctypes.c_int64),
        ("host_calls", ctypes.c_int64),
        ("background_compiles", ctypes.c_int64),
        ("compiles_pending", ctypes.c_int64),
        ("host_copy_bytes", ctypes.c_int64),
        ("donated_buffers", ctypes.c_int64),
        ("donated_bytes", ctypes.c_int64),
    ]


class CacheEntryInfo(ctypes.Structure):  # tt_cache_entry_info
    _fields_ = [
        ("key", ctypes.c_char * 33),
        ("label", ctypes.c_char * 64),
        ("uses", ctypes.c_int64),
        ("compile_seconds", ctypes.c_double),
        ("from_disk", ctypes.c_bool),
        ("text_bytes", ctypes.c_int64),
    ]


class FusedStats(ctypes.Structure):  # tt_fused_stats
    _fields_ = [(name, ctypes.c_int64) for name in (
        "graphs", "ops", "pending_ops", "last_graph_ops", "last_graph_params",
        "last_graph_outputs", "last_graph_bytes", "lowered_ops", "replayed_ops",
        "last_graph_instructions", "bound_splits", "donated_buffers", "donated_bytes")]


class ProfileEvent(ctypes.Structure):  # tt_profile_event
    _fields_ = [
        ("name", ctypes.c_char * 128),
        ("kind", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("start_ns", ctypes.c_int64),
        ("launched_ns", ctypes.c_int64),
        ("end_ns", ctypes.c_int64),
        ("bytes_in", ctypes.c_int64),
        ("bytes_out", ctypes.c_int64),
        ("seq", ctypes.c_uint64),
        ("failed", ctypes.c_bool),
        ("correlation", ctypes.c_uint64),
    ]


# tt_profile_kind
PROFILE_KINDS = ("op", "fused", "graph", "collective")


_p = ctypes.c_void_p
_u64 = ctypes.c_uint64

# name: (restype, argtypes)
_CORE_FUNCS = {
    "tt_status_code": (ctypes.c_int, [_p]),
    "tt_status_message": (ctypes.c_char_p, [_p]),
    "tt_status_free": (None, [_p]),
    "tt_runtime_get": (_p, [ctypes.POINTER(_p)]),
    "tt_runtime_info_get": (None, [_p, ctypes.POINTER(RuntimeInfo)]),
    "tt_runtime_set_mode": (None, [_p, ctypes.c_int]),
    "tt_runtime_mode": (ctypes.c_int, [_p]),
    "tt_runtime_synchronize": (_p, [_p]),
    "tt_runtime_set_device_checks": (None, [_p, ctypes.c_bool]),
    "tt_runtime_set_layouts_per_op": (_p, [_p, ctypes.c_int64]),
    "tt_runtime_set_host_tier": (_p, [_p, ctypes.c_int64, ctypes.c_int64]),
    "tt_runtime_host_tier": (None, [_p, ctypes.POINTER(ctypes.c_int64),
                                    ctypes.POINTER(ctypes.c_int64)]),
    "tt_runtime_wait_compiles": (None, [_p]),
    "tt_runtime_stop_compiles": (None, [_p]),
    "tt_runtime_device_checks": (ctypes.c_bool, [_p]),
    "tt_runtime_flush": (_p, [_p]),
    "tt_runtime_set_fuse_limit": (None, [_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]),
    "tt_runtime_fused_stats": (None, [_p, ctypes.POINTER(FusedStats)]),
    "tt_runtime_stats": (None, [_p, ctypes.POINTER(Stats)]),
    "tt_runtime_graph_stats": (None, [_p, ctypes.POINTER(GraphStats)]),
    "tt_runtime_reset_peak": (None, [_p]),
    "tt_runtime_fallback_counts": (ctypes.c_int, [_p, ctypes.POINTER(ctypes.c_char_p),
                                                  ctypes.POINTER(ctypes.c_int64), ctypes.c_int]),
    "tt_runtime_default_generator": (_p, [_p, ctypes.c_int]),
    "tt_generator_set_state": (None, [_p, _u64, _u64]),
    "tt_generator_get_state": (None, [_p, ctypes.POINTER(_u64), ctypes.POINTER(_u64)]),
    "tt_runtime_set_cache_dir": (_p, [_p, ctypes.c_char_p, ctypes.c_int64]),
    "tt_runtime_cache_entries": (ctypes.c_int, [_p, ctypes.POINTER(CacheEntryInfo), ctypes.c_int]),
    "tt_runtime_set_explain_recompiles": (None, [_p, ctypes.c_bool]),
    "tt_runtime_explain_recompiles": (ctypes.c_bool, [_p]),
    "tt_runtime_recompile_causes": (ctypes.c_int, [_p, ctypes.POINTER(ctypes.c_char_p),
                                                   ctypes.POINTER(ctypes.c_int64), ctypes.c_int]),
    "tt_runtime_recompile_summary": (ctypes.c_size_t, [_p, ctypes.c_char_p, ctypes.c_size_t]),
    "tt_op_register_alias": (ctypes.c_int32, [ctypes.c_char_p, ctypes.c_char_p]),
    "tt_op_lookup": (ctypes.c_int32, [ctypes.c_char_p]),
    "tt_runtime_profile_start": (_p, [_p, ctypes.c_int]),
    "tt_runtime_profile_stop": (None, [_p]),
    "tt_runtime_profile_enabled": (ctypes.c_bool, [_p]),
    "tt_runtime_profile_read": (_p, [_p, ctypes.POINTER(ProfileEvent), ctypes.c_int,
                                     ctypes.POINTER(ctypes.c_int)]),
    "tt_runtime_profile_counts": (None, [_p, ctypes.POINTER(ctypes.c_int64),
                                         ctypes.POINTER(ctypes.c_int64)]),
    "tt_runtime_profile_now_ns": (ctypes.c_int64, []),
}

# Entry points bound only when the core exports them (added by later cores).
_OPTIONAL_CORE_FUNCS = {
    # tt_status tt_runtime_set_program_cache_bytes(tt_runtime *, int64_t max_bytes)
    "tt_runtime_set_program_cache_bytes": (_p, [_p, ctypes.c_int64]),
}

_SHIM_FUNCS = {
    "torchtpu_shim_set_fallback_mode": (ctypes.c_bool, [ctypes.c_int]),
    "torchtpu_shim_fallback_mode": (ctypes.c_int, []),
    "torchtpu_shim_set_fused_sdp_tracing": (None, [ctypes.c_bool]),
}

core = None
shim = None


def _bind(lib, table):
    for name, (restype, argtypes) in table.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:  # a build older than this package (e.g. after git pull)
            raise ImportError(
                f"torchtpu: {lib._name} has no {name}: the native libraries are older than "
                f"the Python package; rebuild them with `make` in the repository root "
                f"(or `pip install -e .`)") from None
        fn.restype = restype
        fn.argtypes = argtypes


def load():
    """Loads the core, then the shim (whose static initialisers register the
    "tpu" device with PyTorch). torch must be imported first."""
    global core, shim
    if shim is not None:
        return
    for path in (CORE_PATH, SHIM_PATH):
        if not os.path.exists(path):
            raise ImportError(
                f"torchtpu: {path} is missing; build it with `make` in the "
                f"repository root (or `pip install -e .`)")
    core = ctypes.CDLL(CORE_PATH, mode=ctypes.RTLD_GLOBAL)
    _bind(core, _CORE_FUNCS)
    _bind(core, {k: v for k, v in _OPTIONAL_CORE_FUNCS.items() if hasattr(core, k)})
    shim = ctypes.CDLL(SHIM_PATH, mode=ctypes.RTLD_GLOBAL)
    _bind(shim, _SHIM_FUNCS)


def check(status):
    """Raises RuntimeError with the core's message when `status` is an error."""
    if not status:
        return
    code = core.tt_status_code(status)
    msg = core.tt_status_message(status)
    msg = msg.decode("utf-8", "replace") if msg else "unknown error"
    core.tt_status_free(status)
    if code == TT_OUT_OF_RANGE:
        raise IndexError(msg)
    if code == TT_TYPE_ERROR:
        raise TypeError(msg)
    raise RuntimeError(msg)


# --- runtime ---------------------------------------------------------------------

_lock = threading.Lock()
_rt = None
_on_first_runtime = []  # callbacks run once the runtime exists


def runtime():
    """The process-wide runtime handle; RuntimeError when it cannot start."""
    global _rt
    if _rt is not None:
        return _rt
    with _lock:
        if _rt is None:
            handle = _p()
            check(core.tt_runtime_get(ctypes.byref(handle)))
            _rt = handle
            for fn in _on_first_runtime:
                fn(_rt)
    return _rt


def runtime_or_none():
    try:
        return runtime()
    except RuntimeError:
        return None


def _s(b):
    return b.decode("utf-8", "replace") if b is not None else None


def info():
    out = RuntimeInfo()
    core.tt_runtime_info_get(runtime(), ctypes.byref(out))
    return {
        "platform": _s(out.platform),
        "platform_version": _s(out.platform_version),
        "plugin_path": _s(out.plugin_path),
        "api_version": (out.api_major, out.api_minor),
        "device_count": out.device_count,
        "device_kind": _s(out.device_kind),
        "supports_f64": bool(out.supports_f64),
        "asynchronous": bool(out.asynchronous),
        "host_memory_kept": bool(out.host_memory_kept),
        "cpu_attention_kernel": bool(out.cpu_attention_kernel),
    }


def device_count():
    """Devices the runtime sees; 0 when it cannot start. Never raises."""
    rt = runtime_or_none()
    if rt is None:
        return 0
    out = RuntimeInfo()
    core.tt_runtime_info_get(rt, ctypes.byref(out))
    return out.device_count


def graph_stats():
    """The core's graph capture/replay counters (tt_graph_stats) as a dict."""
    out = GraphStats()
    core.tt_runtime_graph_stats(runtime(), ctypes.byref(out))
    return {name: getattr(out, name) for name, _ in GraphStats._fields_}


def stats():
    out = Stats()
    core.tt_runtime_stats(runtime(), ctypes.byref(out))
    return {name: getattr(out, name) for name, _ in Stats._fields_}


def reset_peak():
    core.tt_runtime_reset_peak(runtime())


def synchronize():
    check(core.tt_runtime_synchronize(runtime()))


def set_mode(mode):
    core.tt_runtime_set_mode(runtime(), mode)


def mode():
    return core.tt_runtime_mode(runtime())


def flush():
    check(core.tt_runtime_flush(runtime()))


# --- profiling ---------------------------------------------------------------------

def profile_start(capacity=0):
    check(core.tt_runtime_profile_start(runtime(), capacity))


def profile_stop():
    core.tt_runtime_profile_stop(runtime())


def profile_enabled():
    return core.tt_runtime_profile_enabled(runtime())


def profile_counts():
    """(events recorded since the runtime started, events overwritten in the
    ring since the last profile_start)."""
    rec, drop = ctypes.c_int64(), ctypes.c_int64()
    core.tt_runtime_profile_counts(runtime(), ctypes.byref(rec), ctypes.byref(drop))
    return rec.value, drop.value


def profile_read(cap=65536):
    """The events recorded since the last profile_start, oldest first, as
    dicts (times in CLOCK_MONOTONIC nanoseconds; end_ns 0: not finished)."""
    buf = (ProfileEvent * cap)()
    n = ctypes.c_int()
    check(core.tt_runtime_profile_read(runtime(), buf, cap, ctypes.byref(n)))
    out = []
    for e in buf[:n.value]:
        kind = e.kind
        out.append({
            "name": e.name.decode("utf-8", "replace"),
            "kind": PROFILE_KINDS[kind] if 0 <= kind < len(PROFILE_KINDS) else str(kind),
            "device": e.device, "start_ns": e.start_ns, "launched_ns": e.launched_ns,
            "end_ns": e.end_ns, "bytes_in": e.bytes_in, "bytes_out": e.bytes_out,
            "seq": e.seq, "failed": e.failed,
        })
    return out


def profile_now_ns():
    return core.tt_runtime_profile_now_ns()


def set_layouts_per_op(n):
    """Layouts of one op and shape compiled before strided inputs are copied
    dense instead (0: a program per layout)."""
    check(core.tt_runtime_set_layouts_per_op(runtime(), int(n)))


def set_host_tier(compile_after, max_bytes):
    """Calls of a new op signature before its program is compiled in the
    background, until then run on the host (0: compile at the first call),
    and the largest call (bytes) the host tier takes."""
    check(core.tt_runtime_set_host_tier(runtime(), int(compile_after), int(max_bytes)))


def host_tier():
    n, b = ctypes.c_int64(), ctypes.c_int64()
    core.tt_runtime_host_tier(runtime(), ctypes.byref(n), ctypes.byref(b))
    return n.value, b.value


def wait_compiles():
    core.tt_runtime_wait_compiles(runtime())


def stop_compiles():
    rt = runtime_or_none()
    if rt is not None:
        core.tt_runtime_stop_compiles(rt)


def set_device_checks(flag):
    core.tt_runtime_set_device_checks(runtime(), bool(flag))


def device_checks():
    return bool(core.tt_runtime_device_checks(runtime()))


def set_fuse_limit(max_ops, max_bytes, max_instructions):
    core.tt_runtime_set_fuse_limit(runtime(), int(max_ops), int(max_bytes), int(max_instructions))


def fused_stats():
    out = FusedStats()
    core.tt_runtime_fused_stats(runtime(), ctypes.byref(out))
    return {name: getattr(out, name) for name, _ in FusedStats._fields_}


def fallback_counts():
    rt = runtime_or_none()
    if rt is None:
        return {}
    n = core.tt_runtime_fallback_counts(rt, (ctypes.c_char_p * 1)(), (ctypes.c_int64 * 1)(), 0)
    if n <= 0:
        return {}
    names = (ctypes.c_char_p * n)()
    counts = (ctypes.c_int64 * n)()
    n = min(n, core.tt_runtime_fallback_counts(rt, names, counts, n))
    return {_s(names[i]): int(counts[i]) for i in range(n)}


def generator_state(device):
    g = core.tt_runtime_default_generator(runtime(), device)
    seed, offset = _u64(), _u64()
    core.tt_generator_get_state(g, ctypes.byref(seed), ctypes.byref(offset))
    return seed.value, offset.value


def set_generator_state(device, seed, offset=0):
    g = core.tt_runtime_default_generator(runtime(), device)
    core.tt_generator_set_state(g, seed & 0xFFFFFFFFFFFFFFFF, offset & 0xFFFFFFFFFFFFFFFF)


# --- compilation cache and recompile explainer ---------------------------------------

def set_cache_dir(path, max_bytes):
    """Turns the persistent cache on at `path` (None: off)."""
    arg = os.fsencode(path) if path else None
    check(core.tt_runtime_set_cache_dir(runtime(), arg, int(max_bytes)))


def has_program_cache_bound():
    return hasattr(core, "tt_runtime_set_program_cache_bytes")


def set_program_cache_bytes(max_bytes):
    """Bounds the in-memory program cache (LRU, bytes; 0: unbounded)."""
    if not has_program_cache_bound():
        raise NotImplementedError("torchtpu: this core cannot bound its program cache yet "
                                  "(tt_runtime_set_program_cache_bytes is missing)")
    check(core.tt_runtime_set_program_cache_bytes(runtime(), int(max_bytes)))


def cache_entries():
    rt = runtime_or_none()
    if rt is None:
        return []
    n = core.tt_runtime_cache_entries(rt, None, 0)
    if n <= 0:
        return []
    buf = (CacheEntryInfo * n)()
    n = min(n, core.tt_runtime_cache_entries(rt, buf, n))
    return [{"key": _s(e.key), "label": _s(e.label), "uses": int(e.uses),
             "compile_seconds": float(e.compile_seconds), "from_disk": bool(e.from_disk),
             "text_bytes": int(e.text_bytes)} for e in buf[:n]]


def set_explain_recompiles(flag):
    core.tt_runtime_set_explain_recompiles(runtime(), bool(flag))


def explain_recompiles():
    rt = runtime_or_none()
    return bool(rt is not None and core.tt_runtime_explain_recompiles(rt))


def recompile_causes():
    rt = runtime_or_none()
    if rt is None:
        return {}
    names = (ctypes.c_char_p * 16)()
    counts = (ctypes.c_int64 * 16)()
    n = min(16, core.tt_runtime_recompile_causes(rt, names, counts, 16))
    return {_s(names[i]): int(counts[i]) for i in range(n)}


def recompile_summary():
    rt = runtime_or_none()
    if rt is None:
        return ""
    need = core.tt_runtime_recompile_summary(rt, None, 0)
    buf = ctypes.create_string_buffer(need + 1)
    core.tt_runtime_recompile_summary(rt, buf, need + 1)
    return _s(buf.value)


def has_rule(name):
    """True when the core has a lowering rule for the full ATen name
    ("aten::add.Tensor", "aten::relu")."""
    return core.tt_op_lookup(name.encode()) >= 0


def register_alias(name, existing):
    """Makes op `name` use the lowering rule of `existing`; returns its id."""
    op = core.tt_op_register_alias(name.encode(), existing.encode())
    if op < 0:
        raise RuntimeError(f"register_alias: {existing!r} has no lowering rule")
    return op


# --- shim ------------------------------------------------------------------------

_FALLBACK_MODES = {"warn": 0, "error": 1, "silent": 2}


def set_fallback_mode(name):
    if name not in _FALLBACK_MODES:
        raise ValueError(f"fallback mode {name!r}: expected one of "
                         f"{', '.join(_FALLBACK_MODES)}")
    shim.torchtpu_shim_set_fallback_mode(_FALLBACK_MODES[name])


def fallback_mode():
    code = shim.torchtpu_shim_fallback_mode()
    return {v: k for k, v in _FALLBACK_MODES.items()}[code]


@contextlib.contextmanager
def fused_sdp_tracing():
    """While fake "tpu" tensors are traced without functionalization
    (make_fx), F.scaled_dot_product_attention picks the fused attention op
    (the CPU flash op the core lowers), as under torch.compile, instead of
    the math path (shim/fallback.cpp, fused_sdp_choice). Process-wide: the
    traced backward runs on autograd's device thread."""
    shim.torchtpu_shim_set_fused_sdp_tracing(True)
    try:
        yield
    finally:
        shim.torchtpu_shim_set_fused_sdp_tracing(False)
