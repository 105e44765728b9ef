"""SimpleFSDP: FSDP written with DTensor and a parameter access hook, as
TorchTitan's experiments/simple_fsdp designs it (parallelism.fsdp = "simple").

Every parameter is stored as a DTensor Shard(0) on the data-parallel mesh
(its dim-0 chunk on each rank); gradients and optimizer state are the same
shards. Reading the parameter in forward (module.weight) redistributes it
Shard(0) -> Replicate(): an all-gather, cast to mixed_precision_param
before the gather. Autograd's backward of that redistribute reduce-scatters
the gradient (Partial -> Shard(0), averaged over the ranks, in
mixed_precision_reduce), so no wrapper module, no hooks on backward and no
bucketing: eager runs the collectives through the process group one
parameter at a time, and torch.compile traces them into functional
collectives in the forward and backward graphs.

HSDP: on a 2-d mesh (dp_replicate, dp_shard) the parameter is
(Replicate(), Shard(0)); the gather makes it (Replicate(), Replicate()) and
the gradient's Partial on both dims becomes an all-reduce over the replicas
and a reduce-scatter over the shards.

The hook is a per-module subclass with one property per parameter name, so
module._parameters (and so named_parameters, state_dict, the optimizer and
DCP) keep the sharded DTensors under their usual names: a SimpleFSDP
checkpoint has FSDP2's keys and Shard(0) layout, and each loads the other's."""
import torch
import torch.nn as nn
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

__all__ = ["data_parallel", "DTYPES"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class _Gather:
    """The parametrization: a sharded DTensor parameter -> the full local
    tensor forward uses. Its backward is the gradient's reduce-scatter."""

    def __init__(self, mesh, param_dtype, reduce_dtype):
        n = mesh.ndim
        self.replicate = (Replicate(),) * n
        # avg: each rank's gradient is of its own rows' mean loss; their mean
        # is the gradient of the global batch's mean loss (DDP's and FSDP2's)
        self.grad_placements = (Partial("avg"),) * n
        self.param_dtype, self.reduce_dtype = param_dtype, reduce_dtype

    def __call__(self, p):
        if not isinstance(p, DTensor):
            return p
        param_dtype = self.param_dtype if p.dtype != self.param_dtype else None
        # backward_dtype: the gradient is reduced in reduce_dtype, then cast
        # back to the parameter's dtype (the shard's .grad)
        full = p.redistribute(placements=self.replicate, forward_dtype=param_dtype,
                              backward_dtype=self.reduce_dtype)
        return full.to_local(grad_placements=self.grad_placements)


def _hook(module, names, gather):
    """Makes module.<name> (for each of `names`) return gather(the sharded
    parameter): the module's class becomes a subclass with a property per
    name, which attribute lookup finds before nn.Module.__getattr__."""
    props = {name: property(lambda self, n=name: gather(self._parameters[n]))
             for name in names}
    cls = module.__class__
    module.__class__ = type(f"SimpleFSDP{cls.__name__}", (cls,), props)


def data_parallel(model, mesh, param_dtype=torch.float32, reduce_dtype=torch.float32):
    """Shards every parameter of `model` (already on its device) over `mesh`
    (1-d: FSDP; 2-d (replicate, shard): HSDP) and hooks their reads; returns
    the model (changed in place). Every rank must hold the same initial
    values (the trainer seeds them): each keeps its own chunk, nothing is sent."""
    placements = (Replicate(),) * (mesh.ndim - 1) + (Shard(0),)
    gather = _Gather(mesh, param_dtype, reduce_dtype)
    done = {}  # id(parameter) -> its sharded replacement (shared parameters stay shared)
    for module in model.modules():
        names = [n for n, p in module._parameters.items() if p is not None]
        if not names:
            continue
        for name in names:
            p = module._parameters[name]
            if isinstance(p, DTensor):
                raise ValueError(f"SimpleFSDP: parameter {name} of {type(module).__name__} is "
                                 f"already a DTensor ({p.placements})")
            if id(p) not in done:
                shard = distribute_tensor(p.detach(), mesh, placements, src_data_rank=None)
                done[id(p)] = nn.Parameter(shard, requires_grad=p.requires_grad)
            module._parameters[name] = done[id(p)]
        _hook(module, names, gather)
    return model
