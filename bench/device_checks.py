"""What device-side checks cost: the same loops with checks on and off
(torchtpu.set_device_checks), in one run, and their ratio.

    python bench/device_checks.py [--iters 500] [--steps 20] [--repeat 3]

Loops (strict eager unless named), each ending in one synchronisation:
  index_select  x.index_select(0, idx) on a [1024, 64] table
  embedding     F.embedding(tokens [8, 32], weight [1000, 64])
  gather        x.gather(1, idx) on [256, 64]
  floor_divide  integer a // b on [4096]
  train step    embedding -> linear -> cross_entropy, backward, SGD (strict
                and fused eager; loss.item() each step)
Each check adds a small output per program and one 16-byte read per flag at
the next synchronisation; "reads" is the flags read per loop. On a machine
without a TPU, "tpu" is XLA's CPU plugin.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu
from torchtpu import _core

DEV = "tpu"


def op_loops(iters):
    g = torch.Generator().manual_seed(0)
    table = torch.randn(1024, 64, generator=g).to(DEV)
    idx = torch.randint(0, 1024, (128,), generator=g).to(DEV)
    weight = torch.randn(1000, 64, generator=g).to(DEV)
    tokens = torch.randint(0, 1000, (8, 32), generator=g).to(DEV)
    x = torch.randn(256, 64, generator=g).to(DEV)
    gidx = torch.randint(0, 64, (256, 8), generator=g).to(DEV)
    a = torch.randint(-1000, 1000, (4096,), generator=g).to(DEV)
    b = torch.randint(1, 50, (4096,), generator=g).to(DEV)
    return {
        "index_select": lambda: [table.index_select(0, idx) for _ in range(iters)],
        "embedding": lambda: [F.embedding(tokens, weight) for _ in range(iters)],
        "gather": lambda: [x.gather(1, gidx) for _ in range(iters)],
        "floor_divide": lambda: [a // b for _ in range(iters)],
    }


def train_loop(steps, mode):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(1000, 64), nn.Flatten(), nn.Linear(64 * 16, 1000)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tokens = torch.randint(0, 1000, (16, 16)).to(DEV)
    target = torch.randint(0, 1000, (16,)).to(DEV)

    def run():
        with torchtpu.mode(mode):
            for _ in range(steps):
                opt.zero_grad()
                loss = F.cross_entropy(model(tokens), target)
                loss.backward()
                opt.step()
                loss.item()
    return run


def timed(fn, repeat):
    fn()  # warm-up: compiles
    torch.tpu.synchronize()
    best = float("inf")
    reads = 0
    for _ in range(repeat):
        r0 = _core.stats()["device_check_reads"]
        t0 = time.perf_counter()
        fn()
        torch.tpu.synchronize()
        best = min(best, time.perf_counter() - t0)
        reads = _core.stats()["device_check_reads"] - r0
    return best, reads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    loops = op_loops(args.iters)
    loops["train step (strict)"] = train_loop(args.steps, "strict")
    loops["train step (fused)"] = train_loop(args.steps, "fused")
    print(f"device: {torch.tpu.get_device_name(0) if hasattr(torch.tpu, 'get_device_name') else DEV}; "
          f"{args.iters} ops per loop, {args.steps} train steps; best of {args.repeat}")
    print(f"{'loop':24s} {'checks on':>11s} {'checks off':>11s} {'on/off':>7s} {'reads':>6s}")
    for name, fn in loops.items():
        torchtpu.set_device_checks(True)
        on, reads = timed(fn, args.repeat)
        torchtpu.set_device_checks(False)
        off, _ = timed(fn, args.repeat)
        torchtpu.set_device_checks(True)
        print(f"{name:24s} {on * 1e3:9.1f}ms {off * 1e3:9.1f}ms {on / off:7.2f} {reads:6d}")


if __name__ == "__main__":
    main()
