"""Rank entry points for tests/test_graph_step.py (run by
torchtpu.testing.multiprocess.run)."""
import torch.distributed as dist

import torchtpu


def _one(trainer, load_config, cfg):
    lines = []

    def log(*args, **kwargs):
        print(*args, **kwargs)
        lines.append(" ".join(map(str, args)))

    out = trainer.train(load_config(overrides=cfg), log=log)
    return {"losses": {str(k): v for k, v in out["losses"].items()},
            "grad_norms": {str(k): v for k, v in out["grad_norms"].items()},
            "whole_step": out["whole_step"], "world": out["parallel"].world, "log": lines}


def train(args):
    """torchtpu.train.train on this rank; its losses and whole-step counters.
    args["cfg"]: one run; args["cfgs"]: {name: cfg}, run one after the other
    in one launch (one process group), returning {name: result}."""
    from torchtpu import train as trainer
    from torchtpu.trainer.config import load_config
    torchtpu.set_fallback_mode("silent")
    if "cfgs" in args:
        result = {name: _one(trainer, load_config, cfg) for name, cfg in args["cfgs"].items()}
    else:
        result = _one(trainer, load_config, args["cfg"])
    if dist.is_initialized():
        dist.destroy_process_group()
    return result
