"""--dry-run: what a configured job needs, from the config alone, in seconds.

    python -m torchtpu.train --config torchtpu/configs/llama3_70b.toml --dry-run \\
        [--parallelism.tensor_parallel_degree 8] [--metrics.peak_flops 459e12] \\
        [--tokens-per-second 1e6 | --mfu 0.4]

The model is built on the meta device (shapes, no memory, no device touched)
and the report says:

- parameters: total, non-embedding, and for MoE the non-embedding ones a token
  uses (dense weights, router, top_k of n_experts experts);
- training FLOPs per token, the trainer's formula (models.flops_per_token);
- memory per rank, for the [parallelism] degrees (world size = their
  product; data_parallel_shard_degree = -1 is what WORLD_SIZE, or 1, leaves):
  parameters, gradients (both float32, as the trainer keeps them), optimizer
  state (AdamW / Adam: two float32 moments; SGD: one momentum), and the
  activations of one micro-batch below. FSDP shards all of them over
  data_parallel_shard_degree; TP splits the blocks' projection weights over
  tensor_parallel_degree (embeddings, norms and the head are replicated);
  replication shards nothing. FSDP also holds two blocks unsharded at a time
  (all-gather of the next one while one computes);
- the MFU a given tokens/s means, or the tokens/s a given MFU needs, against
  metrics.peak_flops per chip (e.g. 459e12: TPU v5p bf16).

Activation estimate, bytes per token of one block (b x s tokens per rank and
micro-batch), with d = dim, q = n_heads * head_dim, f = the SwiGLU width,
h = n_heads, e = 2 under bfloat16 autocast and 4 in float32:

    dense block  A = 4*(2d + 2)          RMSNorms' float32 inputs and rsqrt
                   + c*d                 normed inputs of wq, wk, wv, w1, w3:
                                         c = 4*2 in float32 (one per norm),
                                         2*5 under autocast (a bf16 copy each)
                   + e*(5q + 4f)         attention's q, k, v (kv heads repeated
                                         to q), output and wo's input; SwiGLU's
                                         w1 and w3 outputs, silu and product
                   + 4h                  attention's log-sum-exp
    MoE block    the attention part as above, and for the feed-forward, with k
                 = top_k, g = capacity_factor * top_k expert rows per token,
                 x = expert_hidden and E = n_experts:
                   + e*(3k*d + g*d + 4g*x) + 8E    gathered tokens and outputs,
                                         the expert buffer, the experts'
                                         SwiGLU, router probabilities

q, f (and x, h) are divided by tensor_parallel_degree (TP splits heads and
the hidden width; the d-sized terms stay whole). Under autocast each block
also keeps a bfloat16 copy of its weights for the backward (2 bytes per block
parameter / tp). For the float32 debug models the formula is within 10% of the
tensors autograd saves (tests/test_plan.py counts them).

Checkpointing ([activation_checkpoint]): a checkpointed block keeps only its
input (4d bytes per token, float32 residual stream); "full" checkpoints every
block, "selective" N every N-th; "op" keeps the matmul and attention outputs,
e*(q + 2kv + 2d + 2f) + e*q + 4h + 4d (kv = n_kv_heads * head_dim; MoE: the
expert matmuls' e*g*(2x + d) instead of e*2f). Whenever anything is
recomputed, one block's full activations exist at a time during the backward
(added once). Outside the blocks: the head, 12*V bytes per token (float32
logits, log-softmax and its gradient; V = vocab_size), and the embedding
output, 4d.

These are estimates for planning (XLA may fuse some tensors away, an
allocator rounds); the measured peak is in every trainer log line.
"""
import math
import os

import torch

from ..models import build_model, flops_per_token, num_params
from . import parallel
from .config import validate_activation_checkpoint

_TP_SPLIT = ("attention.wq", "attention.wk", "attention.wv", "attention.wo",
             "feed_forward.w1", "feed_forward.w2", "feed_forward.w3")


def meta_model(cfg):
    """The configured model on the meta device: shapes only, no memory, no
    device (the same flavour and vocab_size as the trainer builds)."""
    m = cfg["model"]
    overrides = {"vocab_size": m["vocab_size"]} if m["vocab_size"] else {}
    with torch.device("meta"):
        return build_model(m["name"], m["flavor"], **overrides)


def degrees(cfg):
    """(replicate, shard, tp, world) from [parallelism]; shard -1 is what
    WORLD_SIZE (default 1) leaves."""
    # not parallel.degrees: a plan may combine TP with FSDP and needs no ranks
    rep, shard, tp = parallel.read_degrees(cfg["parallelism"])
    if shard == -1:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        shard = max(1, world // (rep * tp))
    return rep, shard, tp, rep * shard * tp


def _param_split(model, tp):
    """(parameters per rank before FSDP, parameters of one block per rank):
    TP divides the blocks' projection weights (nn.Linear ones) by tp."""
    per_rank, block = 0, 0
    for name, p in model.named_parameters():
        split = (name.startswith("layers.") and name.split(".", 2)[2].startswith(_TP_SPLIT)
                 and p.dim() == 2)
        n = p.numel() / tp if split else p.numel()
        per_rank += n
        if name.startswith("layers.0."):
            block += n
    return per_rank, block


def block_activation_bytes(a, is_moe, e, tp=1):
    """Bytes per token one block keeps for the backward without checkpointing
    (the docstring's A)."""
    d, f, h = a.dim, a.ffn_hidden / tp, a.n_heads / tp
    q = a.n_heads * a.head_dim / tp
    c = 4 * 2 if e == 4 else 2 * 5
    shared = 4 * (2 * d + 2) + c * d + e * 5 * q + 4 * h
    if not is_moe:
        return shared + e * 4 * f
    k, x = a.top_k, a.expert_hidden / tp
    g = a.capacity_factor * k
    return shared + e * (3 * k * d + g * d + 4 * g * x) + 8 * a.n_experts


def op_activation_bytes(a, is_moe, e, tp=1):
    """Bytes per token one block keeps under op-level selective checkpointing:
    the outputs of its matmuls and of attention, and its input."""
    d, f, h = a.dim, a.ffn_hidden / tp, a.n_heads / tp
    q, kv = a.n_heads * a.head_dim / tp, a.kv_heads * a.head_dim / tp
    attn = e * (q + 2 * kv + d) + e * q + 4 * h + 4 * d
    if not is_moe:
        return attn + e * (2 * f + d)
    g = a.capacity_factor * a.top_k
    return attn + e * g * (2 * a.expert_hidden / tp + d) + 4 * a.n_experts


def activation_bytes(a, is_moe, tokens, e, ac, tp=1):
    """{"blocks", "recompute", "head", "total"}: bytes of the activations of
    one micro-batch of `tokens` tokens per rank, for [activation_checkpoint]
    `ac`."""
    validate_activation_checkpoint(ac)
    full = block_activation_bytes(a, is_moe, e, tp)
    kept = 4 * a.dim  # a checkpointed block's input
    n = a.n_layers
    mode, option = ac["mode"], ac["selective_ac_option"]
    if mode == "none":
        per_block = [full] * n
    elif mode == "full":
        per_block = [kept] * n
    elif option == "op":
        per_block = [op_activation_bytes(a, is_moe, e, tp)] * n
    else:
        every = int(option)
        per_block = [kept if (i + 1) % every == 0 else full for i in range(n)]
    recompute = full if mode != "none" else 0.0
    head = 12 * a.vocab_size + 4 * a.dim
    return {"blocks": tokens * sum(per_block), "recompute": tokens * recompute,
            "head": tokens * head,
            "total": tokens * (sum(per_block) + recompute + head)}


def plan(cfg, tokens_per_second=None, mfu=None):
    """The dry run's figures as a dict (see the module docstring)."""
    t, m = cfg["training"], cfg["model"]
    model = meta_model(cfg)
    a = model.args
    is_moe = hasattr(model, "active_params")
    rep, shard, tp, world = degrees(cfg)
    total = num_params(model)
    non_emb = num_params(model, exclude_embedding=True)
    active = model.active_params() if is_moe else non_emb
    flops_tok = flops_per_token(model, t["seq_len"])

    per_rank, block = _param_split(model, tp)
    local = per_rank / shard  # FSDP shards everything over data_parallel_shard_degree
    moments = {"adamw": 2, "adam": 2, "sgd": 1}[cfg["optimizer"]["name"].lower()]
    if moments == 1 and cfg["optimizer"]["momentum"] == 0:
        moments = 0
    bf16 = t["mixed_precision"] == "bfloat16"
    e = 2 if bf16 else 4
    gather_bytes = {"float32": 4, "bfloat16": 2}[t["mixed_precision_param"]]
    tokens = t["local_batch_size"] * t["seq_len"]
    act = activation_bytes(a, is_moe, tokens, e, cfg["activation_checkpoint"], tp)
    if bf16:  # autocast's bf16 weight copies, kept by every block not checkpointed
        ac = cfg["activation_checkpoint"]
        if ac["mode"] == "none":
            kept_blocks = a.n_layers
        elif ac["mode"] == "full" or ac["selective_ac_option"] == "op":
            kept_blocks = 1  # the block being recomputed
        else:
            kept_blocks = a.n_layers - a.n_layers // int(ac["selective_ac_option"]) + 1
        act["weight_copies"] = 2 * block * kept_blocks
        act["total"] += act["weight_copies"]
    mem = {"parameters": 4 * local, "gradients": 4 * local,
           "optimizer": 4 * moments * local,
           "fsdp_buffers": 2 * block * gather_bytes if shard > 1 else 0.0,
           "activations": act["total"]}
    mem["total"] = sum(mem.values())

    peak = cfg["metrics"]["peak_flops"]
    global_tokens = tokens * t["gradient_accumulation_steps"] * rep * shard
    out = {"model": f"{m['name']}/{m['flavor']}", "params": total, "non_embedding": non_emb,
           "active": active, "is_moe": is_moe, "flops_per_token": flops_tok,
           "replicate": rep, "shard": shard, "tp": tp, "world": world,
           "tokens_per_step": global_tokens, "memory": mem, "activations": act,
           "peak_flops": peak, "trainer_supports": _trainer_supports(cfg, rep, shard, tp, world)}
    if peak > 0:
        rows = []
        if tokens_per_second:
            rows.append((tokens_per_second, flops_tok * tokens_per_second / (peak * world)))
        for target in ([mfu] if mfu else ([] if tokens_per_second else [0.3, 0.4, 0.5])):
            rows.append((target * peak * world / flops_tok, target))
        out["throughput"] = [{"tokens_per_second": tps, "mfu": u,
                              "step_seconds": global_tokens / tps} for tps, u in rows]
    return out


def _trainer_supports(cfg, rep, shard, tp, world):
    """None, or why the trainer cannot run this layout today."""
    from . import parallel
    p = dict(cfg["parallelism"], data_parallel_shard_degree=shard)
    try:
        parallel.degrees(p, world)
    except ValueError as err:
        return str(err)
    if tp > 1 and cfg["model"]["name"] == "moe":
        return "tensor parallelism of the MoE experts is not supported yet"
    return None


def _gib(n):
    return f"{n / 2 ** 30:,.2f} GiB"


def _si(n):
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"


def format_plan(p, cfg):
    t, ac = cfg["training"], cfg["activation_checkpoint"]
    mem = p["memory"]
    ac_text = ac["mode"] + (f" ({ac['selective_ac_option']})" if ac["mode"] == "selective" else "")
    lines = [f"dry run: {p['model']} on the meta device (nothing allocated, no device used)",
             f"parameters: {p['params']:,} ({_si(p['params'])}) total, "
             f"{p['non_embedding']:,} non-embedding"
             + (f", {p['active']:,} ({_si(p['active'])}) active per token (non-embedding)"
                if p["is_moe"] else ""),
             f"FLOPs per token (training, seq {t['seq_len']}): {_si(p['flops_per_token'])}",
             f"parallelism: world {p['world']} = replicate {p['replicate']} x shard "
             f"{p['shard']} x tensor {p['tp']}; {p['tokens_per_step']:,} tokens per step "
             f"(batch {t['local_batch_size']} x seq {t['seq_len']} x accum "
             f"{t['gradient_accumulation_steps']} x dp {p['replicate'] * p['shard']})",
             f"memory per rank ({t['mixed_precision']}, activation checkpointing {ac_text}):",
             f"  parameters   {_gib(mem['parameters']):>14}  (float32)",
             f"  gradients    {_gib(mem['gradients']):>14}  (float32)",
             f"  optimizer    {_gib(mem['optimizer']):>14}  ({cfg['optimizer']['name']})"]
    if mem["fsdp_buffers"]:
        lines.append(f"  fsdp buffers {_gib(mem['fsdp_buffers']):>14}  (two blocks unsharded)")
    act = p["activations"]
    detail = (f"blocks {_gib(act['blocks'])}, recompute {_gib(act['recompute'])}, "
              f"head {_gib(act['head'])}"
              + (f", autocast weight copies {_gib(act['weight_copies'])}"
                 if "weight_copies" in act else ""))
    lines += [f"  activations  {_gib(mem['activations']):>14}  ({detail})",
              f"  total        {_gib(mem['total']):>14}"]
    if p.get("throughput"):
        lines.append(f"throughput at metrics.peak_flops {p['peak_flops']:.4g} FLOP/s per chip "
                     f"x {p['world']} chips:")
        for row in p["throughput"]:
            lines.append(f"  {row['tokens_per_second']:>14,.0f} tokens/s  =  MFU "
                         f"{100 * row['mfu']:5.1f}%  ({row['tokens_per_second'] / p['world']:,.0f}"
                         f" per chip, {row['step_seconds']:.2f} s per step)")
    else:
        lines.append("throughput: set --metrics.peak_flops (FLOP/s per chip) for MFU figures")
    if p["trainer_supports"]:
        lines.append(f"note: the trainer cannot run this layout yet: {p['trainer_supports']}")
    return "\n".join(lines)


def dry_run(cfg, tokens_per_second=None, mfu=None, log=print):
    """Prints the plan; returns its dict."""
    p = plan(cfg, tokens_per_second, mfu)
    log(format_plan(p, cfg))
    return p
