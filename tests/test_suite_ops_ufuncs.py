"""Conformance with PyTorch's CPU for what PyTorch's test_ops, test_binary_ufuncs,
test_unary_ufuncs and test_reductions found on "tpu" (issue 16; the runs are
in docs/conformance.md, "test_ops and ufuncs").

Every case runs the same call on "cpu" and "tpu" (assert_like_cpu): both
raise the same exception type, the tpu message starting with the CPU's, or
both succeed with the same dtype and values."""
import pytest
import torch

import torchtpu  # noqa: F401
from test_conformance import assert_like_cpu


def _t(shape, dtype=torch.float32):
    """A fixed tensor of shape and dtype (the same values on every device)."""
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.float64) * 0.37 - 1.1).reshape(shape).to(dtype)


# --- 1. gather / scatter shape and dtype checks (test_ops' noncontiguous samples) ------------

def _idx(shape, dtype=torch.long):
    return torch.zeros(shape, dtype=dtype)


GATHER_SCATTER_CASES = [
    # an empty index skips PyTorch's shape checks: empty result / self unchanged
    ("gather empty index of other rank", lambda d: torch.gather(_t((5,)).to(d), 0, _idx((2, 0)).to(d))),
    ("gather empty index wider than self", lambda d: torch.gather(_t((5, 3)).to(d), 0, _idx((0, 9)).to(d))),
    ("gather empty float index", lambda d: torch.gather(_t((5, 3)).to(d), 0, _idx((0,), torch.float).to(d))),
    ("gather 0-d self, empty index", lambda d: torch.gather(_t(()).to(d), 0, _idx((0, 2)).to(d))),
    ("scatter empty index of other rank", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 0, 4)).to(d), 1.0)),
    ("scatter src, empty index wider than self",
     lambda d: _t((5, 3)).to(d).scatter(0, _idx((0, 9)).to(d), _t((3, 3)).to(d))),
    ("scatter_add, empty index", lambda d: _t((5, 3)).to(d).scatter_add(0, _idx((0, 9)).to(d), _t((3, 3)).to(d))),
    ("scatter_reduce, empty index",
     lambda d: _t((5, 3)).to(d).scatter_reduce(0, _idx((0, 9)).to(d), _t((3, 3)).to(d), "amax")),
    ("scatter_ in place, empty index", lambda d: _t((5, 3)).to(d).scatter_(1, _idx((0, 2)).to(d), 2.0)),
    # PyTorch's texts for the checks that do apply
    ("gather index rank", lambda d: torch.gather(_t((5, 3)).to(d), 0, _idx((2,)).to(d))),
    ("gather index too large", lambda d: torch.gather(_t((5, 3)).to(d), 0, _idx((2, 4)).to(d))),
    ("gather 0-d self, [1, 1] index", lambda d: torch.gather(_t(()).to(d), 0, _idx((1, 1)).to(d))),
    ("gather float index", lambda d: torch.gather(_t((5, 3)).to(d), 0, _idx((2, 2), torch.float).to(d))),
    ("gather int16 index", lambda d: torch.gather(_t((5, 3)).to(d), 1, _idx((2, 2), torch.int16).to(d))),
    ("gather int32 index", lambda d: torch.gather(_t((5, 3)).to(d), 1, _idx((2, 2), torch.int32).to(d))),
    ("scatter index rank", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2,)).to(d), _t((3, 3)).to(d))),
    ("scatter value index too large", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 4)).to(d), 1.0)),
    ("scatter src smaller than index", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 2)).to(d), _t((1, 3)).to(d))),
    ("scatter src narrower than index", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 2)).to(d), _t((3, 1)).to(d))),
    ("scatter src of higher rank", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 2)).to(d), _t((3, 3, 3)).to(d))),
    ("scatter src of lower rank", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 2)).to(d), _t((3,)).to(d))),
    ("scatter src dtype", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 2)).to(d), _t((3, 3), torch.half).to(d))),
    ("scatter src dtype, empty index",
     lambda d: _t((5, 3)).to(d).scatter(0, _idx((0,), torch.float).to(d), _t((3, 3), torch.half).to(d))),
    ("scatter_add float index", lambda d: _t((5, 3)).to(d).scatter_add(0, _idx((2, 2), torch.float).to(d), _t((3, 3)).to(d))),
    ("scatter_reduce float index",
     lambda d: _t((5, 3)).to(d).scatter_reduce(0, _idx((2, 2), torch.float).to(d), _t((3, 3)).to(d), "sum")),
    ("scatter int16 index", lambda d: _t((5, 3)).to(d).scatter(0, _idx((2, 2), torch.int16).to(d), _t((3, 3)).to(d))),
    ("scatter_add values", lambda d: _t((5, 3)).to(d).scatter_add(
        0, torch.tensor([[0, 4, 1], [2, 2, 0]]).to(d), _t((2, 4)).to(d))),
]


@pytest.mark.parametrize("name,fn", GATHER_SCATTER_CASES, ids=[c[0] for c in GATHER_SCATTER_CASES])
def test_gather_scatter_checks_like_cpu(name, fn):
    """gather/scatter refused every index whose shape did not fit self, even
    an empty one (PyTorch skips its shape checks then: test_ops'
    noncontiguous samples of gather), accepted int16 indices, and raised
    texts of their own (or an HLO builder error for a src smaller than the
    index)."""
    assert_like_cpu(fn)
