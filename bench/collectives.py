"""Collective bandwidth on "tpu" (the "tpu" c10d backend) against gloo on CPU
tensors, in one run, with nccl-tests' definitions, and the trainer's
tokens/s on 1, 2 and 4 ranks.

    python bench/collectives.py [--ranks 2] [--min-kib 4] [--max-mib 64] [--trainer]

For each collective and size S (bytes; nccl-tests' convention: the per-rank
buffer for all_reduce, the gathered output for all_gather_into_tensor, the
scattered input for reduce_scatter_tensor, the send buffer for
all_to_all_single), t is the slowest rank's mean time per call;
algbw = S / t; busbw = algbw x 2(n-1)/n for all_reduce, x (n-1)/n for the
others. ratio = tpu busbw / gloo busbw. The tpu path copies device -> host,
runs gloo, copies back (transport "host (gloo)"), and by default checks the
ranks agree on shape/dtype first (TORCHTPU_DIST_CHECK=0 turns that off).

--trainer runs `torchtpu.train` (llama_debug.toml) for a few steps on 1 rank,
2 ranks (DDP and FSDP2) and 4 ranks (FSDP2) and prints the last window's
global tokens/s (local batch per rank fixed: weak scaling)."""
import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
COLLECTIVES = ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
               "all_to_all_single"]


def _bus_factor(name, n):
    return 2 * (n - 1) / n if name == "all_reduce" else (n - 1) / n


def worker(args):
    """One rank: times every collective and size on tpu and on gloo/CPU."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import torchtpu  # noqa: F401

    dist.init_process_group(timeout=timedelta(seconds=300))
    torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
    n, rank = dist.get_world_size(), dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    out = []
    for size in args["sizes"]:
        elems = size // 4
        elems -= elems % n
        for name in COLLECTIVES:
            row = {"collective": name, "bytes": elems * 4}
            for where in ("tpu", "gloo"):
                dev, group = ("tpu", None) if where == "tpu" else ("cpu", gloo)
                if name == "all_gather_into_tensor":
                    src = torch.ones(elems // n, device=dev)
                    dst = torch.empty(elems, device=dev)
                    fn = lambda: dist.all_gather_into_tensor(dst, src, group=group)  # noqa: E731
                elif name == "reduce_scatter_tensor":
                    src = torch.ones(elems, device=dev)
                    dst = torch.empty(elems // n, device=dev)
                    fn = lambda: dist.reduce_scatter_tensor(dst, src, group=group)  # noqa: E731
                elif name == "all_to_all_single":
                    src = torch.ones(elems, device=dev)
                    dst = torch.empty(elems, device=dev)
                    fn = lambda: dist.all_to_all_single(dst, src, group=group)  # noqa: E731
                else:
                    src = torch.ones(elems, device=dev)
                    fn = lambda: dist.all_reduce(src, group=group)  # noqa: E731
                fn()  # warm-up (compiles the copies)
                if dev == "tpu":
                    torch.tpu.synchronize()
                # iterations: about budget seconds, at least 2, agreed by all ranks
                t0 = time.perf_counter()
                fn()
                if dev == "tpu":
                    torch.tpu.synchronize()
                one = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                dist.all_reduce(one, op=dist.ReduceOp.MAX, group=gloo)
                iters = int(max(2, min(50, args["budget"] / max(one.item(), 1e-6))))
                dist.barrier(group=gloo)
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                if dev == "tpu":
                    torch.tpu.synchronize()
                dt = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
                dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=gloo)
                row[where] = dt.item()
            out.append(row)
    dist.destroy_process_group()
    return out if rank == 0 else None


def _fmt_bytes(b):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:g} {unit}"
    return f"{b} B"


def collectives_table(ranks, sizes, budget):
    sys.path.insert(0, REPO)
    from torchtpu.testing.multiprocess import run

    env = {"PYTHONPATH": os.pathsep.join([REPO, HERE, os.environ.get("PYTHONPATH", "")]),
           "TORCHTPU_FALLBACK": "silent"}
    rows = run("collectives:worker", ranks, timeout=3600, env=env,
               args={"sizes": sizes, "budget": budget})[0]
    print(f"\n{ranks} ranks; tpu transport host (gloo), TORCHTPU_DIST_CHECK="
          f"{os.environ.get('TORCHTPU_DIST_CHECK', '1')}; times are the slowest rank's mean\n")
    print("| collective | size | tpu time | tpu algbw | tpu busbw | gloo/CPU time | "
          "gloo algbw | gloo busbw | ratio tpu/gloo |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        f = _bus_factor(r["collective"], ranks)
        alg = {w: r["bytes"] / r[w] / 1e9 for w in ("tpu", "gloo")}
        print(f"| {r['collective']} | {_fmt_bytes(r['bytes'])} | {r['tpu'] * 1e3:.3f} ms | "
              f"{alg['tpu']:.3f} GB/s | {alg['tpu'] * f:.3f} GB/s | {r['gloo'] * 1e3:.3f} ms | "
              f"{alg['gloo']:.3f} GB/s | {alg['gloo'] * f:.3f} GB/s | "
              f"{alg['tpu'] / alg['gloo']:.2f} |")


def trainer_tokens(steps):
    config = os.path.join(REPO, "torchtpu/configs/llama_debug.toml")
    common = ["-m", "torchtpu.train", "--config", config, "--training.steps", str(steps),
              "--metrics.log_freq", str(steps // 2), "--checkpoint.enable", "false",
              "--metrics.progress_bar", "false", "--metrics.plot", "false",
              "--job.dump_folder", "/tmp/torchtpu-bench-train"]
    from torchtpu.testing.multiprocess import free_port
    runs = [("1 rank", [], []),
            ("2 ranks DDP", 2, ["--parallelism.data_parallel_replicate_degree", "2",
                                "--parallelism.data_parallel_shard_degree", "1"]),
            ("2 ranks FSDP2", 2, ["--parallelism.data_parallel_shard_degree", "2"]),
            ("4 ranks FSDP2", 4, ["--parallelism.data_parallel_shard_degree", "4"])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    print(f"\ntrainer (llama debugmodel, local batch 4 x seq 128 per rank), tokens/s over "
          f"steps {steps // 2 + 1}-{steps}, all ranks together\n")
    print("| run | global tokens/s | per rank |")
    print("| --- | ---: | ---: |")
    for label, n, extra in runs:
        if n:
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={n}",
                   f"--master_port={free_port()}"] + common + extra
        else:
            cmd = [sys.executable] + common
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        found = re.findall(r"tps:\s*([\d,]+)", p.stdout + p.stderr)
        if p.returncode != 0 or not found:
            print(f"| {label} | failed (exit {p.returncode}) | |")
            sys.stderr.write((p.stdout + p.stderr)[-3000:])
            continue
        tps = float(found[-1].replace(",", ""))
        print(f"| {label} | {tps:,.0f} | {tps / (n or 1):,.0f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--min-kib", type=int, default=4)
    ap.add_argument("--max-mib", type=int, default=64)
    ap.add_argument("--budget", type=float, default=0.5, help="seconds per measurement")
    ap.add_argument("--trainer", action="store_true", help="also trainer tokens/s at 1/2/4 ranks")
    ap.add_argument("--trainer-only", action="store_true")
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    print("load:", os.getloadavg(), "cpus:", os.cpu_count())
    if not a.trainer_only:
        sizes, s = [], a.min_kib << 10
        while s <= a.max_mib << 20:
            sizes.append(s)
            s *= 4
        collectives_table(a.ranks, sizes, a.budget)
    if a.trainer or a.trainer_only:
        trainer_tokens(a.steps)


if __name__ == "__main__":
    main()
