"""torch.distributed on "tpu": the c10d backend "tpu" (also "tpu_dist", the
name Google's TorchTPU uses).

    torchrun --nproc_per_node=2 train.py
        import torch, torch.distributed as dist, torchtpu
        dist.init_process_group()          # "tpu" is the default for tpu jobs
        torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
        model = DDP(model.to("tpu"))       # or fully_shard(model), DTensor ...

`import torchtpu` registers the backend; dist.init_process_group() with no
backend picks it (torch picks the accelerator's default backend), and it
serves both "tpu" and CPU tensors. The collectives run on the host through
PyTorch's gloo (see _host.py); transport() says so, as do the process group's
.transport and torchtpu.runtime_info()["distributed"]."""
import torch.distributed as dist

from .. import _env
from ._host import TRANSPORT, ProcessGroupTPU

__all__ = ["ProcessGroupTPU", "transport", "info", "set_timeout", "BACKEND_NAMES"]

BACKEND_NAMES = ("tpu", "tpu_dist")


def _create(store, rank, size, timeout):
    return ProcessGroupTPU(store, rank, size, timeout, check=_env.dist_check())


def _register():
    """Registers the backend names once (called by `import torchtpu`)."""
    if not dist.is_available():
        return
    for name in BACKEND_NAMES:
        if name not in dist.Backend.backend_list:
            dist.Backend.register_backend(name, _create, devices=["cpu", "tpu"])
    # register_backend maps "tpu" only if no backend claimed the device yet.
    dist.Backend.default_device_backend_map["tpu"] = "tpu"
    if not hasattr(dist, "set_timeout"):
        dist.set_timeout = set_timeout


def set_timeout(timeout, group=None):
    """torch.distributed.set_timeout(timeout, group=None), which PyTorch after
    2.13 has and TorchTitan 0.3.0 calls after the first step (it shortens the
    timeouts once compilation is done): sets the timeout of `group`'s later
    collectives (default: the world group) through ProcessGroup.set_timeout.
    `import torchtpu` installs it only where torch.distributed lacks it."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    pg.set_timeout(timeout)


def transport():
    """The transport the "tpu" backend uses: "host (gloo)"."""
    return TRANSPORT


def info():
    """{"backend", "transport", "initialized", "rank", "world_size"}."""
    out = {"backend": "tpu", "transport": TRANSPORT, "initialized": False,
           "rank": 0, "world_size": 1}
    if dist.is_available() and dist.is_initialized():
        world = dist.group.WORLD
        out.update(initialized=True, rank=dist.get_rank(), world_size=dist.get_world_size(),
                   backend="tpu" if isinstance(world, ProcessGroupTPU) else dist.get_backend(),
                   transport=getattr(world, "transport", dist.get_backend()))
    return out
