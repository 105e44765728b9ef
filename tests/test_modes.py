"""Execution modes: strict, debug and fused eager give the same numbers; fused
eager defers ops into one graph (no device memory for intermediates, one
compile per training step, errors still raised at the op) and flushes it
when a value is needed."""
import copy
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn as nn

import torchtpu

MODES = ("debug", "strict", "fused")


def compiles():
    return torch.tpu._get_cache_stats()["compiles"]


def close(a, b, rel=1e-5):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


# --- the mode API --------------------------------------------------------------------

def test_mode_api():
    assert torchtpu.get_mode() == "strict"
    with torchtpu.mode("fused"):
        assert torchtpu.get_mode() == "fused"
        with torchtpu.mode("debug"):
            assert torchtpu.get_mode() == "debug"
            assert torchtpu.launch_blocking()
        assert torchtpu.get_mode() == "fused"
    assert torchtpu.get_mode() == "strict"
    with pytest.raises(ValueError, match="expected one of"):
        torchtpu.set_mode("lazy")
    torchtpu.set_launch_blocking(True)
    assert torchtpu.get_mode() == "debug"
    torchtpu.set_launch_blocking(False)
    assert torchtpu.get_mode() == "strict"
    torchtpu.sync()  # nothing pending: a no-op in any mode


def test_env_selects_fused():
    code = "import torchtpu, torch; torch.ones(1, device='tpu'); print(torchtpu.get_mode())"
    env = dict(os.environ, TORCH_TPU_DEFER_AND_FUSE="1")
    env.pop("TPU_LAUNCH_BLOCKING", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "fused"


# --- the same numbers in every mode ----------------------------------------------------

def train_mlp(mode, steps):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 16, generator=g)
    y = torch.randint(0, 4, (64,), generator=g)
    losses, step_compiles = [], []
    with torchtpu.mode(mode):
        model, x, y = model.to("tpu"), x.to("tpu"), y.to("tpu")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for _ in range(steps):
            before = compiles()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())  # flushes the step's graph in fused mode
            step_compiles.append(compiles() - before)
        weights = [p.detach().cpu() for p in model.parameters()]
    return losses, step_compiles, weights


def test_mlp_same_losses_in_every_mode_and_fused_compiles_once():
    runs = {m: train_mlp(m, 8) for m in MODES}
    ref_losses, _, ref_weights = runs["strict"]
    for mode, (losses, _, weights) in runs.items():
        for step, (a, b) in enumerate(zip(ref_losses, losses)):
            assert close(a, b), f"{mode} step {step}: strict {a} vs {b}"
        for a, b in zip(ref_weights, weights):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert ref_losses[-1] < ref_losses[0]
    fused_compiles = runs["fused"][1]
    assert fused_compiles[3:] == [0] * 5, fused_compiles  # the step's text repeats


def test_llama_tiny_same_losses_strict_and_fused():
    llama = pytest.importorskip("torchtpu.models.llama")
    per_mode = {}
    for mode in ("strict", "fused"):
        torch.manual_seed(0)
        model = llama.Transformer(llama.llama_args("tiny", dropout=0.0))
        tokens = torch.randint(0, 264, (2, 17), generator=torch.Generator().manual_seed(1))
        losses, step_compiles = [], []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # CPU-fallback warnings, if any
            with torchtpu.mode(mode):
                model, tok = model.to("tpu"), tokens.to("tpu")
                opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
                for _ in range(5):
                    before = compiles()
                    opt.zero_grad()
                    logits = model(tok[:, :-1])
                    loss = nn.functional.cross_entropy(logits.flatten(0, 1),
                                                       tok[:, 1:].flatten())
                    loss.backward()
                    opt.step()
                    losses.append(loss.item())
                    step_compiles.append(compiles() - before)
        per_mode[mode] = (losses, step_compiles)
    for step, (a, b) in enumerate(zip(per_mode["strict"][0], per_mode["fused"][0])):
        assert close(a, b), f"step {step}: strict {a} fused {b}"
    assert per_mode["fused"][1][3:] == [0, 0], per_mode["fused"][1]


def test_random_ops_draw_the_same_numbers():
    out = {}
    for mode in ("strict", "fused"):
        with torchtpu.mode(mode):
            torch.tpu.manual_seed(123)
            a = torch.randn(4, 5, device="tpu")
            b = torch.empty(64, device="tpu").uniform_(-1, 1) * 2
            c = torch.rand(3, device="tpu")
            out[mode] = [t.cpu() for t in (a, b, c)]
    for s, f in zip(out["strict"], out["fused"]):
        torch.testing.assert_close(f, s, rtol=0, atol=0)


# --- fused eager: deferral, memory, flush triggers ---------------------------------------

def chain(x, n=8):
    y = x
    for _ in range(n):
        y = y * 1.01 + 0.5
    return y


def chain_peak(mode, x_cpu):
    with torchtpu.mode(mode):
        x = x_cpu.to("tpu")
        torch.tpu.synchronize()
        base = torch.tpu.memory_allocated()
        torch.tpu.reset_peak_memory_stats()
        y = chain(x)
        torchtpu.sync()
        peak = torch.tpu.max_memory_allocated() - base
        held = torch.tpu.memory_allocated() - base
        result = y.cpu()
    return peak, held, result


def test_fused_intermediates_take_no_device_memory():
    x = torch.randn(256, 256)
    nbytes = x.numel() * 4
    with torchtpu.mode("fused"):
        x_tpu = x.to("tpu")
        torch.tpu.synchronize()
        base = torch.tpu.memory_allocated()
        y = chain(x_tpu)
        assert torch.tpu.memory_allocated() == base  # all pending: nothing held
        assert torchtpu.modes.fused_stats()["pending_ops"] >= 16
        del y
    strict_peak, strict_held, strict_y = chain_peak("strict", x)
    fused_peak, fused_held, fused_y = chain_peak("fused", x)
    torch.testing.assert_close(fused_y, strict_y)
    torch.testing.assert_close(fused_y, chain(x))
    assert fused_held == strict_held == nbytes
    assert fused_peak < strict_peak
    assert fused_peak <= nbytes  # the result only (scalars aside)


def test_sync_and_item_flush():
    with torchtpu.mode("fused"):
        x = torch.arange(6.0, device="tpu")
        y = (x * 2).sum()
        assert torchtpu.modes.fused_stats()["pending_ops"] > 0
        graphs = torchtpu.modes.fused_stats()["graphs"]
        torchtpu.sync()
        st = torchtpu.modes.fused_stats()
        assert st["pending_ops"] == 0 and st["graphs"] == graphs + 1
        assert y.item() == 30.0
        z = x + 1
        assert torchtpu.modes.fused_stats()["pending_ops"] == 1
        assert z.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # .cpu() flushes
        assert torchtpu.modes.fused_stats()["pending_ops"] == 0
        w = x - 1
        print(w)  # printing flushes too
        torch.testing.assert_close(w.cpu(), torch.arange(6.0) - 1)


def test_shape_error_raises_at_the_op_and_the_graph_survives():
    with torchtpu.mode("fused"):
        a = torch.ones(4, 5, device="tpu")
        b = a * 3
        with pytest.raises(RuntimeError, match=r"\[4, 5\].*\[3\].*aten::add"):
            b + torch.ones(3, device="tpu")
        with pytest.raises(RuntimeError, match="mm"):
            b @ torch.ones(4, 2, device="tpu")
        c = b + 1  # the graph recorded before the errors is intact
        assert c.sum().item() == 80.0


def test_fuse_limit_splits_graphs():
    try:
        with torchtpu.mode("fused"):
            torchtpu.modes.set_fuse_limit(max_ops=4)
            graphs = torchtpu.modes.fused_stats()["graphs"]
            x = torch.randn(8)
            y = chain(x.to("tpu"), n=10)  # 20 ops
            torch.testing.assert_close(y.cpu(), chain(x, n=10))
            assert torchtpu.modes.fused_stats()["graphs"] - graphs >= 5
    finally:
        torchtpu.modes.set_fuse_limit()


def test_compile_cost_bound_splits_graphs_and_says_so_once():
    """A graph is run before it passes max_instructions StableHLO
    instructions (its compile-cost estimate); the first split is said once
    on stderr, every split counted; the numbers are the CPU's."""
    code = textwrap.dedent("""
        import sys, torch, torchtpu
        torchtpu.set_mode("fused")
        torchtpu.modes.set_fuse_limit(max_instructions=40)
        x = torch.randn(8)
        y, ref = x.to("tpu"), x
        for _ in range(30):
            y, ref = (y * 1.5).sin(), (ref * 1.5).sin()
        torch.testing.assert_close(y.cpu(), ref)
        st = torchtpu.modes.fused_stats()
        assert st["bound_splits"] >= 3, st
        assert 0 < st["last_graph_instructions"] <= 60, st
        print("ok", st["bound_splits"])
    """)
    env = dict(os.environ)
    env.pop("TORCHTPU_FUSE_MAX_INSTRUCTIONS", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "ok"
    assert out.stderr.count("fused eager split a graph") == 1, out.stderr


def test_fuse_max_instructions_env_is_validated():
    env = dict(os.environ, TORCHTPU_FUSE_MAX_INSTRUCTIONS="lots")
    out = subprocess.run([sys.executable, "-c", "import torchtpu"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "TORCHTPU_FUSE_MAX_INSTRUCTIONS" in out.stderr and "positive integer" in out.stderr


def test_inplace_through_views_of_pending_storages():
    a = torch.randn(4, 6)
    with torchtpu.mode("fused"):
        t = a.to("tpu") * 2                # pending
        t[1:3].add_(1)                     # dense view
        t.t()[2].mul_(-3)                  # strided view (a column)
        t[:, ::2].sub_(0.5)                # gather/scatter view
        v = t.view(6, 4)
        v[0].fill_(7)
        u = t.clone()
        u.copy_(t.flip(0))
    r = a * 2
    r[1:3].add_(1)
    r.t()[2].mul_(-3)
    r[:, ::2].sub_(0.5)
    r.view(6, 4)[0].fill_(7)
    torch.testing.assert_close(t.cpu(), r)
    torch.testing.assert_close(u.cpu(), r.flip(0))


def test_mixed_with_cpu_fallback_ops():
    x = torch.randn(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torchtpu.mode("fused"):
            t = x.to("tpu") * 2 + 1          # pending
            f = torch.special.i0e(t)         # CPU fallback: reads t (flushes)
            g = f * 3                        # back in the graph
            t.add_(g)                        # in place on a flushed storage
            h = torch.special.i0e(g)         # fallback on a pending input
            out = (t + h).cpu()
    e = x * 2 + 1
    fe = torch.special.i0e(e)
    ref = e + fe * 3 + torch.special.i0e(fe * 3)
    torch.testing.assert_close(out, ref)


def test_inputs_dropped_or_overwritten_before_the_flush():
    a_cpu = torch.randn(3, 3)
    with torchtpu.mode("fused"):
        a = a_cpu.to("tpu")
        b = a * 2                          # reads a's buffer at the flush
        a.copy_(torch.zeros(3, 3))         # overwrites a from the host
        c = a + 1                          # reads the new value
        d = torch.ones(3, 3).to("tpu")
        e = d * 5
        del d                              # d's storage dies before the flush
        torch.testing.assert_close(b.cpu(), a_cpu * 2)
        torch.testing.assert_close(c.cpu(), torch.ones(3, 3))
        torch.testing.assert_close(e.cpu(), torch.full((3, 3), 5.0))


def test_fused_leaks_no_device_memory():
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    losses, _, _ = train_mlp("fused", 3)
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == before
    assert losses[-1] < losses[0]
