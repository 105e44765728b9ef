"""Checks a PJRT plugin the way torchtpu will use it, without PyTorch.

    python -m torchtpu.tools.plugin_check [PATH] [--devices N] [--timeout S] [--json]
    python torchtpu/tools/plugin_check.py [PATH] ...   # the same, importing nothing of torch

PATH is a plugin .so (libtpu.so, xla_cuda_plugin.so, a CPU plugin); without
it the core's discovery picks one, as `import torchtpu` would. The check
loads it through the core's own loader (libtorchtpu_core.so, through
ctypes) and prints, one line each: API versions (the plugin's and ours),
the size the plugin accepts for every argument struct we pass, plugin
attributes, extensions, platform, devices and memory spaces; then it
compiles and runs x*2+1 on one device and an all_reduce over every local
device and checks their values. It stops at the first failure with the
step's name and the core's message; exit status 0 when everything passed,
1 otherwise.

libtpu: TPU_SKIP_MDS_QUERY=1 is set for the check unless you set it (off a
Cloud TPU VM libtpu otherwise waits ~30 s per setting on the metadata
server; --query-metadata keeps libtpu's default), and initialisation gives
up after --timeout seconds (TORCHTPU_PLUGIN_INIT_TIMEOUT).

This file imports only the standard library: `python -m` runs the package's
__init__ first (which imports torch), running it by path does not.
"""
import argparse
import ctypes
import importlib.util
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def core_path():
    """libtorchtpu_core.so: TORCHTPU_LIB_DIR's, else the one in torchtpu/lib."""
    lib_dir = os.environ.get("TORCHTPU_LIB_DIR") or os.path.join(os.path.dirname(_HERE), "lib")
    return os.path.join(lib_dir, "libtorchtpu_core.so")


def _export_site_packages():
    # torchtpu._env.export_site_packages, loaded by path: importing it as
    # torchtpu._env would run the package's __init__, which imports torch
    # (_env.py itself needs only the standard library).
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_env.py")
    spec = importlib.util.spec_from_file_location("_torchtpu_env", path)
    env = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(env)
    env.export_site_packages()


class _Options(ctypes.Structure):  # tt_pjrt_check_options (core/src/pjrt/pjrt.h)
    _fields_ = [("plugin_path", ctypes.c_char_p),
                ("cpu_device_count", ctypes.c_int),
                ("skip_struct_probe", ctypes.c_bool)]


_EMIT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)


def run(path=None, devices=4, timeout=None, query_metadata=False, struct_probe=True,
        on_line=None):
    """Runs the check; returns {"ok", "lines": [(key, value)], "step", "error"}.
    `on_line(key, value)` sees each line as it comes (a hang shows where)."""
    _export_site_packages()
    if not query_metadata:
        os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    if timeout is not None:
        os.environ["TORCHTPU_PLUGIN_INIT_TIMEOUT"] = str(float(timeout))
    else:
        os.environ.setdefault("TORCHTPU_PLUGIN_INIT_TIMEOUT", "60")
    # The CPU plugin logs through absl to stderr; keep the report readable.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    lib_file = core_path()
    if not os.path.isfile(lib_file):
        return {"ok": False, "lines": [], "step": "load core",
                "error": f"{lib_file}: no such file (build it: make core)"}
    lib = ctypes.CDLL(lib_file)
    lib.tt_pjrt_check.restype = ctypes.c_void_p
    lib.tt_pjrt_check.argtypes = [ctypes.POINTER(_Options), _EMIT, ctypes.c_void_p]
    lib.tt_status_message.restype = ctypes.c_char_p
    lib.tt_status_message.argtypes = [ctypes.c_void_p]
    lib.tt_status_free.argtypes = [ctypes.c_void_p]

    lines = []

    def emit(_arg, key, value):
        k, v = key.decode(), value.decode(errors="replace")
        lines.append((k, v))
        if on_line:
            on_line(k, v)

    cb = _EMIT(emit)
    opts = _Options(os.fsencode(path) if path else None, int(devices), not struct_probe)
    st = lib.tt_pjrt_check(ctypes.byref(opts), cb, None)
    error = None
    if st:
        error = lib.tt_status_message(st).decode(errors="replace")
        lib.tt_status_free(st)
    steps = [v for k, v in lines if k == "step"]
    return {"ok": error is None, "lines": lines, "step": steps[-1] if steps else None,
            "error": error}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m torchtpu.tools.plugin_check",
                                 description="Check a PJRT plugin the way torchtpu uses it.")
    ap.add_argument("path", nargs="?", help="plugin .so (default: the core's discovery)")
    ap.add_argument("--devices", type=int, default=4,
                    help="devices asked of a CPU plugin for the collective step (default 4)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds PJRT_Plugin_Initialize may take (default: "
                         "TORCHTPU_PLUGIN_INIT_TIMEOUT, else 60)")
    ap.add_argument("--query-metadata", action="store_true",
                    help="leave TPU_SKIP_MDS_QUERY unset: libtpu asks the cloud metadata "
                         "server (the core still sets it where no TPU device node exists)")
    ap.add_argument("--no-struct-probe", action="store_true",
                    help="don't ask the plugin its struct sizes (a plugin that crashes on it)")
    ap.add_argument("--json", action="store_true", help="print one JSON object at the end")
    args = ap.parse_args(argv)

    def show(k, v):
        if k == "step":
            return
        print(f"{k:>17}: {v}", flush=True)

    res = run(args.path, args.devices, args.timeout, args.query_metadata,
              not args.no_struct_probe, on_line=None if args.json else show)
    res["torch_imported"] = "torch" in sys.modules
    if args.json:
        print(json.dumps(res))
    elif res["ok"]:
        print("plugin_check: passed", flush=True)
    else:
        print(f"plugin_check: FAILED at step '{res['step']}': {res['error']}", flush=True)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter and plugin teardown: a plugin whose initialisation
    # timed out still has a thread inside it, and libtpu's exit handlers
    # may wait on it.
    os._exit(code)
