"""Ops without a lowering run on the CPU, counted per op and warned once;
the strict setting raises instead."""
import subprocess
import sys
import warnings

import pytest
import torch

import torchtpu

from torchtpu import _core

# Ops with a CPU kernel and (so far) no tpu lowering, each called on a float32
# [3, 3] `x`; the first one still unlowered exercises the fallback.
_CANDIDATES = [
    ("aten::unique_dim", "torch.unique(x, dim=0)"),  # output size depends on the data
    ("aten::linalg_eig", "torch.linalg.eig(x)[0]"),  # no eig on XLA's CPU plugin
]
UNLOWERED_NAME, EXPR = next((n, e) for n, e in _CANDIDATES if not _core.has_rule(n))
SHORT = UNLOWERED_NAME.split("::")[1]


def UNLOWERED(x):
    return eval(EXPR, {"torch": torch, "x": x})


def test_fallback_counts_and_result():
    torchtpu.set_fallback_mode("warn")
    x = torch.randn(3, 3)
    before = torchtpu.fallback_counts().get(UNLOWERED_NAME, 0)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = UNLOWERED(x.to("tpu"))
        UNLOWERED(x.to("tpu"))
    assert out.device.type == "tpu"
    torch.testing.assert_close(out.cpu(), UNLOWERED(x))
    assert torchtpu.fallback_counts()[UNLOWERED_NAME] == before + 2
    msgs = [str(m.message) for m in w if SHORT in str(m.message)]
    assert len(msgs) <= 1  # warned once per op (maybe earlier in the session)


def test_strict_mode_raises():
    torchtpu.set_fallback_mode("error")
    try:
        with pytest.raises(NotImplementedError, match=SHORT):
            UNLOWERED(torch.randn(3, 3, device="tpu"))
    finally:
        torchtpu.set_fallback_mode("warn")
    # The process is still usable.
    assert (torch.ones(2, device="tpu") + 1).cpu().tolist() == [2.0, 2.0]


def test_strict_mode_from_environment():
    code = ("import torch, torchtpu\n"
            "try:\n"
            "    x = torch.randn(3, 3, device='tpu')\n"
            f"    {EXPR}\n"
            "except NotImplementedError as e:\n"
            f"    print('raised', {SHORT!r} in str(e))\n")
    env = dict(__import__("os").environ, TORCHTPU_FALLBACK="error")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert "raised True" in out.stdout, out.stderr


def test_fallback_summary_at_exit():
    """TORCHTPU_FALLBACK_SUMMARY=1 prints fallback_counts() at exit as one JSON
    line: what a program run unchanged (torchrun ...) fell back to."""
    import json
    import os
    code = ("import torch, torchtpu\n"
            "x = torch.randn(3, 3, device='tpu')\n"
            f"for _ in range(3): {EXPR}\n"
            "(x + 1).cpu()\n")
    env = dict(os.environ, TORCHTPU_FALLBACK="silent", TORCHTPU_FALLBACK_SUMMARY="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(torchtpu.__file__)), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [l for l in out.stderr.splitlines()
             if l.startswith(torchtpu.FALLBACK_SUMMARY_PREFIX)]
    assert len(lines) == 1, out.stderr
    counts = json.loads(lines[0][len(torchtpu.FALLBACK_SUMMARY_PREFIX):])
    assert counts == {UNLOWERED_NAME: 3}, counts


def test_fallback_summary_setting_is_validated(monkeypatch):
    from torchtpu import _env
    monkeypatch.setenv("TORCHTPU_FALLBACK_SUMMARY", "loud")
    with pytest.raises(ValueError, match="TORCHTPU_FALLBACK_SUMMARY"):
        _env.validate()
