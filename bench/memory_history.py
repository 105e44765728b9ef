"""The cost of torch.tpu.memory's allocation history on eager "tpu" ops: the
time per op of a loop of small allocating ops (y = x + 1, a fresh storage
each) with the history off, with stacks="python" (TorchTitan's setting) and
with stacks="all" (C++ frames too), each as a ratio to off, in one run; and
the time _snapshot() takes to symbolize what was recorded.

    python bench/memory_history.py [--ops 2000] [--repeats 5]

The time per op is the best of --repeats loops. CUDA's documentation puts
its Python stack capture at ~2 us per allocation."""
import argparse
import time

import torch

import torchtpu  # noqa: F401  (registers "tpu")


def per_op(x, ops, repeats):
    best = float("inf")
    for _ in range(repeats):
        torch.tpu.synchronize()
        t0 = time.perf_counter()
        for _ in range(ops):
            x + 1
        torch.tpu.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best / ops


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    x = torch.randn(64, device="tpu")
    per_op(x, 50, 1)  # compile, warm up
    rows = []
    for name, kwargs in (("off", None), ("python", {"stacks": "python"}),
                         ("all", {"stacks": "all"})):
        if kwargs is not None:
            torch.tpu.memory._record_memory_history(max_entries=100000, clear_history=True,
                                                     **kwargs)
        t = per_op(x, args.ops, args.repeats)
        snap_s = None
        if kwargs is not None:
            t0 = time.perf_counter()
            snap = torch.tpu.memory._snapshot()
            snap_s = time.perf_counter() - t0
            events = len(snap["device_traces"][0])
            torch.tpu.memory._record_memory_history(enabled=None, clear_history=True)
        rows.append((name, t, snap_s, events if kwargs else 0))
    base = rows[0][1]
    print(f"{'history':8s} {'us/op':>8s} {'vs off':>7s} {'snapshot s':>11s} {'events':>7s}")
    for name, t, snap_s, events in rows:
        snap = f"{snap_s:11.2f}" if snap_s is not None else f"{'-':>11s}"
        print(f"{name:8s} {t * 1e6:8.1f} {t / base:7.2f} {snap} {events:7d}")


if __name__ == "__main__":
    main()
