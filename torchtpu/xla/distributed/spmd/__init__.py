"""torch_xla.distributed.spmd (xs) on torchtpu: meshes and shardings mapped
onto DTensor.

PyTorch/XLA's SPMD is single-controller: one process drives every device and
mark_sharding annotates a tensor in place. torchtpu runs one process per
device (torchrun, xmp.spawn), so the faithful mapping is DTensor:

    mesh = xs.Mesh(range(n), (n,), ("data",))     # n = number of processes
    w = xs.mark_sharding(w, mesh, ("data", None))  # a DTensor: w's value, Shard(0)

mark_sharding returns a DTensor with the tensor's value, sharded as the
partition spec says (axis name or index per tensor dim: Shard on that mesh
dim; None: replicated), over a DeviceMesh("tpu") of the job's processes
(the default process group is started through "xla://" when needed). The
tensor passed is not changed in place: use the returned one (computations
on either give the same values). A mesh of one device needs no sharding:
mark_sharding returns the tensor itself. Everything else (a multi-device
mesh in one process, several mesh axes on one tensor dim, manual sharding,
auto-sharding, SPMD FSDP) raises NotImplementedError naming the API and the
torchtpu way."""
import math
from collections import OrderedDict

import numpy as np
import torch
import torch.distributed as dist

GUIDE = "docs/migrating_from_torch_xla.md"
_DTENSOR = ("torch.distributed.tensor.distribute_tensor over a "
            "torch.distributed.device_mesh.init_device_mesh('tpu', shape) under torchrun")


def _unsupported(api, instead=_DTENSOR):
    return NotImplementedError(f"torch_xla.distributed.spmd.{api} is not supported on torchtpu; "
                               f"use {instead} ({GUIDE})")


class Mesh:
    """A logical mesh of device ids (here: ranks of the job, one device each)."""

    def __init__(self, device_ids, mesh_shape, axis_names=None):
        ids = np.asarray(list(device_ids))
        if ids.size != math.prod(mesh_shape):
            raise ValueError(f"Mesh: {ids.size} device ids do not fill a mesh of shape "
                             f"{tuple(mesh_shape)}")
        if axis_names is not None and len(axis_names) != len(mesh_shape):
            raise ValueError(f"Mesh: {len(axis_names)} axis names for {len(mesh_shape)} axes")
        self.device_ids = ids
        self.mesh_shape = tuple(mesh_shape)
        self.axis_names = tuple(axis_names) if axis_names is not None else None
        self._device_mesh = None

    def size(self):
        return int(self.device_ids.size)

    def shape(self):
        names = self.axis_names or tuple(range(len(self.mesh_shape)))
        return OrderedDict(zip(names, self.mesh_shape))

    def get_logical_mesh(self):
        return self.device_ids.reshape(self.mesh_shape)

    def get_axis_name_idx(self, name):
        if self.axis_names is None or name not in self.axis_names:
            return None
        return self.axis_names.index(name)

    def _mesh_dim(self, entry):
        if isinstance(entry, int):
            return entry
        idx = self.get_axis_name_idx(entry)
        if idx is None:
            raise ValueError(f"mark_sharding: {entry!r} is not an axis of the mesh "
                             f"{self.axis_names}")
        return idx

    def get_device_mesh(self):
        """The torch DeviceMesh("tpu") over the job's processes with this
        mesh's layout (the device ids are ranks)."""
        if self._device_mesh is None:
            from torch.distributed.device_mesh import DeviceMesh
            _ensure_process_group(self)
            self._device_mesh = DeviceMesh("tpu", torch.as_tensor(self.get_logical_mesh()),
                                           mesh_dim_names=self.axis_names)
        return self._device_mesh


class HybridMesh(Mesh):
    """PyTorch/XLA's ICI x DCN mesh: one host here, so the axes multiply."""

    def __init__(self, *, ici_mesh_shape, dcn_mesh_shape=None, axis_names=None):
        dcn = dcn_mesh_shape or (1,) * len(ici_mesh_shape)
        shape = tuple(i * d for i, d in zip(ici_mesh_shape, dcn))
        super().__init__(range(math.prod(shape)), shape, axis_names)


def _ensure_process_group(mesh):
    from ... import _world
    if not dist.is_initialized():
        if not _world.launched() or _world.world_size() == 1:
            raise _unsupported(
                f"mark_sharding over a {mesh.size()}-device mesh in one process (PyTorch/XLA's "
                "single-controller SPMD)",
                "one process per device (torchrun, or xmp.spawn / torch_xla.launch through "
                f"`python -m torchtpu.xla`) and {_DTENSOR}")
        from .. import xla_backend  # noqa: F401  "xla" and xla://
        dist.init_process_group("xla", init_method="xla://")
    if dist.get_world_size() != mesh.size():
        raise ValueError(f"Mesh of {mesh.size()} devices in a job of {dist.get_world_size()} "
                         "processes: torchtpu maps a mesh onto the job's processes (one device "
                         "each), so their numbers must match")


def _placements(mesh, spec, ndim):
    from torch.distributed.tensor import Replicate, Shard
    if len(spec) != ndim:
        raise ValueError(f"mark_sharding: partition spec {tuple(spec)} has {len(spec)} entries "
                         f"for a {ndim}-d tensor")
    placements = [Replicate() for _ in mesh.mesh_shape]
    for dim, entry in enumerate(spec):
        if entry is None:
            continue
        if isinstance(entry, tuple):
            raise _unsupported(f"mark_sharding with several mesh axes {entry} on one tensor dim",
                               "one mesh axis per tensor dim (DTensor's Shard(dim) per mesh dim)")
        placements[mesh._mesh_dim(entry)] = Shard(dim)
    return placements


_global_mesh = None


def set_global_mesh(mesh):
    global _global_mesh
    _global_mesh = mesh


def get_global_mesh():
    return _global_mesh


def mark_sharding(t, mesh, partition_spec):
    """The tensor `t` as a DTensor sharded by `partition_spec` over `mesh`
    (see the module doc); a one-device mesh returns `t`."""
    mesh = mesh or _global_mesh
    _placements(mesh, partition_spec, t.dim())  # checks the spec even on one device
    if mesh.size() == 1:
        return t
    from torch.distributed.tensor import distribute_tensor
    return distribute_tensor(t, mesh.get_device_mesh(),
                             _placements(mesh, partition_spec, t.dim()))


def clear_sharding(t):
    """The tensor's full value (a DTensor is gathered)."""
    from torch.distributed.tensor import DTensor
    return t.full_tensor() if isinstance(t, DTensor) else t


def enable_manual_sharding(t, partition_spec, *, mesh=None):
    raise _unsupported("enable_manual_sharding",
                       "DTensor.to_local() (the shard of each process) and DTensor.from_local()")


def disable_manual_sharding(t, partition_spec, full_shape, *, mesh=None):
    raise _unsupported("disable_manual_sharding", "DTensor.from_local(t, mesh, placements)")


def mark_sharding_with_gradients(t, mesh, partition_spec):
    raise _unsupported("mark_sharding_with_gradients",
                       "distribute_tensor (DTensor gradients follow the tensor's placements)")


def apply_backward_optimization_barrier(module):
    raise _unsupported("apply_backward_optimization_barrier", "nothing: eager needs no barrier")


class ShardingSpec:
    def __init__(self, *args, **kwargs):
        raise _unsupported("ShardingSpec", "DTensor placements (Shard, Replicate)")


class XLAShardedTensor:
    def __init__(self, *args, **kwargs):
        raise _unsupported("XLAShardedTensor", "torch.distributed.tensor.DTensor")


class SpmdFullyShardedDataParallel:
    def __init__(self, *args, **kwargs):
        raise _unsupported("SpmdFullyShardedDataParallel",
                           "FSDP2 torch.distributed.fsdp.fully_shard under torchrun")


def __getattr__(name):
    raise AttributeError(f"torch_xla.distributed.spmd.{name} is not provided by torchtpu's "
                         f"migration layer ({GUIDE})")
