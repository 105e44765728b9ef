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

__all__ = ["ProcessGroupTPU", "transport", "info", "BACKEND_NAMES"]

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
