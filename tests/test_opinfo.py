"""PyTorch's OpInfo database on "tpu" against the CPU (torchtpu.testing.opinfo).

A fixed subset of common entries must pass natively at float32 (every sample
matches the CPU, no op falls back). The full sweep is a command, not a test:
    python -m torchtpu.testing.opinfo --dtype float32 --jobs 2
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from torchtpu.testing import opinfo

# Entries whose float32 samples must all run natively and match the CPU.
CI_ENTRIES = [
    "add", "sub", "mul", "div.no_rounding_mode", "div.floor_rounding", "div.trunc_rounding",
    "remainder", "fmod", "pow", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos",
    "tanh", "sigmoid", "atan", "asin", "sinh", "log2", "floor", "round", "clamp", "where",
    "maximum", "minimum", "eq", "lt", "sum", "mean", "amax", "argmax", "var", "softmax",
    "log_softmax", "mm", "bmm", "addmm", "addmv", "cat", "flip", "tril",
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "nn.functional.elu",
    "nn.functional.leaky_relu", "linalg.vector_norm", "lerp", "addcmul", "logaddexp",
    "xlogy", "nan_to_num", "fmax", "copysign", "slice_scatter", "select_scatter",
]
SAMPLES_PER_ENTRY = 4  # keeps the subset well under a minute


_ENTRIES = opinfo.entries_by_key(CI_ENTRIES)


@pytest.mark.parametrize("key,op", list(zip(CI_ENTRIES, _ENTRIES)), ids=CI_ENTRIES)
def test_entry_native_float32(key, op):
    opinfo.assert_native_pass(key, op, limit=SAMPLES_PER_ENTRY)


def test_harness_flags_wrong_results():
    """compare() catches a wrong value, a wrong dtype and a wrong shape."""
    op = next(o for _, o in opinfo.select(torch.float32, {"add"}))
    e = torch.ones(3)
    dev = [torch.device("tpu")]
    opinfo.compare(op, torch.float32, e, e.clone(), list(dev), False)
    for bad in (e + 1e-3, e.double(), torch.ones(4)):
        with pytest.raises(opinfo.WrongResult):
            opinfo.compare(op, torch.float32, e, bad, list(dev), False)
    with pytest.raises(opinfo.WrongResult):  # a result left on the CPU
        opinfo.compare(op, torch.float32, e, e.clone(), [torch.device("cpu")], False)


def test_harness_accepts_only_tie_reorderings():
    """An unstable sort may order equal values' indices either way; another
    valid order passes, a wrong or repeated index does not, nor does stable=True."""
    from torch.testing._internal.opinfo.core import SampleInput
    op = next(o for _, o in opinfo.select(torch.float32, {"sort"}))
    x = torch.tensor([[2.0, 1.0, 2.0, 0.0]])
    want = torch.sort(x, 1)
    swapped = (want.values, torch.tensor([[3, 1, 2, 0]]))  # the two 2.0s swapped
    assert want.indices.tolist() == [[3, 1, 0, 2]]
    assert opinfo._same_up_to_ties(op, SampleInput(x, args=(1,)), want, swapped)
    for bad in ([[3, 1, 0, 0]], [[1, 3, 0, 2]]):
        assert not opinfo._same_up_to_ties(op, SampleInput(x, args=(1,)), want,
                                           (want.values, torch.tensor(bad)))
    assert not opinfo._same_up_to_ties(op, SampleInput(x, args=(1,), kwargs={"stable": True}),
                                       want, swapped)


def test_harness_judges_16_bit_results_against_float64():
    """A bfloat16 result that differs from the CPU's but is nearer the float64
    answer passes; one farther from it does not; float32 sweeps stay exact."""
    from torch.testing._internal.opinfo.core import SampleInput
    op = next(o for _, o in opinfo.select(torch.bfloat16, {"sum"}))
    x = torch.tensor([256.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.bfloat16)
    s = SampleInput(x)
    cpu = x[0]
    for v in x[1:]:  # partial sums rounded to bfloat16: 256 + 1 is 256
        cpu = cpu + v
    exact = x.double().sum().bfloat16()  # 260: the float64 answer
    assert cpu.item() == 256.0 and exact.item() == 260.0
    worse = torch.tensor(250.0, dtype=torch.bfloat16)
    assert opinfo._as_accurate_as_cpu(op, torch.bfloat16, s, cpu, exact)
    assert not opinfo._as_accurate_as_cpu(op, torch.bfloat16, s, cpu, worse)
    assert not opinfo._as_accurate_as_cpu(op, torch.float32, SampleInput(x.float()),
                                           cpu.float(), exact.float())


def test_harness_judges_unary_ufuncs_against_their_numpy_ref():
    """A float64 result that differs from the CPU's passes when it is nearer the
    OpInfo's SciPy reference (PyTorch's bessel_y1 is off by 9e-7 at 5.0008);
    a farther one does not, nor a sample the reference cannot take."""
    pytest.importorskip("scipy")
    from torch.testing._internal.opinfo.core import SampleInput
    op = next(o for _, o in opinfo.select(torch.float64, {"special.bessel_y1"}))
    x = torch.tensor([5.0008333333333335, 1.0], dtype=torch.float64)
    cpu = torch.special.bessel_y1(x)
    exact = torch.from_numpy(op.ref(x.numpy()))
    assert (cpu - exact).abs().max() > 5e-7
    assert opinfo._as_accurate_as_cpu(op, torch.float64, SampleInput(x), cpu, exact)
    assert not opinfo._as_accurate_as_cpu(op, torch.float64, SampleInput(x), cpu, exact + 2e-6)
    assert not opinfo._as_accurate_as_cpu(op, torch.float64, SampleInput(x, args=(1,)), cpu,
                                           exact)


def _run(code):
    env = dict(os.environ, TORCHTPU_FALLBACK="silent")
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


# aten::_foobar is PyTorch's test op returning a copy of self; no rule lowers
# it. On int64 input the rule of aten::floor (which leaves integers as they
# are) computes exactly that, so registering it under the new name must make
# the op run natively with the CPU's result.
_PRELUDE = """
    import ctypes, torch, torchtpu
    core = torchtpu._core.core
    core.tt_op_lookup.restype = ctypes.c_int32
    core.tt_op_lookup.argtypes = [ctypes.c_char_p]
    core.tt_op_register_alias.restype = ctypes.c_int32
    core.tt_op_register_alias.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    x = torch.arange(-5, 7).reshape(3, 4)
    def run():
        before = torchtpu.fallback_counts().get("aten::_foobar", 0)
        y = torch.ops.aten._foobar(x.to("tpu"))
        assert y.device.type == "tpu"
        assert torch.equal(y.cpu(), torch.ops.aten._foobar(x)), (y.cpu(), x)
        return torchtpu.fallback_counts().get("aten::_foobar", 0) - before
"""


def test_registered_alias_runs_natively():
    # Without a rule the op falls back to the CPU.
    out = _run(_PRELUDE + """
    assert core.tt_op_lookup(b"aten::_foobar") == -1
    print("fallbacks", run())
    """)
    assert "fallbacks 1" in out, out
    # With the alias registered (before the op's first call: the shim resolves
    # an op's rule once per process) it runs natively.
    out = _run(_PRELUDE + """
    assert core.tt_op_register_alias(b"aten::_foobar", b"aten::nonexistent_op") == -1
    op = core.tt_op_register_alias(b"aten::_foobar", b"aten::floor")
    assert op >= 0 and core.tt_op_lookup(b"aten::_foobar") == op
    print("fallbacks", run(), run())
    """)
    assert "fallbacks 0 0" in out, out
