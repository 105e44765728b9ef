"""The PyTorch-suite runner (torchtpu.testing.pytorch_suites) on a tiny
device-generic test file written here, so it needs none of PyTorch's files:
each kind of outcome the runner sorts (pass, tpu-only failure, failure on the
CPU too, skip, segfault, hang) appears once, and the runner must put each in
its category, recover from the crash and the hang, and keep the tests after
them."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from torchtpu.testing import pytorch_suites as ps

SUITE = textwrap.dedent('''
    import os, signal, time, unittest
    import torch
    from torch.testing._internal.common_utils import TestCase, run_tests
    from torch.testing._internal.common_device_type import (
        instantiate_device_type_tests, dtypes)

    class TestSynthetic(TestCase):
        @dtypes(torch.float32)
        def test_a_pass(self, device, dtype):
            x = torch.arange(6, dtype=dtype, device=device)
            self.assertEqual((x + x).cpu(), torch.arange(6, dtype=dtype) * 2)

        def test_b_fail_tpu(self, device):
            if torch.device(device).type == "tpu":
                raise ValueError(f"tpu says no to shape {3 + 1}")

        def test_c_fail_both(self, device):
            self.assertEqual(1, 2)

        def test_d_segv(self, device):
            if torch.device(device).type == "tpu":
                os.kill(os.getpid(), signal.SIGSEGV)

        def test_e_hang(self, device):
            if torch.device(device).type == "tpu":
                time.sleep(600)

        def test_f_skip(self, device):
            raise unittest.SkipTest("not here")

        def test_g_after(self, device):
            # Runs after the crash and the hang: the runner must resume.
            self.assertEqual(torch.ones(2, device=device).sum().item(), 2.0)

    instantiate_device_type_tests(TestSynthetic, globals())

    if __name__ == "__main__":
        run_tests()
''')

CLS = "test_synth.py::TestSyntheticPRIVATEUSE1::"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("suites")
    (d / "test_synth.py").write_text(SUITE)
    out = d / "out.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torchtpu.testing.pytorch_suites", "--tests-dir", str(d),
         "--suite", "test_synth", "--timeout", "20", "--json", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text()), proc.stdout


def test_tpu_names_and_cpu_counterparts():
    assert ps.cpu_counterpart("a.py::TestFooPRIVATEUSE1::test_add_tpu_float32") == \
        "a.py::TestFooCPU::test_add_cpu_float32"
    assert ps.cpu_counterpart("a.py::TestFooPRIVATEUSE1::test_tpu_things_tpu") == \
        "a.py::TestFooPRIVATEUSE1".replace("PRIVATEUSE1", "CPU") + "::test_tpu_things_cpu"
    assert ps.cpu_counterpart("a.py::TestFooCPU::test_add_cpu") is None
    # Not instantiated per device: the same test, run without torchtpu.
    assert ps.cpu_counterpart("a.py::TestFoo::test_add") == "a.py::TestFoo::test_add"


def test_cluster_key_strips_numbers_and_names():
    a = ps.cluster_key("RuntimeError", "shape [3, 4] vs 5 for 'aten::add' at 0x7f00")
    b = ps.cluster_key("RuntimeError", "shape [7, 8] vs 9 for 'aten::mul' at 0x1234")
    assert a == b
    assert a != ps.cluster_key("ValueError", "shape [3, 4] vs 5 for 'aten::add' at 0x7f00")


def test_each_outcome_is_classified(report):
    rep, stdout = report
    tests = rep["suites"]["test_synth"]["tests"]
    cat = {k.split("::")[-1]: v["category"] for k, v in tests.items()}
    assert cat == {
        "test_a_pass_tpu_float32": "passed",
        "test_b_fail_tpu_tpu": "failed_tpu",
        "test_c_fail_both_tpu": "failed_cpu_too",
        "test_d_segv_tpu": "crash",
        "test_e_hang_tpu": "timeout",
        "test_f_skip_tpu": "skipped",
        "test_g_after_tpu": "passed",
    }, stdout
    crash = tests[CLS + "test_d_segv_tpu"]
    assert crash["error"] == "SIGSEGV" and crash["cpu_outcome"] == "passed"
    assert tests[CLS + "test_e_hang_tpu"]["cpu_outcome"] == "passed"
    fail = tests[CLS + "test_b_fail_tpu_tpu"]
    assert fail["error"] == "ValueError" and "tpu says no" in fail["message"]
    assert fail["cpu_outcome"] == "passed"
    assert tests[CLS + "test_c_fail_both_tpu"]["cpu_outcome"] == "failed"


def test_counts_clusters_and_crash_list(report):
    rep, stdout = report
    c = rep["suites"]["test_synth"]["counts"]
    assert (c["passed"], c["failed_tpu"], c["failed_cpu_too"], c["skipped"],
            c["crash"], c["timeout"]) == (2, 1, 1, 1, 1, 1)
    # 2 passed of 2 + 1 tpu-only failure + crash + hang (their CPU twins pass)
    assert c["pct_tpu_pass"] == 40.0
    [g] = rep["clusters"]
    assert g["key"] == "ValueError: tpu says no to shape N" and g["count"] == 1
    assert [x["id"] for x in rep["crashes"]] == [CLS + "test_d_segv_tpu"]
    assert "PYTORCH_TESTING_DEVICE_ONLY_FOR=tpu" in rep["crashes"][0]["repro"]
    assert "test_synth" in stdout and "SIGSEGV" in stdout
    md = ps.format_markdown(rep)
    assert "| test_synth | 2 | 1 | 1 | 1 | 1 | 1 | 0 | 0 | 40.0 |" in md
    assert "test_d_segv_tpu" in md and "tpu says no" in md


def test_k_filter_and_xfail_file(tmp_path):
    (tmp_path / "test_synth.py").write_text(SUITE)
    xf = tmp_path / "xfail.toml"
    xf.write_text('[[xfail]]\nid = "test_synth.py::TestSyntheticPRIVATEUSE1::test_b_fail_tpu_tpu"\n'
                  'reason = "synthetic"\n')
    # A generous per-test timeout: the first tpu test starts the runtime, which
    # on a loaded machine can take tens of seconds (no test here hangs).
    s = ps.run_suite("test_synth", str(tmp_path), k="fail_tpu or a_pass",
                     timeout=90, xfails=ps.load_xfails(str(xf)), log=lambda m: None)
    cat = {k.split("::")[-1]: v["category"] for k, v in s["tests"].items()}
    assert cat == {"test_a_pass_tpu_float32": "passed", "test_b_fail_tpu_tpu": "xfail"}, s
    assert s["tests"][CLS + "test_b_fail_tpu_tpu"]["xfail_reason"] == "synthetic"
    # an expected failure is not rerun on the CPU (it is xfail either way)
    assert s["tests"][CLS + "test_b_fail_tpu_tpu"]["cpu_outcome"] == "missing"
    xf.write_text('[[xfail]]\nid = "x"\n')
    with pytest.raises(ValueError, match="no reason"):
        ps.load_xfails(str(xf))


def test_missing_suite_and_import_error(tmp_path):
    (tmp_path / "test_broken.py").write_text("import torch\nfrom torch.testing._internal.common_utils import no_such_helper\n")
    s = ps.run_suite("test_broken", str(tmp_path), timeout=20, log=lambda m: None)
    assert s["tests"] == {} and s["error"] and "no_such_helper" in s["error"][0]
    s = ps.run_suite("test_absent", str(tmp_path), timeout=20, log=lambda m: None)
    assert s["counts"] is None and "not found" in s["error"][0]


def test_shipped_xfail_file_has_reasons():
    assert os.path.exists(ps.XFAIL_FILE)
    for pattern, reason in ps.load_xfails().items():
        assert reason.strip(), pattern


def test_select_runs_only_the_listed_tests(tmp_path):
    """--select (the not_run tests of an earlier run, say): only those ids of
    this file run, whatever -k says."""
    (tmp_path / "test_synth.py").write_text(SUITE)
    s = ps.run_suite("test_synth", str(tmp_path), k="nothing_matches", timeout=90,
                     log=lambda m: None, cpu_rerun=False,
                     select=[CLS + "test_a_pass_tpu_float32", CLS + "test_g_after_tpu",
                             "test_other.py::TestOtherPRIVATEUSE1::test_x_tpu"])
    cat = {k.split("::")[-1]: v["category"] for k, v in s["tests"].items()}
    assert cat == {"test_a_pass_tpu_float32": "passed", "test_g_after_tpu": "passed"}, s


def test_sample_is_an_even_seeded_subset(tmp_path):
    """--sample N: a random N of what -k keeps, the same N for the same seed
    (a restart after a crash must pick the same tests), others for another."""
    (tmp_path / "test_synth.py").write_text(SUITE)
    k = "a_pass or c_fail or f_skip or g_after"

    def ran(seed):
        s = ps.run_suite("test_synth", str(tmp_path), k=k, timeout=90, log=lambda m: None,
                         cpu_rerun=False, sample=(2, seed))
        return frozenset(i.split("::")[-1] for i in s["tests"])

    picks = {seed: ran(seed) for seed in (0, 1, 2)}
    every = {"test_a_pass_tpu_float32", "test_c_fail_both_tpu", "test_f_skip_tpu",
             "test_g_after_tpu"}
    assert all(len(p) == 2 and p <= every for p in picks.values()), picks
    assert ran(0) == picks[0]
    assert len(set(picks.values())) > 1, picks
    assert ps._sampled(["a", "b"], "5,0") == {"a", "b"}


PLAIN_SUITE = textwrap.dedent('''
    import sys
    from torch.testing._internal.common_utils import TestCase, run_tests

    class TestPlain(TestCase):
        def test_without_torchtpu(self):
            self.assertNotIn("torchtpu", sys.modules)

        def test_broken_everywhere(self):
            self.assertEqual(1, 2)

    if __name__ == "__main__":
        run_tests()
''')


def test_tests_not_instantiated_per_device_are_rerun_without_torchtpu(tmp_path):
    """A class not instantiated per device (test_torch's TestTorch) runs in
    the tpu run too; its CPU counterpart is the same test, run without
    torchtpu: failing only with torchtpu loaded is ours, failing in both is
    not."""
    (tmp_path / "test_plain.py").write_text(PLAIN_SUITE)
    s = ps.run_suite("test_plain", str(tmp_path), timeout=90, log=lambda m: None)
    cat = {k.split("::")[-1]: v["category"] for k, v in s["tests"].items()}
    assert cat == {"test_without_torchtpu": "failed_tpu",
                   "test_broken_everywhere": "failed_cpu_too"}, s


def test_xfail_patterns_with_inner_wildcards():
    """A `*` anywhere stands for any run of characters (families such as
    every test of a dtype); other characters match themselves."""
    xf = {"a.py::C::test_*_tpu_complex32": "c32", "a.py::C::test_x[*": "prefix",
          "a.py::C::test_exact": "exact"}
    assert ps._xfail_reason(xf, "a.py::C::test_abs_tpu_complex32") == "c32"
    assert ps._xfail_reason(xf, "a.py::C::test_abs_tpu_complex64") is None
    assert ps._xfail_reason(xf, "a.py::C::test_x[1]") == "prefix"
    assert ps._xfail_reason(xf, "a.py::C::test_exact") == "exact"
    assert ps._xfail_reason(xf, "a.py::C::test_exactly") is None
    assert ps._xfail_reason(xf, "a.py::C::test_y.z") is None


def test_bridged_helpers_are_the_installed_ones():
    """The old names that 2023 test files import resolve to today's helpers
    (test_foreach's foreach_lerp_op_db: lerp's ForeachFuncInfo)."""
    import torch.testing._internal.common_methods_invocations as cmi
    ps._bridge_renamed_helpers()
    assert [op.name for op in cmi.foreach_lerp_op_db] == ["_foreach_lerp"]
    assert cmi.foreach_lerp_op_db[0] in cmi.foreach_other_op_db


def test_repeated_suite_flags_run_every_suite(tmp_path):
    """`--suite a --suite b` runs both (argparse's default would keep only the
    last, silently dropping suites from a long run)."""
    for name in ("test_one", "test_two"):
        (tmp_path / f"{name}.py").write_text(PLAIN_SUITE)
    out = tmp_path / "r.json"
    ps.main(["--tests-dir", str(tmp_path), "--suite", "test_one", "--suite", "test_two",
             "--no-cpu-rerun", "--timeout", "90", "--json", str(out)])
    import json
    assert sorted(json.loads(out.read_text())["suites"]) == ["test_one", "test_two"]


def test_listed_tests_that_crash_or_hang_are_not_xfail():
    """An xfail entry says why a test fails; a crash or a timeout of a listed
    test still counts as a crash or a timeout (it was hidden as xfail)."""
    xf = {"a.py::CPRIVATEUSE1::test_*": "listed"}
    tpu = {f"a.py::CPRIVATEUSE1::test_{o}_tpu": {"outcome": o}
           for o in ("failed", "crash", "timeout", "passed")}
    got = {k.split("::")[-1]: v["category"] for k, v in ps.classify(tpu, {}, xf).items()}
    assert got == {"test_failed_tpu": "xfail", "test_crash_tpu": "crash",
                   "test_timeout_tpu": "timeout", "test_passed_tpu": "xpass"}
