"""Ops without a lowering run on the CPU, counted per op and warned once;
the strict setting raises instead."""
import subprocess
import sys
import warnings

import pytest
import torch

import torchtpu

# An op with no tpu lowering (and a CPU kernel) to exercise the fallback.
UNLOWERED = lambda x: torch.special.i0e(x)  # noqa: E731
UNLOWERED_NAME = "aten::special_i0e"


def test_fallback_counts_and_result():
    torchtpu.set_fallback_mode("warn")
    x = torch.randn(5)
    before = torchtpu.fallback_counts().get(UNLOWERED_NAME, 0)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = UNLOWERED(x.to("tpu"))
        UNLOWERED(x.to("tpu"))
    assert out.device.type == "tpu"
    torch.testing.assert_close(out.cpu(), UNLOWERED(x))
    assert torchtpu.fallback_counts()[UNLOWERED_NAME] == before + 2
    msgs = [str(m.message) for m in w if "special_i0e" in str(m.message)]
    assert len(msgs) <= 1  # warned once per op (maybe earlier in the session)


def test_strict_mode_raises():
    torchtpu.set_fallback_mode("error")
    try:
        with pytest.raises(NotImplementedError, match="special_i0e"):
            UNLOWERED(torch.randn(3, device="tpu"))
    finally:
        torchtpu.set_fallback_mode("warn")
    # The process is still usable.
    assert (torch.ones(2, device="tpu") + 1).cpu().tolist() == [2.0, 2.0]


def test_strict_mode_from_environment():
    code = ("import torch, torchtpu\n"
            "try:\n"
            "    torch.special.i0e(torch.randn(3, device='tpu'))\n"
            "except NotImplementedError as e:\n"
            "    print('raised', 'special_i0e' in str(e))\n")
    env = dict(__import__("os").environ, TORCHTPU_FALLBACK="error")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert "raised True" in out.stdout, out.stderr
