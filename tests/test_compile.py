"""torch.compile(backend="tpu") gives what PyTorch CPU eager gives: training
steps (forward, backward, optimizer) of an MLP, a BatchNorm net, a ConvNet,
the llama and MoE models; graph breaks; mutated inputs; recompilation bounded
by Dynamo's limit; dynamic=True; no new programs on a second call."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu
from torchtpu import compile as tpu_compile

ATOL, RTOL = 2e-5, 1e-4


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    tpu_compile.reset_stats()
    previous = torchtpu.fallback_mode()
    torchtpu.set_fallback_mode("silent")  # ops not lowered yet run on the CPU
    yield
    torchtpu.set_fallback_mode(previous)
    torch._dynamo.reset()


def close(cpu, tpu, what, atol=ATOL, rtol=RTOL):
    tpu = tpu.detach().cpu()
    assert cpu.shape == tpu.shape, f"{what}: shape {tuple(cpu.shape)} vs {tuple(tpu.shape)}"
    diff = (cpu.detach().double() - tpu.double()).abs().max().item() if cpu.numel() else 0.0
    assert torch.allclose(cpu.detach(), tpu, atol=atol, rtol=rtol), f"{what}: max abs diff {diff}"


def compare_models(cpu_model, tpu_model, grads=True, **tol):
    for (name, a), b in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        close(a, b, name, **tol)
        if grads and a.grad is not None:
            close(a.grad, b.grad, name + ".grad", **tol)
    for (name, a), b in zip(cpu_model.named_buffers(), tpu_model.buffers()):
        close(a, b, name, **tol)


def train_both(model, batches, loss_fn, steps=2, opt=torch.optim.SGD, compile_opt=False,
               tpu_opt_args=None, lr=0.05, **tol):
    """Runs `steps` training steps on the CPU (eager) and on "tpu" (compiled),
    checking losses after each step and weights, grads and buffers at the end."""
    cpu_model, tpu_model = model, copy.deepcopy(model).to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu")
    cpu_opt = opt(cpu_model.parameters(), lr=lr)
    tpu_opt = opt(tpu_model.parameters(), lr=lr, **(tpu_opt_args or {}))
    tpu_step = torch.compile(tpu_opt.step, backend="tpu") if compile_opt else tpu_opt.step
    for step in range(steps):
        batch = batches[step % len(batches)]
        cpu_opt.zero_grad()
        tpu_opt.zero_grad()
        cpu_loss = loss_fn(cpu_model, cpu_model, batch)
        tpu_loss = loss_fn(tpu_model, compiled, tuple(t.to("tpu") for t in batch))
        close(cpu_loss, tpu_loss, f"loss at step {step}", **tol)
        cpu_loss.backward()
        tpu_loss.backward()
        if step == steps - 1:
            compare_models(cpu_model, tpu_model, **tol)
        cpu_opt.step()
        tpu_step()
    compare_models(cpu_model, tpu_model, grads=False, **tol)
    return cpu_model, tpu_model


def ce_loss(model, fwd, batch):
    del model
    x, y = batch
    return F.cross_entropy(fwd(x), y)


def lm_loss(model, fwd, batch):
    (tokens,) = batch
    logits = fwd(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    aux = model.aux_loss()
    return loss if aux is None else loss + aux


def data(n, d, classes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, *d, generator=g), torch.randint(0, classes, (n,), generator=g)


# --- registration and decompositions ---------------------------------------------------

def test_backend_is_registered():
    assert "tpu" in torch._dynamo.list_backends()


def test_native_rules_are_not_decomposed():
    table = tpu_compile.decompositions()
    for op in (torch.ops.aten._log_softmax_backward_data.default,
               torch.ops.aten.nll_loss_forward.default):
        if tpu_compile.has_rule(op):
            assert op not in table, f"{op} has a tpu rule but is still decomposed"
    # ops without a rule keep their decomposition
    assert any(not tpu_compile.has_rule(op) for op in table)


# --- training steps -------------------------------------------------------------------------

def test_mlp_train_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.Tanh(),
                          nn.Linear(32, 4))
    train_both(model, [data(8, (16,), 4, s) for s in range(2)], ce_loss, steps=3)
    s = tpu_compile.stats()
    assert s["forward"] == 1 and s["backward"] == 1, s  # one graph each, reused


def test_mlp_adamw_compiled_optimizer_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    # capturable: the step counts live on the device, so the compiled step's
    # graph is all tpu (the CPU can't be capturable: the CPU run uses the default)
    train_both(model, [data(6, (8,), 3)], ce_loss, steps=3, opt=torch.optim.AdamW,
               compile_opt=True, tpu_opt_args={"capturable": True})
    assert tpu_compile.stats()["inference"] >= 1  # the optimizer step's graph


def test_batchnorm_running_stats_and_eval():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4))
    cpu_model, tpu_model = train_both(model, [data(10, (6,), 4, s) for s in range(2)],
                                      ce_loss, steps=3)
    bn = tpu_model[1]
    assert bn.num_batches_tracked.item() == 3
    # eval: running stats are read, not written (an inference graph)
    cpu_model.eval()
    tpu_model.eval()
    compiled = torch.compile(tpu_model, backend="tpu")
    x, _ = data(5, (6,), 4, seed=7)
    with torch.no_grad():
        close(cpu_model(x), compiled(x.to("tpu")), "eval output")
    compare_models(cpu_model, tpu_model, grads=False)


def _conv_runs_on_tpu():
    try:
        nn.Conv2d(1, 1, 1).to("tpu")(torch.zeros(1, 1, 2, 2, device="tpu")).cpu()
        return True
    except (NotImplementedError, RuntimeError):
        return False


def test_convnet_batchnorm_train_step():
    if not _conv_runs_on_tpu():
        pytest.skip("convolution has no tpu kernel in this build (aten::convolution_overrideable)")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
    train_both(model, [data(4, (3, 8, 8), 5, s) for s in range(2)], ce_loss, steps=2,
               atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("name", ["llama", "moe"])
def test_model_train_step(name):
    models = pytest.importorskip("torchtpu.models")
    torch.manual_seed(0)
    model = models.build_model(name, "tiny")
    tokens = torch.randint(0, model.args.vocab_size, (2, 17),
                           generator=torch.Generator().manual_seed(1))
    # Adam's first steps move every weight by about lr whatever the gradient's
    # size, so a small lr keeps float noise in tiny gradients small
    train_both(model, [(tokens,)], lm_loss, steps=2, opt=torch.optim.AdamW, lr=1e-3,
               atol=1e-4, rtol=1e-3)


# --- graph breaks, mutation, recompilation -----------------------------------------------

def test_data_dependent_graph_break():
    def f(x, w):
        y = torch.tanh(x @ w)
        if y.sum() > 0:  # data-dependent: Dynamo breaks the graph here
            return (y * 2).relu().sum(0)
        return (y - 1).sigmoid().sum(0)

    compiled = torch.compile(f, backend="tpu")
    w = torch.randn(4, 3)
    for sign in (1.0, -1.0, 1.0):
        x = sign * torch.rand(5, 4)
        wt = w.clone().requires_grad_()
        out = compiled(x.to("tpu"), wt.detach().to("tpu").requires_grad_())
        close(f(x, w), out, f"output (sign {sign})")
    assert tpu_compile.stats()["graphs"] >= 3  # before the break, and both branches


def test_inplace_input_mutation():
    def f(x, buf):
        buf.mul_(0.9).add_(x.mean(0), alpha=0.1)  # a running average, like BatchNorm's
        x.add_(1)
        return x * buf

    compiled = torch.compile(f, backend="tpu")
    x, buf = torch.randn(4, 3), torch.randn(3)
    xt, buft = x.to("tpu"), buf.to("tpu")
    for _ in range(2):
        out = f(x, buf)
        out_t = compiled(xt, buft)
        close(out, out_t, "output")
        close(x, xt, "mutated x")
        close(buf, buft, "mutated buf")


def test_mutation_through_view():
    def f(x):
        x[:, 1:].mul_(2)
        return x.sum()

    compiled = torch.compile(f, backend="tpu")
    x = torch.randn(3, 4)
    xt = x.to("tpu")
    close(f(x), compiled(xt), "output")
    close(x, xt, "mutated x")


def test_second_call_compiles_nothing():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.SiLU(), nn.Linear(16, 4)).to("tpu")
    compiled = torch.compile(model, backend="tpu")
    x, x2 = torch.randn(5, 8).to("tpu"), torch.randn(5, 8).to("tpu")
    compiled(x).sum().backward()
    before = torch.tpu._get_cache_stats()["compiles"]
    graphs = tpu_compile.stats()["graphs"]
    model.zero_grad(set_to_none=True)  # else backward accumulates: an eager add_
    compiled(x2).sum().backward()
    assert torch.tpu._get_cache_stats()["compiles"] == before
    assert tpu_compile.stats()["graphs"] == graphs


def test_recompiles_are_bounded():
    def f(x):
        return (x.sin() * 2).sum(0)

    limit = torch._dynamo.config.recompile_limit
    compiled = torch.compile(f, backend="tpu", dynamic=False)
    for n in range(1, limit + 4):  # more shapes than the limit
        x = torch.randn(n, 3)
        close(f(x), compiled(x.to("tpu")), f"rows {n}")
    assert tpu_compile.stats()["graphs"] == limit  # then Dynamo runs f eagerly


def test_dynamic_true_one_graph_for_all_shapes():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))
    tpu_model = copy.deepcopy(model).to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu", dynamic=True)
    for n in (3, 5, 9):
        x = torch.randn(n, 6)
        close(model(x), compiled(x.to("tpu")), f"batch {n}")
        model(x).sum().backward()
        compiled(x.to("tpu")).sum().backward()
    compare_models(model, tpu_model)
    s = tpu_compile.stats()
    assert s["forward"] == 1 and s["backward"] == 1, s


def test_unknown_option_is_rejected():
    compiled = torch.compile(lambda x: x + 1, backend="tpu", options={"bogus": 1})
    with pytest.raises(Exception, match="unknown options"):
        compiled(torch.ones(2, device="tpu"))


# --- the trainer -------------------------------------------------------------------------

def test_trainer_compile_matches_cpu(tmp_path):
    trainer = pytest.importorskip("torchtpu.train")
    from torchtpu.trainer.config import load_config

    def run(device, compile):
        cfg = load_config(overrides={
            "job": {"dump_folder": str(tmp_path)},
            "model": {"name": "llama", "flavor": "tiny", "dropout": 0.0},
            "optimizer": {"lr": 3e-3}, "lr_scheduler": {"warmup_steps": 2},
            "training": {"device": device, "steps": 3, "local_batch_size": 2, "seq_len": 16,
                         "seed": 0, "compile": compile},
            "checkpoint": {"enable": False},
            "metrics": {"log_freq": 1, "peak_flops": 1e9, "plot": False,
                        "progress_bar": False}})
        return trainer.train(cfg, log=lambda *a: None)["losses"]

    cpu, tpu = run("cpu", False), run("tpu", True)
    for step in cpu:
        assert abs(cpu[step] - tpu[step]) <= 1e-4 * abs(cpu[step]), (step, cpu[step], tpu[step])
    s = tpu_compile.stats()
    # forward, backward, optimizer step: once each, though the lr changes every step
    assert (s["forward"], s["backward"], s["inference"]) == (1, 1, 1), s


# --- capture once, replay ------------------------------------------------------------------
#
# The first call of a graph is captured by the core; later calls replay the
# captured program in one shim call (no recording, no Python per op).

def _train_compiled(model, batches, loss_fn, steps, options, opt=torch.optim.AdamW, lr=1e-3,
                    compile_opt=False):
    """Losses and final weights of `steps` compiled training steps on tpu."""
    model = copy.deepcopy(model).to("tpu")
    compiled = torch.compile(model, backend="tpu", options=options)
    optimizer = opt(model.parameters(), lr=lr, **({"capturable": True} if compile_opt else {}))
    step_fn = (torch.compile(optimizer.step, backend="tpu", options=options)
               if compile_opt else optimizer.step)
    losses = []
    for step in range(steps):
        batch = tuple(t.to("tpu") for t in batches[step % len(batches)])
        optimizer.zero_grad()
        loss = loss_fn(model, compiled, batch)
        loss.backward()
        step_fn()
        losses.append(loss.detach().cpu())
    return losses, [p.detach().cpu() for p in model.parameters()]


def _train_cpu(model, batches, loss_fn, steps, opt=torch.optim.AdamW, lr=1e-3):
    model = copy.deepcopy(model)
    optimizer = opt(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(model, model, batches[step % len(batches)])
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return losses, [p.detach() for p in model.parameters()]


def _check_replay_matches(model, batches, loss_fn, steps, compile_opt=False, **tol):
    cpu = _train_cpu(model, batches, loss_fn, steps)
    torch._dynamo.reset()
    tpu_compile.reset_stats()
    fused = _train_compiled(model, batches, loss_fn, steps, {"replay": False},
                            compile_opt=compile_opt)
    assert tpu_compile.stats()["replays"] == 0
    torch._dynamo.reset()
    tpu_compile.reset_stats()
    replay = _train_compiled(model, batches, loss_fn, steps, {}, compile_opt=compile_opt)
    s = tpu_compile.stats()
    assert s["capture_failures"] == 0, s
    assert s["captures"] == s["graphs"], s  # every graph captured once
    assert s["replays"] == s["calls"] - s["captures"], s  # every later call replayed
    for step in range(steps):
        close(cpu[0][step], replay[0][step], f"loss at step {step} (cpu vs replay)", **tol)
        close(fused[0][step], replay[0][step], f"loss at step {step} (fused vs replay)", **tol)
    for i, (a, b, c) in enumerate(zip(cpu[1], fused[1], replay[1])):
        close(a, c, f"parameter {i} (cpu vs replay)", **tol)
        close(b, c, f"parameter {i} (fused vs replay)", **tol)
    return s


def test_replay_mlp_train_steps_match_fused_and_cpu():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.Tanh(),
                          nn.Linear(32, 4))
    s = _check_replay_matches(model, [data(8, (16,), 4, k) for k in range(2)], ce_loss,
                              steps=4, compile_opt=True)
    assert s["replays"] >= 3 * 3  # forward, backward, optimizer step: 3 replays each


def test_replay_llama_train_steps_match_fused_and_cpu():
    models = pytest.importorskip("torchtpu.models")
    torch.manual_seed(0)
    model = models.build_model("llama", "tiny")
    batches = [(torch.randint(0, model.args.vocab_size, (2, 17),
                              generator=torch.Generator().manual_seed(k)),) for k in range(2)]
    s = _check_replay_matches(model, batches, lm_loss, steps=3, atol=1e-4, rtol=1e-3)
    assert s["replays"] >= 2 * 2


def test_replay_records_and_compiles_nothing():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.SiLU(), nn.Linear(16, 4)).to("tpu")
    compiled = torch.compile(model, backend="tpu")
    x, x2 = torch.randn(5, 8), torch.randn(5, 8)
    compiled(x.to("tpu")).sum().backward()
    assert tpu_compile.stats()["captures"] == 2  # forward and backward
    ops = torchtpu.modes.fused_stats()["ops"]
    compiles = torch.tpu._get_cache_stats()["compiles"]
    model.zero_grad(set_to_none=True)
    out = compiled(x2.to("tpu"))
    out.sum().backward()
    assert tpu_compile.stats()["replays"] == 2
    assert torchtpu.modes.fused_stats()["ops"] == ops  # nothing recorded
    assert torch.tpu._get_cache_stats()["compiles"] == compiles
    cpu_model = copy.deepcopy(model).cpu()
    close(cpu_model(x2), out, "replayed output")


def test_replay_off_records_every_call():
    model = nn.Linear(4, 3).to("tpu")
    compiled = torch.compile(model, backend="tpu", options={"replay": False})
    with torch.no_grad():
        for _ in range(3):
            compiled(torch.randn(2, 4).to("tpu"))
    s = tpu_compile.stats()
    assert s["captures"] == 0 and s["replays"] == 0 and s["calls"] == 3


def _runner(fn, *example):
    """A _GraphRunner over the FX graph of `fn` (no Dynamo, no guards)."""
    gm = torch.fx.symbolic_trace(fn)
    return tpu_compile._GraphRunner(gm, "inference", tpu_compile._fused_runner())


def test_replay_new_input_shape_recaptures():
    runner = _runner(lambda x, w: [torch.tanh(x @ w).sum(0)], )
    w = torch.randn(4, 3)
    for n in (5, 5, 7, 7):  # Dynamo would guard; the runner must not replay wrongly
        x = torch.randn(n, 4)
        (out,) = runner([x.to("tpu"), w.to("tpu")])
        close(torch.tanh(x @ w).sum(0), out, f"output for {n} rows")
    s = tpu_compile.stats()
    assert s["captures"] == 2 and s["recaptures"] == 1 and s["replays"] == 2, s


def test_replay_keeps_a_capture_per_shape():
    runner = _runner(lambda x, w: [torch.tanh(x @ w).sum(0)], )
    w = torch.randn(4, 3)
    for n in (5, 7, 5, 7, 9, 5):  # lengths in turn: each replays its own capture
        x = torch.randn(n, 4)
        (out,) = runner([x.to("tpu"), w.to("tpu")])
        close(torch.tanh(x @ w).sum(0), out, f"output for {n} rows")
    s = tpu_compile.stats()
    assert s["captures"] == 3 and s["replays"] == 3, s


def test_dynamic_graph_replays_each_length():
    """A graph with symbolic sizes (mark_dynamic) is traced once; each length
    is captured at its first call and replayed after, forward and backward,
    with the CPU's results and gradients."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))
    mt = copy.deepcopy(m).to("tpu")

    def f(model, x):
        return torch.softmax(model(x), -1).mean(1).pow(2).sum()

    ft = torch.compile(f, backend="tpu")
    for n in (5, 7, 5):
        x = torch.randn(2, n, 8)
        xt = x.to("tpu")
        torchtpu.mark_dynamic(xt, 1, min=2, max=64)
        loss, loss_t = f(m, x), ft(mt, xt)
        close(loss, loss_t, f"loss at length {n}")
        m.zero_grad(); mt.zero_grad()
        loss.backward(); loss_t.backward()
        for (name, p), pt in zip(m.named_parameters(), mt.parameters()):
            close(p.grad, pt.grad, f"grad {name} at length {n}")
    s = tpu_compile.stats()
    assert s["forward"] == 1 and s["backward"] == 1, s  # one trace for every length
    assert s["capture_failures"] == 0 and s["captures"] == 4 and s["replays"] == 2, s


def test_mark_dynamic_bad_input():
    x = torch.randn(2, 5).to("tpu")
    with pytest.raises(IndexError, match=r"dim 2 out of range.*\[2, 5\]"):
        torchtpu.mark_dynamic(x, 2)
    with pytest.raises(ValueError, match=r"dim 1 has size 5, outside \[8, 16\]"):
        torchtpu.mark_dynamic(x, 1, 8, 16)
    with pytest.raises(ValueError, match="min 9 > max 4"):
        torchtpu.mark_dynamic(x, 1, min=9, max=4)


def test_replay_mismatch_is_a_clear_error():
    runner = _runner(lambda x: [x.exp() * 2])
    runner([torch.randn(3, 2).to("tpu")])
    handle = runner.graph.handle
    with pytest.raises(ValueError, match=r"input 0 \(float32 \[4, 2\]\).*\(float32 \[3, 2\]\)"):
        torch.ops.torchtpu.graph_replay(handle, [torch.randn(4, 2).to("tpu")])
    with pytest.raises(ValueError, match="1 inputs, the capture had 1|0 inputs"):
        torch.ops.torchtpu.graph_replay(handle, [])
    with pytest.raises(ValueError, match="strides"):
        torch.ops.torchtpu.graph_replay(handle, [torch.randn(2, 3).to("tpu").t()])


def test_replay_inplace_input_mutation_and_aliased_outputs():
    def f(x, buf):
        buf.mul_(0.5).add_(x.mean(0))
        return [x * buf, x, x[1:], buf.view(1, -1)]

    runner = _runner(f)
    x, buf = torch.randn(4, 3), torch.randn(3)
    xt, buft = x.to("tpu"), buf.to("tpu")
    for _ in range(3):
        want = f(x, buf)
        got = runner([xt, buft])
        for i, (a, b) in enumerate(zip(want, got)):
            close(a, b, f"output {i}")
        close(buf, buft, "mutated buf")
    assert got[1] is xt  # an output that is an input comes back as that tensor
    assert tpu_compile.stats()["replays"] == 2


def test_replay_dropout_draws_new_numbers():
    def f(x):
        return [F.dropout(x, 0.5, training=True)]

    runner = _runner(f)
    x = torch.ones(64, 64).to("tpu")
    gen = torch.tpu.default_generators[0] if hasattr(torch.tpu, "default_generators") else None
    masks = []
    for _ in range(3):
        (out,) = runner([x])
        masks.append(out.cpu() != 0)
    assert tpu_compile.stats()["replays"] == 2
    assert not torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2])
    for m in masks:
        assert 0.4 < m.float().mean().item() < 0.6
    del gen


def test_replay_falls_back_when_capture_fails():
    const = torch.randn(3).to("tpu")

    def f(x):  # reads a tensor that is not a graph input: not capturable
        return [x + const]

    runner = _runner(f)
    for _ in range(2):
        x = torch.randn(3)
        (out,) = runner([x.to("tpu")])
        close(x + const.cpu(), out, "output")
    s = tpu_compile.stats()
    assert s["capture_failures"] == 1 and s["replays"] == 0, s
    assert "not a graph input" in runner.no_capture
