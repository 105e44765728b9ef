"""What a checkpoint costs the step loop: the trainer's step time with no
checkpoints, synchronous ones and asynchronous ones (checkpoint.async_mode =
"async") every N steps, in one run, as ratios against the run without.

    .venv/bin/python bench/checkpoint.py [--flavor debugmodel] [--steps 40]
        [--interval 5] [--ranks 1|2] [--repeat 2]

One process saves step-<N>.pt (torch.save of a host copy on a thread when
async); --ranks 2 runs FSDP2 on 2 ranks saving DCP folders (dcp.save, or
dcp.async_save on a gloo group of its own). A step's time runs from the end
of the step before to the end of this one and its checkpoint; the figures
are the mean over the steps after the first two (compiling), and the mean
over the checkpoint steps alone. Each mode runs --repeat times, alternating,
and the median is kept. The run's final checkpoint (always synchronous) is
left out."""
import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

MODES = ("none", "sync", "async")


def config(folder, mode, a, dp):
    return {"job": {"dump_folder": folder},
            "model": {"name": "llama", "flavor": a.flavor, "dropout": 0.0},
            "lr_scheduler": {"warmup_steps": 2},
            "training": {"device": "tpu", "steps": a.steps, "local_batch_size": a.batch,
                         "seq_len": a.seq, "seed": 0},
            "checkpoint": {"enable": mode != "none", "interval": a.interval,
                           "keep_latest_k": 2, "resume": False,
                           "async_mode": "async" if mode == "async" else "disabled"},
            "preemption": {"signals": ""},
            "metrics": {"log_freq": 1000, "peak_flops": 1e9, "plot": False,
                        "progress_bar": False},
            "parallelism": {"data_parallel_shard_degree": dp}}


def step_times(out, interval, steps):
    ends = out["step_ends"]
    times = {s: ends[s] - ends[s - 1] for s in range(3, steps)}  # the last (sync save) left out
    ck = [t for s, t in times.items() if s % interval == 0]
    return statistics.mean(times.values()), statistics.mean(ck) if ck else float("nan")


def run_modes(a, dp=1):
    """{mode: [(mean step s, mean checkpoint-step s), ...]} in this process."""
    import torchtpu
    from torchtpu import train as trainer
    from torchtpu.trainer.config import load_config
    torchtpu.set_fallback_mode("silent")
    out = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as tmp:
        for r in range(a.repeat):
            for mode in MODES:
                folder = os.path.join(tmp, f"{mode}{r}")
                res = trainer.train(load_config(overrides=config(folder, mode, a, dp)),
                                    log=lambda *x, **k: None)
                out[mode].append(step_times(res, a.interval, a.steps))
    return out


def _rank(args):
    """One rank of --ranks N (torchtpu.testing.multiprocess.run)."""
    import torch.distributed as dist
    a = argparse.Namespace(**args)
    out = run_modes(a, dp=a.ranks)
    if dist.is_initialized():
        dist.destroy_process_group()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flavor", default="debugmodel")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--interval", type=int, default=5)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--repeat", type=int, default=2)
    a = p.parse_args()
    if a.ranks > 1:
        from torchtpu.testing.multiprocess import run
        env = {"PYTHONPATH": os.pathsep.join([REPO, HERE, os.environ.get("PYTHONPATH", "")]),
               "TORCHTPU_FALLBACK": "silent"}
        res = run("checkpoint:_rank", a.ranks, timeout=3600, env=env, args=vars(a))[0]
    else:
        res = run_modes(a)
    med = {m: (statistics.median(x[0] for x in res[m]), statistics.median(x[1] for x in res[m]))
           for m in MODES}
    base = med["none"][0]
    print(f"llama/{a.flavor}, {a.ranks} rank(s), batch {a.batch} x seq {a.seq}, checkpoint "
          f"every {a.interval} steps, {a.steps} steps, median of {a.repeat}")
    print(f"{'checkpoints':<12} {'mean step ms':>13} {'vs none':>8} {'checkpoint step ms':>19}")
    for m in MODES:
        step, ck = med[m]
        print(f"{m:<12} {step * 1e3:13.1f} {step / base:7.2f}x {ck * 1e3:19.1f}")


if __name__ == "__main__":
    main()
