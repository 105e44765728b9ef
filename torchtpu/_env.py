"""The one place torchtpu reads environment variables.

Names follow DESIGN.md (compatible with Google's TorchTPU where one exists):

    TORCHTPU_FALLBACK       warn (default) | error | silent: ops without a tpu
                            lowering run on the CPU with a warning, raise, or
                            run on the CPU quietly
    TPU_LAUNCH_BLOCKING     1: debug eager, synchronous after every op
    TORCH_TPU_DEFER_AND_FUSE  1: fused eager, ops deferred into one graph run
                            when a value is needed (launch blocking wins)
    TORCHTPU_PLUGIN_PATH    an explicit PJRT plugin (read by the core)
    TORCHTPU_CPU_DEVICES    devices the CPU plugin creates (read by the core)
    TF_CPP_MIN_LOG_LEVEL    XLA's log level; defaults to 1 (no info lines)
    TORCHTPU_SITE_PACKAGES  where the core looks for the CPU plugin's package;
                            set here from Python's site-packages when unset
    TORCHTPU_CACHE_DIR      persistent compilation cache directory; unset:
                            $XDG_CACHE_HOME/torchtpu (~/.cache/torchtpu);
                            "0", "off", "none", "false" or empty: no disk cache
    TORCHTPU_CACHE_MAX_BYTES  size bound of that directory (default 2G;
                            suffixes K, M, G; 0: unbounded)
    TORCHTPU_EXPLAIN_RECOMPILES  1: print why each program is compiled, and a
                            summary of the causes at exit
    TORCHTPU_CHECK_NUMERICS 1: compare every tpu op with PyTorch's CPU result
                            (torchtpu.debug.check_numerics), raise on the first
                            divergence
    TORCHTPU_DIST_CHECK     0: collectives skip the cross-rank dtype/shape check
    LOCAL_RANK, LOCAL_WORLD_SIZE  set by torchrun: the CPU plugin then creates
                            LOCAL_WORLD_SIZE devices unless TORCHTPU_CPU_DEVICES
                            is set (torch.tpu.set_device(local_rank) works)
"""
import os
import site
import sys
import warnings

FALLBACK_MODES = ("warn", "error", "silent")


def fallback_mode():
    """The fallback mode asked for by TORCHTPU_FALLBACK ("warn" when unset)."""
    value = os.environ.get("TORCHTPU_FALLBACK", "").strip().lower()
    if not value:
        return "warn"
    if value not in FALLBACK_MODES:
        warnings.warn(f"TORCHTPU_FALLBACK={value!r} is not one of "
                      f"{', '.join(FALLBACK_MODES)}; using 'warn'")
        return "warn"
    return value


def launch_blocking():
    """True when TPU_LAUNCH_BLOCKING asks for synchronous (debug) eager."""
    return os.environ.get("TPU_LAUNCH_BLOCKING", "").strip().lower() in ("1", "true", "yes", "on")


def defer_and_fuse():
    """True when TORCH_TPU_DEFER_AND_FUSE asks for fused eager."""
    return os.environ.get("TORCH_TPU_DEFER_AND_FUSE", "").strip().lower() in ("1", "true", "yes", "on")


def quiet_plugin_logs():
    """XLA's plugins log informational lines to stderr at start-up; keep
    warnings and errors only, unless the user chose a level."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


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

_OFF = ("0", "off", "none", "false", "no")
_TRUE = ("1", "true", "yes", "on")


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


def parse_bytes(text):
    """"2G", "512M", "1000" -> bytes; ValueError when malformed."""
    t = str(text).strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    if scale != 1:
        t = t[:-1]
    return int(float(t) * scale)


def cache_max_bytes():
    """TORCHTPU_CACHE_MAX_BYTES (default 2 GiB; 0 or less: unbounded)."""
    value = os.environ.get("TORCHTPU_CACHE_MAX_BYTES", "").strip()
    if not value:
        return DEFAULT_CACHE_MAX_BYTES
    try:
        return parse_bytes(value)
    except ValueError:
        warnings.warn(f"TORCHTPU_CACHE_MAX_BYTES={value!r} is not a size; "
                      f"using {DEFAULT_CACHE_MAX_BYTES}")
        return DEFAULT_CACHE_MAX_BYTES


def explain_recompiles():
    """True when TORCHTPU_EXPLAIN_RECOMPILES asks for compile explanations."""
    return os.environ.get("TORCHTPU_EXPLAIN_RECOMPILES", "").strip().lower() in _TRUE


def check_numerics():
    """True when TORCHTPU_CHECK_NUMERICS asks to check every op against the CPU."""
    return os.environ.get("TORCHTPU_CHECK_NUMERICS", "").strip().lower() in _TRUE


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


def dist_check():
    """TORCHTPU_DIST_CHECK (default on): before each collective the ranks
    compare collective, dtype and shape and raise on a mismatch; 0 turns the
    check (one small gloo all_gather per collective) off."""
    return os.environ.get("TORCHTPU_DIST_CHECK", "1").strip().lower() not in _OFF
