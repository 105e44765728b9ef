"""nn.SyncBatchNorm on "tpu" (lower/norm_sync.c): its per-channel statistics
kernels (batch_norm_stats, batch_norm_gather_stats_with_counts,
batch_norm_elemt, batch_norm_backward_reduce, batch_norm_backward_elemt) are
CUDA-only in PyTorch. Each is checked against the same quantity computed with
CPU ops; then DDP training with SyncBatchNorm on 2 ranks, each with half of
the global batch, must give step by step the losses, parameters and running
statistics of one CPU process training plain BatchNorm on the whole batch."""
import os

import pytest
import torch

from torchtpu.testing import native_only
from torchtpu.testing.multiprocess import run

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ENV = {"PYTHONPATH": os.pathsep.join([REPO, HERE, os.environ.get("PYTHONPATH", "")])}


def rnd(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def close(got, want, tol=1e-5):
    torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 5), (2, 3, 4, 5)])
def test_statistics_kernels_against_cpu_formulas(shape):
    eps, momentum = 1e-5, 0.1
    x = rnd(*shape)
    dims = [d for d in range(x.dim()) if d != 1]
    # Two "ranks": the first and the second half of the batch.
    parts = x.chunk(2)
    with native_only():
        stats = [torch.batch_norm_stats(p.to("tpu"), eps) for p in parts]
        for (mean, invstd), p in zip(stats, parts):
            close(mean, p.mean(dims))
            close(invstd, (p.var(dims, unbiased=False) + eps).rsqrt())
        means = torch.stack([s[0] for s in stats])
        invstds = torch.stack([s[1] for s in stats])
        counts = torch.tensor([p.numel() / p.shape[1] for p in parts], device="tpu")
        rm, rv = torch.zeros(shape[1], device="tpu"), torch.ones(shape[1], device="tpu")
        mean, invstd = torch.batch_norm_gather_stats_with_counts(
            x.to("tpu"), means, invstds, rm, rv, momentum, eps, counts)
        close(mean, x.mean(dims))
        close(invstd, (x.var(dims, unbiased=False) + eps).rsqrt())
        close(rm, momentum * x.mean(dims))
        close(rv, (1 - momentum) + momentum * x.var(dims, unbiased=True))
        w, b = rnd(shape[1], seed=1), rnd(shape[1], seed=2)
        bshape = [1, shape[1]] + [1] * (x.dim() - 2)
        norm = (x - x.mean(dims, keepdim=True)) * (x.var(dims, unbiased=False, keepdim=True) + eps).rsqrt()
        y = torch.batch_norm_elemt(x.to("tpu"), w.to("tpu"), b.to("tpu"), mean, invstd, eps)
        close(y, norm * w.view(bshape) + b.view(bshape))
        close(torch.batch_norm_elemt(x.to("tpu"), None, None, mean, invstd, eps), norm)
        # Backward against autograd of batch_norm on the whole batch.
        dy = rnd(*shape, seed=3)
        xr = x.clone().requires_grad_()
        wr = w.clone().requires_grad_()
        br = b.clone().requires_grad_()
        torch.nn.functional.batch_norm(xr, None, None, wr, br, True, 0.0, eps).backward(dy)
        sum_dy, sum_dy_xmu, gw, gb = torch.batch_norm_backward_reduce(
            dy.to("tpu"), x.to("tpu"), mean, invstd, w.to("tpu"), True, True, True)
        close(gw, wr.grad, 1e-4)
        close(gb, br.grad, 1e-4)
        gx = torch.batch_norm_backward_elemt(dy.to("tpu"), x.to("tpu"), mean, invstd, w.to("tpu"),
                                             sum_dy, sum_dy_xmu,
                                             counts.to(torch.int32).view(-1, 1))
        close(gx, xr.grad, 1e-4)


def single_process(steps, batch):
    import syncbn_workers as w
    m = w.model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in w.batches(steps, batch):
        loss = torch.nn.functional.cross_entropy(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v for k, v in m.state_dict().items() if v.is_floating_point()}


@pytest.mark.parametrize("channels_last", [False, True])
def test_two_ranks_match_one_process_on_the_whole_batch(channels_last):
    import sys
    sys.path.insert(0, HERE)
    steps, batch = 3, 8
    results = run("syncbn_workers:train", 2, timeout=300, env=ENV,
                  args={"steps": steps, "batch": batch, "channels_last": channels_last})
    want_losses, want_state = single_process(steps, batch)
    for r in results:
        torch.testing.assert_close(torch.tensor(r["losses"]), torch.tensor(want_losses),
                                   rtol=1e-4, atol=1e-5)
        for k, v in want_state.items():
            torch.testing.assert_close(torch.tensor(r["state"][k]), v, rtol=1e-4, atol=1e-4,
                                       msg=lambda m, k=k: f"{k}: {m}")
