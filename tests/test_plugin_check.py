"""python -m torchtpu.tools.plugin_check: a PJRT plugin checked through the
core's own loader, without PyTorch.

CI runs it on XLA's CPU plugin: the values of its two programs are compared
with the same arithmetic done here, the struct sizes with what the plugin
accepts. The libtpu handshake runs where libtpu is installed (an optional
extra, not in the default set-up) and is skipped, saying so, elsewhere:
load, version, struct sizes, initialisation without a hang, and off a TPU
host our own "no TPU" message naming libtpu's lock file."""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "torchtpu", "tools", "plugin_check.py")
CORE = os.path.join(ROOT, "torchtpu", "lib", "libtorchtpu_core.so")


def _env():
    env = dict(os.environ)
    env.pop("TORCHTPU_PLUGIN_PATH", None)  # the CPU plugin, found by discovery
    return env


def run_tool(*args, module=False, env=None, timeout=300):
    """Runs the tool by path (imports no torch) or with -m; returns (rc, out)."""
    cmd = [sys.executable] + (["-m", "torchtpu.tools.plugin_check"] if module else [TOOL])
    p = subprocess.run(cmd + list(args), capture_output=True, text=True, cwd=ROOT,
                       env=env or _env(), timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def run_json(*args, **kw):
    rc, out = run_tool("--json", *args, **kw)
    last = [ln for ln in out.splitlines() if ln.startswith("{")][-1]
    return rc, json.loads(last)


def values(res, key):
    return [v for k, v in res["lines"] if k == key]


def floats(text):
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", text)]


def test_cpu_plugin_passes_and_its_programs_compute_the_right_values():
    rc, res = run_json("--devices", "4")
    assert rc == 0 and res["ok"], res
    assert res["torch_imported"] is False  # by path, nothing of torch loads
    assert values(res, "platform") == ["cpu"]
    assert values(res, "devices") == ["4"]
    assert len(values(res, "device")) == 4
    # Every device reports its memories, one of them the default.
    mem = values(res, "memory")
    assert sum("(default)" in m for m in mem) == 4
    # x*2+1 on x = 0.5 i - 1: the reported values against Python's arithmetic.
    prog = values(res, "program")[0]
    got = floats(prog.split(":", 1)[1].split("(")[0])
    assert got == [2 * (0.5 * i - 1) + 1 for i in range(8)]
    # all_reduce(sum) of (d+1)*[1 2 3 4] over 4 devices: [1 2 3 4] * 10.
    coll = values(res, "collective")[0]
    assert "over 4 devices" in coll and "*10 " in coll and "max error 0)" in coll


def test_cpu_plugin_struct_sizes_and_versions():
    rc, res = run_json()
    assert rc == 0, res
    api = values(res, "api")[0]
    major, minor = map(int, re.search(r"plugin (\d+)\.(\d+)", api).groups())
    assert major == 0 and minor >= 81
    structs = values(res, "struct")
    assert len(structs) > 30
    for line in structs:
        ours, need = map(int, re.search(r"ours (\d+), plugin needs >= (\d+)", line).groups())
        assert need <= ours, line
    assert any(v.startswith("stablehlo_current_version = ") for v in values(res, "attribute"))
    assert any(v.startswith("FFI ") for v in values(res, "extension"))


def test_human_output_and_module_spelling():
    rc, out = run_tool("--devices", "2")
    assert rc == 0 and "plugin_check: passed" in out
    assert re.search(r"platform: cpu", out)
    rc, res = run_json("--devices", "2", module=True)  # python -m (the package imports torch)
    assert rc == 0 and res["ok"] and values(res, "devices") == ["2"]


@pytest.mark.parametrize("path, step, needle", [
    ("/nonexistent/plugin.so", "load", "no such file"),
    (CORE, "load", "exports no GetPjrtApi: not a PJRT plugin"),
    (TOOL, "load", "dlopen("),  # not a shared object at all
])
def test_bad_plugins_fail_with_a_clear_message(path, step, needle):
    rc, res = run_json(path)
    assert rc == 1 and not res["ok"]
    assert res["step"] == step and needle in res["error"], res
    rc, out = run_tool(path)
    assert rc == 1 and f"FAILED at step '{step}'" in out and needle in out


# --- libtpu (optional: pip install libtpu) ---------------------------------------------

def _libtpu_path():
    env = os.environ.get("TPU_LIBRARY_PATH")
    if env and os.path.isfile(env):
        return env
    spec = importlib.util.find_spec("libtpu")  # finds, does not import
    if spec and spec.submodule_search_locations:
        path = os.path.join(list(spec.submodule_search_locations)[0], "libtpu.so")
        if os.path.isfile(path):
            return path
    return None


LIBTPU = _libtpu_path()
TPU_HOST = os.path.exists("/dev/accel0") or os.path.exists("/dev/vfio")
needs_libtpu = pytest.mark.skipif(
    LIBTPU is None, reason="libtpu is not installed (optional, 467 MB: pip install libtpu)")


@needs_libtpu
def test_libtpu_handshake():
    env = _env()
    env.pop("TPU_SKIP_MDS_QUERY", None)  # the tool sets it, as a user would not
    # The timeout guards the test from a hang; the check must end on its own.
    rc, res = run_json(LIBTPU, "--timeout", "60", env=env, timeout=240)
    api = values(res, "api")[0]
    assert re.search(r"plugin 0\.(\d+)", api) and int(re.search(r"plugin 0\.(\d+)", api)[1]) >= 81
    structs = values(res, "struct")
    assert structs and all(line.endswith(": ok") for line in structs), structs
    assert any(v.startswith("stablehlo_current_version = ") for v in values(res, "attribute"))
    assert any(v.startswith("Collectives ") for v in values(res, "extension"))
    if TPU_HOST:
        assert rc == 0 and res["ok"], res
    else:
        assert rc == 1 and res["step"] == "client", res
        assert "found no TPU on this host" in res["error"]
        assert "libtpu_lockfile" in res["error"]


@needs_libtpu
@pytest.mark.skipif(TPU_HOST, reason="a TPU host: libtpu finds its device there")
def test_libtpu_without_a_tpu_is_torchtpus_message_at_first_use():
    env = _env()
    env["TORCHTPU_PLUGIN_PATH"] = LIBTPU
    env.pop("TPU_SKIP_MDS_QUERY", None)  # the loader's default off-TPU: no hang
    code = ("import torch, torchtpu\n"
            "try:\n"
            "    torch.ones(2, device='tpu') + 1\n"
            "except RuntimeError as e:\n"
            "    print('ERROR:', e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=240)
    assert "ERROR:" in p.stdout, p.stdout + p.stderr
    assert "found no TPU on this host" in p.stdout and "libtpu_lockfile" in p.stdout


# --- scripts/device_check.sh, the CPU plugin standing in -------------------------------

def test_device_check_script_passes_on_the_cpu_plugin(tmp_path):
    """What a lent GPU machine runs, here with the CPU plugin: every step
    passes and the results have the format docs/portability.md describes."""
    env = _env()
    env.pop("PLUGIN", None)
    env["OUT"] = str(tmp_path)
    env["CORE_TESTS"] = "test_abi test_pjrt"  # the full list is the script's default
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "device_check.sh")],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert p.returncode == 0, summary
    steps = {}
    for line in summary[:-1]:
        status, name, secs = line.split()[:3]
        assert status in ("PASS", "FAIL", "SKIP") and float(secs) >= 0
        steps[name] = status
    assert summary[-1] == "RESULT PASS"
    assert steps == dict.fromkeys(["env", "build_core", "core_tests", "plugin_check",
                                   "build_shim", "smoke"], "PASS")
    report = json.loads((tmp_path / "plugin_check.json").read_text())
    assert report["ok"] and values(report, "platform") == ["cpu"]
    smoke = json.loads((tmp_path / "smoke.json").read_text())
    assert smoke["runtime"]["platform"] == "cpu"
    names = [c["name"] for c in smoke["checks"]]
    assert names == ["tensors", "sdpa", "mlp_step", "compiled_step"]
    assert all(c["ok"] and c["max_abs_diff"] <= 1e-4 for c in smoke["checks"]), smoke["checks"]
    for f in ("env.txt", "core_tests.log", "build_core.log", "smoke.log"):
        assert (tmp_path / f).is_file()


@pytest.mark.parametrize("value", ["soon", "-5"])
def test_bad_plugin_init_timeout_is_refused_at_import(value):
    env = dict(os.environ, TORCHTPU_PLUGIN_INIT_TIMEOUT=value)
    p = subprocess.run([sys.executable, "-c", "import torchtpu"], capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode != 0
    assert "TORCHTPU_PLUGIN_INIT_TIMEOUT" in p.stderr and "positive number" in p.stderr
