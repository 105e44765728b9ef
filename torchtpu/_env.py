"""The one place torchtpu reads environment variables.

Names follow DESIGN.md (compatible with Google's TorchTPU where one exists):

    TORCHTPU_FALLBACK       warn (default) | error | silent: ops without a tpu
                            lowering run on the CPU with a warning, raise, or
                            run on the CPU quietly
    TPU_LAUNCH_BLOCKING     1: debug eager, synchronous after every op
    TORCHTPU_PLUGIN_PATH    an explicit PJRT plugin (read by the core)
    TORCHTPU_CPU_DEVICES    devices the CPU plugin creates (read by the core)
    TF_CPP_MIN_LOG_LEVEL    XLA's log level; defaults to 1 (no info lines)
    TORCHTPU_SITE_PACKAGES  where the core looks for the CPU plugin's package;
                            set here from Python's site-packages when unset
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
