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
are written; loading reshards, so a run saved on 4 ranks resumes on 2. With
checkpoint.async_mode = "async" the ranks stage their shards to host memory
and write them on a thread (torch.distributed.checkpoint.async_save on a gloo
group of its own); rank 0 renames the folder once every rank's shards and
the metadata are written.

Restarts (docs/fault_tolerance.md): setup() joins through a store whose keys
carry torchrun's attempt number (TORCHELASTIC_RESTART_COUNT), so every group
made on it (the default one, DeviceMesh's, new_group's gloo groups) meets
only ranks of the same attempt: torchrun keeps one store across restarts,
where a restarted rank otherwise reads the dead attempt's gloo addresses."""
import datetime
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
    fsdp_auto: bool = False         # parallelism.fsdp = auto chose SimpleFSDP (compile_mode step)
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


def resolve_fsdp(cfg, world):
    """parallelism.fsdp with "auto" decided: SimpleFSDP where the whole step
    is traced (training.compile_mode = "step" on sharded data parallelism:
    FSDP2's eager hooks cannot be part of one program), FSDP2 elsewhere."""
    p, t = cfg["parallelism"], cfg["training"]
    if p["fsdp"] != "auto":
        return p["fsdp"]
    if t["compile"] and t["compile_mode"] == "step" and world > 1:
        rep, shard, tp = degrees(p, world)
        if shard > 1 and tp == 1:
            return "simple"
    return "fully_shard"


def check(cfg, world):
    """(replicate, shard, tp) of cfg's [parallelism] on `world` ranks; a
    ValueError when they do not fit or SimpleFSDP's settings cannot apply."""
    p, t = cfg["parallelism"], cfg["training"]
    rep, shard, tp = degrees(p, world)
    mixed = (t["mixed_precision_param"], t["mixed_precision_reduce"]) != ("float32", "float32")
    p = dict(p, fsdp=resolve_fsdp(cfg, world))
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
    comm = cfg["comm"]
    _flight_recorder_settings(cfg)
    if not dist.is_initialized():
        init_restart_scoped(backend="gloo" if device == "cpu" else None,
                            timeout=comm["init_timeout_seconds"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "tpu":
        torch.tpu.set_device(local_rank)
    fsdp = resolve_fsdp(cfg, world)
    par = Parallel(world=world, rank=dist.get_rank(), local_rank=local_rank, replicate=rep,
                   shard=shard, tp=tp, fsdp=fsdp, param_dtype=t["mixed_precision_param"],
                   reduce_dtype=t["mixed_precision_reduce"],
                   fsdp_auto=p["fsdp"] == "auto" and fsdp == "simple")
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


def attempt():
    """torchrun's restart count of this worker group (0 outside torchrun)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def init_restart_scoped(backend=None, timeout=300.0):
    """dist.init_process_group (env://: torchrun's or the tests' variables)
    on a store whose keys carry the restart attempt. torchrun keeps its
    TCPStore across restarts (static rendezvous: the agent's store on
    --master_port; c10d rendezvous too), and PyTorch's gloo reads its peers'
    addresses from keys named only by group and rank: a restarted rank read
    the dead attempt's address of a peer and failed in connectFullMesh
    (Connection refused), for the default group (static) or the first
    new_group(backend="gloo") (c10d). Scoping every key by the attempt gives
    each restart fresh gloo pairs; nothing waits on a dead peer's address."""
    td = datetime.timedelta(seconds=float(timeout))
    store, rank, world = next(dist.rendezvous("env://", timeout=td))
    store = dist.PrefixStore(f"torchtpu/attempt_{attempt()}/", store)
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world,
                            timeout=td)


def set_timeouts(seconds):
    """The timeout of every process group's later collectives (the world,
    the meshes' and new_group's): comm.train_timeout_seconds after step 1,
    as TorchTitan shortens it once compiling is over."""
    td = datetime.timedelta(seconds=float(seconds))
    for pg in list(dist.distributed_c10d._world.pg_map):
        try:
            pg.set_timeout(td)
        except (AttributeError, RuntimeError, NotImplementedError):
            pass  # a backend that cannot change it keeps init_timeout_seconds


def _flight_recorder_settings(cfg):
    """[comm] trace_buf_size and save_traces_folder, as the host transport
    reads them (TORCHTPU_FR_BUFFER_SIZE, TORCHTPU_FR_DUMP_FILE), unless the
    environment sets them already."""
    comm = cfg["comm"]
    folder = os.path.join(cfg["job"]["dump_folder"], comm["save_traces_folder"])
    values = {"TORCHTPU_FR_BUFFER_SIZE": str(comm["trace_buf_size"]),
              "TORCHTPU_FR_DUMP_FILE": os.path.join(os.path.abspath(folder), "rank_")}
    for key, value in values.items():
        if key not in os.environ or _FR_SET.get(key) == os.environ[key]:
            os.environ[key] = _FR_SET[key] = value  # ours (an earlier run's): this run's


_FR_SET = {}  # the flight-recorder variables this module set, and to what


def stop_requested(flag, par):
    """Whether any rank asks to stop (preemption): every rank learns it at
    the same step, so all save the same checkpoint. One small all_reduce of
    a host tensor per step where several ranks run, on the world group (the
    "tpu" group serves host tensors through its gloo: a rank missing here is
    reported as any hung collective is)."""
    if not par.enabled:
        return bool(flag)
    t = torch.tensor([1 if flag else 0], dtype=torch.int32)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


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
    return _cached_group("g")


def _cached_group(key):
    """A gloo group made once per process group (a later init_process_group,
    e.g. after a restart in-process, gets new ones)."""
    g = _CPU.get(key)
    if g is None or g not in dist.distributed_c10d._world.pg_map:
        g = _CPU[key] = dist.new_group(backend="gloo")
    return g


def full(t):
    """A DTensor (FSDP2's grad norm) as a plain tensor."""
    from torch.distributed.tensor import DTensor
    return t.full_tensor() if isinstance(t, DTensor) else t


# --- sharded checkpoints (torch.distributed.checkpoint) --------------------------------

def _dcp_path(folder, step):
    return os.path.join(folder, f"step-{step}.dcp")


def dcp_steps(folder):
    """Steps of the complete (published, with DCP's metadata) checkpoints."""
    if not os.path.isdir(folder):
        return []
    steps = []
    for name in os.listdir(folder):
        if (name.startswith("step-") and name.endswith(".dcp")
                and os.path.exists(os.path.join(folder, name, ".metadata"))):
            try:
                steps.append(int(name[5:-4]))
            except ValueError:
                pass
    return sorted(steps)


def _publish(folder, step, keep_latest_k):
    """Rank 0, once every rank's shards and the metadata are written."""
    final = _dcp_path(folder, step)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(final + ".tmp", final)
    if keep_latest_k > 0:
        for old in dcp_steps(folder)[:-keep_latest_k]:
            shutil.rmtree(_dcp_path(folder, old), ignore_errors=True)


class PendingSave:
    """An asynchronous DCP save in flight: wait() returns its path once every
    rank's shards are written and rank 0 published the folder."""

    def __init__(self, future, path):
        self.future, self.path = future, path

    def done(self):
        return self.future.done()

    def wait(self):
        self.future.result()  # raises the save's error, if any
        return self.path


def dcp_save(model, optimizer, extra, folder, step, keep_latest_k, par, async_save=False):
    """Every rank writes its shards; rank 0 publishes the folder by a rename.
    async_save: the shards are staged to host memory now and written on a
    thread; returns a PendingSave (the caller waits for it before the next
    save), else the path."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(unwrap(model) if par.shard == 1 else model, optimizer)
    final = _dcp_path(folder, step)
    tmp = final + ".tmp"
    if par.is_main:
        os.makedirs(folder, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    dist.barrier()
    state = {"model": msd, "optimizer": osd, "extra": extra}
    if async_save:
        # Its planning and metadata collectives run on the writer thread: a
        # gloo group of their own keeps them apart from the step's.
        future = dcp.async_save(state, checkpoint_id=tmp, process_group=_checkpoint_group())
        if par.is_main:
            done = future
            future = _then(done, lambda: _publish(folder, step, keep_latest_k))
        return PendingSave(future, final)
    dcp.save(state, checkpoint_id=tmp)
    dist.barrier()
    if par.is_main:
        _publish(folder, step, keep_latest_k)
    dist.barrier()
    return final


def _then(future, fn):
    """A future done when `future` is and fn() ran after it (rank 0 publishes
    on the writer's completion, not at the next step boundary: a rank killed
    meanwhile leaves the checkpoint published)."""
    from concurrent.futures import Future
    out = Future()

    def after(f):
        try:
            f.result()
            fn()
            out.set_result(None)
        except BaseException as e:  # noqa: BLE001 (handed to whoever waits)
            out.set_exception(e)
    future.add_done_callback(after)
    return out


def _checkpoint_group():
    return _cached_group("ckpt")


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
