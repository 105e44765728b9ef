"""What each rank runs in tests/test_sync_batchnorm.py (started by
torchtpu.testing.multiprocess.run): a small CNN with nn.SyncBatchNorm under
DDP on "tpu", each rank training on its half of a global batch."""
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import torchtpu  # noqa: F401


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Conv2d(4, 2, 3), nn.BatchNorm2d(2, affine=False), nn.Flatten(),
                         nn.Linear(2 * 6 * 6, 3))


def batches(steps, batch):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(batch, 3, 8, 8, generator=g), torch.randint(0, 3, (batch,), generator=g))
            for _ in range(steps)]


def train(args):
    """Losses (of the global batch), parameters and running statistics."""
    dist.init_process_group(timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
    m = nn.SyncBatchNorm.convert_sync_batchnorm(model()).to("tpu")
    if args.get("channels_last"):
        m = m.to(memory_format=torch.channels_last)
    ddp = DDP(m)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in batches(args["steps"], args["batch"]):
        xs = x.chunk(world)[rank].to("tpu")
        if args.get("channels_last"):
            xs = xs.to(memory_format=torch.channels_last)
        loss = nn.functional.cross_entropy(ddp(xs), y.chunk(world)[rank].to("tpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / world)
    state = {k: v.cpu().tolist() for k, v in m.state_dict().items() if v.is_floating_point()}
    dist.destroy_process_group()
    return {"losses": losses, "state": state}
