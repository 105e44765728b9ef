"""Special functions and misc ops of core/src/lower/special.c on "tpu".

Their OpInfo entries must run natively (no CPU fallback) and match the CPU;
the edge cases below check values the OpInfo samples don't reach (poles,
tails, subnormals) against PyTorch's CPU kernels.
"""
import pytest
import torch

import torchtpu  # noqa: F401
from torchtpu.testing import opinfo

ENTRIES = [
    "lgamma", "mvlgamma.mvlgamma_p_3", "digamma", "polygamma.polygamma_n_0",
    "polygamma.polygamma_n_1", "polygamma.polygamma_n_2", "polygamma.polygamma_n_4",
    "special.polygamma.special_polygamma_n_0", "i0", "special.i0e", "special.i1",
    "special.i1e", "erfinv", "erfc", "special.ndtri", "special.log_ndtr", "nextafter",
    "frexp", "angle", "equal", "aminmax", "isin", "bucketize", "searchsorted",
    "igamma", "igammac",
]
SAMPLES_PER_ENTRY = 4
FEWER_SAMPLES = {"igamma": 2, "igammac": 2}  # ~1 s to compile each shape


def _entries():
    found = {opinfo.entry_key(op): op for _, op in opinfo.select(torch.float32, set(ENTRIES))}
    return [found.get(k) for k in ENTRIES]


@pytest.mark.parametrize("key,op", list(zip(ENTRIES, _entries())), ids=ENTRIES)
def test_entry_native_float32(key, op):
    assert op is not None, f"OpInfo entry {key} not found or not float32 on cpu"
    res = opinfo.run_entry(op, torch.float32, limit=FEWER_SAMPLES.get(key, SAMPLES_PER_ENTRY))
    assert res["samples"] > 0, f"{key}: no sample ran ({res['message']})"
    assert res["status"] == "native-pass", f"{key}: {res['status']}: {res['message']} " \
                                           f"fallback={res['fallback_ops']}"


def _same(fn, *args, **kw):
    exp = fn(*args, **kw)
    dev = lambda a: a.to("tpu") if isinstance(a, torch.Tensor) else a  # noqa: E731
    got = fn(*[dev(a) for a in args], **{k: dev(v) for k, v in kw.items()})
    exp = exp if isinstance(exp, tuple) else (exp,)
    got = got if isinstance(got, tuple) else (got,)
    for e, g in zip(exp, got):
        assert g.device.type == "tpu"
        torch.testing.assert_close(g.cpu(), e, rtol=2e-5, atol=1e-6, equal_nan=True)


X = torch.tensor([8.0, 0.5, -3.0, -2.5, 0.0, -0.0, 1e-3, 20.0, -8.4784, float("nan"),
                  float("inf")])


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_polygamma_poles_and_negative_x(n):
    _same(torch.polygamma, n, X)


def test_tails():
    _same(torch.erfc, torch.tensor([-3.0, 0.5, 5.0, 9.0, 10.0]))
    _same(torch.special.log_ndtr, torch.tensor([-40.0, -12.0, -9.0, -2.0, 0.0, 3.0]))
    _same(torch.special.i0e, torch.tensor([-30.0, -14.9, 15.0, 40.0, 0.0]))
    _same(torch.special.ndtri, torch.tensor([1e-30, 1e-6, 1e-3, 0.049, 0.3, 0.98, 0.0, 1.0]))


def test_igamma_edges():
    a = torch.tensor([0.0, 0.0, 1e-3, 0.5, float("inf"), 3.0, -1.0, 2.0, 30.0, 0.7])
    x = torch.tensor([0.0, 2.0, 5.0, 0.0, 1.0, float("inf"), 1.0, -1.0, 31.0, 0.3])
    _same(torch.igamma, a, x)
    _same(torch.igammac, a, x)


def test_frexp_subnormal_and_specials():
    x = torch.tensor([1e-40, -3e-42, 0.0, -0.0, 6.5, -0.75, float("inf"), float("nan")])
    _same(torch.frexp, x)


def test_equal_shapes_and_nan():
    a = torch.tensor([1.0, 2.0])
    assert torch.equal(a.to("tpu"), a.clone().to("tpu"))
    assert not torch.equal(a.to("tpu"), torch.tensor([1.0, 2.0, 3.0]).to("tpu"))
    n = torch.tensor([float("nan")])
    assert not torch.equal(n.to("tpu"), n.to("tpu"))


def test_searchsorted_sorter_and_nan():
    seq = torch.tensor([3.0, 1.0, 2.0, 5.0])
    sorter = torch.argsort(seq)
    v = torch.tensor([[0.0, 2.0, float("nan")], [5.0, 4.0, 1.0]])
    for right in (False, True):
        _same(torch.searchsorted, seq, v, sorter=sorter, right=right)
