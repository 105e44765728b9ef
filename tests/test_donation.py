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
