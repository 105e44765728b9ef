"""Strided inputs past the per-op layout bound are copied dense, not compiled
for (runtime/spill.h): results stay PyTorch's CPU results, written views
keep their layout, layout-reading ops keep theirs, nothing leaks."""
import itertools

import pytest
import torch

import torchtpu
from torchtpu import _core

# Twelve layouts of a 6 x 5 tensor: steps, offsets and transposes of one
# base, each a new strided view (none dense).
def _layouts(base):
    out = []
    for s0, s1 in ((1, 2), (2, 1), (2, 2), (3, 1), (1, 3), (3, 2)):
        v = base[1::s0, ::s1][:6, :5]
        out.append(v)
        out.append(base[::s1, 1::s0][:5, :6].t())
    return out


def _stats():
    return torch.tpu._get_cache_stats()


def _sweep(fn, base_cpu):
    base = base_cpu.to("tpu")
    for a, d in zip(_layouts(base_cpu), _layouts(base)):
        assert not d.is_contiguous()
        torch.testing.assert_close(fn(d).cpu(), fn(a), equal_nan=True)


OPS = {
    "elementwise": lambda v: v.sin() * 2 + v,
    "reduction": lambda v: v.exp().sum(0),
    "matmul": lambda v: v @ v.t(),
    "where": lambda v: torch.where(v > 0, v, -v),
    "cat_list": lambda v: torch.cat([v, v.cos(), v]),
    "sort": lambda v: torch.sort(v, dim=1).values,
    "integer": lambda v: (v * 100).to(torch.int64) // 7,
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_sweep_spills_with_cpu_results(name):
    s0 = _stats()
    _sweep(OPS[name], torch.randn(24, 20, dtype=torch.float64))
    s1 = _stats()
    # Twelve layouts, four compiled per op: the others spill.
    assert s1["layout_spills"] > s0["layout_spills"]


def test_fewer_compiles_than_a_program_per_layout():
    def run(n, rows):
        _core.set_layouts_per_op(n)
        try:
            base = torch.randn(rows, 26)  # storage sizes no other test uses
            s0 = _stats()
            _sweep(lambda v: torch.tanh(v) * v - v.abs(), base)
            s1 = _stats()
            return s1["compiles"] - s0["compiles"], s1["layout_spills"] - s0["layout_spills"]
        finally:
            _core.set_layouts_per_op(4)

    per_layout, spills_off = run(0, 30)
    assert spills_off == 0
    # Other storages, so other signatures: two layouts compiled, ten copied.
    bounded, spills_on = run(2, 31)
    assert spills_on > 0 and bounded < per_layout


def test_written_views_keep_their_layout():
    base_cpu = torch.randn(24, 20)
    base = base_cpu.to("tpu")
    src_cpu = torch.randn(40, 40)
    src = src_cpu.to("tpu")
    for dst_c, dst_d, s_c, s_d in zip(_layouts(base_cpu), _layouts(base),
                                      _layouts(src_cpu), _layouts(src)):
        dst_d.add_(s_d.cos())  # dst is written through its view, src is read
        dst_c.add_(s_c.cos())
        torch.testing.assert_close(base.cpu(), base_cpu)  # cos: an ulp apart
    out_c = torch.zeros(20, 24)
    out_d = out_c.to("tpu")
    for i, (a, d) in enumerate(zip(_layouts(src_cpu), _layouts(src))):
        torch.mul(a, 3, out=out_c[i % 3::3][:6, :5] if i % 2 == 0 else out_c.t()[:6, :5])
        torch.mul(d, 3, out=out_d[i % 3::3][:6, :5] if i % 2 == 0 else out_d.t()[:6, :5])
    torch.testing.assert_close(out_d.cpu(), out_c, rtol=0, atol=0)


def test_rows_written_through_out_across_layouts():
    """minimum(e[k], s[k], out=e[k]) over the rows of permuted e and s (how
    test_torch's test_index_reduce builds its reference): once the layouts
    passed the bound, spilled calls left rows k >= 1 unwritten. Ops that
    write into a given tensor no longer spill."""
    perms = list(itertools.permutations(range(3)))
    got, want = [], []
    for p in perms:
        for q in perms:
            for dev, acc in (("cpu", want), ("tpu", got)):
                base = torch.arange(64, dtype=torch.int32).reshape(4, 4, 4).to(dev)
                src = (torch.arange(64, dtype=torch.int32).reshape(4, 4, 4) % 7 + 20).to(dev)
                e, s = base.permute(p), src.permute(q)
                for k in range(4):
                    torch.minimum(e[k], s[k], out=e[k])
                acc.append(base.cpu())
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_read_view_of_the_written_storage():
    # The read view shares the written storage: its dense copy is taken
    # before the write, as the program reads the old storage.
    for step in range(1, 10):
        c = torch.randn(120)
        d = c.to("tpu")
        c[:8].add_(c[8::step][:8])
        d[:8].add_(d[8::step][:8])
        torch.testing.assert_close(d.cpu(), c, rtol=0, atol=0)
        c[::3][:8].mul_(c[40::step][:8])
        d[::3][:8].mul_(d[40::step][:8])
        torch.testing.assert_close(d.cpu(), c, rtol=0, atol=0)


def test_layout_reading_op_keeps_its_layout():
    # _linalg_det returns the LU of A^T for a contiguous A, of A otherwise
    # (as PyTorch does): its strided input is never made dense.
    base_cpu = torch.randn(40, 40, dtype=torch.float64)
    base = base_cpu.to("tpu")
    for s in range(1, 8):
        a, d = base_cpu[::s, 1:][:4, :4], base[::s, 1:][:4, :4]
        for x, y in zip(torch._linalg_det(d), torch._linalg_det(a)):
            torch.testing.assert_close(x.cpu(), y)


def test_expanded_inputs_stay_broadcasts():
    # Stride-0 dims are not spilled (integer division by a broadcast divisor
    # rounds as PyTorch's is_scalar operand does).
    s0 = _stats()
    for n in range(2, 12):
        row = torch.randn(1, 5, dtype=torch.float16)
        c, d = row.expand(n, 5), row.to("tpu").expand(n, 5)
        num = torch.randn(n, 5, dtype=torch.float16) * 50
        torch.testing.assert_close(torch.div(num.to("tpu"), d, rounding_mode="floor").cpu(),
                                   torch.div(num, c, rounding_mode="floor"))
    assert _stats()["layout_spills"] == s0["layout_spills"]


def test_no_buffers_leak():
    torch.tpu.synchronize()
    base = torch.randn(50, 44).to("tpu")
    views = _layouts(base)
    for v in views:  # warm: every program compiled, every spill seen once
        (v * 2).relu_()
    torch.tpu.synchronize()
    before = _core.stats()["buffers_in_use"]
    for _ in range(3):
        for v in views:
            (v * 2).relu_()
    torch.tpu.synchronize()
    assert _core.stats()["buffers_in_use"] == before


def test_env_setting_is_checked(monkeypatch):
    from torchtpu import _env
    monkeypatch.setenv("TORCHTPU_LAYOUTS_PER_OP", "-3")
    with pytest.raises(ValueError, match="TORCHTPU_LAYOUTS_PER_OP"):
        _env.layouts_per_op()
    monkeypatch.setenv("TORCHTPU_LAYOUTS_PER_OP", "0")
    assert _env.layouts_per_op() == 0
    with pytest.raises(RuntimeError, match="layouts per op"):
        _core.set_layouts_per_op(-1)
