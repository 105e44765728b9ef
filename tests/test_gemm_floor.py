"""bench/gemm_floor.py's reading of a dumped XLA program: hlo_dump.dots finds
every matrix product of a compiled program (those XLA put inside fusions
too), and the bench's einsum for each one computes a result of the dot's own
shape and the product's FLOPs."""
import os
import sys

import torch

from torchtpu.testing import hlo_dump

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "bench"))
import gemm_floor  # noqa: E402

_CHILD = r"""
import torch, torchtpu
def f(x, w, dy, q, k):
    # a Linear's forward (x w^T), its weight gradient (dy^T x) and a batched
    # attention product (q k^T), each through a pointwise op first
    return (torch.tanh(x) @ w.t(), torch.tanh(dy).t() @ x, torch.tanh(q) @ k.transpose(-1, -2))
args = [torch.randn(s, device="tpu") for s in
        ((64, 32), (48, 32), (64, 48), (2, 3, 16, 8), (2, 3, 16, 8))]
torch.compile(f, backend="tpu")(*args)
torch.tpu.synchronize()
"""


def test_dots_of_a_compiled_program(tmp_path):
    out = hlo_dump.run_dumping(["-c", _CHILD], tmp_path / "dump", flags="",
                               env={"TORCHTPU_CACHE_DIR": str(tmp_path / "cache")}, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    files = hlo_dump.optimized_modules(tmp_path / "dump")
    dots = [d for path in files for d in hlo_dump.dots(path)]
    assert len(dots) == 3, dots
    want = 2 * 64 * 32 * 48 + 2 * 48 * 64 * 32 + 2 * (2 * 3 * 16 * 16 * 8)
    assert sum(gemm_floor.dot_flops(d) for d in dots) == want
    for d in dots:
        got = torch.einsum(gemm_floor.einsum_spec(d), torch.randn(d.lhs), torch.randn(d.rhs))
        assert tuple(got.shape) == d.out, (d, gemm_floor.einsum_spec(d))
    batched = [d for d in dots if d.lhs_batch]  # matmul's batch dims, flattened or not
    assert len(batched) == 1, dots
    assert torch.Size([batched[0].lhs[i] for i in batched[0].lhs_batch]).numel() == 6, dots
