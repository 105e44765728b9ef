"""Per-op latency of a small elementwise op: torchtpu strict eager (cache
hit, asynchronous: ops are launched back to back and waited for once) against
the same op in PyTorch CPU eager, in one run.

    python bench/op_latency.py [--size 1024] [--iters 2000]

Prints microseconds per op for each and their ratio (tpu / cpu; lower is
better for torchtpu). On a machine without a TPU, "tpu" is XLA's CPU plugin,
so this measures dispatch + PJRT launch overhead, not accelerator speed.
"""
import argparse
import time

import torch

import torchtpu  # noqa: F401


def per_op_us(fn, iters, sync):
    for _ in range(20):  # warm up: compile, fill caches
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--iters", type=int, default=2000)
    a = p.parse_args()

    xc, yc = torch.randn(a.size), torch.randn(a.size)
    xt, yt = xc.to("tpu"), yc.to("tpu")
    nothing = lambda: None  # noqa: E731

    rows = []
    cpu_add = per_op_us(lambda: torch.add(xc, yc), a.iters, nothing)
    tpu_add = per_op_us(lambda: torch.add(xt, yt), a.iters, torch.tpu.synchronize)
    rows.append(("add (fresh output)", tpu_add, cpu_add))
    cpu_mul = per_op_us(lambda: xc.mul(1.0001), a.iters, nothing)
    tpu_mul = per_op_us(lambda: xt.mul(1.0001), a.iters, torch.tpu.synchronize)
    rows.append(("mul by scalar", tpu_mul, cpu_mul))
    zc, zt = xc.clone(), xt.clone()
    cpu_ip = per_op_us(lambda: zc.add_(yc, alpha=0.5), a.iters, nothing)
    tpu_ip = per_op_us(lambda: zt.add_(yt, alpha=0.5), a.iters, torch.tpu.synchronize)
    rows.append(("add_ in place", tpu_ip, cpu_ip))

    info = torchtpu.runtime_info()
    print(f"float32[{a.size}], {a.iters} iterations; tpu = {info['platform']} plugin "
          f"(PJRT {info['api_version'][0]}.{info['api_version'][1]})")
    print(f"{'op':<22}{'tpu us/op':>12}{'cpu us/op':>12}{'tpu/cpu':>10}")
    for name, t, c in rows:
        print(f"{name:<22}{t:>12.1f}{c:>12.1f}{t / c:>10.1f}")
    stats = torch.tpu._get_cache_stats()
    print(f"compiles {stats['compiles']}, signature hits {stats['sig_hits']}")


if __name__ == "__main__":
    main()
