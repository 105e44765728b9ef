"""torch.tpu.graphs: microseconds per step of a small model, eager vs a
TPUGraph replay (torchtpu/graphs.py), in one run on the same device.

Rows: a training step of an MLP (forward, backward, SGD with momentum) and
its forward alone, each as
  eager    strict eager: one program per op
  fused    fused eager (torchtpu.mode("fused")): the step recorded and
           flushed as one program every call
  graph    the step captured once with torch.tpu.graph, then per call: the
           new batch copied into the static inputs (copy_) and g.replay()
Every call ends with torch.tpu.synchronize(), so each figure is the step's
whole time. The paths run interleaved, one call of each per round
(bench/step_timing.py), and each figure is the median of its rounds.

    python bench/graphs.py [--steps 200] [--width 256] [--batch 32]
"""
import argparse
import copy
import os
import sys

import torch

import torchtpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_timing import time_interleaved  # noqa: E402


def mlp(width, depth=4):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))


def train_paths(width, batch):
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(batch, width, generator=gen).to("tpu") for _ in range(4)]
    ys = [torch.randint(0, 10, (batch,), generator=gen).to("tpu") for _ in range(4)]
    state = {"i": 0}

    def make():
        m = mlp(width).to("tpu")
        opt = torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)

        def step(x, y):
            loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss
        return step

    def batch_of():
        state["i"] += 1
        return xs[state["i"] % 4], ys[state["i"] % 4]

    eager_step, fused_step, graph_step = make(), make(), make()

    def eager():
        state["loss"] = eager_step(*batch_of())
        torch.tpu.synchronize()

    def fused():
        with torchtpu.mode("fused"):
            state["loss"] = fused_step(*batch_of())
        torch.tpu.synchronize()

    static_x, static_y = xs[0].clone(), ys[0].clone()
    for _ in range(2):
        graph_step(static_x, static_y)  # compiles, makes the momentum buffers
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        graph_step(static_x, static_y)

    def graph():
        x, y = batch_of()
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        torch.tpu.synchronize()
    return {"eager": eager, "fused": fused, "graph": graph}


def forward_paths(width, batch):
    m = mlp(width).to("tpu").eval()
    gen = torch.Generator().manual_seed(2)
    xs = [torch.randn(batch, width, generator=gen).to("tpu") for _ in range(4)]
    state = {"i": 0}

    def x_of():
        state["i"] += 1
        return xs[state["i"] % 4]

    # Each path keeps its output, as a caller would: fused eager drops a
    # graph none of whose outputs is alive.
    @torch.no_grad()
    def eager():
        state["out"] = m(x_of())
        torch.tpu.synchronize()

    @torch.no_grad()
    def fused():
        with torchtpu.mode("fused"):
            state["out"] = m(x_of())
        torch.tpu.synchronize()

    static_x = xs[0].clone()
    g = torch.tpu.TPUGraph()
    with torch.no_grad():
        m(static_x)
        with torch.tpu.graph(g):
            state["static_out"] = m(static_x)  # kept: the graph's output

    def graph():
        static_x.copy_(x_of())
        g.replay()
        torch.tpu.synchronize()
    return {"eager": eager, "fused": fused, "graph": graph}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    info = torchtpu.runtime_info() if hasattr(torchtpu, "runtime_info") else {}
    print(f"device: tpu ({info.get('platform', '?')}), MLP width {a.width}, batch {a.batch}, "
          f"{a.steps} interleaved rounds, medians")
    print(f"{'row':<14} {'eager us':>10} {'fused us':>10} {'graph us':>10} "
          f"{'eager/graph':>12} {'fused/graph':>12}")
    for name, make in (("train step", train_paths), ("forward", forward_paths)):
        paths = make(a.width, a.batch)
        for _ in range(a.warmup):
            for fn in paths.values():
                fn()
        t = time_interleaved(paths, a.steps)
        us = {k: v[0] * 1e6 for k, v in t.items()}
        print(f"{name:<14} {us['eager']:>10.1f} {us['fused']:>10.1f} {us['graph']:>10.1f} "
              f"{us['eager'] / us['graph']:>11.2f}x {us['fused'] / us['graph']:>11.2f}x")


if __name__ == "__main__":
    main()
