"""torch_xla.core.xla_model (xm) on torchtpu's eager "tpu" device.

    import torch_xla.core.xla_model as xm
    device = xm.xla_device()            # torch.device("tpu", local ordinal)
    loss.backward(); xm.optimizer_step(opt)   # grads averaged over processes
    xm.mark_step()                      # runs fused eager's graph, then step closures

Eager, not lazy: every op has already been launched when mark_step comes,
so mark_step only runs the pending fused-eager graph (TORCH_TPU_DEFER_AND_FUSE=1)
and the step closures. Collectives run on torchtpu's "tpu" c10d backend over
the processes xmp.spawn / torch_xla.launch / torchrun started (see _world.py).
`groups` (lists of replica ids) are honoured by gathering from every process
and reducing within the caller's group on the device."""
import io
from collections import OrderedDict
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

import torchtpu

from .. import _device, _world

REDUCE_SUM = "sum"
REDUCE_MUL = "mul"
REDUCE_AND = "and"
REDUCE_OR = "or"
REDUCE_MIN = "min"
REDUCE_MAX = "max"

_OPS = {REDUCE_SUM: dist.ReduceOp.SUM, REDUCE_MUL: dist.ReduceOp.PRODUCT,
        REDUCE_AND: dist.ReduceOp.BAND, REDUCE_OR: dist.ReduceOp.BOR,
        REDUCE_MIN: dist.ReduceOp.MIN, REDUCE_MAX: dist.ReduceOp.MAX}


def _unsupported(api, instead):
    return NotImplementedError(f"{api} is not supported on torchtpu: {instead} "
                               "(docs/migrating_from_torch_xla.md)")


# --- devices and ordinals ------------------------------------------------------------

def xla_device(n=None, devkind=None):
    """This process's device, torch.device("tpu", local ordinal); `n` picks
    the n-th device of this process (one per process when launched)."""
    del devkind
    if n is None:
        return _device.tpu_device()
    devices = get_xla_supported_devices()
    if not 0 <= n < len(devices):
        raise IndexError(f"xla_device({n}): device index out of range in {devices}")
    return torch.device(devices[n])


def get_xla_supported_devices(devkind=None, max_devices=None):
    """The devices of this process as strings ("tpu:i"): this process's one
    device when launched, every device of the plugin otherwise."""
    del devkind
    if _world.launched():
        names = [f"tpu:{_world.local_rank()}"]
    else:
        names = [f"tpu:{i}" for i in range(torch.tpu.device_count())]
    return names[:max_devices] if max_devices else names


def xla_device_hw(device):
    """The hardware behind `device`: "TPU", "CPU" (XLA's CPU plugin) or "CUDA"."""
    del device
    return torchtpu.runtime_info()["platform"].upper()


def is_xla_tensor(tensor):
    return tensor.device.type == "tpu"


def xrt_world_size(defval=1):
    del defval
    return _world.world_size()


def get_ordinal(defval=0):
    del defval
    return _world.rank()


def get_local_ordinal(defval=0):
    del defval
    return _world.local_rank()


def is_master_ordinal(local=True):
    return (get_local_ordinal() if local else get_ordinal()) == 0


def master_print(*args, fd=sys.stdout, finalize=False):
    """print(*args) on the global master only."""
    del finalize
    if is_master_ordinal(local=False):
        print(*args, file=fd, flush=True)


def xla_replication_devices(local_devices=None):
    del local_devices
    return [f"tpu:{i}" for i in range(_world.world_size())]


def set_replication(device, devices):
    """Replication is the process group's (one process per device): nothing to set."""
    del device, devices


# --- steps -----------------------------------------------------------------------------

_closures = []
_async = None
_steps = 0  # mark_step calls (met's MarkStep counter)


def add_step_closure(closure, args=(), run_async=False):
    """Runs closure(*args) at the next mark_step / torch_xla.sync, after the
    step's work, in the order added; run_async closures run on one background
    thread in their order, the step does not wait for them."""
    _closures.append((closure, tuple(args), run_async))


def _run_step_closures():
    global _async
    closures, _closures[:] = list(_closures), []
    for closure, args, run_async in closures:
        if run_async:
            if _async is None:
                _async = ThreadPoolExecutor(1, thread_name_prefix="xla_step_closure")
            _async.submit(closure, *args)
        else:
            closure(*args)


def mark_step(wait=False, reset_scope=True):
    """Ends a step: runs the pending fused-eager graph (there is none in
    strict eager, where every op has already been launched), waits for the
    device when `wait`, then runs the step closures."""
    global _steps
    del reset_scope
    _steps += 1
    torchtpu.sync()
    if wait:
        torch.tpu.synchronize()
    _run_step_closures()


def wait_device_ops(devices=()):
    """Waits until every launched program has finished."""
    del devices
    torch.tpu.synchronize()


def unlazy(tensors):
    """Materialises pending (fused) work: eager tensors are always computed."""
    del tensors
    torchtpu.sync()


# --- collectives --------------------------------------------------------------------

def _gather_all(t):
    """[rank 0's t, rank 1's t, ...] (every rank's tensor of t's shape)."""
    pg = _world.group()
    outs = [torch.empty_like(t) for _ in range(_world.world_size())]
    pg.allgather([outs], [t.contiguous()]).wait()
    return outs


def _members(groups):
    """The replica ids of the caller's group (every rank when groups is empty)."""
    if not groups:
        return list(range(_world.world_size()))
    me = _world.rank()
    for g in groups:
        if me in g:
            return list(g)
    raise ValueError(f"rank {me} is in none of the replica groups {groups}")


def _reduce_list(values, reduce_type):
    out = values[0].clone()
    for v in values[1:]:
        if reduce_type == REDUCE_SUM:
            out = out + v
        elif reduce_type == REDUCE_MUL:
            out = out * v
        elif reduce_type == REDUCE_MIN:
            out = torch.minimum(out, v)
        elif reduce_type == REDUCE_MAX:
            out = torch.maximum(out, v)
        elif reduce_type == REDUCE_AND:
            out = out & v
        elif reduce_type == REDUCE_OR:
            out = out | v
    return out


def _check_type(reduce_type):
    if reduce_type not in _OPS:
        raise ValueError(f"all_reduce: reduce_type {reduce_type!r}: expected one of "
                         f"{', '.join(map(repr, _OPS))}")


def _all_reduce_tensor(reduce_type, t, scale, groups):
    """A new tensor: t reduced over the caller's group, times scale."""
    if _world.world_size() == 1:
        out = t.clone()
    elif groups and len(_members(groups)) != _world.world_size():
        everyone = _gather_all(t)
        out = _reduce_list([everyone[r] for r in _members(groups)], reduce_type)
    else:
        out = t.clone()
        opts = dist.AllreduceOptions()
        opts.reduceOp = _OPS[reduce_type]
        _world.group().allreduce([out], opts).wait()
    if scale != 1.0:
        out.mul_(scale)
    return out


def all_reduce(reduce_type, inputs, scale=1.0, groups=None, pin_layout=True):
    """A tensor: returns the reduced tensor (times scale). A list of tensors:
    reduces each in place and returns the list. reduce_type: xm.REDUCE_SUM,
    REDUCE_MUL, REDUCE_MIN, REDUCE_MAX, REDUCE_AND, REDUCE_OR."""
    del pin_layout
    _check_type(reduce_type)
    if isinstance(inputs, torch.Tensor):
        return _all_reduce_tensor(reduce_type, inputs, scale, groups)
    tensors = list(inputs)
    if not tensors:
        return inputs
    if _world.world_size() > 1 and not groups and reduce_type == REDUCE_SUM and \
            len({t.dtype for t in tensors}) == 1:
        flat = _flatten_dense_tensors([t.detach() for t in tensors])  # one collective
        reduced = _all_reduce_tensor(reduce_type, flat, scale, groups)
        for t, r in zip(tensors, _unflatten_dense_tensors(reduced, tensors)):
            t.copy_(r)
        return inputs
    for t in tensors:
        t.copy_(_all_reduce_tensor(reduce_type, t, scale, groups))
    return inputs


def all_gather(value, dim=0, groups=None, output=None, pin_layout=True):
    """Every group member's `value` concatenated along `dim` (in rank order)."""
    del pin_layout
    if _world.world_size() == 1:
        parts = [value]
    else:
        everyone = _gather_all(value)
        parts = [everyone[r] for r in _members(groups)]
    result = torch.cat(parts, dim=dim)
    if output is not None:
        output.copy_(result)
        return output
    return result


def reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count, groups=None,
                   output=None, pin_layout=True):
    """`input` reduced over the group (times scale), split into shard_count
    pieces along scatter_dim; returns the caller's piece (its place in the
    group). A list of tensors reduce-scatters each and returns a list."""
    del pin_layout
    _check_type(reduce_type)
    if isinstance(input, (list, tuple)):
        outs = [reduce_scatter(reduce_type, t, scale, scatter_dim, shard_count, groups)
                for t in input]
        if output is not None:
            for o, r in zip(output, outs):
                o.copy_(r)
            return output
        return outs
    members = _members(groups)
    if shard_count != len(members):
        raise ValueError(f"reduce_scatter: shard_count {shard_count} differs from the "
                         f"group size {len(members)}")
    reduced = _all_reduce_tensor(reduce_type, input, scale, groups)
    piece = reduced.chunk(shard_count, dim=scatter_dim)[members.index(_world.rank())]
    if output is not None:
        output.copy_(piece)
        return output
    return piece.contiguous()


def all_to_all(value, split_dimension, concat_dimension, split_count, groups=None,
               pin_layout=True):
    """Splits `value` into split_count pieces along split_dimension, sends the
    i-th to the group's i-th member, concatenates what it receives along
    concat_dimension."""
    del pin_layout
    members = _members(groups)
    if split_count != len(members):
        raise ValueError(f"all_to_all: split_count {split_count} differs from the group "
                         f"size {len(members)}")
    me = members.index(_world.rank())
    everyone = _gather_all(value) if _world.world_size() > 1 else [value]
    parts = [everyone[r].chunk(split_count, dim=split_dimension)[me] for r in members]
    return torch.cat(parts, dim=concat_dimension)


def collective_permute(value, pairs):
    """pairs: [[source, target], ...]: each target receives its source's
    `value`; a rank no pair targets receives zeros."""
    everyone = _gather_all(value) if _world.world_size() > 1 else [value]
    for source, target in pairs:
        if target == _world.rank():
            return everyone[source].clone()
    return torch.zeros_like(value)


def send(value, channel_id):
    raise _unsupported("torch_xla.core.xla_model.send",
                       "use torch.distributed.send on the 'xla'/'tpu' process group")


def recv(output, channel_id):
    raise _unsupported("torch_xla.core.xla_model.recv",
                       "use torch.distributed.recv on the 'xla'/'tpu' process group")


_rendezvous_rounds = {}


def rendezvous(tag, payload=b"", replicas=()):
    """Waits for every process to reach the rendezvous `tag`; returns every
    process's payload (bytes), in rank order."""
    if replicas:
        raise _unsupported("rendezvous(replicas=...)", "rendezvous with all processes")
    payload = bytes(payload)
    if _world.world_size() == 1:
        return [payload]
    n = _rendezvous_rounds.get(tag, 0)
    _rendezvous_rounds[tag] = n + 1
    store = _world.store()
    key = f"rendezvous/{tag}/{n}/"
    store.set(key + str(_world.rank()), payload)
    keys = [key + str(r) for r in range(_world.world_size())]
    store.wait(keys)
    return [bytes(store.get(k)) for k in keys]


def _to_cpu(data):
    return _map(data, lambda t: t.detach().cpu() if t.device.type != "cpu" else t.detach())


def _map(data, fn):
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, dict):
        items = [(k, _map(v, fn)) for k, v in data.items()]
        out = type(data)(items) if type(data) in (dict, OrderedDict) else dict(items)
        if hasattr(data, "_metadata"):  # a state_dict's versions
            out._metadata = data._metadata
        return out
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_map(v, fn) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(_map(v, fn) for v in data)
    return data


def mesh_reduce(tag, data, reduce_fn):
    """reduce_fn([every process's data]) (tensors go through the host), the
    same on every process."""
    buf = io.BytesIO()
    torch.save(_to_cpu(data), buf)
    payloads = rendezvous(tag, buf.getvalue())
    values = [torch.load(io.BytesIO(p), weights_only=False) for p in payloads]
    return reduce_fn(values)


# --- training -------------------------------------------------------------------------

def reduce_gradients(optimizer, groups=None, pin_layout=True):
    """Averages the gradients of `optimizer`'s parameters over the processes
    (one all-reduce per gradient dtype)."""
    del pin_layout
    world = len(_members(groups)) if groups else _world.world_size()
    if world == 1:
        return
    grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    by_dtype = {}
    for g in grads:
        by_dtype.setdefault(g.dtype, []).append(g)
    for same in by_dtype.values():
        all_reduce(REDUCE_SUM, same, scale=1.0 / world, groups=groups)


def optimizer_step(optimizer, barrier=False, optimizer_args={}, groups=None, pin_layout=True):  # noqa: B006
    """reduce_gradients(optimizer) then optimizer.step(**optimizer_args);
    barrier: mark_step after. Returns what step returned."""
    reduce_gradients(optimizer, groups=groups, pin_layout=pin_layout)
    loss = optimizer.step(**optimizer_args)
    if barrier:
        mark_step()
    return loss


def save(data, file_or_path, master_only=True, global_master=False):
    """torch.save of `data` with every tensor moved to the CPU (loadable
    without torchtpu), written by the master process only (the local master
    unless global_master); every process waits for it."""
    cpu = _to_cpu(data)
    if not master_only or is_master_ordinal(local=not global_master):
        torch.save(cpu, file_or_path)
    if master_only and _world.world_size() > 1:
        rendezvous("torch_xla.core.xla_model.save")


def send_cpu_data_to_device(datas, device, input_sharding=None):
    """Moves every tensor in `datas` to `device` (a list in, a list out)."""
    del input_sharding
    device = _device.map_device(device)
    return _map(datas, lambda t: t.to(device))


def set_rng_state(seed, device=None):
    """Seeds the tpu generator(s) of this process."""
    del device
    torch.tpu.manual_seed(int(seed))


def get_rng_state(device=None):
    """The seed of this process's tpu generator."""
    del device
    return torch.tpu.initial_seed()


def get_memory_info(device=None):
    """{"bytes_used", "bytes_limit", "peak_bytes_used"} of the device."""
    idx = _device.map_device(device).index if device is not None else None
    free, total = torch.tpu.mem_get_info(idx)
    return {"bytes_used": torch.tpu.memory_allocated(idx), "bytes_limit": total,
            "peak_bytes_used": torch.tpu.max_memory_allocated(idx)}


def get_stablehlo(tensors=None):
    raise _unsupported("torch_xla.core.xla_model.get_stablehlo",
                       "torchtpu.testing.hlo_dump prints the StableHLO of tpu programs")


class RateTracker:
    """Samples per second: rate() smoothed over update() calls, global_rate()
    since the tracker was made."""

    def __init__(self, smooth_factor=None):
        self._smooth = 0.4 if smooth_factor is None else smooth_factor
        self._start = self._last = time.monotonic()
        self._total = 0  # samples since start
        self._pending = 0  # samples add()ed since the last update
        self._rate = None

    def update(self, count):
        """Records `count` samples done since the last update; returns rate()."""
        now = time.monotonic()
        count += self._pending
        self._pending = 0
        self._total += count
        elapsed = now - self._last
        if elapsed > 0:
            r = count / elapsed
            self._rate = r if self._rate is None else \
                r * self._smooth + self._rate * (1.0 - self._smooth)
        self._last = now
        return self.rate()

    def add(self, count):
        self._pending += count

    def rate(self):
        return self._rate or 0.0

    def global_rate(self):
        elapsed = time.monotonic() - self._start
        return (self._total + self._pending) / elapsed if elapsed > 0 else 0.0


def __getattr__(name):
    raise AttributeError(f"torch_xla.core.xla_model.{name} is not provided by torchtpu's "
                         "migration layer (docs/migrating_from_torch_xla.md)")

