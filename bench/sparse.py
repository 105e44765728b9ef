"""Sparse workloads on "tpu" against PyTorch's CPU eager in the same run.

Rows (steady state: after --warmup untimed iterations, the median of
--iters timed ones, each ending in a host read so asynchronous launches are
counted):

  spmm      torch.sparse.mm(A, X): A an N x N COO matrix with --density
            non-zeros, X dense N x 64 (a GCN layer's aggregation)
  dense     the same product with A dense (what sparse saves or costs)
  gcn_step  a 2-layer GCN training step (forward, backward, SGD) over A
  rec_step  an EmbeddingBag(sparse=True) + MLP step with SparseAdam (the
            batch's ids distinct, so nnz is the same every step)

    python bench/sparse.py [--n 2048] [--density 0.002] [--iters 20]

Prints one line per row: cpu ms, tpu ms, tpu/cpu.
"""
import argparse
import statistics
import time
import warnings

import torch
import torch.nn.functional as F

import torchtpu

warnings.filterwarnings("ignore")


def timed(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torchtpu.wait_compiles()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def adjacency(n, density, gen):
    nnz = max(1, int(n * n * density))
    idx = torch.randint(0, n, (2, nnz), generator=gen)
    return torch.sparse_coo_tensor(idx, torch.rand(nnz, generator=gen), (n, n)).coalesce()


def rows(args):
    gen = torch.Generator().manual_seed(0)
    a_cpu = adjacency(args.n, args.density, gen)
    x_cpu = torch.randn(args.n, 64, generator=gen)
    labels = torch.randint(0, 8, (args.n,), generator=gen)

    def spmm(dev):
        a, x = a_cpu.to(dev), x_cpu.to(dev)
        return lambda: torch.sparse.mm(a, x).sum().item()

    def dense(dev):
        a, x = a_cpu.to_dense().to(dev), x_cpu.to(dev)
        return lambda: torch.mm(a, x).sum().item()

    def gcn_step(dev):
        torch.manual_seed(0)
        w1, w2 = torch.nn.Linear(64, 32).to(dev), torch.nn.Linear(32, 8).to(dev)
        opt = torch.optim.SGD(list(w1.parameters()) + list(w2.parameters()), lr=0.1)
        a, x, y = a_cpu.to(dev), x_cpu.to(dev), labels.to(dev)

        def step():
            opt.zero_grad()
            out = torch.sparse.mm(a, w2(torch.sparse.mm(a, w1(x)).relu()))
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            return loss.item()
        return step

    def rec_step(dev):
        torch.manual_seed(0)
        emb = torch.nn.EmbeddingBag(50_000, 32, mode="sum", sparse=True).to(dev)
        mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                  torch.nn.Linear(64, 1)).to(dev)
        opts = [torch.optim.SparseAdam(emb.parameters()), torch.optim.Adam(mlp.parameters())]
        g = torch.Generator().manual_seed(1)

        def step():
            ids = torch.randperm(50_000, generator=g)[:512].to(dev)
            off = torch.arange(0, 512, 8, device=dev)
            y = torch.randint(0, 2, (64,), generator=g).float().to(dev)
            for o in opts:
                o.zero_grad()
            loss = F.binary_cross_entropy_with_logits(mlp(emb(ids, off)).squeeze(1), y)
            loss.backward()
            for o in opts:
                o.step()
            return loss.item()
        return step

    return {"spmm": spmm, "dense": dense, "gcn_step": gcn_step, "rec_step": rec_step}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--density", type=float, default=0.002)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    print(f"N={args.n} density={args.density} iters={args.iters} "
          f"({torchtpu.runtime_info()['platform']} plugin)")
    print(f"{'row':10s} {'cpu ms':>9s} {'tpu ms':>9s} {'tpu/cpu':>8s}")
    for name, make in rows(args).items():
        cpu = timed(make("cpu"), args.warmup, args.iters)
        tpu = timed(make("tpu"), args.warmup, args.iters)
        print(f"{name:10s} {cpu:9.2f} {tpu:9.2f} {tpu / cpu:8.2f}", flush=True)


if __name__ == "__main__":
    main()
