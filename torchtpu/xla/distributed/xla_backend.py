"""torch_xla.distributed.xla_backend: the c10d backend "xla" and the "xla://"
rendezvous, mapped onto torchtpu's "tpu" backend.

    import torch_xla.distributed.xla_backend
    dist.init_process_group("xla", init_method="xla://")

"xla" makes the same process group as "tpu" (ProcessGroupTPU: DDP, FSDP2,
DTensor and the collectives on "tpu" tensors). "xla://" takes rank, world
size and the store's address from the launcher's environment (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT: set by xmp.spawn, torch_xla.launch and
torchrun), as env:// does; a process started without them is rank 0 of 1.
Importing torch_xla registers both, as importing this module does."""
import importlib
import os
from urllib.parse import parse_qs, urlparse

import torch.distributed as dist

from ...distributed import ProcessGroupTPU, _create
from ...testing.multiprocess import free_port

# The module (torch.distributed.rendezvous, the name, is also its function).
_rdv = importlib.import_module("torch.distributed.rendezvous")

BACKEND = "xla"
ProcessGroupXla = ProcessGroupTPU


def _xla_rendezvous(url, timeout=None, **kwargs):
    query = {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}
    rank = int(query.get("rank", os.environ.get("RANK", 0)))
    world = int(query.get("world_size", os.environ.get("WORLD_SIZE", 1)))
    if world == 1 and "MASTER_PORT" not in os.environ:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(free_port())
    extra = {"timeout": timeout} if timeout is not None else {}
    yield from _rdv.rendezvous("env://", rank=rank, world_size=world, **extra)


def register():
    """Registers the "xla" backend and the "xla://" scheme (idempotent)."""
    if not dist.is_available():
        return
    if BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "tpu"])
        dist.Backend.default_device_backend_map["tpu"] = "tpu"
    try:
        _rdv.register_rendezvous_handler("xla", _xla_rendezvous)
    except RuntimeError:
        pass  # registered already


register()
