"""The one place torchtpu reads environment variables.

Names follow DESIGN.md (compatible with Google's TorchTPU where one exists):

    TORCHTPU_FALLBACK       warn (default) | error | silent: ops without a tpu
                            lowering run on the CPU with a warning, raise, or
                            run on the CPU quietly
    TPU_LAUNCH_BLOCKING     1: debug eager, synchronous after every op
    TORCH_TPU_DEFER_AND_FUSE  1: fused eager, ops deferred into one graph run
                            when a value is needed (launch blocking wins)
    TORCHTPU_PLUGIN_PATH    an explicit PJRT plugin (read by the core)
    TORCHTPU_PLUGIN_INIT_TIMEOUT  seconds the plugin's initialisation may take
                            (default 300; read by the core)
    TORCHTPU_CPU_DEVICES    devices the CPU plugin creates (read by the core)
    TORCHTPU_CPU_ASYNC      1: the CPU plugin runs programs asynchronously on
                            its worker threads; 0 or unset: inline on the
                            launching thread (read by the core)
    TORCHTPU_CPU_KEEP_MEMORY  1 or unset: on the CPU plugin, freed host
                            memory stays in the C heap for the next program
                            (glibc: no mmap'd blocks, no trimming under 2 GiB);
                            0: the C library's defaults (read by the core)
    TF_CPP_MIN_LOG_LEVEL    XLA's log level; defaults to 1 (no info lines)
    TORCHTPU_SITE_PACKAGES  where the core looks for the CPU plugin's package;
                            set here from Python's site-packages when unset
    TORCHTPU_CACHE_DIR      persistent compilation cache directory; unset:
                            $XDG_CACHE_HOME/torchtpu (~/.cache/torchtpu);
                            "0", "off", "none", "false" or empty: no disk cache
    TORCHTPU_CACHE_MAX_BYTES  size bound of that directory (default 2G;
                            suffixes K, M, G, T; 0: unbounded)
    TORCHTPU_PROGRAM_CACHE_MAX_BYTES  bound of the in-memory program cache
                            (same syntax; default 1G, about 4,000 programs;
                            0: unbounded)
    TORCHTPU_LAYOUTS_PER_OP  input layouts (strides) of one op and shape that
                            strict eager compiles a program for; a further
                            layout's strided inputs are copied dense first
                            (default 4; 0: a program per layout always)
    TORCHTPU_COMPILE_AFTER  calls of a new op signature (strict eager) before
                            its program is compiled, in the background; until
                            it is ready, its calls run with PyTorch's CPU
                            kernels on host copies of the tensors (the host
                            tier; default 2: a signature used once never
                            compiles; 0: compile at the first call, every op
                            on the device)
    TORCHTPU_HOST_TIER_MAX_BYTES  the largest op call (bytes of its tensors)
                            the host tier takes (default 4M; same syntax as
                            the cache bounds); a larger one compiles at once
    TORCHTPU_OP_OPT_LEVEL   XLA's backend optimisation level for strict
                            eager's per-op programs of calls within that
                            bound: "default" (the plugin's; the default) or
                            0-3; 0 halves XLA CPU's compile of a tiny program
                            but runs its loops unvectorised (read by the core)
    TORCHTPU_FUSE_MAX_INSTRUCTIONS  fused eager's compile-cost bound: a graph
                            is run before it passes this many StableHLO
                            instructions (a positive integer; default 20000)
    TORCHTPU_EXPLAIN_RECOMPILES  1: print why each program is compiled, and a
                            summary of the causes at exit
    TORCHTPU_FALLBACK_SUMMARY  1: print the CPU-fallback counts
                            (torchtpu.fallback_counts()) at exit, one line on
                            stderr: for programs run unchanged (torchrun ...)
    TORCHTPU_CHECK_NUMERICS 1: compare every tpu op with PyTorch's CPU result
                            (torchtpu.debug.check_numerics), raise on the first
                            divergence
    TORCHTPU_DIST_CHECK     0: collectives skip the cross-rank dtype/shape check
    TORCHTPU_DEVICE_CHECKS  0: programs skip device-side checks (indices in
                            range, class targets, integer division by zero),
                            which otherwise raise at the next synchronisation
    LOCAL_RANK, LOCAL_WORLD_SIZE  set by torchrun: the CPU plugin then creates
                            LOCAL_WORLD_SIZE devices unless TORCHTPU_CPU_DEVICES
                            is set (torch.tpu.set_device(local_rank) works)

Every setting is validated by validate(), at import: a value that is not
one of the accepted ones raises ValueError naming the variable, the value
and what is accepted, instead of being replaced by a default unseen.
"""
import os
import site
import sys

FALLBACK_MODES = ("warn", "error", "silent")


_OFF = ("0", "off", "none", "false", "no")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")

# The most devices the CPU plugin is asked for: each is a thread pool and
# buffers; a typo like 99999999999 must not exhaust the machine.
MAX_CPU_DEVICES = 1024


def _bad(name, value, accepted):
    return ValueError(f"torchtpu: environment variable {name}={value!r} is not valid; "
                      f"accepted: {accepted}")


def _flag(name):
    """A boolean setting: 1/true/yes/on or 0/false/no/off (or unset)."""
    value = os.environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise _bad(name, os.environ[name], "1, true, yes, on (enable) or 0, false, no, off, "
               "empty (disable)")


def fallback_mode():
    """The fallback mode asked for by TORCHTPU_FALLBACK ("warn" when unset)."""
    value = os.environ.get("TORCHTPU_FALLBACK", "").strip().lower()
    if not value:
        return "warn"
    if value not in FALLBACK_MODES:
        raise _bad("TORCHTPU_FALLBACK", os.environ["TORCHTPU_FALLBACK"],
                   ", ".join(FALLBACK_MODES))
    return value


def launch_blocking():
    """True when TPU_LAUNCH_BLOCKING asks for synchronous (debug) eager."""
    return _flag("TPU_LAUNCH_BLOCKING")


def defer_and_fuse():
    """True when TORCH_TPU_DEFER_AND_FUSE asks for fused eager."""
    return _flag("TORCH_TPU_DEFER_AND_FUSE")


def cpu_devices():
    """TORCHTPU_CPU_DEVICES: devices the CPU plugin creates, 1..MAX_CPU_DEVICES
    (default 1). The core reads the variable itself; a valid value is
    written back in canonical form ("04 " -> "4") so it reads the same."""
    raw = os.environ.get("TORCHTPU_CPU_DEVICES")
    if raw is None or not raw.strip():
        return 1
    text = raw.strip()
    if not text.isdigit() or not 1 <= int(text) <= MAX_CPU_DEVICES:
        raise _bad("TORCHTPU_CPU_DEVICES", raw, f"an integer from 1 to {MAX_CPU_DEVICES}")
    os.environ["TORCHTPU_CPU_DEVICES"] = str(int(text))
    return int(text)


def _core_flag(name, default):
    """A boolean setting the core reads itself: `default` when unset; a set
    value is checked and written back as "1" or "0" (the core's spelling)."""
    if not os.environ.get(name, "").strip():
        return default
    on = _flag(name)
    os.environ[name] = "1" if on else "0"
    return on


def cpu_async():
    """TORCHTPU_CPU_ASYNC as a boolean (default False: XLA's CPU plugin runs
    each program inline on the launching thread)."""
    return _core_flag("TORCHTPU_CPU_ASYNC", False)


def cpu_keep_memory():
    """TORCHTPU_CPU_KEEP_MEMORY as a boolean (default True: freed host memory
    stays in the C heap on the CPU plugin)."""
    return _core_flag("TORCHTPU_CPU_KEEP_MEMORY", True)


def quiet_plugin_logs():
    """XLA's plugins log informational lines to stderr at start-up; keep
    warnings and errors only, unless the user chose a level."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def quiet_autograd_exit():
    """Backward on "tpu" starts PyTorch's autograd device thread
    (pt_autograd_0). At exit PyTorch wakes it to stop and waits for it
    (TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT seconds, 10 by default), so that
    thread unwinds and exits while the main thread destroys the process's
    static objects: a race, and a candidate for the "terminate called
    without an active exception" CI saw now and then from processes whose
    work was done (shim/module.cpp's terminate report will name the thread
    if it recurs). 0, PyTorch's own setting for autograd threads that
    misbehave at shutdown, leaves the idle thread asleep for the process's
    exit to end. Keeps a value the user set."""
    os.environ.setdefault("TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT", "0")


def export_site_packages():
    """Tells the core where Python packages live, so that it finds the CPU
    PJRT plugin wheel (lammps_jax_pjrt_cpu). Keeps a value already set."""
    if os.environ.get("TORCHTPU_SITE_PACKAGES"):
        return
    dirs = []
    candidates = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        candidates.append(site.getusersitepackages())
    candidates += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    for d in candidates:
        if d and os.path.isdir(d) and d not in dirs:
            dirs.append(d)
    os.environ["TORCHTPU_SITE_PACKAGES"] = os.pathsep.join(dirs)


# --- compilation cache and debugging tools ------------------------------------------


def cache_dir():
    """The persistent compilation cache directory from TORCHTPU_CACHE_DIR, or
    None when it is turned off. Unset: $XDG_CACHE_HOME/torchtpu, else
    ~/.cache/torchtpu."""
    value = os.environ.get("TORCHTPU_CACHE_DIR")
    if value is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "torchtpu")
    value = value.strip()
    if not value or value.lower() in _OFF:
        return None
    return os.path.abspath(os.path.expanduser(value))


DEFAULT_CACHE_MAX_BYTES = 2 << 30
# Each loaded program costs the process ~260 KB and ~4 memory mappings on
# XLA's CPU plugin (the cache's per-entry estimate is 256 KiB plus its text
# and serialised size): unbounded, a process that compiles ~16,000 shapes
# runs out of Linux's 65,530 mappings and the plugin crashes mid-compile.
# 1 GiB keeps about 4,000 programs, least recently used evicted first.
DEFAULT_PROGRAM_CACHE_MAX_BYTES = 1 << 30


_SIZES = "a size in bytes, a whole or decimal number with an optional suffix K, M, G or T " \
         "(e.g. 2G, 512M, 1.5G, 1000000); 0 for no bound"
_MAX_BYTES = 1 << 62


def parse_bytes(text):
    """"2G", "512M", "1.5g", "1000" -> bytes; ValueError when malformed,
    negative, not finite or beyond 2**62."""
    t = str(text).strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    if scale != 1:
        t = t[:-1].strip()
    if not t or not all(c.isdigit() or c == "." for c in t) or t.count(".") > 1 or t == ".":
        raise ValueError(f"{text!r} is not a size")
    n = float(t) * scale
    if n > _MAX_BYTES:
        raise ValueError(f"{text!r} is too large")
    return int(n)


def _size_setting(name, default):
    raw = os.environ.get(name, "")
    if not raw.strip():
        return default
    try:
        return parse_bytes(raw)
    except ValueError:
        raise _bad(name, raw, _SIZES) from None


def cache_max_bytes():
    """TORCHTPU_CACHE_MAX_BYTES (default 2 GiB; 0: unbounded)."""
    return _size_setting("TORCHTPU_CACHE_MAX_BYTES", DEFAULT_CACHE_MAX_BYTES)


def program_cache_max_bytes():
    """TORCHTPU_PROGRAM_CACHE_MAX_BYTES: bound of the in-memory program cache
    (default 1 GiB; 0: unbounded)."""
    return _size_setting("TORCHTPU_PROGRAM_CACHE_MAX_BYTES", DEFAULT_PROGRAM_CACHE_MAX_BYTES)


def layouts_per_op():
    """TORCHTPU_LAYOUTS_PER_OP (None: the core's default, 4; 0: a program
    per input layout always)."""
    raw = os.environ.get("TORCHTPU_LAYOUTS_PER_OP", "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) > 2**31 - 1:
        raise _bad("TORCHTPU_LAYOUTS_PER_OP", raw, "a count, 0 or more")
    return int(raw)


DEFAULT_COMPILE_AFTER = 2
DEFAULT_HOST_TIER_MAX_BYTES = 4 << 20


def compile_after():
    """TORCHTPU_COMPILE_AFTER (default 2; 0: no host tier)."""
    raw = os.environ.get("TORCHTPU_COMPILE_AFTER", "").strip()
    if not raw:
        return DEFAULT_COMPILE_AFTER
    if not raw.isdigit() or int(raw) > 2**31 - 1:
        raise _bad("TORCHTPU_COMPILE_AFTER", raw, "a count of calls, 0 or more (0: compile "
                   "at a signature's first call)")
    return int(raw)


def host_tier_max_bytes():
    """TORCHTPU_HOST_TIER_MAX_BYTES (default 4 MiB)."""
    return _size_setting("TORCHTPU_HOST_TIER_MAX_BYTES", DEFAULT_HOST_TIER_MAX_BYTES)


def op_opt_level():
    """TORCHTPU_OP_OPT_LEVEL, checked here; the core reads it."""
    raw = os.environ.get("TORCHTPU_OP_OPT_LEVEL", "").strip()
    if raw and raw not in ("0", "1", "2", "3", "default"):
        raise _bad("TORCHTPU_OP_OPT_LEVEL", raw, "0, 1, 2, 3 or default")
    return raw or None


def plugin_init_timeout():
    """TORCHTPU_PLUGIN_INIT_TIMEOUT, checked here; the core reads it (seconds
    PJRT_Plugin_Initialize may take before loading fails; default 300)."""
    raw = os.environ.get("TORCHTPU_PLUGIN_INIT_TIMEOUT", "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise _bad("TORCHTPU_PLUGIN_INIT_TIMEOUT", raw, "a positive number of seconds")
    return value


def fuse_max_instructions():
    """TORCHTPU_FUSE_MAX_INSTRUCTIONS (0: the core's default, 20000)."""
    raw = os.environ.get("TORCHTPU_FUSE_MAX_INSTRUCTIONS", "").strip()
    if not raw:
        return 0
    if not raw.isdigit() or int(raw) < 1 or int(raw) > 2**62:
        raise _bad("TORCHTPU_FUSE_MAX_INSTRUCTIONS", raw, "a positive integer")
    return int(raw)


def explain_recompiles():
    """True when TORCHTPU_EXPLAIN_RECOMPILES asks for compile explanations."""
    return _flag("TORCHTPU_EXPLAIN_RECOMPILES")


def fallback_summary():
    """True when TORCHTPU_FALLBACK_SUMMARY asks for the fallback counts at exit."""
    return _flag("TORCHTPU_FALLBACK_SUMMARY")


def check_numerics():
    """True when TORCHTPU_CHECK_NUMERICS asks to check every op against the CPU."""
    return _flag("TORCHTPU_CHECK_NUMERICS")


def validate():
    """Checks every setting above (raises ValueError naming the first bad
    one) before anything starts; the getters are then safe to call."""
    fallback_mode()
    for name in ("TPU_LAUNCH_BLOCKING", "TORCH_TPU_DEFER_AND_FUSE",
                 "TORCHTPU_EXPLAIN_RECOMPILES", "TORCHTPU_FALLBACK_SUMMARY",
                 "TORCHTPU_CHECK_NUMERICS", "TORCHTPU_DIST_CHECK", "TORCHTPU_DEVICE_CHECKS"):
        _flag(name)
    cpu_devices()
    compile_after()
    host_tier_max_bytes()
    op_opt_level()
    plugin_init_timeout()
    cpu_async()
    cpu_keep_memory()
    # TORCHTPU_PLUGIN_PATH is checked by the core when the runtime starts: a
    # missing or bad plugin is a RuntimeError naming it at first use, and the
    # process stays usable for CPU work.
    cache_dir()
    cache_max_bytes()
    program_cache_max_bytes()
    fuse_max_instructions()
    level = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "").strip()
    if level and level not in ("0", "1", "2", "3"):
        raise _bad("TF_CPP_MIN_LOG_LEVEL", os.environ["TF_CPP_MIN_LOG_LEVEL"], "0, 1, 2 or 3")


# --- distributed (torchrun) -----------------------------------------------------------

def launched_devices():
    """Under torchrun (LOCAL_RANK and LOCAL_WORLD_SIZE set) each process asks
    the CPU plugin for LOCAL_WORLD_SIZE devices, so that device LOCAL_RANK
    exists and torch.tpu.set_device(local_rank) works as on CUDA. A value of
    TORCHTPU_CPU_DEVICES already set wins; other plugins ignore it."""
    if os.environ.get("TORCHTPU_CPU_DEVICES") or "LOCAL_RANK" not in os.environ:
        return
    n = os.environ.get("LOCAL_WORLD_SIZE", "").strip()
    if n.isdigit() and int(n) > 1:
        os.environ["TORCHTPU_CPU_DEVICES"] = n


def device_checks():
    """TORCHTPU_DEVICE_CHECKS (default on): value preconditions that live on
    the device are computed in each program and raised at the next
    synchronisation; 0 (false, no, off) turns them off for speed."""
    raw = os.environ.get("TORCHTPU_DEVICE_CHECKS")
    if raw is None or not raw.strip():
        return True
    return _flag("TORCHTPU_DEVICE_CHECKS")


def dist_check():
    """TORCHTPU_DIST_CHECK (default on): before each collective the ranks
    compare collective, dtype and shape and raise on a mismatch; 0 turns the
    check (one small gloo all_gather per collective) off."""
    return "TORCHTPU_DIST_CHECK" not in os.environ or _flag("TORCHTPU_DIST_CHECK") or \
        not os.environ["TORCHTPU_DIST_CHECK"].strip()
