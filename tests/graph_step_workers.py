"""Rank entry points for tests/test_graph_step.py (run by
torchtpu.testing.multiprocess.run)."""
import torch.distributed as dist

import torchtpu


def train(args):
    """torchtpu.train.train on this rank; its losses and whole-step counters."""
    from torchtpu import train as trainer
    from torchtpu.trainer.config import load_config
    torchtpu.set_fallback_mode("silent")
    out = trainer.train(load_config(overrides=args["cfg"]), log=print)
    result = {"losses": {str(k): v for k, v in out["losses"].items()},
              "grad_norms": {str(k): v for k, v in out["grad_norms"].items()},
              "whole_step": out["whole_step"], "world": out["parallel"].world}
    if dist.is_initialized():
        dist.destroy_process_group()
    return result
