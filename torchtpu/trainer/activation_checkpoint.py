"""Activation checkpointing of the transformer blocks ([activation_checkpoint],
TorchTitan's names and meaning):

    mode = "none"       every activation the backward needs is kept (default)
    mode = "full"       every block keeps only its input; its forward runs again
                        in the backward
    mode = "selective", selective_ac_option = "N" (an integer)
                        every N-th block (the 2nd, 4th, ... for N = 2) is
                        checkpointed as in "full", the others keep everything
    mode = "selective", selective_ac_option = "op"
                        every block keeps the outputs of its matmuls and of
                        attention (the costly ops) and recomputes the cheap
                        ones (norms, rotary embeddings, SwiGLU's silu and
                        product, routing) in the backward

Blocks are wrapped in place (model.layers[i] becomes a CheckpointWrapper) with
PyTorch's non-reentrant torch.utils.checkpoint, which works under autograd in
eager and under torch.compile (AOTAutograd's partitioner reads the recompute
tags); the whole-step mode (compile_mode = "step") refuses it for now (see
config.validate). The forward's result and the gradients are those of the
unwrapped model: the recomputation runs the same ops on the same inputs (and,
with dropout, the same random numbers: the RNG state is then saved and
restored; without dropout it is not, as TorchTitan does, which keeps traces
free of the real state tensor). Apply before the parallelism
wrapping (FSDP2 then shards the wrapped blocks).
"""
import functools

import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointWrapper, checkpoint_wrapper)
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from .config import validate_activation_checkpoint


@functools.cache
def _saved_ops():
    """The ops whose outputs op-level selective checkpointing keeps: matmuls
    and the attention kernels (the FLOPs), as TorchTitan's list without its
    CUDA-only entries. Everything else is recomputed."""
    aten = torch.ops.aten
    ops = [aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
           aten.linear.default]
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_flash_attention_for_cpu",
                 "_scaled_dot_product_fused_attention_overrideable"):
        if hasattr(aten, name):
            ops.append(getattr(aten, name).default)
    return frozenset(ops)


def _op_policy(ctx, op, *args, **kwargs):
    return (CheckpointPolicy.MUST_SAVE if op in _saved_ops()
            else CheckpointPolicy.PREFER_RECOMPUTE)


def _op_context():
    return create_selective_checkpoint_contexts(_op_policy)


def _wrap(block, op_level=False, rng=False):
    # rng: save and restore the RNG state around the recomputation (dropout's
    # masks must repeat); without dropout there is nothing random to repeat,
    # and the whole-step trace (graph_step.py) cannot take the real state tensor
    kw = {"context_fn": _op_context} if op_level else {}
    return checkpoint_wrapper(block, preserve_rng_state=rng, **kw)


def apply(model, ac):
    """Wraps model.layers' blocks per `ac` (the [activation_checkpoint]
    section) in place; returns the number of blocks wrapped."""
    validate_activation_checkpoint(ac)  # ConfigError (a ValueError) naming the key
    mode, option = ac["mode"], ac["selective_ac_option"]
    if mode == "none":
        return 0
    layers = model.layers
    rng = getattr(getattr(model, "args", None), "dropout", 0.0) > 0
    wrapped = 0
    for i, block in enumerate(layers):
        if isinstance(block, CheckpointWrapper):
            raise ValueError(f"activation_checkpoint: block {i} is already checkpointed "
                             f"(apply once)")
        if mode == "full" or option == "op":
            layers[i] = _wrap(block, op_level=option == "op" and mode == "selective", rng=rng)
        elif (i + 1) % int(option) == 0:  # TorchTitan counts blocks from 1
            layers[i] = _wrap(block, rng=rng)
        else:
            continue
        wrapped += 1
    return wrapped
