"""training.compile_mode = "step" (torchtpu/trainer/graph_step.py): the whole
training step as one replayed program gives the eager trainer's losses, grad
norms and final parameters on the same seed (clipping active, the lr
changing every step in warmup), runs one program per step and compiles
nothing after step 2; bad combinations are clear errors."""
import copy
import re

import pytest
import torch

import torchtpu
from torchtpu import train as trainer
from torchtpu.models import build_model
from torchtpu.trainer.config import ConfigError, load_config
from torchtpu.trainer.graph_step import WholeStep


SIMPLE_FSDP_STEPS = 8  # 2-rank SimpleFSDP runs: compile at steps 1-2, replay after


def config(tmp_path, name="llama", flavor="debugmodel", steps=10, **sections):
    overrides = {
        "job": {"dump_folder": str(tmp_path)},
        "model": {"name": name, "flavor": flavor, "dropout": 0.0},
        "optimizer": {"lr": 3e-3},
        # warmup over the whole run: the lr changes at every step
        "lr_scheduler": {"warmup_steps": steps},
        # clipping active: the debug models' grad norms are well above 0.5
        "training": {"device": "tpu", "steps": steps, "local_batch_size": 2, "seq_len": 32,
                     "seed": 0, "max_norm": 0.5},
        "checkpoint": {"enable": False},
        "metrics": {"log_freq": 1, "peak_flops": 1e9, "plot": False, "progress_bar": False},
    }
    for section, values in sections.items():
        overrides.setdefault(section, {}).update(values)
    return load_config(overrides=overrides)


def run(cfg):
    lines = []
    out = trainer.train(cfg, log=lambda *a, **k: lines.append(" ".join(map(str, a))))
    out["log"] = lines
    return out


def assert_close_per_step(ref, got, rel=1e-4):
    assert sorted(ref) == sorted(got)
    for step in ref:
        assert abs(ref[step] - got[step]) <= rel * abs(ref[step]), \
            f"step {step}: eager {ref[step]} whole-step {got[step]}"


def check_against_eager(tmp_path, name, steps=10, rtol=1e-4, atol=1e-5, **sections):
    eager = run(config(tmp_path / "eager", name, steps=steps, **sections))
    compiles0 = torch.tpu._get_cache_stats()["compiles"]
    step = run(config(tmp_path / "step", name, steps=steps,
                      **{**sections, "training": {**sections.get("training", {}),
                                                  "compile_mode": "step"}}))
    assert_close_per_step(eager["losses"], step["losses"])
    assert_close_per_step(eager["grad_norms"], step["grad_norms"])
    assert all(n > 0.5 for n in eager["grad_norms"].values())  # clipping did something
    assert step["losses"][steps] < step["losses"][1]
    ws = step["whole_step"]
    assert ws["programs_per_step"] == 1, ws
    assert ws["compiles_after_step2"] == 0, ws
    assert "whole-step: 1 program(s) per step" in step["log"]
    assert torch.tpu._get_cache_stats()["compiles"] > compiles0  # it did compile, once
    ref = dict(eager["model"].named_parameters())
    for name, p in step["model"].named_parameters():
        torch.testing.assert_close(p.detach().cpu(), ref[name].detach().cpu(),
                                   rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")
    # the optimizer state is torch.optim's, updated in place by the program
    st = step["optimizer"].state
    est = eager["optimizer"].state
    for p_step, p_eager in zip(step["model"].parameters(), eager["model"].parameters()):
        assert float(st[p_step]["step"]) == float(est[p_eager]["step"]) == steps
        torch.testing.assert_close(st[p_step]["exp_avg"].cpu(), est[p_eager]["exp_avg"].cpu(),
                                   rtol=rtol, atol=atol)
    return eager, step


def test_llama_debug_whole_step_matches_eager(tmp_path):
    check_against_eager(tmp_path, "llama")


def test_moe_debug_whole_step_matches_eager(tmp_path):
    check_against_eager(tmp_path, "moe")


def test_accumulation_and_sgd_match_eager(tmp_path):
    """Gradient accumulation (inside the step) and SGD with momentum, nesterov
    and weight decay, on the tiny flavour."""
    sections = {"model": {"flavor": "tiny"},
                "optimizer": {"name": "SGD", "lr": 0.05, "nesterov": True,
                              "weight_decay": 0.01},
                "training": {"gradient_accumulation_steps": 2}}
    cfgs = [config(tmp_path / k, "llama", steps=5, **sections) for k in ("a", "b")]
    cfgs[1]["training"]["compile_mode"] = "step"
    cfgs[1]["training"]["compile"] = True
    eager, step = run(cfgs[0]), run(cfgs[1])
    assert_close_per_step(eager["losses"], step["losses"])
    assert step["whole_step"]["programs_per_step"] == 1
    ref = dict(eager["model"].named_parameters())
    for name, p in step["model"].named_parameters():
        torch.testing.assert_close(p.detach().cpu(), ref[name].detach().cpu(),
                                   rtol=1e-4, atol=1e-5)


def test_one_replayed_program_per_step_by_the_profiler():
    """Counted independently of the trainer: torchtpu.profiler's events of one
    step after the first two."""
    from torchtpu import profiler
    from torchtpu.train import build_optimizer

    cfg = load_config(overrides={"model": {"flavor": "tiny"}})
    torch.manual_seed(0)
    model = build_model("llama", "tiny").to("tpu")
    opt = build_optimizer(model.parameters(), cfg["optimizer"])
    ws = WholeStep(model, opt, cfg, "tpu")
    xs = torch.randint(0, 256, (1, 2, 16))
    for _ in range(2):
        ws(xs, xs)
    with profiler.trace() as prof:
        loss, norm = ws(xs, xs)
    events = prof.events
    assert len(events) == 1 and events[0]["kind"] == "graph", events
    assert torch.isfinite(loss.cpu()) and float(norm) > 0


def test_attention_traces_as_the_fused_op():
    """make_fx does not functionalize, so "tpu"'s SDPA choice would take the
    math path (a [B, H, L, S] mask, a safe softmax and its backward) in the
    traced step; the trace asks for the fused attention op, as torch.compile's
    graphs have it, and the step still gives CPU eager's loss and gradients."""
    from torchtpu.train import build_optimizer

    cfg = load_config(overrides={"model": {"flavor": "tiny"}})
    torch.manual_seed(0)
    model = build_model("llama", "tiny")
    ref = copy.deepcopy(model)
    model.to("tpu")
    opt = build_optimizer(model.parameters(), cfg["optimizer"])
    ws = WholeStep(model, opt, cfg, "tpu")
    xs = torch.randint(0, 256, (1, 2, 16))
    loss, norm = ws(xs.to("tpu"), xs.to("tpu"))
    ops = {str(n.target) for r in ws.runners for n in r.gm.graph.nodes
           if n.op == "call_function"}
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in ops
    assert "aten._scaled_dot_product_flash_attention_for_cpu_backward.default" in ops
    assert not {"aten._safe_softmax.default", "aten.tril.default"} & ops
    logits = ref(xs[0])
    ref_loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), xs[0].flatten())
    ref_loss.backward()
    ref_norm = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(p.grad) for p in ref.parameters()]))
    torch.testing.assert_close(loss.cpu(), ref_loss.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(float(norm), float(ref_norm), rtol=1e-4, atol=1e-5)


_SCORES_CHILD = r"""
import torch, torchtpu
from torchtpu.models import build_model
from torchtpu.train import build_optimizer
from torchtpu.trainer.config import load_config
from torchtpu.trainer.graph_step import WholeStep
cfg = load_config(overrides={"model": {"flavor": "tiny"}})
torch.manual_seed(0)
model = build_model("llama", "tiny").to("tpu")
ws = WholeStep(model, build_optimizer(model.parameters(), cfg["optimizer"]), cfg, "tpu")
xs = torch.randint(0, 256, (1, 2, 24), device="tpu")
ws(xs, xs)
torch.tpu.synchronize()
"""


def test_attention_scores_computed_once_per_layer(tmp_path):
    """In the whole step's XLA program the backward's recomputation of the
    scores Q K^T is the forward's product (XLA computes it once): per layer,
    two products have the scores' shape, Q K^T and dO V^T (the plugin's
    optimized-HLO dump). Scaling Q instead of the scores once made them two
    products, a third of the attention's matmul work more. This is the
    StableHLO lowering TPU and GPU plugins compile: on the CPU plugin our C
    kernel is turned off for it."""
    step = _step_program(tmp_path, {"TORCHTPU_CPU_ATTENTION_KERNEL": "0"})
    from torchtpu.testing import hlo_dump
    # [batch, heads, 24 queries, 24 keys] (the model repeats its kv heads itself)
    scores = [d for d in hlo_dump.dots(step) if len(d.out) >= 3 and d.out[-2:] == (24, 24)]
    assert len(scores) == 2 * build_model("llama", "tiny").args.n_layers, scores


def _step_program(tmp_path, env):
    """The tiny llama's whole training step, as the plugin optimized it."""
    import os

    from torchtpu.testing import hlo_dump

    env = dict(env, TORCHTPU_CACHE_DIR=str(tmp_path / "cache"))
    out = hlo_dump.run_dumping(["-c", _SCORES_CHILD], tmp_path / "dump", flags="", env=env,
                               timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return max(hlo_dump.optimized_modules(tmp_path / "dump"), key=os.path.getsize)


@pytest.mark.skipif(not torchtpu.runtime_info()["cpu_attention_kernel"],
                    reason="our C attention kernel runs on XLA's CPU plugin, x86-64 with AVX2")
def test_attention_is_one_kernel_call_each_way(tmp_path):
    """On the CPU plugin the whole step's attention is our C kernel: one
    custom call forward and one backward per layer, no score-shaped product
    left to XLA, and no transpose to the kernel's [batch, seq, heads, dim]
    operands (XLA cancels it against the model's own transpose)."""
    from torchtpu.testing import hlo_dump

    step = _step_program(tmp_path, {})
    text = open(step).read()
    n_layers = build_model("llama", "tiny").args.n_layers
    assert text.count('custom_call_target="torchtpu_c_kernel"') == 2 * n_layers
    assert [d for d in hlo_dump.dots(step) if len(d.out) >= 3 and d.out[-2:] == (24, 24)] == []
    # [2 sequences, 24 tokens, 4 heads, 16] or [2, 4, 24, 16]: q, k, v, o, dO, dq, dk, dv
    moved = re.findall(r"= f32\[(?:2,24,4,16|2,4,24,16)\]\{[0-9,]*\} (?:transpose|copy)\(", text)
    assert moved == []


def test_bad_combinations_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="implementation = 'fused'"):
        config(tmp_path, training={"compile_mode": "step"},
               optimizer={"implementation": "fused"})
    with pytest.raises(ConfigError, match="compile_mode = 'whole'"):
        config(tmp_path, training={"compile_mode": "whole"})
    with pytest.raises(ConfigError, match="runs on the tpu device"):
        config(tmp_path, training={"compile_mode": "step", "device": "cpu"})
    cfg = config(tmp_path, training={"compile_mode": "step"})
    assert cfg["training"]["compile"] is True  # step implies compile
    model = build_model("llama", "tiny").to("tpu")
    from torchtpu.trainer.parallel import Parallel
    adamw = torch.optim.AdamW(model.parameters())
    with pytest.raises(ValueError, match="needs parallelism.fsdp = 'simple'"):
        WholeStep(model, adamw, cfg, "tpu", Parallel(world=2, shard=2))  # FSDP2
    for opt, what in ((torch.optim.Adagrad(model.parameters()), "Adagrad is not supported"),
                      (torch.optim.AdamW(model.parameters(), amsgrad=True), "with amsgrad")):
        with pytest.raises(ValueError, match=what):
            WholeStep(model, opt, cfg, "tpu")


def test_ddp_two_ranks_segments_match_single_process(tmp_path):
    """Replicate 2: forward+backward program, host all_reduce, optimizer
    program; the losses are one process's on the global batch."""
    import os

    from torchtpu.testing.multiprocess import run as run_ranks

    here = os.path.dirname(os.path.abspath(__file__))
    env = {"PYTHONPATH": os.pathsep.join([os.path.dirname(here), here,
                                          os.environ.get("PYTHONPATH", "")]),
           "TORCHTPU_FALLBACK": "silent"}
    par = {"data_parallel_replicate_degree": 2, "data_parallel_shard_degree": 1}
    cfg = config(tmp_path / "ddp", flavor="tiny", steps=5,
                 training={"compile_mode": "step"}, parallelism=par)
    results = run_ranks("graph_step_workers:train", 2, timeout=420, env=env, args={"cfg": cfg})
    single = run(config(tmp_path / "one", flavor="tiny", steps=5,
                        training={"local_batch_size": 4}))
    for r in results:
        assert r["world"] == 2
        ws = r["whole_step"]
        assert ws["segments"] == 2 and ws["compiles_after_step2"] == 0, ws
        got = {int(k): v for k, v in r["losses"].items()}
        assert_close_per_step(single["losses"], got)


def test_simple_fsdp_two_ranks_whole_step_matches_one_process(tmp_path):
    """SimpleFSDP (shard 2): the traced step all-gathers the shards,
    reduce-scatters the gradients and all-reduces the grad norm's squares;
    on the host transport it runs as program segments between those
    collectives, each replayed from step 3 on. Losses and grad norms
    (clipping active) are one eager process's on the global batch. The tiny
    llama: on this 2-core host a 2-rank launch tracing and compiling the
    debug model's step takes over two minutes, the tiny MoE's about two
    (both agree the same way, run by hand: see the branch's report)."""
    import os

    from torchtpu.testing.multiprocess import run as run_ranks

    here = os.path.dirname(os.path.abspath(__file__))
    env = {"PYTHONPATH": os.pathsep.join([os.path.dirname(here), here,
                                          os.environ.get("PYTHONPATH", "")]),
           "TORCHTPU_FALLBACK": "silent"}
    steps = SIMPLE_FSDP_STEPS
    # parallelism.fsdp left at "auto": compile_mode = "step" picks SimpleFSDP
    par = {"data_parallel_shard_degree": 2}
    models = ("llama",)
    # an odd vocabulary: the embedding and output rows split 133 + 132, so
    # the collectives run on padded chunks (Shard(0) splits as torch.chunk)
    model = {"vocab_size": 265}
    cfgs = {m: config(tmp_path / m, m, flavor="tiny", steps=steps, model=model,
                      training={"compile_mode": "step"}, parallelism=par) for m in models}
    results = run_ranks("graph_step_workers:train", 2, timeout=600, env=env,
                        args={"cfgs": cfgs})
    for m in models:
        single = run(config(tmp_path / f"one_{m}", m, flavor="tiny", steps=steps, model=model,
                            training={"local_batch_size": 4}))
        for r in results:
            got = r[m]
            assert got["world"] == 2
            ws = got["whole_step"]
            # [casts] all-gather [forward, backward] reduce-scatter [norm] all-reduce [update]
            assert ws["segments"] == 4, ws
            assert ws["compiles_after_step2"] == 0, ws
            assert ws["replays_after_step2"] == ws["segments"] * (steps - 2), ws
            assert ws["programs_per_step"] >= ws["segments"], ws
            for kind in ("losses", "grad_norms"):
                assert_close_per_step(single[kind], {int(k): v for k, v in got[kind].items()})
        log = results[0][m]["log"]
        assert any("4 device segments around the host collectives" in line
                   for line in log), log
        assert any("parallelism.fsdp = auto: SimpleFSDP" in line for line in log), log


def test_resume_continues_with_the_same_losses(tmp_path):
    """The state the program writes in place is what checkpoints save: a run
    resumed at step 2 continues with the uninterrupted run's losses."""
    ck = {"enable": True, "interval": 2, "keep_latest_k": 0}
    step = {"compile_mode": "step"}

    def cfg(folder, steps, **extra):
        out = config(folder, flavor="tiny", steps=4, training=step,
                     checkpoint=dict(ck, **extra))
        out["training"]["steps"] = steps  # the same schedule (warmup 4) in every run
        return out

    full = run(cfg(tmp_path / "full", 4))
    first = run(cfg(tmp_path / "part", 2))
    assert first["losses"] == {s: full["losses"][s] for s in (1, 2)}
    resumed = run(cfg(tmp_path / "part", 4, resume=True))
    assert resumed["losses"][3] == full["losses"][3]
    assert resumed["losses"][4] == full["losses"][4]
    for pf, pr in zip(full["model"].parameters(), resumed["model"].parameters()):
        assert torch.equal(pf.detach().cpu(), pr.detach().cpu())
