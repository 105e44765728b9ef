"""Strided views read as reshape + slice, permuted writes as a transpose
(core/src/lower/ctx.c): values against PyTorch CPU, and the programs free
of the gathers and scatters XLA's CPU backend runs as serial loops."""
import glob
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torchtpu  # noqa: F401

# (size, stride, offset) views of a 4000-element storage: stride-2 pairs
# (RoPE's x[..., 0]), non-zero offsets (the box's last row is padded),
# transposed strided, size-1 dims with odd strides, rank 5.
STRIDED = [((4, 3, 2), (60, 10, 2), 0), ((4, 3, 2), (60, 10, 2), 1),
           ((4, 3, 2), (60, 10, 2), 5), ((5, 4), (2, 10), 3), ((3, 4), (1, 8), 0),
           ((2, 3, 4, 5), (600, 100, 20, 2), 7), ((6,), (3,), 2),
           ((3, 1, 4), (20, 99, 3), 1), ((2, 2, 2, 2, 2), (64, 16, 8, 4, 2), 0),
           ((3, 4), (1000, 1), 1996)]


@pytest.mark.parametrize("size,stride,offset", STRIDED)
def test_strided_view_reads_match_cpu(size, stride, offset):
    base = torch.randn(4000)
    ref = base.as_strided(size, stride, offset) * 2
    got = base.to("tpu").as_strided(size, stride, offset) * 2
    torch.testing.assert_close(got.cpu(), ref, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.float64])
def test_strided_view_reads_other_dtypes(dtype):
    base = torch.arange(100) % 3 == 0 if dtype == torch.bool else torch.arange(100).to(dtype)
    ref = base.as_strided((4, 5), (20, 2), 19).clone()
    got = base.to("tpu").as_strided((4, 5), (20, 2), 19).clone()
    assert torch.equal(got.cpu(), ref)


def test_rope_pairs_match_cpu():
    x = torch.randn(2, 8, 4, 16)
    xp, xpt = x.reshape(2, 8, 4, 8, 2), x.to("tpu").reshape(2, 8, 4, 8, 2)
    for i in (0, 1):
        assert torch.equal((xpt[..., i] + 0).cpu(), xp[..., i] + 0)


PERMS = [((4, 16, 8, 16), (0, 2, 1, 3)), ((3, 5), (1, 0)), ((2, 3, 4), (2, 0, 1)),
         ((2, 1, 3, 4), (3, 1, 0, 2))]


def _strides_of(size, perm):
    """Strides of a `size` tensor laid out with dims in `perm` order."""
    dense = torch.empty([size[p] for p in perm])
    return dense.permute(*[perm.index(i) for i in range(len(perm))]).stride()


@pytest.mark.parametrize("size,perm", PERMS)
def test_permuted_whole_storage_copy(size, perm):
    x = torch.randn(size)
    stride = _strides_of(size, perm)
    ref = torch.empty_strided(size, stride).copy_(x)
    got = torch.empty_strided(size, stride, device="tpu").copy_(x.to("tpu"))
    assert got.stride() == ref.stride()
    flat = (x.numel(),), (1,)
    assert torch.equal(got.cpu().as_strided(*flat), ref.as_strided(*flat))  # storage order


@pytest.mark.parametrize("size,perm", PERMS)
def test_permuted_patch_of_larger_storage(size, perm):
    x = torch.randn(size)
    n, stride = x.numel(), _strides_of(size, perm)
    big = torch.randn(2 * n + 3)
    bt = big.to("tpu")
    big.as_strided(size, stride, n).copy_(x)
    bt.as_strided(size, stride, n).copy_(x.to("tpu"))
    assert torch.equal(bt.cpu(), big)


def test_programs_have_no_gather_or_scatter(tmp_path):
    """The dumped programs of a RoPE pair read and a permuted copy hold
    neither: the reads are slices, the write a transpose."""
    code = textwrap.dedent("""
        import torch, torchtpu
        x = torch.randn(2, 8, 4, 16, device="tpu").reshape(2, 8, 4, 8, 2)
        y = (x[..., 1] * 3).cpu()
        out = torch.empty_strided((2, 4, 8, 16), (512, 16, 64, 1), device="tpu")
        out.copy_(torch.randn(2, 4, 8, 16, device="tpu"))
        torch.tpu.synchronize()
    """)
    env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={tmp_path} --xla_dump_hlo_as_text",
               TORCHTPU_CACHE_DIR="0")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
    texts = [open(p).read() for p in glob.glob(str(tmp_path / "*before_optimizations.txt"))]
    assert texts, "XLA wrote no programs"
    assert any(" transpose(" in t for t in texts)  # the permuted copy is there
    for t in texts:
        assert " gather(" not in t and " scatter(" not in t
