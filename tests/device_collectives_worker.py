"""Runs every device collective on the N "tpu" devices of this process
(TORCHTPU_CPU_DEVICES=N) and checks it against the same collective computed
with torch on CPU copies; prints "ALL OK" at the end. Used by
tests/test_device_collectives.py in a subprocess (the device count is fixed
when the runtime starts)."""
import os
import sys

import torch
import torch.distributed as dist

import torchtpu  # noqa: F401
from torchtpu.distributed import device_collectives as dc

N = int(os.environ["TORCHTPU_CPU_DEVICES"])
DTYPES = [torch.float32, torch.bfloat16, torch.int32, torch.int64]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.PRODUCT,
       dist.ReduceOp.MIN, dist.ReduceOp.MAX]
failures = []
checks = [0]


def make(i, dtype, shape, strided):
    g = torch.Generator().manual_seed(1234 + i)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g).to(dtype)
    elif dtype == torch.int64:
        # int64 extremes included (MIN/MAX must be exact there).
        x = torch.randint(-5, 6, shape, generator=g, dtype=dtype)
        x.view(-1)[0] = torch.iinfo(torch.int64).min + i
        x.view(-1)[1] = torch.iinfo(torch.int64).max - i
    else:
        x = torch.randint(-5, 6, shape, generator=g, dtype=dtype)
    if strided:  # a transposed view over a bigger storage, at an offset
        big = torch.zeros((shape[1] + 1, shape[0]), dtype=dtype)
        big[1:].copy_(x.t())
        d = big.to(f"tpu:{i}")[1:].t()
        assert not d.is_contiguous() and d.storage_offset() > 0
        return x, d
    return x, x.to(f"tpu:{i}")


def ref_reduce(xs, op):
    s = torch.stack([x.double() if x.is_floating_point() else x for x in xs])
    if op == dist.ReduceOp.SUM:
        r = s.sum(0)
    elif op == dist.ReduceOp.AVG:
        r = s.sum(0) / len(xs) if s.is_floating_point() else torch.div(s.sum(0), len(xs), rounding_mode="trunc")
    elif op == dist.ReduceOp.PRODUCT:
        r = s.prod(0)
    elif op == dist.ReduceOp.MIN:
        r = s.min(0).values
    else:
        r = s.max(0).values
    return r.to(xs[0].dtype)


def compare(what, got, want):
    checks[0] += 1
    got = got.cpu()
    if got.shape != want.shape or got.dtype != want.dtype:
        failures.append(f"{what}: got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}")
        return
    if not want.is_floating_point():
        if not torch.equal(got, want):
            failures.append(f"{what}: ints differ: {got.flatten()[:8].tolist()} vs {want.flatten()[:8].tolist()}")
        return
    # f32: <= 1e-6 relative (summation order differs); bf16: the device
    # reduces in bf16, the reference in double rounded once.
    rtol = 1e-6 if want.dtype == torch.float32 else 2e-2
    g, w = got.double(), want.double()
    err = ((g - w).abs() / w.abs().clamp_min(1e-3 if want.dtype == torch.float32 else 1e-1)).max().item()
    if err > rtol:
        failures.append(f"{what}: max rel err {err:.3g} > {rtol}")


def int_safe(op, dtype):
    # PRODUCT/SUM/AVG of int64 extremes overflow: the reference wraps the
    # same way only for SUM; keep the extremes out of those.
    return not (dtype == torch.int64 and op in (dist.ReduceOp.PRODUCT, dist.ReduceOp.SUM, dist.ReduceOp.AVG))


def inputs(dtype, shape, strided, op=None):
    pairs = [make(i, dtype, shape, strided) for i in range(N)]
    cpu = [p[0] for p in pairs]
    dev = [p[1] for p in pairs]
    if op is not None and not int_safe(op, dtype):
        for c, d in zip(cpu, dev):
            c.view(-1)[:2] = 3
            d.copy_(c)
    return cpu, dev


def main():
    shape = (2 * N, 3)
    for dtype in DTYPES:
        for strided in (False, True):
            tag = f"{dtype} {'strided' if strided else 'dense'}"
            for op in OPS:
                cpu, dev = inputs(dtype, shape, strided, op)
                want = ref_reduce(cpu, op)
                dc.all_reduce(dev, op)
                for i, d in enumerate(dev):
                    compare(f"all_reduce {op} {tag} dev{i}", d, want)
            cpu, dev = inputs(dtype, shape, strided)
            outs = [torch.empty((N * shape[0], shape[1]), dtype=dtype, device=f"tpu:{i}") for i in range(N)]
            dc.all_gather_into_tensor(outs, dev)
            for i, o in enumerate(outs):
                compare(f"all_gather {tag} dev{i}", o, torch.cat(cpu))
            for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
                cpu, dev = inputs(dtype, shape, strided, op)
                outs = [torch.empty((shape[0] // N, shape[1]), dtype=dtype, device=f"tpu:{i}") for i in range(N)]
                dc.reduce_scatter_tensor(outs, dev, op)
                full = ref_reduce(cpu, op)
                for i, o in enumerate(outs):
                    compare(f"reduce_scatter {op} {tag} dev{i}", o, full.chunk(N)[i])
            cpu, dev = inputs(dtype, shape, strided)
            outs = [torch.empty(shape, dtype=dtype, device=f"tpu:{i}") for i in range(N)]
            dc.all_to_all_single(outs, dev)
            for i, o in enumerate(outs):
                compare(f"all_to_all {tag} dev{i}", o, torch.cat([c.chunk(N)[i] for c in cpu]))
            for src in (0, N - 1):
                cpu, dev = inputs(dtype, shape, strided)
                dc.broadcast(dev, src)
                for i, d in enumerate(dev):
                    compare(f"broadcast src={src} {tag} dev{i}", d, cpu[src])
    # A strided output view (written through a temporary).
    outs_big = [torch.zeros((N * shape[0], shape[1] * 2), device=f"tpu:{i}") for i in range(N)]
    cpu, dev = inputs(torch.float32, shape, False)
    dc.all_gather_into_tensor([o[:, ::2] for o in outs_big], dev)
    for i, o in enumerate(outs_big):
        compare(f"all_gather into strided view dev{i}", o[:, ::2], torch.cat(cpu))
        compare(f"all_gather leaves the rest dev{i}", o[:, 1::2], torch.zeros(N * shape[0], shape[1]))

    # Storages are untyped bytes: a uint8 storage viewed as float32 (its
    # buffer holds uint8) and a float32 storage viewed as uint8.
    cpu = [torch.randint(0, 60, (4 * shape[0],), dtype=torch.uint8) for _ in range(N)]
    dev = [torch.empty(4 * shape[0], dtype=torch.uint8, device=f"tpu:{i}") for i in range(N)]
    for c, d in zip(cpu, dev):
        d.copy_(c)
    dc.all_reduce([d.view(torch.float32) for d in dev], dist.ReduceOp.MAX)
    want = torch.stack([c.view(torch.float32) for c in cpu]).max(0).values
    for i, d in enumerate(dev):
        compare(f"all_reduce of a uint8 storage as float32 dev{i}", d.view(torch.float32), want)
    cpu, dev = inputs(torch.float32, shape, False)
    outs = [torch.empty(N * cpu[0].numel() * 4, dtype=torch.uint8, device=f"tpu:{i}") for i in range(N)]
    dc.all_gather_into_tensor(outs, [d.view(torch.uint8) for d in dev])
    for i, o in enumerate(outs):
        compare(f"all_gather of a float32 storage as uint8 dev{i}", o, torch.cat([c.view(-1).view(torch.uint8) for c in cpu]))

    # A second identical call compiles nothing.
    cpu, dev = inputs(torch.float32, shape, False)
    dc.all_reduce(dev)
    before = torch.tpu._get_cache_stats()["compiles"]
    cpu, dev = inputs(torch.float32, shape, False)
    dc.all_reduce(dev)
    after = torch.tpu._get_cache_stats()["compiles"]
    if after != before:
        failures.append(f"second all_reduce compiled {after - before} program(s)")

    # Mismatched inputs: a clear error naming the collective, device, shapes.
    dev = [torch.ones(4, device=f"tpu:{i}") for i in range(N)]
    dev[-1] = torch.ones(5, device=f"tpu:{N - 1}")
    try:
        dc.all_reduce(dev)
        failures.append("mismatched shapes did not raise")
    except RuntimeError as e:
        msg = str(e)
        if not ("all_reduce" in msg and f"device {N - 1}" in msg and "[5]" in msg and "[4]" in msg):
            failures.append(f"unclear shape error: {msg}")
    dev = [torch.ones(4, device=f"tpu:{i}") for i in range(N)]
    dev[-1] = torch.ones(4, dtype=torch.int32, device=f"tpu:{N - 1}")
    try:
        dc.all_reduce(dev)
        failures.append("mismatched dtypes did not raise")
    except RuntimeError as e:
        if not ("all_reduce" in str(e) and "int32" in str(e) and "float32" in str(e)):
            failures.append(f"unclear dtype error: {e}")
    try:
        dc.all_reduce([torch.ones(4, device="tpu:0")] * N)
        failures.append("tensors on the wrong devices did not raise")
    except RuntimeError as e:
        if "tpu:1" not in str(e):
            failures.append(f"unclear device error: {e}")
    if not dc.available():
        failures.append("available() is False")

    for f in failures:
        print("FAIL", f)
    print(f"{checks[0]} comparisons on {N} devices")
    print("ALL OK" if not failures else f"{len(failures)} FAILURES")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
