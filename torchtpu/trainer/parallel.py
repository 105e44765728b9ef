"""The trainer on many ranks: [parallelism] as TorchTitan spells it.

    torchrun --nproc_per_node=2 -m torchtpu.train --config torchtpu/configs/llama_debug.toml \\
        --parallelism.data_parallel_shard_degree 2

data_parallel_replicate_degree (DDP) x data_parallel_shard_degree (FSDP2
fully_shard; -1: what the other degrees leave of the world) must equal the
number of ranks; both > 1 is HSDP (fully_shard on a 2-d mesh). Every
data-parallel rank reads its slice of one global batch of
local_batch_size x dp rows, so a run on N ranks computes the same steps as
one process with an N times larger local batch. tensor_parallel_degree (DTensor
TP: wq/wk/wv and w1/w3 column-wise, wo and w2 row-wise in every block, the
rest replicated) takes all the ranks for now; with data parallelism together
it is a clear error.

Checkpoints on many ranks go through torch.distributed.checkpoint: each rank
writes its shards into step-<N>.dcp.tmp, rank 0 renames the folder when all
are written; loading reshards, so a run saved on 4 ranks resumes on 2."""
import os
import shutil
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class Parallel:
    world: int = 1
    rank: int = 0
    local_rank: int = 0
    replicate: int = 1
    shard: int = 1
    tp: int = 1
    mesh: object = None
    fsdp: str = "fully_shard"       # parallelism.fsdp: fully_shard (FSDP2) | simple (SimpleFSDP)
    param_dtype: str = "float32"    # SimpleFSDP: training.mixed_precision_param
    reduce_dtype: str = "float32"   # SimpleFSDP: training.mixed_precision_reduce

    @property
    def simple(self):
        """SimpleFSDP shards the parameters (parallelism.fsdp = simple)."""
        return self.fsdp == "simple" and self.shard > 1

    @property
    def enabled(self):
        return self.world > 1

    @property
    def dp(self):
        return self.replicate * self.shard

    @property
    def dp_rank(self):
        return self.rank // self.tp  # the ranks of one TP group read the same rows

    @property
    def is_main(self):
        return self.rank == 0


def read_degrees(p):
    """(replicate, shard, tp) as [parallelism] gives them (shard may be -1);
    ValueError when one is below 1."""
    rep, shard, tp = (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"],
                      p["tensor_parallel_degree"])
    if rep < 1 or tp < 1 or (shard < 1 and shard != -1):
        raise ValueError(f"parallelism: degrees must be >= 1 (shard may be -1), got replicate "
                         f"{rep}, shard {shard}, tensor {tp}")
    return rep, shard, tp


def degrees(p, world):
    """(replicate, shard, tp) for `world` ranks; ValueError when they do not fit."""
    rep, shard, tp = read_degrees(p)
    if shard == -1:
        if world % (rep * tp):
            raise ValueError(f"parallelism: replicate {rep} x tensor {tp} does not divide "
                             f"the {world} ranks")
        shard = world // (rep * tp)
    if rep * shard * tp != world:
        raise ValueError(f"parallelism: replicate {rep} x shard {shard} x tensor {tp} = "
                         f"{rep * shard * tp}, but there are {world} ranks (WORLD_SIZE)")
    if tp > 1 and rep * shard > 1:
        raise ValueError("parallelism: tensor parallelism together with data parallelism is not "
                         "supported yet (tensor_parallel_degree must take all the ranks)")
    return rep, shard, tp


def check(cfg, world):
    """(replicate, shard, tp) of cfg's [parallelism] on `world` ranks; a
    ValueError when they do not fit or SimpleFSDP's settings cannot apply."""
    p, t = cfg["parallelism"], cfg["training"]
    rep, shard, tp = degrees(p, world)
    mixed = (t["mixed_precision_param"], t["mixed_precision_reduce"]) != ("float32", "float32")
    if p["fsdp"] == "simple" and world > 1 and shard == 1:
        raise ValueError(f"parallelism.fsdp = simple shards the parameters: it needs "
                         f"data_parallel_shard_degree > 1 (got replicate {rep}, shard {shard}, "
                         f"tensor {tp} on {world} ranks); for DDP alone use fsdp = fully_shard")
    if mixed and (p["fsdp"] != "simple" or world == 1):
        raise ValueError("training.mixed_precision_param / mixed_precision_reduce are SimpleFSDP's "
                         "gather and reduce dtypes (parallelism.fsdp = simple on several ranks); "
                         "FSDP2, DDP and one process keep the parameters' dtype (see "
                         "training.mixed_precision for autocast)")
    return rep, shard, tp


def setup(cfg):
    """Joins the process group when launched on several ranks (torchrun)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    p, t = cfg["parallelism"], cfg["training"]
    rep, shard, tp = check(cfg, world)
    if world == 1:
        return Parallel()
    device = cfg["training"]["device"]
    if not dist.is_initialized():
        dist.init_process_group(backend="gloo" if device == "cpu" else None)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "tpu":
        torch.tpu.set_device(local_rank)
    par = Parallel(world=world, rank=dist.get_rank(), local_rank=local_rank, replicate=rep,
                   shard=shard, tp=tp, fsdp=p["fsdp"], param_dtype=t["mixed_precision_param"],
                   reduce_dtype=t["mixed_precision_reduce"])
    if tp > 1:
        from torch.distributed.device_mesh import init_device_mesh
        par.mesh = init_device_mesh(device, (tp,), mesh_dim_names=("tp",))
    elif rep > 1 and shard > 1:
        from torch.distributed.device_mesh import init_device_mesh
        par.mesh = init_device_mesh(device, (rep, shard),
                                    mesh_dim_names=("dp_replicate", "dp_shard"))
    elif par.simple:
        from torch.distributed.device_mesh import init_device_mesh
        par.mesh = init_device_mesh(device, (shard,), mesh_dim_names=("dp_shard",))
    return par


def apply(model, par, device):
    """DDP, FSDP2 (each transformer block, then the root), HSDP, SimpleFSDP
    (parallelism.fsdp = simple; HSDP on a 2-d mesh) or TP."""
    if not par.enabled:
        return model
    if par.tp > 1:
        return _tensor_parallel(model, par)
    if hasattr(model, "set_data_parallel_group"):
        # MoE: the load-balancing loss counts the assignments of every
        # data-parallel rank (replicas and shards), so that it and its
        # gradient are the one-process run's (models/moe.py). Data parallelism
        # takes all the ranks (degrees refuses it beside TP): the world.
        model.set_data_parallel_group(dist.group.WORLD)
    if par.simple:
        from .simple_fsdp import DTYPES, data_parallel
        return data_parallel(model, par.mesh, DTYPES[par.param_dtype], DTYPES[par.reduce_dtype])
    if par.shard == 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model)
    from torch.distributed.fsdp import fully_shard
    kw = {"mesh": par.mesh} if par.mesh is not None else {}
    for block in model.layers:
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    return model


def _tensor_parallel(model, par):
    """Megatron-style TP of every block (TorchTitan's plan without sequence
    parallelism): attention heads and the feed-forward hidden size are split
    over the ranks; each rank's attention then sees n_heads / tp heads."""
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    tp = par.tp
    for block in model.layers:
        att, ffn = block.attention, block.feed_forward
        if att.n_heads % tp or att.n_kv % tp or not hasattr(ffn, "w1") or ffn.w1.out_features % tp:
            raise ValueError(f"tensor_parallel_degree {tp}: needs heads ({att.n_heads}), kv heads "
                             f"({att.n_kv}) and a dense feed-forward hidden size divisible by it")
        parallelize_module(block, par.mesh, {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel()})
        att.n_heads //= tp
        att.n_kv //= tp
    return model


def optimizer_config(o, par):
    """TP mixes DTensor and plain parameters: the foreach / fused kernels
    refuse mixed lists, the per-parameter loop takes them."""
    if par.tp > 1 and o["implementation"] != "for-loop":
        return dict(o, implementation="for-loop")
    return o


@torch.no_grad()
def clip_grad_norm(params, max_norm, par):
    """torch.nn.utils.clip_grad_norm_ (same formula) for parameter lists that
    mix DTensors and plain tensors (TP); elsewhere torch's own."""
    params = [p for p in params if p.grad is not None]
    if par.tp == 1:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    sq = [full(torch.linalg.vector_norm(p.grad)).float() ** 2 for p in params]
    total = torch.stack(sq).sum().sqrt()
    coef = min(1.0, max_norm / (float(total) + 1e-6))
    for p in params:
        p.grad.mul_(coef)
    return total


def unwrap(model):
    return getattr(model, "module", model)


def local_rows(x, par):
    """This data-parallel rank's rows of the global batch."""
    if not par.enabled:
        return x
    n = x.shape[0] // par.dp
    return x[par.dp_rank * n:(par.dp_rank + 1) * n]


def mean_across(values, par):
    """The ranks' mean of a tensor (a no-op on one rank)."""
    if not par.enabled:
        return values
    values = values.clone()
    dist.all_reduce(values, op=dist.ReduceOp.AVG)
    return values


def sum_across(x, par):
    """Sum of a Python float over the ranks (peaks for the MFU)."""
    if not par.enabled:
        return x
    t = torch.tensor([float(x)], dtype=torch.float64)
    dist.all_reduce(t, group=_cpu_group())
    return float(t.item())


_CPU = {}


def _cpu_group():
    if "g" not in _CPU:
        _CPU["g"] = dist.new_group(backend="gloo")
    return _CPU["g"]


def full(t):
    """A DTensor (FSDP2's grad norm) as a plain tensor."""
    from torch.distributed.tensor import DTensor
    return t.full_tensor() if isinstance(t, DTensor) else t


# --- sharded checkpoints (torch.distributed.checkpoint) --------------------------------

def _dcp_path(folder, step):
    return os.path.join(folder, f"step-{step}.dcp")


def dcp_steps(folder):
    if not os.path.isdir(folder):
        return []
    steps = []
    for name in os.listdir(folder):
        if name.startswith("step-") and name.endswith(".dcp"):
            try:
                steps.append(int(name[5:-4]))
            except ValueError:
                pass
    return sorted(steps)


def dcp_save(model, optimizer, extra, folder, step, keep_latest_k, par):
    """Every rank writes its shards; rank 0 publishes the folder by a rename."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(unwrap(model) if par.shard == 1 else model, optimizer)
    final = _dcp_path(folder, step)
    tmp = final + ".tmp"
    if par.is_main:
        os.makedirs(folder, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    dist.barrier()
    dcp.save({"model": msd, "optimizer": osd, "extra": extra}, checkpoint_id=tmp)
    dist.barrier()
    if par.is_main:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        if keep_latest_k > 0:
            for old in dcp_steps(folder)[:-keep_latest_k]:
                shutil.rmtree(_dcp_path(folder, old), ignore_errors=True)
    dist.barrier()
    return final


def dcp_load_latest(model, optimizer, extra_template, folder, par):
    """Loads the newest step-<N>.dcp into model and optimizer (resharding to
    this run's ranks); returns (step, extra) or (0, None)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    steps = dcp_steps(folder)
    if not steps:
        return 0, None
    step = steps[-1]
    target = unwrap(model) if par.shard == 1 else model
    msd, osd = get_state_dict(target, optimizer)
    state = {"model": msd, "optimizer": osd, "extra": dict(extra_template)}
    dcp.load(state, checkpoint_id=_dcp_path(folder, step))
    set_state_dict(target, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"])
    return step, state["extra"]
