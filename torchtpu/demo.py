"""A short training run on the "tpu" device: the README's main job until the
language-model trainer lands.

    python -m torchtpu.demo [--steps 300]

Trains a small MLP classifier on a synthetic, seeded task (nothing is
downloaded), printing loss and throughput, then checks the first steps
against the same run on the CPU.
"""
import argparse
import copy
import time

import torch
import torch.nn as nn

import torchtpu


def make_task(n=512, d=32, classes=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, d, generator=g) * 2
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, d, generator=g)
    return x, y


def train(model, x, y, device, steps, log_every=0):
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if log_every and (step % log_every == 0 or step == 1):
            value = loss.item()
            dt = time.perf_counter() - t0
            print(f"step {step:4d}  loss {value:.4f}  "
                  f"{step * x.shape[0] / dt:9.0f} samples/s  "
                  f"mem {torch.tpu.memory_allocated() / 1024:.0f} KiB")
        losses.append(loss)
    return [l.item() for l in losses]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=300)
    a = p.parse_args()
    info = torchtpu.runtime_info()
    print(f"torchtpu on {info['platform']} ({info['device_kind']}), "
          f"plugin {info['plugin_path']}")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128),
                          nn.ReLU(), nn.Linear(128, 8))
    x, y = make_task()
    losses = train(copy.deepcopy(model), x, y, "tpu", a.steps, log_every=50)
    ref = train(copy.deepcopy(model), x, y, "cpu", 10)
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses[:10], ref))
    stats = torch.tpu._get_cache_stats()
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}; first 10 steps vs CPU: "
          f"max relative difference {worst:.2e}")
    print(f"compiled {stats['compiles']} programs in {stats['compile_seconds']:.1f} s; "
          f"fallback ops: {torchtpu.fallback_counts() or 'none'}")


if __name__ == "__main__":
    main()
