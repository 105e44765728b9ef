"""A training step of a small Llama-style model in strict eager and in fused
eager (TORCH_TPU_DEFER_AND_FUSE), in one run with their steps interleaved:
tokens/s and CPU time of each, their ratio, and what each does per step
after warm-up (compiles, ops lowered or replayed from the recorded trace,
programs launched, fused flushes).

    python bench/fused_vs_strict.py [--flavor tiny] [--batch 4] [--seq 64]
                                    [--warmup 4] [--steps 10] [--fuse-limit N]

Each step is forward, cross-entropy loss, backward, SGD(momentum) update
and loss.item() (which ends the step's graph in fused mode). Uses
torchtpu.models.llama when present, else a self-contained transformer
block stack defined here. On a machine without a TPU, "tpu" is XLA's CPU
plugin: the ratio measures what fusing a step into one program saves there
(dispatch, launches, intermediate buffers), not accelerator speed.
"""
import argparse
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu


# --- the model -------------------------------------------------------------------------

class Block(nn.Module):
    """Pre-norm attention (causal, hand-written) + a SwiGLU MLP."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.w1, self.w3 = nn.Linear(dim, 4 * dim, bias=False), nn.Linear(dim, 4 * dim, bias=False)
        self.w2 = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5 + mask
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(y)
        h = self.norm2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class SmallLM(nn.Module):
    def __init__(self, vocab=512, dim=128, layers=2, heads=4, seq=256):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm, self.out = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1))

    def forward(self, tokens):
        s = tokens.shape[1]
        x = self.emb(tokens)
        for blk in self.blocks:
            x = blk(x, self.mask[:s, :s])
        return self.out(self.norm(x))


def build_model(flavor, vocab=512):
    """(model, description, vocabulary size)."""
    try:
        from torchtpu.models.llama import Transformer, llama_args
    except ImportError:
        return SmallLM(vocab=vocab), f"self-contained SmallLM (vocab {vocab})", vocab
    args = llama_args(flavor, dropout=0.0)
    return (Transformer(args), f"torchtpu.models.llama '{flavor}' (vocab {args.vocab_size})",
            args.vocab_size)


# --- the runs ----------------------------------------------------------------------------

def make_step(mode, model_cpu, tokens_cpu, accum):
    """A step function running in `mode`, on its own copy of the model."""
    import copy
    with torchtpu.mode(mode):
        torch.manual_seed(0)
        model = copy.deepcopy(model_cpu).to("tpu")
        tokens = tokens_cpu.to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)

    def step():
        with torchtpu.mode(mode):
            opt.zero_grad()
            for _ in range(accum):
                logits = model(tokens[:, :-1])
                loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
                (loss / accum).backward()
            opt.step()
            return loss.item()
    return step


def counters():
    f = torchtpu.modes.fused_stats()
    return {"compiles": torch.tpu._get_cache_stats()["compiles"], "graphs": f["graphs"],
            "ops": f["ops"], "lowered": f["lowered_ops"], "replayed": f["replayed_ops"],
            "splits": f["bound_splits"]}


def run(model_cpu, tokens_cpu, warmup, steps, accum=1):
    """Strict and fused steps interleaved (strict, fused, strict, ...) so that
    both see the same host load: on a shared machine a block of one mode
    and then a block of the other measures the load's drift, not the
    modes. Per mode: the median wall and process-CPU time of a step (CPU
    time counts every thread of the process, the plugin's too, and is what
    a busy host inflates least), the counters' change per timed step and
    the programs one step launches."""
    from torchtpu.trainer.graph_step import programs_during

    modes = ("strict", "fused")
    fns = {m: make_step(m, model_cpu, tokens_cpu, accum) for m in modes}
    losses = {m: [fns[m]() for _ in range(warmup)] for m in modes}
    # Strict eager's host tier compiles programs in the background
    # (torchtpu.set_host_tier): the steady state is the one with all of them
    # ready, and the step after the wait takes them in.
    torchtpu.wait_compiles()
    for m in modes:
        losses[m].append(fns[m]())
    torch.tpu.synchronize()
    wall = {m: [] for m in modes}
    cpu = {m: [] for m in modes}
    delta = {m: {} for m in modes}
    for _ in range(steps):
        for m in modes:
            c0, t0, p0 = counters(), time.perf_counter(), time.process_time()
            losses[m].append(fns[m]())
            wall[m].append(time.perf_counter() - t0)
            cpu[m].append(time.process_time() - p0)
            c1 = counters()
            for k in c1:
                delta[m][k] = delta[m].get(k, 0) + c1[k] - c0[k]
    ntok = tokens_cpu.shape[0] * (tokens_cpu.shape[1] - 1) * accum
    res = {}
    for m in modes:
        med = sorted(wall[m])[steps // 2]
        loss, programs = programs_during(fns[m])
        losses[m].append(loss)
        res[m] = {"tok_s": ntok / med, "ms_step": 1e3 * med,
                  "cpu_ms_step": 1e3 * sorted(cpu[m])[steps // 2],
                  "programs_per_step": programs,
                  **{k + "_per_step": v / steps for k, v in delta[m].items()},
                  "losses": losses[m]}
    f = torchtpu.modes.fused_stats()
    res["fused"]["last_graph"] = (f["last_graph_ops"], f["last_graph_params"],
                                  f["last_graph_outputs"], f["last_graph_bytes"])
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--flavor", default="tiny")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--accum", type=int, default=1,
                   help="micro-batches per step (gradient accumulation): more small ops "
                        "per step (--accum 4 on 'tiny': about 1,150 ops)")
    p.add_argument("--fuse-limit", type=int, default=0,
                   help="ops per fused graph (0: the default bound); a smaller graph "
                        "runs while the rest of the step is recorded")
    a = p.parse_args()
    warnings.simplefilter("ignore")  # CPU-fallback warnings are counted below
    torchtpu.modes.set_fuse_limit(max_ops=a.fuse_limit or None)

    torch.manual_seed(0)
    model, what, vocab = build_model(a.flavor)
    tokens = torch.randint(0, vocab, (a.batch, a.seq + 1), generator=torch.Generator().manual_seed(0))

    res = run(model, tokens, a.warmup, a.steps, a.accum)
    s, f = res["strict"], res["fused"]
    info = torchtpu.runtime_info()
    print(f"{what}; batch {a.batch} x seq {a.seq} x {a.accum} micro-batch(es); "
          f"{a.warmup} warm-up + {a.steps} timed steps, the modes interleaved (median); "
          f"tpu = {info['platform']} plugin")
    print(f"{'mode':<8}{'tokens/s':>10}{'ms/step':>9}{'cpu ms':>8}{'compiles':>10}"
          f"{'lowered':>9}{'replayed':>10}{'programs':>10}{'flushes':>9}   (per step)")
    for m in ("strict", "fused"):
        r = res[m]
        print(f"{m:<8}{r['tok_s']:>10.0f}{r['ms_step']:>9.1f}{r['cpu_ms_step']:>8.1f}"
              f"{r['compiles_per_step']:>10.2f}{r['lowered_per_step']:>9.1f}"
              f"{r['replayed_per_step']:>10.0f}{r['programs_per_step']:>10d}"
              f"{r['graphs_per_step']:>9.1f}")
    print(f"fused / strict: tokens/s {f['tok_s'] / s['tok_s']:.2f}x, "
          f"CPU time per step {s['cpu_ms_step'] / f['cpu_ms_step']:.2f}x less")
    ops, params, outs, nbytes = f["last_graph"]
    print(f"fused: {f['ops_per_step']:.0f} ops/step, {f['splits_per_step']:.1f} bound splits/step; "
          f"last graph {ops} ops, {params} params, {outs} outputs, {nbytes / 1e3:.0f} kB of StableHLO")
    worst = max(abs(x - y) / abs(x) for x, y in zip(s["losses"], f["losses"]))
    print(f"loss strict {s['losses'][-1]:.6f} fused {f['losses'][-1]:.6f} "
          f"(max relative difference over {len(s['losses'])} steps {worst:.1e})")
    fb = torchtpu.fallback_counts()
    if fb:
        print("CPU-fallback ops (each one ends a fused graph): " +
              ", ".join(f"{k} x{v}" for k, v in sorted(fb.items())))


if __name__ == "__main__":
    main()
