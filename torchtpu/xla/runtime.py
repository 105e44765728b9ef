"""torch_xla.runtime (xr) on torchtpu: ranks, device counts, the SPMD switch,
the persistent compilation cache.

One process per device (xmp.spawn, torch_xla.launch or torchrun): world_size()
is the number of processes, global_ordinal() this one's rank, and each
process addresses one device."""
import torch

import torchtpu

from . import _world


def world_size():
    """Processes in the job (1 under SPMD, as in PyTorch/XLA)."""
    return 1 if _spmd else _world.world_size()


def global_ordinal():
    return 0 if _spmd else _world.rank()


def local_ordinal():
    return 0 if _spmd else _world.local_rank()


def process_index():
    return _world.rank()


def process_count():
    return _world.world_size()


def host_index():
    """Index of this host: hosts are not told apart here (one host)."""
    return 0


def local_process_count():
    return _world.local_world_size()


def addressable_device_count():
    """Devices this process drives: one when launched, else the plugin's."""
    return 1 if _world.launched() else torch.tpu.device_count()


def local_device_count():
    """Devices on this host."""
    return _world.local_world_size() if _world.launched() else torch.tpu.device_count()


def global_device_count():
    return _world.world_size() if _world.launched() else torch.tpu.device_count()


def global_runtime_device_count():
    return global_device_count()


def addressable_runtime_device_count():
    return addressable_device_count()


def device_type():
    """The PJRT platform backing "tpu": "TPU", "CUDA" or "CPU" (XLA's CPU plugin)."""
    return torchtpu.runtime_info()["platform"].upper()


def using_pjrt():
    return True


def get_master_ip():
    import os
    return os.environ.get("MASTER_ADDR", "127.0.0.1")


def initialize_cache(path, readonly=False):
    """torchtpu's persistent compilation cache in `path` (TORCHTPU_CACHE_DIR).
    readonly is not supported: the cache writes what it compiles."""
    if readonly:
        raise NotImplementedError(
            "torch_xla.runtime.initialize_cache(readonly=True) is not supported on torchtpu: "
            "its persistent cache writes every program it compiles; use "
            "torchtpu.set_cache_dir(path) (docs/migrating_from_torch_xla.md)")
    torchtpu.set_cache_dir(path)


_spmd = False


def use_spmd(auto=False):
    """Marks the process as SPMD (xs.Mesh / xs.mark_sharding). Sharding maps
    onto DTensor over the processes of a torch.distributed job (one device
    each), see torch_xla.distributed.spmd; auto-sharding is not supported."""
    global _spmd
    if auto:
        raise NotImplementedError(
            "torch_xla.runtime.use_spmd(auto=True): XLA's auto-sharding is not supported on "
            "torchtpu; shard explicitly with DTensor (torch.distributed.tensor.distribute_tensor "
            "over a DeviceMesh('tpu', ...)) or FSDP2 fully_shard under torchrun "
            "(docs/migrating_from_torch_xla.md)")
    _spmd = True


def is_spmd():
    return _spmd


def __getattr__(name):
    raise AttributeError(f"torch_xla.runtime.{name} is not provided by torchtpu's migration "
                         "layer (docs/migrating_from_torch_xla.md)")
