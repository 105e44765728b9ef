"""Who this process is in a PyTorch/XLA-style job, and the process group the
torch_xla collectives (xm.all_reduce, optimizer_step, rendezvous ...) use.

PyTorch/XLA knows ranks from its runtime, without init_process_group. Here
they come from the launcher's environment, the one torchrun sets (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), which
xmp.spawn / torch_xla.launch set for their processes too. The variables are
torchrun's, not torchtpu settings, so they are read here and not in
torchtpu/_env.py.

The collectives run on a private ProcessGroupTPU (torchtpu's "tpu" c10d
backend) made on first use on its own store prefix, so a script may call
dist.init_process_group("xla") before or after its first xm collective, or
never."""
import datetime
import os

import torch.distributed as dist

_group = None
_store = None


def _int(name, default):
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() else default


def rank():
    """Global ordinal: RANK, else 0."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return _int("RANK", 0)


def world_size():
    """Processes in the job: WORLD_SIZE, else 1."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return _int("WORLD_SIZE", 1)


def local_rank():
    return _int("LOCAL_RANK", rank())


def local_world_size():
    return _int("LOCAL_WORLD_SIZE", world_size())


def launched():
    """True in a process started by xmp.spawn, torch_xla.launch or torchrun."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def store():
    """The job's key-value store (a TCPStore on MASTER_ADDR:MASTER_PORT, shared
    with init_process_group's through multi-tenancy or torchrun's agent)."""
    global _store
    if _store is None:
        if world_size() > 1 and dist.is_initialized():
            base = dist.distributed_c10d._get_default_store()
        else:
            addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
            port = _int("MASTER_PORT", -1)
            if port < 0:
                raise RuntimeError(
                    f"torch_xla collectives on {world_size()} processes need MASTER_PORT: run "
                    "the script through `python -m torchtpu.xla`, xmp.spawn, torch_xla.launch "
                    "or torchrun")
            agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
            base = dist.TCPStore(addr, port, world_size(), is_master=(rank() == 0 and not agent),
                                 timeout=datetime.timedelta(minutes=30),
                                 **({} if agent else {"multi_tenant": True}))
        _store = dist.PrefixStore("torchtpu.xla/", base)
    return _store


def group():
    """The process group of the torch_xla collectives (None on one process)."""
    global _group
    if world_size() == 1:
        return None
    if _group is None:
        from ..distributed import _create

        _group = _create(dist.PrefixStore("group/", store()), rank(), world_size(),
                         datetime.timedelta(minutes=30))
    return _group
