"""Rank entry points for tests/test_fault_tolerance.py (run by
torchtpu.testing.multiprocess.run)."""
import datetime
import os
import time

import torch
import torch.distributed as dist

import torchtpu


def train(args):
    """torchtpu.train.train on this rank: its losses, or its exit code and
    log lines where it stopped (preemption). args["cfgs"]: {name: cfg} run
    one after the other in one launch, returning {name: result}."""
    if "cfgs" in args:
        out = {name: _train_one({"cfg": cfg}) for name, cfg in args["cfgs"].items()}
        if dist.is_initialized():
            dist.destroy_process_group()
        return out
    out = _train_one(args)
    if dist.is_initialized():
        dist.destroy_process_group()
    return out


def _train_one(args):
    from torchtpu import train as trainer
    from torchtpu.trainer.config import load_config
    torchtpu.set_fallback_mode("silent")
    lines = []

    def log(*a, **k):
        print(*a, **k, flush=True)
        lines.append(" ".join(map(str, a)))
    try:
        out = trainer.train(load_config(overrides=args["cfg"]), log=log)
    except SystemExit as e:  # the trainer's Preempted
        return {"exit_code": e.code, "log": lines}
    return {"losses": {str(k): v for k, v in out["losses"].items()}, "log": lines,
            "checkpoint": out["checkpoint"]}


def skipped_collective(args):
    """Three all_reduces on every rank; then rank 1 skips the fourth (it
    waits until rank 0 has failed, then leaves). Rank 0 returns the error
    its fourth all_reduce raised."""
    os.environ["TORCHTPU_FR_DUMP_FILE"] = args["fr_prefix"]
    dist.init_process_group("tpu", timeout=datetime.timedelta(seconds=args["timeout"]))
    rank = dist.get_rank()
    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(4, device="tpu")
    for _ in range(3):
        dist.all_reduce(t)
    expected = float(t.cpu()[0])  # 2 ** 3 on two ranks
    if rank == 1:
        store.wait(["rank0_failed"], datetime.timedelta(seconds=120))
        return {"rank": 1, "value": expected}
    t0 = time.monotonic()
    try:
        dist.all_reduce(t)
        error = None
    except RuntimeError as e:
        error = str(e)
    finally:
        store.set("rank0_failed", "1")
    return {"rank": 0, "value": expected, "error": error, "seconds": time.monotonic() - t0}
