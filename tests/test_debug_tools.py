"""The recompile explainer and the numerics checker."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torchtpu
import torchtpu.debug as ttdebug


def run_script(code, tmp_path, **env):
    e = dict(os.environ, TORCHTPU_CACHE_DIR=str(tmp_path / "cache"), **env)
    script = tmp_path / "script.py"  # a file, so stacks show source lines
    script.write_text(textwrap.dedent(code))
    p = subprocess.run([sys.executable, str(script)], env=e, text=True,
                       capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout, p.stderr


# --- recompile explainer ------------------------------------------------------------------

def test_explainer_names_op_and_shape_change(tmp_path):
    _, err = run_script("""
        import torch, torchtpu
        torch.randn(3, 7, device="tpu").exp()
        torch.randn(5, 7, device="tpu").exp()                     # new shape
        torch.randn(5, 7, device="tpu", dtype=torch.float64).exp()  # new dtype
        torch.randn(7, 5, device="tpu").t().exp()                 # a transposed view
    """, tmp_path, TORCHTPU_EXPLAIN_RECOMPILES="1")
    lines = [l for l in err.splitlines() if l.startswith("[torchtpu] compile") and "aten::exp" in l]
    assert len(lines) == 4, err
    assert "new op" in lines[0]
    assert "shape" in lines[1] and "[3, 7] -> [5, 7]" in lines[1]
    assert "dtype: arg 0 float32 -> float64" in lines[2] and "also" not in lines[2]
    assert "layout" in lines[3]
    assert "recompiles" in err and "aten::exp" in err.split("most recompiled")[1]


def test_explainer_in_process(capfd):
    torchtpu.explain_recompiles(True)
    try:
        torch.randn(13, 17, device="tpu").cos()
        torch.randn(13, 19, device="tpu").cos()
        torch.tpu.synchronize()
    finally:
        torchtpu.explain_recompiles(False)
    err = capfd.readouterr().err
    line = [l for l in err.splitlines() if "aten::cos" in l][-1]
    assert "shape: arg 0 [13, 17] -> [13, 19]" in line
    causes = torch.tpu._get_cache_stats()["causes"]
    assert causes["shape"] >= 1
    assert "causes:" in torchtpu.recompile_summary()


def test_explainer_off_by_default(tmp_path):
    _, err = run_script("""
        import torch, torchtpu
        torch.randn(3, 7, device="tpu").exp()
        torch.randn(5, 7, device="tpu").exp()
        assert torch.tpu._get_cache_stats()["causes"]["shape"] >= 1
    """, tmp_path)
    assert "[torchtpu] compile" not in err


# --- numerics checker ------------------------------------------------------------------------

def test_checker_passes_correct_ops():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    model = model.to("tpu")
    x = torch.randn(4, 6, device="tpu")
    with ttdebug.check_numerics() as mode:
        loss = torch.nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 1, 0], device="tpu"))
        loss.backward()
        torch.randn(3, 3, device="tpu")  # random: shape and dtype only
        y = torch.zeros(3, device="tpu")
        y.add_(1.5)                       # in-place: compared after the op
        float(loss.detach())
    assert mode.checked > 10
    assert mode.reports == []


def test_checker_accepts_nan_and_inf_the_cpu_also_gives():
    x = torch.tensor([1.0, -2.0], device="tpu")
    with ttdebug.check_numerics(action="warn") as mode:
        x.sqrt()                                # NaN on both sides
        x / torch.zeros(2, device="tpu")       # inf and -inf on both sides
    assert mode.checked >= 2 and mode.reports == []


def test_checker_finds_wrong_lowering(tmp_path):
    # A fresh process: the wrong rule must not meet a plan cached for sub.
    out, err = run_script("""
        import torch, torchtpu, torchtpu._core as core
        from torchtpu.debug import check_numerics, NumericsError
        core.register_alias("aten::sub.Tensor", "aten::add.Tensor")
        core.register_alias("aten::sub_.Tensor", "aten::add_.Tensor")
        core.register_alias("aten::sqrt", "aten::log")
        a = torch.full((4, 3), 5.0, device="tpu")
        b = torch.full((4, 3), 2.0, device="tpu")
        def user_function(a, b):
            c = a * b
            return c - b        # wrong: runs add
        try:
            with check_numerics():
                user_function(a, b)
        except NumericsError as e:
            print("RAISED", e.op, e.max_abs_diff)
            print(e)
        with check_numerics(action="warn") as mode:
            a.clone().sub_(b)                                    # in-place
            torch.tensor([0.0, 4.0], device="tpu").sqrt()        # log(0) = -inf
        for r in mode.reports:
            print("REPORT", " | ".join(r.splitlines()))
    """, tmp_path)
    assert "RAISED aten.sub.Tensor 4.0" in out, out + err
    assert "max abs diff 4" in out and "tpu 12 vs cpu 8" in out
    assert "[4, 3] float32 on tpu:0" in out      # the inputs
    assert "user_function" in out and "c - b" in out  # the user's stack
    reports = [l for l in out.splitlines() if l.startswith("REPORT")]
    assert len(reports) == 2, out
    assert "aten.sub_.Tensor" in reports[0] and "argument 0 (self) after the op" in reports[0]
    assert "aten.sqrt.default" in reports[1] and "NaN/Inf" in reports[1]


def test_checker_from_environment(tmp_path):
    out, _ = run_script("""
        import torch, torchtpu, torchtpu.debug as d
        torchtpu._core.register_alias("aten::mul.Tensor", "aten::add.Tensor")
        x = torch.ones(2, device="tpu")
        try:
            x * x
        except d.NumericsError as e:
            print("RAISED", e.op)
    """, tmp_path, TORCHTPU_CHECK_NUMERICS="1")
    assert "RAISED aten.mul.Tensor" in out
