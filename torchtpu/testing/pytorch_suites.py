"""Runs PyTorch's own device-generic test suites on "tpu" and sorts the results.

    python -m torchtpu.testing.pytorch_suites --tests-dir DIR
        [--suite test_binary_ufuncs ...] [-k EXPR] [--timeout S] [--budget S]
        [--sample N [--seed S]] [--json out.json] [--markdown out.md] [--no-cpu-rerun]

PyTorch's test files (test_binary_ufuncs.py, test_view_ops.py, ...) are
written once against a generic `device` and instantiated per device type by
torch.testing._internal.common_device_type.instantiate_device_type_tests.
When a PrivateUse1 backend is registered and `torch.<name>.is_available()`
is true (torchtpu registers "tpu"), PrivateUse1TestBase joins the device
bases at import of common_device_type, so every file gains
`<Class>PRIVATEUSE1` classes whose tests are named with the backend's name:
`TestBinaryUfuncsPRIVATEUSE1::test_add_tpu_float32`. The environment variable
PYTORCH_TESTING_DEVICE_ONLY_FOR picks the device bases (`tpu` and
`privateuse1` both name ours; `cpu` names the CPU counterparts,
`TestBinaryUfuncsCPU::test_add_cpu_float32`). TORCH_TEST_DEVICES (extra base
classes from files) and PYTORCH_TESTING_DEVICE_FOR_CUSTOM (run onlyCUDA tests
on a custom device) are not needed and not set.

Getting the test files. The torch wheel ships torch.testing._internal but not
PyTorch's test/ folder. Check out test/ at the installed version, outside
this repository (PyTorch's files are not part of torchtpu):

    git clone --depth 1 --branch v2.13.0 --filter=blob:none --sparse \\
        https://github.com/pytorch/pytorch /tmp/pytorch
    git -C /tmp/pytorch sparse-checkout set test
    python -m torchtpu.testing.pytorch_suites --tests-dir /tmp/pytorch/test

(from an existing clone: `git archive v2.13.0 test | tar -x -C /tmp/pt`).
Files from another PyTorch version may import helpers the installed
torch.testing._internal lacks; a few known renames and moves are bridged
(_bridge_renamed_helpers: the same helper under its old name), anything else
is reported as a collection error.

How a suite runs. Each suite runs in pytest subprocesses (`-p no:cacheprovider`)
with a small plugin (this module, loaded with `-p`) that writes the id of each
test as it starts and its outcome as it ends. The parent is the watchdog:

  - a test that runs longer than --timeout seconds is recorded "timeout", the
    subprocess is killed, and the suite resumes after it;
  - a subprocess that dies (a segfault, an abort) while a test runs records
    that test as "crash" with the signal and the tail of stderr (Python's
    faulthandler stack), and the suite resumes, leaving out every test that
    already has an outcome;
  - --budget bounds a suite's wall time; tests not reached are "not run".

Then the tpu tests that failed, crashed or timed out are rerun on the CPU
(the same test with `_cpu` for `_tpu` and class suffix `CPU`; a test of a
class not instantiated per device, test_torch's TestTorch, as it is), with
torchtpu not loaded (TORCH_DEVICE_BACKEND_AUTOLOAD=0), which splits
"failed, tpu only" from "failed on the CPU too" (broken on this wheel or by a
version mismatch, not our bug). A tpu test whose CPU counterpart does not
exist (onlyPRIVATEUSE1 tests) counts as tpu-only.

Failures are grouped into clusters: exception type plus the first line of its
message with numbers, hex addresses and quoted names normalised, so
"expected 3 but got 4" and "expected 5 but got 6" fall together.

Expected failures live in pytorch_suites_xfail.toml next to this file, each
with a reason; they still run, and count as "xfail" (or "xpass" when they pass).
A listed test that crashes or times out counts as a crash or a timeout.
Nothing is skipped silently.

% tpu-pass is passed / (passed + tpu-only failures + tpu-only crashes and
timeouts): the share of tests that pass on the CPU which also pass on tpu.
Tests that pass on tpu are not rerun on the CPU and are taken as CPU-passing.
"""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

DEFAULT_SUITES = (
    "test_binary_ufuncs", "test_unary_ufuncs", "test_reductions",
    "test_type_promotion", "test_tensor_creation_ops", "test_view_ops",
    "test_shape_ops", "test_sort_and_select", "test_indexing", "test_torch",
)

# `--suite sparse`: PyTorch's sparse suites (issue 44). The sparse parts of
# test_nn / test_torch / test_autograd run with those suites, -k sparse picks
# them. The OpInfo-driven part of test_sparse/test_sparse_csr also runs
# without a checkout: python -m torchtpu.testing.sparse_opinfo.
SPARSE_SUITES = ("test_sparse", "test_sparse_csr")
SUITE_GROUPS = {"sparse": SPARSE_SUITES}

XFAIL_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "pytorch_suites_xfail.toml")

# Final categories, in table order.
CATEGORIES = ("passed", "failed_tpu", "failed_cpu_too", "skipped", "crash",
              "timeout", "xfail", "xpass", "not_run")

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO_ROOT = os.path.dirname(os.path.dirname(_HERE))

# ---------------------------------------------------------------------------
# pytest plugin, loaded in the subprocess with `-p torchtpu.testing.pytorch_suites`.
# Environment: TORCHTPU_SUITES_EVENTS (file to append events to),
# TORCHTPU_SUITES_EXCLUDE (file of node ids to deselect),
# TORCHTPU_SUITES_SELECT (file of node ids to keep; all others deselected),
# TORCHTPU_SUITES_SAMPLE ("N,SEED": keep a seeded random N of what -k keeps).


def _read_ids(path):
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        return {line.rstrip("\n") for line in f if line.strip()}


_events = None


def _sampled(ids, spec):
    """The ids a "N,SEED" sample keeps: the same N for the same collection,
    so a restart after a crash picks the same tests."""
    if not spec:
        return None
    n, seed = (int(v) for v in spec.split(","))
    if n >= len(ids):
        return set(ids)
    return set(random.Random(seed).sample(sorted(ids), n))


def _emit(obj):
    global _events
    if _events is None:
        _events = open(os.environ["TORCHTPU_SUITES_EVENTS"], "a", buffering=1)
    _events.write(json.dumps(obj) + "\n")
    _events.flush()


def _bridge_renamed_helpers():
    """Older copies of PyTorch's test files import a few helpers that
    torch.testing._internal has since renamed or moved; without these aliases
    such a file is one collection error. Each alias is the same helper under
    its old name (nothing is stubbed to pass): the test files' own code is not
    touched. Only names the installed torch lacks are added."""
    import torch
    import torch.testing._internal.common_cuda as cuda
    import torch.testing._internal.common_device_type as device_type
    import torch.testing._internal.common_methods_invocations as cmi
    import torch.testing._internal.common_nn as cnn
    import torch.testing._internal.common_utils as utils

    aliases = (
        (utils, "skipIfMps", lambda: utils.skipIfMPS),            # renamed
        (cmi, "binary_ufuncs_and_refs", lambda: cmi.binary_ufuncs),  # now holds the refs
        (cmi, "xfail", lambda: device_type.xfail),                # moved
        (cmi, "skip", lambda: device_type.skip),                  # moved
        # moved, and now takes the class and test from the decorated function
        (cmi, "skipOps", lambda: lambda _cls, _test, to_skip: device_type.skipOps(to_skip)),
        # lerp's ForeachFuncInfo, since moved into foreach_other_op_db
        (cmi, "foreach_lerp_op_db",
         lambda: [op for op in cmi.foreach_other_op_db if op.name == "_foreach_lerp"]),
        # CUDA's TF32 query; no CUDA device is in these runs
        (cuda, "tf32_is_not_fp32", lambda: lambda: False),
        # the list test_nn iterates, now built by a function
        (cnn, "new_module_tests", lambda: cnn.get_new_module_tests()),
        # test_autograd's import-time query, since moved to torch.backends
        (torch._C, "has_mkldnn", lambda: torch.backends.mkldnn.is_available()),
    )
    for module, name, make in aliases:
        if not hasattr(module, name):
            setattr(module, name, make())


def pytest_configure(config):
    # Also when a person reruns one test by hand with `-p` this plugin (the
    # crash list's repro lines): the old files need the bridge to import.
    _bridge_renamed_helpers()


# trylast: see the list after -k and -m have deselected theirs.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    if "TORCHTPU_SUITES_EVENTS" not in os.environ:
        return
    exclude = _read_ids(os.environ.get("TORCHTPU_SUITES_EXCLUDE")) or set()
    select = _read_ids(os.environ.get("TORCHTPU_SUITES_SELECT"))
    sample = _sampled([i.nodeid for i in items], os.environ.get("TORCHTPU_SUITES_SAMPLE"))
    if sample is not None:
        select = sample if select is None else select & sample
    keep, drop = [], []
    for item in items:
        if item.nodeid in exclude or (select is not None and item.nodeid not in select):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    _emit({"event": "collected", "ids": [i.nodeid for i in keep]})


def pytest_collectreport(report):
    # An import error in a test file: keep the end of its traceback.
    if report.failed and "TORCHTPU_SUITES_EVENTS" in os.environ:
        _emit({"event": "collect_error", "id": report.nodeid,
               "message": str(report.longrepr)[-1500:]})


def pytest_runtest_logstart(nodeid, location):
    if "TORCHTPU_SUITES_EVENTS" in os.environ:
        _emit({"event": "start", "id": nodeid})


def _first_line(text):
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def pytest_runtest_logreport(report):
    if "TORCHTPU_SUITES_EVENTS" not in os.environ:
        return
    # One outcome per test: the first failing phase, else the call phase
    # (or a skip during setup).
    if report.when == "call" or report.failed or (report.when == "setup" and report.skipped):
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfail" if report.skipped else "xpass"
        msg = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            msg = str(report.longrepr[2])[:300]
        _emit({"event": "result", "id": report.nodeid, "when": report.when,
               "outcome": outcome, "message": msg,
               "duration": round(report.duration, 3)})


def _tpu_run():
    return ("TORCHTPU_SUITES_EVENTS" in os.environ and "torchtpu" in sys.modules and
            "tpu" in os.environ.get("PYTORCH_TESTING_DEVICE_ONLY_FOR", ""))


# trylast: after the test body has run (and passed).
@pytest.hookimpl(trylast=True)
def pytest_runtest_call(item):
    """Raises a device error the test left pending (an index out of bounds
    is checked on the device and raised at the next synchronisation) in the
    test that caused it, not in whichever test synchronises next."""
    if _tpu_run():
        import torch
        torch.tpu.synchronize()


def pytest_runtest_teardown(item, nextitem):
    """A test that failed before pytest_runtest_call's synchronisation may
    still leave a device error pending: drop it, so that the next test starts
    clean (the test that caused it has failed already)."""
    if _tpu_run():
        import torch
        try:
            torch.tpu.synchronize()
        except Exception:  # noqa: BLE001 - the pending error of a failed test
            pass


def pytest_runtest_logfinish(nodeid, location):
    if "TORCHTPU_SUITES_EVENTS" in os.environ:
        _emit({"event": "finish", "id": nodeid})


# The failing phase's exception, read from the call before the report is
# logged (a report carries only the formatted text).
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if "TORCHTPU_SUITES_EVENTS" not in os.environ or call.excinfo is None:
        return
    report = outcome.get_result()
    if report.failed:
        exc = call.excinfo.value
        _emit({"event": "exc", "id": item.nodeid, "type": type(exc).__name__,
               "message": _first_line(exc)})


# ---------------------------------------------------------------------------
# The parent: runs subprocesses, watches them, classifies.


def cpu_counterpart(nodeid):
    """`f.py::TestFooPRIVATEUSE1::test_add_tpu_float32` → the CPU test's id.
    A test of a class that is not instantiated per device (test_torch's
    TestTorch) is its own counterpart: the CPU run repeats it without
    torchtpu."""
    parts = nodeid.split("::")
    if len(parts) < 3:
        return None
    cls, name = parts[-2], parts[-1]
    for suffix in ("PRIVATEUSE1", "TPU"):
        if cls.endswith(suffix):
            cls = cls[: -len(suffix)] + "CPU"
            break
    else:
        if re.search(r"(CPU|CUDA|META|MPS|XPU|LAZY)$", cls):
            return None
        return nodeid
    # The device suffix sits after the test name and parameters, before the
    # dtype: the last "_tpu" that ends the name or precedes another "_".
    m = None
    for m in re.finditer(r"_tpu(?=_|$)", name):
        pass
    if m is None:
        return None
    name = name[: m.start()] + "_cpu" + name[m.end():]
    return "::".join(parts[:-2] + [cls, name])


_NORMALISERS = (
    (re.compile(r"0x[0-9a-fA-F]+"), "0x_"),
    (re.compile(r"'[^']*'"), "'_'"),
    (re.compile(r"\"[^\"]*\""), '"_"'),
    (re.compile(r"\d+(\.\d+)?(e[-+]?\d+)?"), "N"),
    (re.compile(r"\s+"), " "),
)


def cluster_key(exc_type, message):
    text = message
    for pattern, repl in _NORMALISERS:
        text = pattern.sub(repl, text)
    return f"{exc_type}: {text.strip()}"[:200]


def load_xfails(path=XFAIL_FILE):
    """{node-id pattern: reason}; a pattern is a node id in which each `*`
    stands for any run of characters (a trailing one for a prefix; one
    inside for a family: `...::test_*_tpu_complex32`)."""
    if not os.path.exists(path) or tomllib is None:
        return {}
    with open(path, "rb") as f:
        data = tomllib.load(f)
    out = {}
    for entry in data.get("xfail", []):
        if not entry.get("reason"):
            raise ValueError(f"{path}: xfail entry {entry.get('id')!r} has no reason")
        out[entry["id"]] = entry["reason"]
    return out


def _matches(pattern, nodeid):
    if "*" not in pattern:
        return nodeid == pattern
    return re.fullmatch(".*".join(re.escape(p) for p in pattern.split("*")), nodeid) is not None


def _xfail_reason(xfails, nodeid):
    for pattern, reason in xfails.items():
        if _matches(pattern, nodeid):
            return reason
        # Patterns may omit the file's directory.
        if "/" in nodeid and nodeid.split("/")[-1] == pattern:
            return reason
    return None


def _child_env(device, events, exclude, select, sample=None):
    env = dict(os.environ)
    env.pop("TORCHTPU_SUITES_SAMPLE", None)
    if sample:
        env["TORCHTPU_SUITES_SAMPLE"] = "%d,%d" % sample
    env["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = device
    env["TORCHTPU_SUITES_EVENTS"] = events
    env["TORCHTPU_SUITES_EXCLUDE"] = exclude
    if select:
        env["TORCHTPU_SUITES_SELECT"] = select
    else:
        env.pop("TORCHTPU_SUITES_SELECT", None)
    env.pop("TORCH_TEST_DEVICES", None)
    env.pop("PYTORCH_TESTING_DEVICE_FOR_CUSTOM", None)
    # Failure messages stay one line: no "To execute this test, run ..." tail.
    env["PYTORCH_PRINT_REPRO_ON_FAILURE"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (_REPO_ROOT, _HERE if device == "cpu" else None, env.get("PYTHONPATH"))
        if p)
    if device == "cpu":
        # The reference is PyTorch without torchtpu: a test that fails only
        # because torchtpu is loaded (pin_memory works once an accelerator is
        # registered) is ours to explain. The plugin is then loaded as the
        # top-level module `pytorch_suites`, which does not import torchtpu.
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env.setdefault("PYTHONFAULTHANDLER", "1")
    # The suites test the device's programs: with the host tier on, a
    # signature's first call would run PyTorch's CPU kernel and compare the
    # CPU with itself.
    env.setdefault("TORCHTPU_COMPILE_AFTER", "0")
    return env


def run_tests(test_file, device, *, tests_dir, k=None, select=None, sample=None,
              timeout=120.0, budget=None, log=print):
    """Runs the tests of one file for one device ("tpu" or "cpu") in pytest
    subprocesses, restarting after crashes and hangs.

    Returns {node id: record} with record["outcome"] one of passed, failed,
    skipped, xfail, xpass, crash, timeout, not_run, plus error/message/detail,
    and a list of collection errors (strings)."""
    records, errors = {}, []
    work = tempfile.mkdtemp(prefix="tt_suites_")
    events = os.path.join(work, "events.jsonl")
    exclude = os.path.join(work, "exclude.txt")
    select_file = None
    if select is not None:
        select_file = os.path.join(work, "select.txt")
        with open(select_file, "w") as f:
            f.write("".join(s + "\n" for s in select))
    open(exclude, "w").close()
    t_suite = time.monotonic()
    collected = None
    restarts = 0
    while True:
        with open(exclude, "w") as f:
            f.write("".join(i + "\n" for i in records))
        plugin = "pytorch_suites" if device == "cpu" else "torchtpu.testing.pytorch_suites"
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
               "-p", plugin, "-q", "--tb=no",
               "--no-header", "-o", "addopts=", "--rootdir", tests_dir, test_file]
        if k and select is None:
            cmd += ["-k", k]
        open(events, "w").close()
        stderr_path = os.path.join(work, "stderr.txt")
        with open(stderr_path, "wb") as err, open(os.path.join(work, "stdout.txt"), "wb") as out:
            proc = subprocess.Popen(cmd, cwd=tests_dir, stdout=out, stderr=err,
                                    env=_child_env(device, events, exclude, select_file, sample),
                                    start_new_session=True)
            current, t_start, pos, killed = None, None, 0, None
            pending_exc = {}
            while True:
                rc = proc.poll()
                # Drain new events.
                with open(events) as f:
                    f.seek(pos)
                    chunk = f.read()
                cut = chunk.rfind("\n") + 1
                pos += cut
                for line in chunk[:cut].splitlines():
                    ev = json.loads(line)
                    kind = ev["event"]
                    if kind == "collected":
                        if collected is None:
                            collected = list(ev["ids"])
                    elif kind == "start":
                        current, t_start = ev["id"], time.monotonic()
                    elif kind == "exc":
                        pending_exc.setdefault(ev["id"], (ev["type"], ev["message"]))
                    elif kind == "result":
                        rec = records.get(ev["id"])
                        if rec is None or rec["outcome"] in ("passed", "skipped"):
                            rec = {"outcome": ev["outcome"], "duration": ev["duration"]}
                            if ev["outcome"] in ("failed", "xpass"):
                                et, em = pending_exc.get(ev["id"], ("Failure", ""))
                                rec.update(error=et, message=em)
                            elif ev["message"]:
                                rec["message"] = ev["message"]
                            records[ev["id"]] = rec
                    elif kind == "finish":
                        current = None
                    elif kind == "collect_error":
                        errors.append(f"collection error in {ev['id']}: {ev['message']}")
                if rc is not None:
                    break
                now = time.monotonic()
                if current is not None and now - t_start > timeout:
                    killed = "timeout"
                elif budget is not None and now - t_suite > budget:
                    killed = "budget"
                if killed:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    break
                time.sleep(0.2)
        with open(stderr_path, "rb") as f:
            tail = f.read()[-3000:].decode("utf-8", "replace")
        if killed == "timeout":
            records[current] = {"outcome": "timeout", "duration": timeout,
                                "error": "Timeout",
                                "message": f"no result after {timeout:g} s"}
            log(f"  timeout: {current}")
        elif killed == "budget":
            break
        elif current is not None and rc != 0:
            sig = -rc if rc < 0 else None
            name = signal.Signals(sig).name if sig else f"exit {rc}"
            records[current] = {"outcome": "crash", "error": name,
                                "message": f"process died ({name}) in this test",
                                "detail": tail}
            log(f"  crash ({name}): {current}")
        else:
            # 0: all passed, 1: some failed, 5: nothing selected; anything
            # else (2: collection error, 3: internal error, a signal outside
            # a test) is reported with pytest's own output.
            if collected is None or rc not in (0, 1, 5):
                with open(os.path.join(work, "stdout.txt"), "rb") as f:
                    out_tail = f.read()[-3000:].decode("utf-8", "replace")
                errors.append(f"pytest exited {rc}: {out_tail.strip()[-1500:]}\n"
                              f"{tail.strip()[-1500:]}")
            break
        restarts += 1
        if collected is not None and all(i in records for i in collected):
            break
    for nodeid in collected or ():
        records.setdefault(nodeid, {"outcome": "not_run"})
    return records, errors


def classify(tpu, cpu, xfails):
    """Final category per tpu test from its tpu record and the CPU rerun."""
    out = {}
    for nodeid, rec in tpu.items():
        o = rec["outcome"]
        cid = cpu_counterpart(nodeid)
        crec = cpu.get(cid) if cid else None
        reason = _xfail_reason(xfails, nodeid)
        # An entry says why a test fails; a crash or a hang is never expected
        # and stays counted as one.
        if o == "failed" and reason:
            cat = "xfail"
        elif o == "passed" and reason:
            cat = "xpass"
        elif o == "failed":
            cpu_bad = crec is not None and crec["outcome"] in ("failed", "crash", "timeout")
            cat = "failed_cpu_too" if cpu_bad else "failed_tpu"
        elif o in ("xfail", "xpass", "passed", "skipped", "crash", "timeout", "not_run"):
            cat = o
        else:
            cat = "failed_tpu"
        entry = dict(rec, category=cat)
        if crec is not None:
            entry["cpu_outcome"] = crec["outcome"]
            if "message" in crec and crec["outcome"] != "passed":
                entry["cpu_message"] = crec["message"]
        elif o in ("failed", "crash", "timeout"):
            entry["cpu_outcome"] = "missing"
        if reason:
            entry["xfail_reason"] = reason
        out[nodeid] = entry
    return out


def summarise(results):
    counts = {c: 0 for c in CATEGORIES}
    for r in results.values():
        counts[r["category"]] += 1
    # crashes and timeouts whose CPU counterpart passes (or is missing) are tpu bugs.
    bad_tpu = counts["failed_tpu"] + sum(
        1 for r in results.values()
        if r["category"] in ("crash", "timeout") and r.get("cpu_outcome") in ("passed", "missing", "skipped"))
    denom = counts["passed"] + bad_tpu
    counts["pct_tpu_pass"] = round(100.0 * counts["passed"] / denom, 1) if denom else None
    return counts


def clusters(results, categories=("failed_tpu",), top=10):
    groups = {}
    for nodeid, r in results.items():
        if r["category"] not in categories:
            continue
        key = cluster_key(r.get("error", "Failure"), r.get("message", ""))
        g = groups.setdefault(key, {"key": key, "count": 0, "examples": []})
        g["count"] += 1
        if len(g["examples"]) < 3:
            g["examples"].append(nodeid)
    return sorted(groups.values(), key=lambda g: -g["count"])[:top]


def run_suite(suite, tests_dir, *, k=None, timeout=120.0, budget=None,
              cpu_rerun=True, xfails=None, log=print, select=None, sample=None):
    path = suite if suite.endswith(".py") else suite + ".py"
    if not os.path.exists(os.path.join(tests_dir, path)):
        return {"error": [f"{path} not found in {tests_dir}"], "counts": None,
                "tests": {}, "clusters": []}
    t0 = time.monotonic()
    if select is not None:  # node ids of this file only
        select = [i for i in select if i.split("::")[0] == path]
    tpu, errors = run_tests(path, "tpu", tests_dir=tests_dir, k=k, select=select,
                            sample=sample, timeout=timeout, budget=budget, log=log)
    cpu = {}
    xfails = xfails if xfails is not None else load_xfails()
    # Expected failures count as xfail whatever the CPU does: not rerun.
    bad = [cpu_counterpart(i) for i, r in tpu.items()
           if r["outcome"] in ("crash", "timeout")
           or (r["outcome"] == "failed" and not _xfail_reason(xfails, i))]
    bad = [b for b in bad if b]
    if cpu_rerun and bad:
        log(f"  rerunning {len(bad)} failures on the CPU")
        cpu, cerr = run_tests(path, "cpu", tests_dir=tests_dir, select=bad,
                              timeout=timeout, budget=budget, log=log)
        errors += [f"cpu rerun: {e}" for e in cerr]
    results = classify(tpu, cpu, xfails)
    return {"counts": summarise(results), "tests": results,
            "clusters": clusters(results),
            "clusters_cpu_too": clusters(results, ("failed_cpu_too",), top=5),
            "error": errors, "seconds": round(time.monotonic() - t0, 1)}


def format_table(report):
    cols = ("passed", "failed_tpu", "failed_cpu_too", "skipped", "crash",
            "timeout", "xfail", "not_run")
    head = f"{'suite':28s}" + "".join(f"{c:>15s}" for c in cols) + f"{'% tpu-pass':>12s}"
    lines = [head]
    for name, s in report["suites"].items():
        c = s["counts"]
        if c is None:
            lines.append(f"{name:28s}  error: {s['error'][0][:80]}")
            continue
        pct = "-" if c["pct_tpu_pass"] is None else f"{c['pct_tpu_pass']:.1f}"
        lines.append(f"{name:28s}" + "".join(f"{c[k]:15d}" for k in cols) + f"{pct:>12s}")
    return "\n".join(lines)


def format_markdown(report):
    """The per-suite table, the clusters and the crashes, as Markdown."""
    cols = ("passed", "failed_tpu", "failed_cpu_too", "skipped", "crash",
            "timeout", "xfail", "not_run")
    out = ["| suite | " + " | ".join(cols) + " | % tpu-pass |",
           "|---" * (len(cols) + 2) + "|"]
    for name, s in report["suites"].items():
        c = s["counts"]
        if c is None:
            out.append(f"| {name} | error: {s['error'][0][:60]} |" + " |" * len(cols))
            continue
        pct = "-" if c["pct_tpu_pass"] is None else f"{c['pct_tpu_pass']:.1f}"
        out.append(f"| {name} | " + " | ".join(str(c[k]) for k in cols) + f" | {pct} |")
    out += ["", "| # | tests | cluster (tpu-only failures) | example |", "|---|---|---|---|"]
    for n, g in enumerate(report.get("clusters", []), 1):
        key = g["key"].replace("|", "\\|")
        out.append(f"| {n} | {g['count']} | `{key}` | `{g['examples'][0].split('::')[-1]}` |")
    if report.get("crashes"):
        out += ["", "Crashes:", ""]
        out += [f"- `{c['id']}` ({c['signal']}, CPU: {c['cpu_outcome']}): `{c['repro']}`"
                for c in report["crashes"]]
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m torchtpu.testing.pytorch_suites",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--tests-dir", required=True,
                   help="PyTorch's test/ folder, checked out at the installed version")
    p.add_argument("--suite", nargs="+", action="extend", default=None,
                   help="suite names (files in --tests-dir, .py optional); "
                        "repeatable: --suite a b --suite c runs all three; "
                        "'sparse' names test_sparse and test_sparse_csr")
    p.add_argument("-k", default=None, help="pytest -k expression for the tpu run")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per test")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds per suite; tests not reached count as not run")
    p.add_argument("--json", default=None, help="write every result here")
    p.add_argument("--markdown", default=None, help="write the table and clusters here")
    p.add_argument("--no-cpu-rerun", action="store_true",
                   help="do not rerun tpu failures on the CPU")
    p.add_argument("--select", default=None, metavar="FILE",
                   help="run only these tpu node ids (one a line, e.g. the not_run "
                        "tests of an earlier --json); -k is then ignored")
    p.add_argument("--sample", type=int, default=None, metavar="N",
                   help="run a random N of each suite's tests (after -k): an even "
                        "sample of a suite too large for the budget, where a budget "
                        "alone runs only the tests that come first")
    p.add_argument("--seed", type=int, default=0, help="the --sample's seed")
    args = p.parse_args(argv)
    args.suite = args.suite or list(DEFAULT_SUITES)
    args.suite = [x for name in args.suite for x in SUITE_GROUPS.get(name, (name,))]
    select = None
    if args.select:
        with open(args.select) as f:
            select = [line.strip() for line in f if line.strip()]
    tests_dir = os.path.abspath(args.tests_dir)
    xfails = load_xfails()
    report = {"tests_dir": tests_dir, "k": args.k, "timeout": args.timeout,
              "budget": args.budget, "sample": args.sample, "seed": args.seed,
              "suites": {}}
    try:
        import torch
        report["torch"] = torch.__version__
    except ImportError:
        pass
    for suite in args.suite:
        print(f"== {suite}", flush=True)
        s = run_suite(suite, tests_dir, k=args.k, timeout=args.timeout,
                      budget=args.budget, cpu_rerun=not args.no_cpu_rerun,
                      xfails=xfails, log=lambda m: print(m, flush=True), select=select,
                      sample=None if args.sample is None else (args.sample, args.seed))
        report["suites"][suite] = s
        for e in s["error"]:
            print(f"  error: {e[:2000]}")
        if s["counts"]:
            print("  " + ", ".join(f"{k}={v}" for k, v in s["counts"].items()), flush=True)
        if args.json:  # written after every suite, so a long run leaves partial results
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
    all_tests = {i: r for s in report["suites"].values() for i, r in s["tests"].items()}
    report["clusters"] = clusters(all_tests, top=10)
    report["crashes"] = [
        {"id": i, "signal": r.get("error"), "cpu_outcome": r.get("cpu_outcome"),
         "repro": f"cd {tests_dir} && PYTORCH_TESTING_DEVICE_ONLY_FOR=tpu python -m pytest "
                  f"-p no:cacheprovider -p torchtpu.testing.pytorch_suites '{i}'"}
        for i, r in all_tests.items() if r["category"] == "crash"]
    print()
    print(format_table(report))
    print("\nlargest tpu-only failure clusters:")
    for g in report["clusters"]:
        print(f"  {g['count']:5d}  {g['key']}\n         e.g. {g['examples'][0]}")
    if report["crashes"]:
        print("\ncrashes:")
        for c in report["crashes"]:
            print(f"  {c['signal']}  {c['id']}  (cpu: {c['cpu_outcome']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(format_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
