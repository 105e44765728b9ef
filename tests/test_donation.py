"""Buffer donation in graph replays: a torch.compile graph (or the trainer's
whole step) that writes an input's new value hands the input's buffer to the
program, which writes the new value into it (tf.aliasing_output), so
parameters and optimizer state are updated in place instead of living twice.

Each test compares with PyTorch CPU eager step by step, checks that buffers
were donated (torchtpu.compile.stats()) and that device buffers are not
leaked (the core's buffers_in_use)."""
import copy

import pytest
import torch
import torch.nn as nn

import torchtpu
from torchtpu import _core
from torchtpu import compile as tpu_compile


pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # conftest.py


def donated():
    s = tpu_compile.stats()
    return s["donated_buffers"], s["donated_bytes"]


@pytest.mark.parametrize("opt_name", ["SGD", "AdamW"])
def test_compiled_optimizer_step_updates_in_place(opt_name):
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    tpu = copy.deepcopy(cpu).to("tpu")
    make = getattr(torch.optim, opt_name)
    kw = {"lr": 0.05, "momentum": 0.9} if opt_name == "SGD" else {"lr": 0.01}
    # capturable: Adam's step counts on the device, so the step is one graph
    # (CPU counts would be graph constants: the graph then runs uncaptured)
    cap = {} if opt_name == "SGD" else {"capturable": True}
    opt_c, opt_t = make(cpu.parameters(), **kw), make(tpu.parameters(), **kw, **cap)
    step_t = torch.compile(opt_t.step, backend="tpu")
    views = [p[0] for p in tpu.parameters()]  # views taken before: they follow the updates
    buffers = None
    for i in range(5):
        x = torch.randn(8, 16)
        for model, opt, data in ((cpu, opt_c, x), (tpu, opt_t, x.to("tpu"))):
            opt.zero_grad()
            model(data).square().mean().backward()
        opt_c.step()
        step_t()
        for (name, a), b in zip(cpu.named_parameters(), tpu.parameters()):
            torch.testing.assert_close(b.detach().cpu(), a.detach(), atol=2e-6, rtol=1e-5,
                                       msg=lambda m: f"step {i} {name}: {m}")
        for v, a in zip(views, cpu.parameters()):
            torch.testing.assert_close(v.detach().cpu(), a.detach()[0], atol=2e-6, rtol=1e-5)
        torch.tpu.synchronize()
        if i == 2:
            buffers = _core.stats()["buffers_in_use"]
    assert _core.stats()["buffers_in_use"] == buffers  # replays free what they replace
    n, nbytes = donated()
    params = sum(p.numel() for p in tpu.parameters()) * 4
    assert n > 0 and nbytes >= 2 * params, (n, nbytes)  # at least the parameters of 2 replays


def test_inputs_sharing_a_storage():
    """x is written and also read through a view of the same storage: the
    program reads the old values, then writes the new ones into the buffer
    it was given (or is not given it), as eager does."""
    def f(x, view):
        y = view * 2 + x.sum()
        x.mul_(3).add_(1)
        return y

    g = torch.compile(f, backend="tpu")
    base = torch.randn(6, 4)
    xt = base.to("tpu")
    xc = base.clone()
    for i in range(4):
        want = f(xc, xc[1:3])
        got = g(xt, xt[1:3])
        torch.testing.assert_close(got.cpu(), want, msg=lambda m: f"call {i}: {m}")
        torch.testing.assert_close(xt.cpu(), xc, msg=lambda m: f"call {i}: {m}")


def test_input_read_after_its_write_keeps_the_old_value_where_eager_did():
    """The graph returns the input's old value (a clone taken before the
    in-place update) beside the update; both must be right when the input's
    buffer is donated."""
    def f(w, g):
        old = w.clone()
        w.sub_(0.5 * g)
        return old, w * 1.0

    c = torch.compile(f, backend="tpu")
    w_cpu, g_cpu = torch.randn(32), torch.randn(32)
    w_tpu, g_tpu = w_cpu.to("tpu"), g_cpu.to("tpu")
    before = donated()[0]
    for _ in range(4):
        want = f(w_cpu, g_cpu)
        got = c(w_tpu, g_tpu)
        for a, b in zip(want, got):
            torch.testing.assert_close(b.cpu(), a)
    assert donated()[0] > before


def test_whole_step_donates_parameters_and_optimizer_state():
    """The trainer's compile_mode = "step" on the tiny llama: three steps give
    eager AdamW's losses and parameters on the CPU, and every replay donates
    the parameters and both Adam moments."""
    from torchtpu.models import build_model
    from torchtpu.trainer.graph_step import WholeStep

    torch.manual_seed(0)
    model = build_model("llama", "tiny")
    ref = copy.deepcopy(model)
    tpu = copy.deepcopy(model).to("tpu")
    opt = torch.optim.AdamW(tpu.parameters(), lr=1e-3)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    cfg = {"training": {"max_norm": 0.0, "gradient_accumulation_steps": 1,
                        "mixed_precision": "float32"}}
    ws = WholeStep(tpu, opt, cfg, "tpu")
    vocab = model.args.vocab_size
    for i in range(4):
        tokens = torch.randint(0, vocab, (2, 17))
        xs, ys = tokens[:, :-1], tokens[:, 1:]
        loss, _ = ws(xs.unsqueeze(0).to("tpu"), ys.unsqueeze(0).to("tpu"))
        opt_ref.zero_grad()
        want = nn.functional.cross_entropy(ref(xs).flatten(0, 1), ys.flatten())
        want.backward()
        opt_ref.step()
        assert abs(loss.item() - want.item()) <= 1e-4 * abs(want.item()), (i, loss, want)
    for (name, a), b in zip(ref.named_parameters(), tpu.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), atol=1e-5, rtol=1e-4,
                                   msg=lambda m: f"{name}: {m}")
    n, _ = donated()
    nparams = len(list(tpu.parameters()))
    replays = 4 - 1  # the first step captures, the later ones replay
    assert n >= replays * 3 * nparams, (n, nparams)  # parameters, exp_avg, exp_avg_sq


def _update_graph():
    """An FX graph that rewrites input m with a pointwise op and reads the new
    value again, as an optimizer step does (lerp, then the update reads it)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def step(m, g, bias):
        new = torch.ops.aten.lerp.Scalar(m, g, 0.1)
        torch.ops.aten.copy_.default(m, new)
        shifted = torch.ops.aten.add.Tensor(g, bias)  # [4, 8] + [8]: broadcast
        torch.ops.aten.copy_.default(g, shifted)
        return torch.ops.aten.mul.Tensor(new, 2.0)

    args = (torch.randn(4, 8), torch.randn(4, 8), torch.randn(8))
    return make_fx(step)(*[a.clone() for a in args]), args


def test_flat_updates_compute_a_rewritten_input_on_its_flat_storage():
    """_flat_updates runs the pointwise op that makes an input's new value on
    flattened operands (the shape of the input's flat storage, so that XLA can
    write it in place), leaves ops with broadcast operands alone, and changes
    no value."""
    gm, args = _update_graph()
    want_inputs = [a.clone() for a in args]
    want = gm(*want_inputs)
    ops = lambda g: [n for n in g.graph.nodes if n.op == "call_function"]  # noqa: E731
    gm = tpu_compile._flat_updates(gm)
    lerp = next(n for n in ops(gm) if n.target is torch.ops.aten.lerp.Scalar)
    add = next(n for n in ops(gm) if n.target is torch.ops.aten.add.Tensor)
    assert all(a.target is torch.ops.aten.reshape.default for a in lerp.args[:2]), lerp.args
    assert [a.op for a in add.args] == ["placeholder", "placeholder"], add.args
    got_inputs = [a.clone() for a in args]
    got = gm(*got_inputs)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    for a, b in zip(got_inputs, want_inputs):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


_COPIES_CHILD = r"""
import sys, torch, torchtpu
import torch.nn as nn
from torchtpu import compile as tpu_compile
from torchtpu.testing import hlo_dump
if sys.argv[2] == "off":
    tpu_compile._flat_updates = lambda gm: gm
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 64)).to("tpu")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True, foreach=False)
step = torch.compile(opt.step, backend="tpu")
x = torch.randn(32, 64, device="tpu")
for _ in range(3):
    opt.zero_grad()
    model(x).square().mean().backward()
    step()
torch.tpu.synchronize()
# the optimizer step's program: the module with the most entry parameters
entries = [hlo_dump.entry_instructions(p) for p in hlo_dump.optimized_modules(sys.argv[1])]
entry = max(entries, key=lambda e: sum(i.op == "parameter" for i in e))
copied = [i for i in hlo_dump.param_copies(entry) if i.elements > 1]  # step counts aside
print("ENTRY_PARAM_COPIES", len(copied), sum(i.op == "parameter" for i in entry))
"""


def _entry_copies(tmp_path, mode):
    from torchtpu.testing import hlo_dump

    dump = tmp_path / mode
    out = hlo_dump.run_dumping(["-c", _COPIES_CHILD, str(dump), mode], dump, flags="",
                               env={"TORCHTPU_CACHE_DIR": str(tmp_path / f"cache-{mode}")},
                               timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("ENTRY_PARAM_COPIES")]
    assert line, out.stdout[-2000:]
    copies, params = map(int, line[0].split()[1:])
    assert params >= 12, line  # 4 weights and biases, 2 moments each: the step's program
    return copies


def test_compiled_adamw_step_copies_no_moment_at_entry(tmp_path):
    """The XLA program of a compiled per-tensor AdamW step (foreach=False, as
    in the trainer's whole step; 2-D weights, their moments donated) copies
    none of its multi-element inputs at entry: each new moment and weight is
    written in place (the plugin's optimized-HLO dump). Without _flat_updates,
    XLA copies the 2-D moments at every step."""
    assert _entry_copies(tmp_path, "off") > 0
    assert _entry_copies(tmp_path, "on") == 0


def _fused_donated():
    return _core.fused_stats()["donated_buffers"]


def test_fused_partial_writes_donate_the_storage_they_rewrite():
    """Fused eager: a graph that writes part of a storage (a KV cache's
    index_copy_, a slice assignment) donates the storage's buffer, so the
    write happens in place instead of copying the whole cache each flush.
    Readers of the old value in the same graph (a clone, a sum, a view read
    before the write) keep it, views taken before follow the update, every
    repeat of the graph (the recorded trace's executable) donates too, and
    no buffer is leaked. Compared with PyTorch CPU eager step by step."""
    torch.manual_seed(0)
    cpu = torch.randn(64, 4, 8)
    tpu = cpu.to("tpu")
    view_c, view_t = cpu[5], tpu[5]  # a view taken before: follows the writes
    before, buffers = _fused_donated(), None
    with torchtpu.modes.mode("fused"):
        for step in range(6):
            rows = torch.tensor([step, 63 - step, 5])
            vals = torch.randn(3, 4, 8)
            out = []
            for cache, view, dev in ((cpu, view_c, "cpu"), (tpu, view_t, "tpu")):
                old = cache.clone()
                total = cache.sum()
                head = view * 1.0
                cache.index_copy_(0, rows.to(dev), vals.to(dev))
                cache[10 + step, 1:3] = float(step)
                out.append((old, total, head, cache.sum(), view * 1.0))
            torch.tpu.synchronize()
            for a, b in zip(*out):
                torch.testing.assert_close(b.cpu(), a, msg=lambda m: f"step {step}: {m}")
            torch.testing.assert_close(tpu.cpu(), cpu, msg=lambda m: f"step {step}: {m}")
            del out
            if step == 2:
                buffers = _core.stats()["buffers_in_use"]
    assert _core.stats()["buffers_in_use"] == buffers  # flushes free what they replace
    assert _fused_donated() - before >= 6, _fused_donated() - before  # one per flush at least


def test_fused_write_after_a_host_overwrite_in_the_same_graph():
    """A storage the graph read, then overwritten from the host while the
    graph records, hands its old buffer to the graph: the graph's later
    partial write must land on the host's new value, and the old value
    must still be what the earlier reads saw."""
    cpu = torch.arange(24.0).reshape(6, 4)
    tpu = cpu.to("tpu")
    new = torch.full((6, 4), 7.0)
    with torchtpu.modes.mode("fused"):
        got, want = [], []
        for cache, dev, out in ((cpu, "cpu", want), (tpu, "tpu", got)):
            s = cache.sum()
            cache.copy_(new)  # from the host
            cache[2] = -1.0
            out += [s, cache * 2]
        torch.tpu.synchronize()
    for a, b in zip(want, got):
        torch.testing.assert_close(b.cpu(), a)
    torch.testing.assert_close(tpu.cpu(), cpu)


@pytest.mark.parametrize("mode", ["strict", "debug"])
def test_eager_in_place_ops_write_their_storage_in_place(mode):
    """Strict (and debug) eager: an op that rewrites a storage it reads
    (index_copy_, a slice assignment, an in-place op on a view, index_put_,
    a whole-storage add_) donates the storage's buffer to its program, so
    the new value is written in place. Clones taken before keep the old
    value, views follow, a view of the same storage read by the op that
    writes another part of it reads the old values, and no buffer is
    leaked; compared with PyTorch CPU eager op by op."""
    torch.manual_seed(0)
    cpu = torch.randn(32, 3, 5)
    tpu = cpu.to("tpu")
    view_c, view_t = cpu[7], tpu[7]
    stats = _core.stats
    before, buffers = stats()["donated_buffers"], None
    with torchtpu.modes.mode(mode):
        for step in range(5):
            rows = torch.tensor([step, 31 - step])
            vals = torch.randn(2, 3, 5)
            out = []
            for cache, view, dev in ((cpu, view_c, "cpu"), (tpu, view_t, "tpu")):
                old = cache.clone()
                cache.index_copy_(0, rows.to(dev), vals.to(dev))
                cache[10 + step, 1:3] = float(step)
                cache[20:22].mul_(cache[0:2])  # reads another part of the same storage
                cache.index_put_((rows.to(dev),), vals.to(dev) * 2, accumulate=True)
                cache.add_(0.5)
                out.append((old, view * 1.0))
            for a, b in zip(*out):
                torch.testing.assert_close(b.cpu(), a, msg=lambda m: f"step {step}: {m}")
            torch.testing.assert_close(tpu.cpu(), cpu, msg=lambda m: f"step {step}: {m}")
            del out
            torch.tpu.synchronize()
            if step == 1:
                buffers = stats()["buffers_in_use"]
    assert stats()["buffers_in_use"] == buffers  # each op frees what it replaces
    assert stats()["donated_buffers"] - before >= 5 * 5, stats()["donated_buffers"] - before
