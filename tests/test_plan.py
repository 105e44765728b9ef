"""--dry-run (torchtpu/trainer/plan.py) and the recipes: every recipe loads and
plans on the meta device; parameter counts match real models and the
published sizes; memory figures follow the parallelism degrees and the
activation-checkpointing mode; the activation formula agrees with the tensors
autograd actually saves (counted on the CPU)."""
import glob
import os
import subprocess
import sys

import pytest
import torch

from torchtpu.models import build_model, num_params
from torchtpu.trainer.config import load_config
from torchtpu.trainer import plan as P

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "torchtpu", "configs")
RECIPES = ["llama3_8b.toml", "llama3_70b.toml", "qwen3_30b_a3b.toml"]


def _cfg(**sections):
    return load_config(overrides=sections)


@pytest.mark.parametrize("name", sorted(os.path.basename(p)
                                        for p in glob.glob(os.path.join(CONFIGS, "*.toml"))))
def test_every_config_loads_and_plans(name):
    cfg = load_config(os.path.join(CONFIGS, name))
    lines = []
    p = P.dry_run(cfg, log=lines.append)
    assert p["params"] > 0 and p["flops_per_token"] > 0 and p["memory"]["total"] > 0
    assert "parameters:" in lines[0] and "memory per rank" in lines[0]


@pytest.mark.parametrize("name", RECIPES)
def test_recipes_are_pod_jobs(name):
    cfg = load_config(os.path.join(CONFIGS, name))
    t = cfg["training"]
    assert t["mixed_precision"] == "bfloat16" and t["seq_len"] == 8192
    assert cfg["activation_checkpoint"]["mode"] != "none"
    assert cfg["metrics"]["peak_flops"] == 459e12
    p = P.plan(cfg)
    assert p["world"] >= 64
    # the plan fits a v5p chip's 95 GiB of HBM
    assert p["memory"]["total"] < 95 * 2 ** 30, p["memory"]


def test_dry_run_command_touches_no_device():
    code = ("import sys, torch; from torchtpu.train import main; "
            "main(sys.argv[1:]); assert not torch.tpu.is_initialized(), 'device started'")
    for flag in ("--dry-run", "--dry_run"):
        out = subprocess.run(
            [sys.executable, "-c", code, "--config", os.path.join(CONFIGS, "llama3_70b.toml"),
             flag, "--parallelism.tensor_parallel_degree", "8",
             "--parallelism.data_parallel_shard_degree", "16", "--mfu", "0.4"],
            capture_output=True, text=True, timeout=300,
            env=dict(os.environ, PYTHONPATH=ROOT))
        assert out.returncode == 0, out.stderr
        assert "70,553,706,496" in out.stdout
        assert "world 128 = replicate 1 x shard 16 x tensor 8" in out.stdout
        assert "MFU  40.0%" in out.stdout


@pytest.mark.parametrize("name,flavor", [("llama", "tiny"), ("llama", "debugmodel"),
                                         ("moe", "tiny"), ("moe", "debugmodel")])
def test_meta_count_equals_real_model(name, flavor):
    cfg = _cfg(model={"name": name, "flavor": flavor})
    p = P.plan(cfg)
    real = build_model(name, flavor)
    assert p["params"] == num_params(real)
    assert p["non_embedding"] == num_params(real, exclude_embedding=True)
    if name == "moe":
        assert p["active"] == real.active_params() < p["non_embedding"]


def test_published_sizes():
    p8 = P.plan(_cfg(model={"name": "llama", "flavor": "8B"}))
    assert abs(p8["params"] - 8.03e9) / 8.03e9 < 0.002  # Llama 3 8B: 8.03e9
    p70 = P.plan(_cfg(model={"name": "llama", "flavor": "70B"}))
    assert abs(p70["params"] - 70.6e9) / 70.6e9 < 0.002  # Llama 3 70B: 70.6e9
    q = P.plan(_cfg(model={"name": "moe", "flavor": "30B-A3B"}))
    assert abs(q["params"] - 30.5e9) / 30.5e9 < 0.005  # Qwen3-30B-A3B: 30.5e9 total
    emb = 151936 * 2048
    assert abs(q["active"] + emb - 3.3e9) / 3.3e9 < 0.03  # 3.3e9 used per token


def test_memory_scales_with_shard_degree():
    base = dict(model={"name": "llama", "flavor": "8B"},
                training={"mixed_precision": "bfloat16", "seq_len": 8192, "local_batch_size": 1})
    m8 = P.plan(_cfg(parallelism={"data_parallel_shard_degree": 8}, **base))["memory"]
    m32 = P.plan(_cfg(parallelism={"data_parallel_shard_degree": 32}, **base))["memory"]
    for key in ("parameters", "gradients", "optimizer"):
        assert m8[key] == pytest.approx(4 * m32[key], rel=1e-9)
    # AdamW: two float32 moments per parameter, parameters and gradients float32
    assert m8["optimizer"] == pytest.approx(2 * m8["parameters"])
    n = P.plan(_cfg(**base))["params"]
    assert m8["parameters"] == pytest.approx(4 * n / 8)
    # replication shards nothing; TP splits the block weights only
    rep = P.plan(_cfg(parallelism={"data_parallel_replicate_degree": 4,
                                   "data_parallel_shard_degree": 8}, **base))
    assert rep["world"] == 32 and rep["memory"]["parameters"] == m8["parameters"]
    tp = P.plan(_cfg(parallelism={"tensor_parallel_degree": 4,
                                  "data_parallel_shard_degree": 8}, **base))["memory"]
    assert m8["parameters"] / 4 < tp["parameters"] < m8["parameters"]
    assert tp["activations"] < m8["activations"]


def test_activation_memory_drops_with_checkpointing():
    def act(mode, option="2"):
        return P.plan(_cfg(model={"name": "llama", "flavor": "8B"},
                           training={"mixed_precision": "bfloat16", "seq_len": 8192,
                                     "local_batch_size": 1},
                           activation_checkpoint={"mode": mode,
                                                  "selective_ac_option": option}))["activations"]
    none, full, sel2, op = act("none"), act("full"), act("selective"), act("selective", "op")
    assert full["blocks"] < op["blocks"] < none["blocks"]
    assert full["blocks"] < sel2["blocks"] < none["blocks"]
    assert full["total"] < sel2["total"] < none["total"]
    assert full["blocks"] * 8 < none["blocks"]
    assert none["recompute"] == 0 < full["recompute"]
    # the activations scale with the tokens of a micro-batch
    two = P.plan(_cfg(model={"name": "llama", "flavor": "8B"},
                      training={"mixed_precision": "bfloat16", "seq_len": 8192,
                                "local_batch_size": 2}))["activations"]
    assert two["blocks"] == pytest.approx(2 * none["blocks"])


def test_mfu_and_tokens_per_second_agree():
    cfg = _cfg(model={"name": "llama", "flavor": "8B"}, metrics={"peak_flops": 459e12},
               parallelism={"data_parallel_shard_degree": 64}, training={"seq_len": 8192})
    need = P.plan(cfg, mfu=0.4)["throughput"][0]
    assert need["mfu"] == 0.4
    back = P.plan(cfg, tokens_per_second=need["tokens_per_second"])["throughput"][0]
    assert back["mfu"] == pytest.approx(0.4)
    # MFU = FLOPs per token x tokens/s / (peak x chips)
    p = P.plan(cfg)
    assert need["tokens_per_second"] == pytest.approx(0.4 * 459e12 * 64 / p["flops_per_token"])


def _saved_bytes_per_token(name, flavor, dtype, b=2, s=48):
    """Bytes autograd saves for the backward of block 0 (per token), counted
    with saved-tensor hooks on the CPU: parameters, their autocast copies, the
    RoPE tables and the block's input excluded (the formula counts those
    elsewhere)."""
    torch.manual_seed(0)
    model = build_model(name, flavor)
    block = model.layers[0]
    x = torch.randn(b, s, model.args.dim, requires_grad=True)
    skip = {p.untyped_storage().data_ptr() for p in model.parameters()}
    skip |= {model.rope_cos.untyped_storage().data_ptr(),
             model.rope_sin.untyped_storage().data_ptr(), x.untyped_storage().data_ptr()}
    weight_shapes = set()  # autocast's bf16 weight copies (96 tokens match no weight)
    if dtype == "bfloat16":
        weight_shapes = {tuple(p.shape) for p in model.parameters()}
        weight_shapes |= {tuple(reversed(sh)) for sh in weight_shapes}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip and tuple(t.shape) not in weight_shapes:
            seen[st.data_ptr()] = st.nbytes()
        return t

    ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bfloat16"
           else torch.autocast("cpu", enabled=False))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx:
        block(x, model.rope_cos[:s], model.rope_sin[:s])
    return sum(seen.values()) / (b * s), model


@pytest.mark.parametrize("name,dtype", [("llama", "float32"), ("llama", "bfloat16"),
                                        ("moe", "float32")])
def test_activation_formula_matches_saved_tensors(name, dtype):
    measured, model = _saved_bytes_per_token(name, "debugmodel", dtype)
    e = 2 if dtype == "bfloat16" else 4
    estimate = P.block_activation_bytes(model.args, name == "moe", e)
    assert abs(estimate - measured) / measured < 0.10, (estimate, measured)


def test_bad_degrees_and_modes_are_errors():
    with pytest.raises(ValueError, match="degrees must be >= 1"):
        P.plan(_cfg(parallelism={"tensor_parallel_degree": 0}))
    cfg = _cfg()
    cfg["activation_checkpoint"]["mode"] = "sometimes"
    with pytest.raises(ValueError, match="activation_checkpoint.mode"):
        P.plan(cfg)
