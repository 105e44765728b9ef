"""What each rank runs in the distributed tests (test_distributed*.py), one
function per launch, started by torchtpu.testing.multiprocess.run. Each
function returns a JSON-able value the test checks; none asserts itself
unless noted (the parent reports which case differs)."""
import os
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import torchtpu

R = dist.ReduceOp


def _init(args):
    mode = args.get("mode", "strict")
    torchtpu.set_mode(mode)
    dist.init_process_group(timeout=timedelta(seconds=args.get("timeout", 60)))
    torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
    return dist.get_rank(), dist.get_world_size()


def _finish():
    dist.destroy_process_group()


# --- collectives against gloo on CPU copies -------------------------------------------

def _data(shape, dtype, seed, kind="any"):
    g = torch.Generator().manual_seed(seed)
    if kind == "prod":
        if dtype.is_floating_point:
            return (0.5 + torch.rand(shape, generator=g)).to(dtype)
        return torch.randint(1, 4, shape, generator=g).to(dtype)
    if kind == "big" and dtype == torch.int64:
        return torch.randint(-2**40, 2**40, shape, generator=g) * 2**20 - 2**62
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-100, 100, shape, generator=g).to(dtype)


class _Pair:
    """A tpu tensor (contiguous, or a strided view into a larger tpu tensor)
    and a CPU contiguous copy of the same values for the gloo reference."""

    def __init__(self, shape, dtype, seed, strided, kind="any"):
        shape = tuple(shape)
        if strided:
            big = _data(shape[:-1] + (2 * shape[-1],), dtype, seed, kind)
            self.base_cpu = big.clone()
            self.base = big.to("tpu")
            self.tpu = self.base[..., ::2]
            self.cpu = big[..., ::2].contiguous()
        else:
            self.base = None
            self.cpu = _data(shape, dtype, seed, kind)
            self.tpu = self.cpu.to("tpu")

    def untouched(self):
        """The elements of the base a strided view skips must not change."""
        if self.base is None:
            return True
        return torch.equal(self.base.cpu()[..., 1::2], self.base_cpu[..., 1::2])


def _close(got, want):
    got = got.cpu()
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}"
    if want.dtype.is_floating_point:
        try:
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        except AssertionError as e:
            return str(e).splitlines()[-1][:300]
        return None
    if not torch.equal(got, want):
        return f"values differ: max diff {(got.long() - want.long()).abs().max().item()}"
    return None


def _cases(rank, world):
    """(name, fn(strided) -> error or None)."""
    ref = _cases.ref
    cases = []
    n = 6  # elements per rank chunk (last dim)

    def seed(i):
        return 1000 * i + rank

    # all_reduce: every op x dtype
    dtypes = [torch.float32, torch.bfloat16, torch.int32, torch.int64]
    ops = [("sum", R.SUM), ("avg", R.AVG), ("min", R.MIN), ("max", R.MAX), ("product", R.PRODUCT)]
    for dt in dtypes:
        for opname, op in ops:
            if op == R.AVG and not dt.is_floating_point:
                continue  # gloo averages floating types only (as NCCL's users do)
            def f(strided, dt=dt, op=op, opname=opname):
                p = _Pair((3, n), dt, seed(1), strided, "prod" if op == R.PRODUCT else "any")
                dist.all_reduce(p.tpu, op=op)
                dist.all_reduce(p.cpu, op=op, group=ref)
                return _close(p.tpu, p.cpu) or (None if p.untouched() else "base changed")
            cases.append((f"all_reduce_{opname}_{str(dt)[6:]}", f))

    def f(strided):
        p = _Pair((2, n), torch.int64, seed(2), strided, "big")
        dist.all_reduce(p.tpu, op=R.MIN)
        dist.all_reduce(p.cpu, op=R.MIN, group=ref)
        return _close(p.tpu, p.cpu)
    cases.append(("all_reduce_min_int64_big", f))

    def f(strided):
        p = _Pair((2, n), torch.float32, seed(3), strided)
        w = dist.all_reduce(p.tpu, async_op=True)
        w.wait()
        y = p.tpu * 2  # ordered after the collective
        dist.all_reduce(p.cpu, group=ref)
        return _close(y, p.cpu * 2)
    cases.append(("all_reduce_async_wait", f))

    def f(strided):
        p = _Pair((4, n), torch.float32, seed(4), strided)
        dist.broadcast(p.tpu, src=world - 1)
        dist.broadcast(p.cpu, src=world - 1, group=ref)
        return _close(p.tpu, p.cpu) or (None if p.untouched() else "base changed")
    cases.append(("broadcast", f))

    for opname, op in (("sum", R.SUM), ("max", R.MAX)):
        def f(strided, op=op):
            p = _Pair((2, n), torch.float32, seed(5), strided)
            before = p.tpu.cpu()
            dist.reduce(p.tpu, dst=0, op=op)
            dist.reduce(p.cpu, dst=0, op=op, group=ref)
            if rank == 0:
                return _close(p.tpu, p.cpu)
            return _close(p.tpu, before)  # non-root input unchanged
        cases.append((f"reduce_{opname}", f))

    for dt in (torch.float32, torch.int64, torch.bfloat16):
        def f(strided, dt=dt):
            p = _Pair((2, n), dt, seed(6), strided)
            outs = [torch.empty(2, n, dtype=dt, device="tpu") for _ in range(world)]
            if strided:
                outs = [torch.zeros(2, 2 * n, dtype=dt, device="tpu")[:, ::2] for _ in range(world)]
            refs = [torch.empty(2, n, dtype=dt) for _ in range(world)]
            dist.all_gather(outs, p.tpu)
            dist.all_gather(refs, p.cpu, group=ref)
            for o, r_ in zip(outs, refs):
                err = _close(o, r_)
                if err:
                    return err
            return None
        cases.append((f"all_gather_{str(dt)[6:]}", f))

    for layout in ("flat", "stacked"):
        def f(strided, layout=layout):
            p = _Pair((2, n), torch.float32, seed(7), strided)
            shape = (world * 2, n) if layout == "flat" else (world, 2, n)
            out = torch.empty(shape, device="tpu")
            want = torch.empty(world * 2, n)  # gloo takes the flat layout only
            dist.all_gather_into_tensor(out, p.tpu)
            dist.all_gather_into_tensor(want, p.cpu, group=ref)
            return _close(out, want.view(shape))
        cases.append((f"all_gather_into_tensor_{layout}", f))

    for opname, op in (("sum", R.SUM), ("avg", R.AVG), ("max", R.MAX)):
        def f(strided, op=op):
            p = _Pair((world * 2, n), torch.float32, seed(8), strided)
            out = torch.empty(2, n, device="tpu")
            want = torch.empty(2, n)
            dist.reduce_scatter_tensor(out, p.tpu, op=op)
            dist.reduce_scatter_tensor(want, p.cpu, op=op, group=ref)
            return _close(out, want)
        cases.append((f"reduce_scatter_tensor_{opname}", f))

    # PREMUL_SUM(f): NCCL's (each input times f, then summed), as FSDP2 uses for
    # gradient division; gloo has none, so its reference is SUM of inputs * f.
    for fname, factor in (("float", 0.5), ("tensor", torch.tensor(0.25, device="tpu"))):
        def f(strided, factor=factor):
            fcpu = factor.cpu() if isinstance(factor, torch.Tensor) else factor
            p = _Pair((world * 2, n), torch.float32, seed(8), strided)
            before = p.tpu.cpu()
            out = torch.empty(2, n, device="tpu")
            want = torch.empty(2, n)
            dist.reduce_scatter_tensor(out, p.tpu, op=dist._make_nccl_premul_sum(factor))
            dist.reduce_scatter_tensor(want, p.cpu * fcpu, group=ref)
            q = _Pair((3, n), torch.float32, seed(12), strided)
            dist.all_reduce(q.tpu, op=dist._make_nccl_premul_sum(factor))
            q.cpu.mul_(fcpu)
            dist.all_reduce(q.cpu, group=ref)
            return (_close(out, want) or _close(p.tpu, before) or _close(q.tpu, q.cpu)
                    or (None if q.untouched() else "base changed"))
        cases.append((f"premul_sum_{fname}", f))

    def f(strided):
        ins = [_Pair((2, n), torch.int32, seed(9) + 10 * i, strided) for i in range(world)]
        out = torch.empty(2, n, dtype=torch.int32, device="tpu")
        want = torch.empty(2, n, dtype=torch.int32)
        dist.reduce_scatter(out, [p.tpu for p in ins])
        dist.reduce_scatter(want, [p.cpu for p in ins], group=ref)
        return _close(out, want)
    cases.append(("reduce_scatter_list_int32", f))

    def f(strided):
        p = _Pair((world * 2, n), torch.float32, seed(10), strided)
        out, want = torch.empty(world * 2, n, device="tpu"), torch.empty(world * 2, n)
        dist.all_to_all_single(out, p.tpu)
        dist.all_to_all_single(want, p.cpu, group=ref)
        return _close(out, want)
    cases.append(("all_to_all_single_even", f))

    def f(strided):
        # rank r sends i + r + 1 rows to rank i, so receives r + j + 1 from rank j
        in_splits = [i + rank + 1 for i in range(world)]
        out_splits = [rank + j + 1 for j in range(world)]
        p = _Pair((sum(in_splits), n), torch.int64, seed(11), strided)
        out = torch.empty(sum(out_splits), n, dtype=torch.int64, device="tpu")
        want = torch.empty(sum(out_splits), n, dtype=torch.int64)
        dist.all_to_all_single(out, p.tpu, out_splits, in_splits)
        dist.all_to_all_single(want, p.cpu, out_splits, in_splits, group=ref)
        return _close(out, want)
    cases.append(("all_to_all_single_uneven", f))

    def f(strided):
        ins = [_Pair((i + 1, n), torch.float32, seed(12) + 10 * i, strided) for i in range(world)]
        outs = [torch.empty(rank + 1, n, device="tpu") for _ in range(world)]
        dist.all_to_all(outs, [p.tpu for p in ins])
        # gloo's all_to_all wants equal shapes: the reference is the uneven single form
        want = torch.empty(world * (rank + 1), n)
        dist.all_to_all_single(want, torch.cat([p.cpu for p in ins]), [rank + 1] * world,
                               [i + 1 for i in range(world)], group=ref)
        return next((e for e in map(_close, outs, want.split(rank + 1)) if e), None)
    cases.append(("all_to_all_list", f))

    def f(strided):
        p = _Pair((2, n), torch.float32, seed(13), strided)
        outs = [torch.empty(2, n, device="tpu") for _ in range(world)] if rank == 0 else None
        wants = [torch.empty(2, n) for _ in range(world)] if rank == 0 else None
        dist.gather(p.tpu, outs, dst=0)
        dist.gather(p.cpu, wants, dst=0, group=ref)
        return next((e for e in map(_close, outs, wants) if e), None) if rank == 0 else None
    cases.append(("gather", f))

    def f(strided):
        ins = [_Pair((2, n), torch.float32, seed(14) + 10 * i, strided) for i in range(world)]
        out = torch.empty(2, n, device="tpu")
        if strided:
            out = torch.zeros(2, 2 * n, device="tpu")[:, ::2]
        want = torch.empty(2, n)
        dist.scatter(out, [p.tpu for p in ins] if rank == 0 else None, src=0)
        dist.scatter(want, [p.cpu for p in ins] if rank == 0 else None, src=0, group=ref)
        return _close(out, want)
    cases.append(("scatter", f))

    def f(strided):
        # ring, irecv posted before isend on every rank
        p = _Pair((2, n), torch.float32, seed(15), strided)
        got = torch.zeros(2, 2 * n, device="tpu")[:, ::2] if strided else torch.zeros(2, n, device="tpu")
        want = torch.zeros(2, n)
        r_ = dist.irecv(got, src=(rank - 1) % world)
        s_ = dist.isend(p.tpu, dst=(rank + 1) % world)
        r_.wait()
        s_.wait()
        r2 = dist.irecv(want, src=(rank - 1) % world, group=ref)
        s2 = dist.isend(p.cpu, dst=(rank + 1) % world, group=ref)
        r2.wait()
        s2.wait()
        return _close(got, want)
    cases.append(("send_recv_ring", f))

    def f(strided):
        ops, want = [], torch.zeros(2, n)
        p = _Pair((2, n), torch.float32, seed(16), strided)
        got = torch.zeros(2, n, device="tpu")
        ops = [dist.P2POp(dist.irecv, got, (rank - 1) % world),
               dist.P2POp(dist.isend, p.tpu, (rank + 1) % world)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        for w in dist.batch_isend_irecv([dist.P2POp(dist.irecv, want, (rank - 1) % world, ref),
                                         dist.P2POp(dist.isend, p.cpu, (rank + 1) % world, ref)]):
            w.wait()
        return _close(got, want)
    cases.append(("batch_isend_irecv", f))

    def f(strided):
        ps = [_Pair((k + 1, n), torch.float32, seed(17) + k, strided) for k in range(3)]
        dist.all_reduce_coalesced([p.tpu for p in ps])
        dist.all_reduce_coalesced([p.cpu for p in ps], group=ref)
        return next((e for e in (_close(p.tpu, p.cpu) for p in ps) if e), None)
    cases.append(("all_reduce_coalesced", f))

    def f(strided):
        ps = [_Pair((k + 1, n), torch.float32, seed(18) + k, strided) for k in range(3)]
        with dist._coalescing_manager(async_ops=True) as cm:
            for p in ps:
                dist.all_reduce(p.tpu)
        cm.wait()
        for p in ps:
            dist.all_reduce(p.cpu, group=ref)
        return next((e for e in (_close(p.tpu, p.cpu) for p in ps) if e), None)
    cases.append(("coalescing_manager_all_reduce", f))

    def f(strided):
        ps = [_Pair((k + 1, n), torch.float32, seed(20) + k, strided) for k in range(2)]
        gathered = [torch.empty(world * (k + 1), n, device="tpu") for k in range(2)]
        big = [_Pair((world * (k + 1), n), torch.float32, seed(21) + k, strided)
               for k in range(2)]
        scattered = [torch.empty(k + 1, n, device="tpu") for k in range(2)]
        with dist._coalescing_manager():
            for o, p in zip(gathered, ps):
                dist.all_gather_into_tensor(o, p.tpu)
        with dist._coalescing_manager():
            for o, p in zip(scattered, big):
                dist.reduce_scatter_tensor(o, p.tpu)
        errs = []
        for k in range(2):
            wg = torch.empty(world * (k + 1), n)
            dist.all_gather_into_tensor(wg, ps[k].cpu, group=ref)
            ws = torch.empty(k + 1, n)
            dist.reduce_scatter_tensor(ws, big[k].cpu, group=ref)
            errs += [_close(gathered[k], wg), _close(scattered[k], ws)]
        return next((e for e in errs if e), None)
    cases.append(("coalescing_manager_gather_scatter", f))

    def f(strided):
        import torch.distributed._functional_collectives as fc
        p = _Pair((world * 2, n), torch.float32, seed(19), strided)
        g = dist.group.WORLD
        a = fc.all_reduce(p.tpu, "sum", g)
        b = fc.all_gather_tensor(p.tpu, 0, g)
        c = fc.reduce_scatter_tensor(p.tpu, "sum", 0, g)
        d = fc.all_to_all_single(p.tpu, None, None, g)
        wa = p.cpu.clone()
        dist.all_reduce(wa, group=ref)
        wb = torch.empty(world * world * 2, n)
        dist.all_gather_into_tensor(wb, p.cpu, group=ref)
        wc = torch.empty(2, n)
        dist.reduce_scatter_tensor(wc, p.cpu, group=ref)
        wd = torch.empty(world * 2, n)
        dist.all_to_all_single(wd, p.cpu, group=ref)
        return next((e for e in map(_close, (a, b, c, d), (wa, wb, wc, wd)) if e), None)
    cases.append(("functional_collectives", f))

    def f(strided):
        dist.barrier()
        objs = [None] * world
        dist.all_gather_object(objs, {"rank": rank})
        return None if objs == [{"rank": r} for r in range(world)] else f"objects {objs}"
    cases.append(("barrier_and_objects", f))
    return cases


def collectives(args):
    """{case name: None (agrees with gloo) or what differs}, contiguous and
    strided inputs ("name" and "name/strided")."""
    rank, world = _init(args)
    _cases.ref = dist.new_group(backend="gloo")
    results = {}
    for name, fn in _cases(rank, world):
        for strided in (False, True):
            key = name + ("/strided" if strided else "")
            try:
                results[key] = fn(strided)
            except Exception:
                results[key] = traceback.format_exc()[-1500:]
    results["_info"] = torchtpu.runtime_info()["distributed"]
    _finish()
    return results


# --- launch, MPMD, failures ------------------------------------------------------------

def devices(args):
    """What a rank sees after torchrun-style launch and set_device(LOCAL_RANK)."""
    rank, world = _init(args)
    x = torch.ones(2, device="tpu")
    out = {"device_count": torch.tpu.device_count(), "current": torch.tpu.current_device(),
           "tensor": str(x.device), "default": str(torch.empty(1, device="tpu").device)}
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(torch.nn.Linear(3, 2).to("tpu"))  # no device_ids
    m(torch.ones(4, 3, device="tpu")).sum().backward()
    out["ddp_grad_device"] = str(m.module.weight.grad.device)
    _finish()
    return out


def mpmd(args):
    """Rank-divergent Python around collectives: a save on rank 0 only, .item()
    and printing on rank 1 only, different op sequences per rank. Returns the
    values of the collectives that follow."""
    rank, world = _init(args)
    x = torch.arange(4.0, device="tpu") + rank
    if rank == 0:
        torch.save({"x": x, "w": torch.randn(3, 3, device="tpu")}, args["path"])
    else:
        print("rank", rank, "sees", x.sum().item(), x)
    # different op sequences per rank, then a collective on the result
    y = x
    for _ in range(rank + 1):
        y = torch.tanh(y) * 2 + 1
    if rank == world - 1:
        y = y.exp().log()
    dist.all_reduce(y)
    value = y.cpu().tolist()
    if rank == 0:
        z = torch.zeros(3, device="tpu")
        dist.broadcast(z, src=1)
        got = z.tolist()
    else:
        z = torch.full((3,), 7.0, device="tpu") if rank == 1 else torch.zeros(3, device="tpu")
        _ = (z * 3).sum()  # pending work on this rank only
        dist.broadcast(z, src=1)
        got = z.cpu().tolist()
    dist.barrier()
    loaded = None
    if rank == 0:
        loaded = torch.load(args["path"])["x"].cpu().tolist()
    _finish()
    return {"all_reduce": value, "broadcast": got, "loaded": loaded}


def mismatches(args):
    """Each kind of disagreement in turn on one group (after the check raised
    on every rank the group is still in step); {kind: error text}, and an
    all_reduce afterwards still works."""
    rank, world = _init(args)
    out = {kind: _mismatch(kind, rank, world)["error"] for kind in args["kinds"]}
    t = torch.ones(3, device="tpu")
    dist.all_reduce(t)
    out["after"] = t.cpu().tolist()
    _finish()
    return out


def mismatch(args):
    """Ranks disagree, or one dies; returns the error text and the time."""
    rank, world = _init(args)
    return _mismatch(args["kind"], rank, world)


def _mismatch(kind, rank, world):
    import time
    t0 = time.monotonic()
    try:
        if kind == "shape":
            dist.all_reduce(torch.ones(2 + rank, 3, device="tpu"))
        elif kind == "dtype":
            dist.all_reduce(torch.ones(4, device="tpu",
                                       dtype=torch.float32 if rank == 0 else torch.int32))
        elif kind == "op":
            t = torch.ones(4, device="tpu")
            dist.all_reduce(t) if rank == 0 else dist.broadcast(t, src=0)
        elif kind == "dead":
            if rank == world - 1:
                os._exit(3)  # dies without a word
            dist.all_reduce(torch.ones(4, device="tpu"))
        error = None
    except Exception as e:  # noqa: BLE001 - the text is what the test checks
        error = f"{type(e).__name__}: {e}"
    return {"error": error, "seconds": time.monotonic() - t0}


# --- the trainer on many ranks ----------------------------------------------------------

def train(args):
    """torchtpu.train.train on this rank; returns {"losses": {step: loss}}."""
    from torchtpu import train as trainer
    from torchtpu.trainer.config import load_config
    torchtpu.set_mode(args.get("mode", "strict"))
    torchtpu.set_fallback_mode("silent")
    cfg = load_config(overrides=args["cfg"])
    out = trainer.train(cfg, log=print)
    result = {"losses": {str(k): v for k, v in out["losses"].items()},
              "grad_norms": {str(k): v for k, v in out["grad_norms"].items()},
              "world": out["parallel"].world, "shard": out["parallel"].shard,
              "replicate": out["parallel"].replicate,
              "wrapped": type(out["model"]).__name__}
    if dist.is_initialized():
        dist.destroy_process_group()
    return result


def train_runs(args):
    """Several trainer runs, one after the other, in one launch (one process
    group): args["cfgs"] is {name: cfg}. Returns {name: {"losses",
    "grad_norms", "compile" (training.compile's report), "wrapped"}}; a
    run's checkpoint folder may be the next run's resume source."""
    from torchtpu import train as trainer
    from torchtpu.trainer.config import load_config
    torchtpu.set_mode(args.get("mode", "strict"))
    torchtpu.set_fallback_mode("silent")
    results = {}
    for name, cfg in args["cfgs"].items():
        out = trainer.train(load_config(overrides=cfg), log=print)
        results[name] = {"losses": {str(k): v for k, v in out["losses"].items()},
                         "grad_norms": {str(k): v for k, v in out["grad_norms"].items()},
                         "compile": out["compile"], "wrapped": type(out["model"]).__name__,
                         "param": _placements(out["model"].output._parameters["weight"])}
    if dist.is_initialized():
        dist.destroy_process_group()
    return results


def _placements(p):
    return f"DTensor{tuple(p.placements)}" if hasattr(p, "placements") else type(p).__name__


# --- MoE load balancing over the data-parallel ranks ----------------------------------

def moe_aux_and_train_runs(args):
    """_moe_aux's check, then train_runs(args) in the same launch (a launch
    costs more than the check); returns train_runs' results and "moe_aux"."""
    _init(args)
    aux = _moe_aux()
    results = train_runs(args)  # the trainer joins the group already made
    results["moe_aux"] = aux
    return results


def _moe_aux():
    """One MoE layer (tiny flavour, capacity factor 1: it drops) on this
    rank's rows of one global batch, with the world group, eager and under
    torch.compile(backend="tpu"); and the one-process reference on the CPU
    (the whole batch, no group). Returns the ranks' means of the aux loss and
    of its router gradient (what data-parallel averaging takes), the
    reference's, the same means with per-rank counts (no group); the largest
    difference of a rank's output from the reference's rows, with the global
    capacity and with capacity_scope "rank"; the dropped assignments."""
    from dataclasses import replace

    from torchtpu.models.moe import MoEFeedForward, moe_args
    rank, world = dist.get_rank(), dist.get_world_size()
    a = moe_args("tiny", capacity_factor=1.0)
    torch.manual_seed(0)
    ref = MoEFeedForward(a)
    for w in (ref.router.weight, ref.w1, ref.w2, ref.w3):
        torch.nn.init.normal_(w, std=0.5)  # a skewed router: unequal expert loads
    x = torch.randn(2 * world, 8, a.dim)   # the global batch; this rank's 2 rows below

    def aux_and_grad(layer, x, fn=None):
        layer.router.weight.grad = None
        out = (fn or layer)(x)
        aux = out[1] if fn is not None else layer.aux_loss
        aux.backward()
        return aux.detach(), layer.router.weight.grad

    want, want_grad = aux_and_grad(ref, x)
    mine = x[2 * rank:2 * rank + 2].to("tpu")
    layer = MoEFeedForward(a).to("tpu")
    layer.load_state_dict(ref.state_dict())
    out = {"want": [want.item()] + want_grad.flatten().tolist()}

    def mean_over_ranks(aux, grad):
        v = torch.cat([aux.reshape(1), grad.flatten()])
        dist.all_reduce(v, op=R.AVG)
        return v.cpu().tolist()

    out["per_rank"] = mean_over_ranks(*aux_and_grad(layer, mine))
    layer.set_data_parallel_group(dist.group.WORLD)
    out["eager"] = mean_over_ranks(*aux_and_grad(layer, mine))
    compiled = torch.compile(lambda x: (layer(x), layer.aux_loss), backend="tpu")
    out["compiled"] = mean_over_ranks(*aux_and_grad(layer, mine, compiled))
    out["counts"] = torch.bincount(torch.topk(ref.router(x), a.top_k)[1].flatten(),
                                   minlength=a.n_experts).tolist()

    def max_over_ranks(v):
        v = torch.as_tensor(v, dtype=torch.float32, device="tpu").reshape(1)
        dist.all_reduce(v, op=R.MAX)
        return v.item()

    with torch.no_grad():
        want_y = ref(x)[2 * rank:2 * rank + 2]
        out["ref_dropped"] = ref.dropped.item()
        out["ref_max"] = want_y.abs().max().item()
        out["global_err"] = max_over_ranks((layer(mine).cpu() - want_y).abs().max())
        d = layer.dropped.reshape(1).float()
        dist.all_reduce(d)
        out["dropped"] = d.item()
        per_rank = MoEFeedForward(replace(a, capacity_scope="rank")).to("tpu")
        per_rank.load_state_dict(ref.state_dict())
        per_rank.set_data_parallel_group(dist.group.WORLD)
        out["rank_err"] = max_over_ranks((per_rank(mine).cpu() - want_y).abs().max())
    return out


# --- sparse COO tensors: gloo's sparse all_reduce, DDP over a sparse embedding --------

def sparse_all_reduce(args):
    """A COO all_reduce on tpu (each rank its own indices, one shared) and
    DDP's averaged sparse gradient of an Embedding(sparse=True); the CPU
    reference is the same run through gloo on CPU tensors."""
    rank, _ = _init(args)
    out = {}
    for device in ("cpu", f"tpu:{rank}"):
        i = torch.tensor([[0, 2, 2 + rank], [1, 0, 3]])
        v = torch.tensor([1.0, 2.0, 3.0]) * (rank + 1)
        t = torch.sparse_coo_tensor(i, v, (5, 4)).to(device)
        group = dist.new_group(backend="gloo") if device == "cpu" else None
        dist.all_reduce(t, group=group)
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 3, sparse=True).to(device)
        ddp = torch.nn.parallel.DistributedDataParallel(emb, process_group=group)
        ddp(torch.tensor([[1, 2, 4 + rank]]).to(device)).sum().backward()
        g = emb.weight.grad
        out[device.split(":")[0]] = {"sum": t.to_dense().cpu().tolist(), "layout": str(g.layout),
                                     "grad": g.to_dense().cpu().tolist()}
    _finish()
    return out


def group_name_after_destroy(args):
    """A subgroup destroyed by destroy_process_group(pg) still answers its
    group_name (vLLM's shutdown asks), with the name it had."""
    _, world = _init(args)
    pg = dist.new_group(ranks=list(range(world)))
    name = pg.group_name
    dist.destroy_process_group(pg)
    after = pg.group_name
    _finish()
    return {"name": name, "after": after}
