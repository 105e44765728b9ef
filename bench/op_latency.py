"""Per-op latency of tiny ops: torchtpu strict eager (cache hit) against the
same op in PyTorch CPU eager, in one run.

    python bench/op_latency.py [--size 1024] [--block-ms 0.3] [--rounds 41] [--busy N] [--floor]

Prints microseconds per op for each and their ratio (tpu / cpu; lower is
better for torchtpu). The two are measured interleaved in short blocks
(cpu, tpu, cpu, tpu, ...; each block about --block-ms long, its tpu ops
waited for at its end), and each figure is the median over the rounds: on a
shared, loaded host most short blocks run without being preempted, so the
median is what an op costs while the process has a core, and both sides
are measured alike (long blocks would be preempted in proportion to their
length, penalising the slower side twice). "cpu time" is the process's CPU
time per op (all its threads). --busy N starts N processes that spin on
the CPU for the whole run (a loaded host: the per-op path must not depend
on other threads getting a core quickly).

On a machine without a TPU, "tpu" is XLA's CPU plugin, so this measures
dispatch + PJRT launch overhead, not accelerator speed. --floor also runs
build/bench/pjrt_floor (made here with `make`): the plugin's own cost of the
same float32[1024] add launched from C on resident buffers, no PyTorch and
no runtime of ours, and prints it as a ratio to PyTorch's CPU add of this run
(the lowest ratio any dispatch path over this plugin could reach).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

import torchtpu  # noqa: F401


def block_us(fn, iters, sync):
    """(wall, process CPU) microseconds per op over one block."""
    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(iters):
        fn()
    sync()
    t1, c1 = time.perf_counter(), time.process_time()
    return (t1 - t0) / iters * 1e6, (c1 - c0) / iters * 1e6


def measure(tpu_fn, cpu_fn, block_ms, rounds):
    """Median (wall, CPU) us/op of each, measured in alternating blocks."""
    sync, nothing = torch.tpu.synchronize, (lambda: None)
    for _ in range(20):  # warm up: compile, fill caches
        tpu_fn()
        cpu_fn()
    sync()
    # Ops per block, from a first estimate of each side's cost.
    n_tpu = max(5, int(block_ms * 1e3 / block_us(tpu_fn, 50, sync)[0]))
    n_cpu = max(5, int(block_ms * 1e3 / block_us(cpu_fn, 50, nothing)[0]))
    t, c = [], []
    for _ in range(rounds):
        c.append(block_us(cpu_fn, n_cpu, nothing))
        t.append(block_us(tpu_fn, n_tpu, sync))
    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    return (med(t, 0), med(t, 1)), (med(c, 0), med(c, 1))


def start_busy(n):
    """n processes that keep a core each busy until killed."""
    spin = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\nwhile True: pass\n"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(n)]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=1024, help="elements of the 1-D operands")
    p.add_argument("--mm", type=int, default=16, help="side of the small square matmul")
    p.add_argument("--block-ms", type=float, default=0.3, help="length of a timed block")
    p.add_argument("--rounds", type=int, default=41, help="cpu/tpu block pairs per op")
    p.add_argument("--busy", type=int, default=0,
                   help="start this many CPU-spinning processes for the run")
    p.add_argument("--floor", action="store_true",
                   help="also measure the plugin's own launch cost (build/bench/pjrt_floor)")
    a = p.parse_args()

    busy = start_busy(a.busy)
    try:
        time.sleep(0.2 if busy else 0)  # let them get going
        rows = run(a)
    finally:
        for b in busy:
            b.terminate()
        for b in busy:
            b.wait()

    info = torchtpu.runtime_info()
    load = os.getloadavg()
    print(f"float32[{a.size}] (matmul [{a.mm}x{a.mm}]), median of {a.rounds} blocks of "
          f"~{a.block_ms} ms; "
          f"tpu = {info['platform']} plugin (PJRT {info['api_version'][0]}."
          f"{info['api_version'][1]}); busy processes {a.busy}; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("wall: elapsed us/op; cpu time: this process's CPU us/op, all its threads")
    print(f"{'op':<22}{'tpu wall':>10}{'cpu wall':>10}{'tpu/cpu':>9}"
          f"{'tpu cpu-time':>14}{'cpu cpu-time':>14}")
    for name, t, c in rows:
        print(f"{name:<22}{t[0]:>10.1f}{c[0]:>10.1f}{t[0] / c[0]:>9.1f}"
              f"{t[1]:>14.1f}{c[1]:>14.1f}")
    stats = torch.tpu._get_cache_stats()
    print(f"compiles {stats['compiles']}, signature hits {stats['sig_hits']}")
    if a.floor:
        print_floor(rows[0][2][0])


def print_floor(cpu_add_us):
    """Runs build/bench/pjrt_floor and prints its figures over PyTorch's CPU add."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    made = subprocess.run(["make", "-s", "-C", repo, "build/bench/pjrt_floor"],
                          capture_output=True, text=True)
    if made.returncode != 0:
        print(f"plugin floor: not measured (make build/bench/pjrt_floor: {made.stderr.strip()[-200:]})")
        return
    import site
    env = dict(os.environ, TORCHTPU_SITE_PACKAGES=":".join(site.getsitepackages()))
    out = subprocess.run([os.path.join(repo, "build", "bench", "pjrt_floor")], env=env,
                         capture_output=True, text=True)
    for line in out.stdout.splitlines():
        name, _, value = line.rpartition(":")
        us = float(value.split()[0])
        print(f"plugin floor, {name.strip()}: {us:.1f} us/op = {us / cpu_add_us:.1f}x PyTorch's CPU add")


def run(a):
    xc, yc = torch.randn(a.size), torch.randn(a.size)
    xt, yt = xc.to("tpu"), yc.to("tpu")
    mc = torch.randn(a.mm, a.mm)
    mt = mc.to("tpu")
    zc, zt = xc.clone(), xt.clone()
    ops = [
        ("add (fresh output)", lambda x, y, z, m: torch.add(x, y)),
        ("mul by scalar", lambda x, y, z, m: x.mul(1.0001)),
        ("add_ in place", lambda x, y, z, m: z.add_(y, alpha=0.5)),
        ("relu", lambda x, y, z, m: torch.relu(x)),
        ("sum", lambda x, y, z, m: x.sum()),
        ("matmul small", lambda x, y, z, m: m @ m),
    ]
    rows = []
    for name, f in ops:
        t, c = measure(lambda: f(xt, yt, zt, mt), lambda: f(xc, yc, zc, mc),
                       a.block_ms, a.rounds)
        rows.append((name, t, c))
    return rows


if __name__ == "__main__":
    main()
