"""Attention forward + backward on XLA's CPU plugin: our C kernel against
the StableHLO lowering and PyTorch's own CPU flash kernel, in one run.

    python bench/attention_cpu.py [--batch 4] [--heads 16] [--kv-heads 16]
                                  [--seq 128] [--head-dim 16] [--rounds 21]

The default shape is the llama debug model's attention (bench/train_step.py's
default batch and sequence), causal. Each path runs
F.scaled_dot_product_attention forward and backward on the same inputs:

- "tpu kernel": torch.compile(backend="tpu") of forward + backward; on the
  CPU plugin attention without a mask is our C kernel
  (core/src/kernels/cpu_attention.c), one custom call each way;
- "tpu stablehlo": the same in a child process started with
  TORCHTPU_CPU_ATTENTION_KERNEL=0 (attention lowers to XLA's own ops, as on
  TPU and GPU plugins; the setting is read when the runtime starts);
- "cpu flash": PyTorch CPU eager (its flash-attention CPU kernel, the one
  Inductor calls too).

The in-process paths take turns, one call each per round (this host's speed
drifts); the child runs the same rounds of its path and of "cpu flash",
and its ratio is to its own cpu figure. Prints ms per forward + backward
(median) and each tpu path's speed relative to "cpu flash" (>1 is faster).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def make_inputs(a):
    g = torch.Generator().manual_seed(0)
    mk = lambda h, d: torch.randn(a.batch, h, a.seq, d, generator=g)  # noqa: E731
    return (mk(a.heads, a.head_dim), mk(a.kv_heads, a.head_dim), mk(a.kv_heads, a.head_dim),
            mk(a.heads, a.head_dim))


def attention(q, k, v, go):
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                       enable_gqa=q.shape[1] != k.shape[1])
    return torch.autograd.grad(o, (q, k, v), go)


def paths(a):
    """name -> a call that runs forward + backward once and waits for it."""
    import torchtpu  # noqa: F401
    q, k, v, go = make_inputs(a)
    cpu = [t.clone().requires_grad_(i < 3) for i, t in enumerate((q, k, v, go))]
    tpu = [t.to("tpu").requires_grad_(i < 3) for i, t in enumerate((q, k, v, go))]
    compiled = torch.compile(attention, backend="tpu")

    def run_tpu():
        out = compiled(*tpu)
        torch.tpu.synchronize()
        return out

    return {"tpu": run_tpu, "cpu flash": lambda: attention(*cpu)}


def timed_rounds(fns, rounds):
    for fn in fns.values():  # warm up: compile, first-touch
        for _ in range(3):
            fn()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {name: statistics.median(ts) for name, ts in times.items()}


def child(a):
    import torchtpu
    ms = timed_rounds(paths(a), a.rounds)
    ms["kernel"] = torchtpu.runtime_info()["cpu_attention_kernel"]
    print(json.dumps(ms))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a)
    args = [sys.executable, os.path.abspath(__file__), "--child"] + sys.argv[1:]
    results = {}
    for kernel in ("1", "0"):
        env = dict(os.environ, TORCHTPU_CPU_ATTENTION_KERNEL=kernel)
        out = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
        results[kernel] = json.loads(out.stdout.strip().splitlines()[-1])
    on, off = results["1"], results["0"]
    print(f"causal attention forward + backward: batch {a.batch}, heads {a.heads} "
          f"(kv {a.kv_heads}), seq {a.seq}, head dim {a.head_dim}, float32; median of "
          f"{a.rounds} rounds; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if not on["kernel"]:
        print("note: the C kernel is not in use here (not XLA's CPU plugin on x86-64 with "
              "AVX2 and FMA): both tpu rows are the StableHLO lowering")
    print(f"{'path':28s} {'ms':>8s} {'vs cpu flash':>13s}")
    for name, r in (("tpu kernel", on), ("tpu stablehlo", off)):
        print(f"{name:28s} {r['tpu']:8.2f} {r['cpu flash'] / r['tpu']:12.2f}x")
    print(f"{'cpu flash (PyTorch eager)':28s} {on['cpu flash']:8.2f} {1.0:12.2f}x")
    speedup = (on["cpu flash"] / on["tpu"]) / (off["cpu flash"] / off["tpu"])
    print(f"tpu kernel vs tpu stablehlo: {off['tpu'] / on['tpu']:.2f}x by their ms (two "
          f"processes, one after the other), {speedup:.2f}x by their ratios to their own "
          "process's cpu flash")


if __name__ == "__main__":
    main()
