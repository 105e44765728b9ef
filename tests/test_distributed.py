"""torch.distributed on "tpu" (issue 9): the "tpu" c10d backend against gloo.

Each test launches 2 or 4 real processes (torchtpu.testing.multiprocess.run,
the environment torchrun sets) running a function of dist_workers.py, bounded
in time. Every collective on "tpu" tensors (contiguous and strided views) is
compared with the same collective through a plain gloo group on CPU copies
of the same values; MPMD code finishes in strict, debug and fused eager;
mismatched calls and a dead rank raise instead of hanging."""
import os
import sys

import pytest
import torch
import torch.distributed as dist

import torchtpu
from torchtpu.testing.multiprocess import run

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ENV = {"PYTHONPATH": os.pathsep.join([REPO, HERE, os.environ.get("PYTHONPATH", "")]),
       "TORCHTPU_FALLBACK": "silent"}


def launch(target, world, timeout=240, **args):
    return run(f"dist_workers:{target}", world, timeout=timeout, args=args, env=ENV)


# --- registration ----------------------------------------------------------------------

def test_backend_registered_for_tpu():
    assert "tpu" in dist.Backend.backend_list and "tpu_dist" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"
    assert torchtpu.runtime_info()["distributed"]["transport"] == "host (gloo)"
    assert torchtpu.distributed.transport() == "host (gloo)"


# --- every collective against gloo on CPU copies -------------------------------------------

EXPECTED = ["all_reduce_sum_float32", "all_reduce_avg_bfloat16", "all_reduce_min_int64",
            "all_reduce_product_int32", "all_reduce_min_int64_big", "all_reduce_async_wait",
            "broadcast", "reduce_sum", "all_gather_float32", "all_gather_into_tensor_flat",
            "all_gather_into_tensor_stacked", "reduce_scatter_tensor_avg",
            "premul_sum_float", "premul_sum_tensor", "reduce_scatter_list_int32", "all_to_all_single_uneven", "all_to_all_list",
            "gather", "scatter", "send_recv_ring", "batch_isend_irecv",
            "all_reduce_coalesced", "coalescing_manager_all_reduce",
            "coalescing_manager_gather_scatter",
            "functional_collectives", "barrier_and_objects"]


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_match_gloo(world):
    results = launch("collectives", world, timeout=300)
    for name in EXPECTED:
        assert name in results[0] and name + "/strided" in results[0], name
    bad = {f"rank {r} {k}": v for r, res in enumerate(results) for k, v in res.items()
           if v and k != "_info"}
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())
    assert results[0]["_info"] == {"backend": "tpu", "transport": "host (gloo)",
                                   "initialized": True, "rank": 0, "world_size": world}


# --- launch and devices ------------------------------------------------------------------

def test_set_device_follows_local_rank():
    results = launch("devices", 2, timeout=120)
    for rank, r in enumerate(results):
        assert r["device_count"] == 2
        assert r["current"] == rank
        assert r["tensor"] == r["default"] == f"tpu:{rank}"
        assert r["ddp_grad_device"] == f"tpu:{rank}"


# --- MPMD ------------------------------------------------------------------------------

def _mpmd_reference(world):
    ys = []
    for rank in range(world):
        y = torch.arange(4.0) + rank
        for _ in range(rank + 1):
            y = torch.tanh(y) * 2 + 1
        if rank == world - 1:
            y = y.exp().log()
        ys.append(y)
    return torch.stack(ys).sum(0)


@pytest.mark.parametrize("mode", ["strict", "debug", "fused"])
def test_mpmd_finishes(mode, tmp_path):
    world = 2
    results = launch("mpmd", world, timeout=180, mode=mode, path=str(tmp_path / "x.pt"))
    want = _mpmd_reference(world)
    for r in results:
        torch.testing.assert_close(torch.tensor(r["all_reduce"]), want, rtol=1e-5, atol=1e-5)
        assert r["broadcast"] == [7.0, 7.0, 7.0]
    assert results[0]["loaded"] == [0.0, 1.0, 2.0, 3.0]


# --- failures are errors -------------------------------------------------------------------

MISMATCHES = {
    "shape": ["all_reduce", "float32[2, 3]", "float32[3, 3]", "rank 0", "rank 1"],
    "dtype": ["all_reduce", "float32[4]", "int32[4]"],
    "op": ["all_reduce", "broadcast"],
}


def test_mismatch_raises_naming_collective():
    results = launch("mismatches", 2, timeout=120, kinds=list(MISMATCHES))
    for r in results:
        for kind, words in MISMATCHES.items():
            assert r[kind] is not None and "ranks disagree" in r[kind], (kind, r)
            for w in words:
                assert w in r[kind], (kind, w, r[kind])
        assert r["after"] == [2.0, 2.0, 2.0]  # the group is still usable


def test_dead_rank_makes_others_raise():
    timeout = 15
    results = run("dist_workers:mismatch", 2, timeout=120, env=ENV, expect_failure=True,
                  args={"kind": "dead", "timeout": timeout})
    rc0, text0, r0 = results[0]
    assert results[1][0] == 3
    assert r0 is not None and r0["error"] is not None, text0[-2000:]
    assert r0["seconds"] < timeout + 10, r0


def test_group_name_after_destroy():
    (r,) = launch("group_name_after_destroy", 1, timeout=120)
    assert r["name"] and r["after"] == r["name"], r


def test_bad_input_is_a_clear_error():
    """Checked on one rank before any communication: no peer needed."""
    from torchtpu.distributed._host import ProcessGroupTPU
    store = dist.HashStore()
    pg = ProcessGroupTPU(store, 0, 1, 10)
    with pytest.raises(ValueError, match="all_gather_into_tensor"):
        pg.all_gather_single(torch.empty(3, device="tpu"), torch.empty(2, device="tpu"))
    with pytest.raises(ValueError, match="all_to_all_single: input splits"):
        pg.all_to_all_single(torch.empty(2, device="tpu"), torch.empty(2, device="tpu"), [2],
                             [1])
    opts = torch._C._distributed_c10d.AllreduceOptions()
    opts.reduceOp = dist._make_nccl_premul_sum(2.0)
    with pytest.raises(TypeError, match="all_reduce: ReduceOp.PREMUL_SUM needs floating-point"):
        pg.allreduce([torch.ones(2, dtype=torch.int64, device="tpu")], opts)
    x = torch.ones(2, device="tpu")
    pg.allreduce([x], opts)  # one rank: the premultiplied input is the sum
    assert x.cpu().tolist() == [2.0, 2.0]


def test_set_timeout_reaches_the_transport():
    """ProcessGroup.set_timeout (and torch.distributed.set_timeout, which
    TorchTitan 0.3.0 calls after its first step and torch 2.13 lacks) changes
    the timeout of the gloo group that carries the collectives; the C++
    default would change nothing on this group, which has no backends."""
    import datetime
    from torchtpu.distributed._host import ProcessGroupTPU
    pg = ProcessGroupTPU(dist.HashStore(), 0, 1, 10)
    assert pg.timeout == datetime.timedelta(seconds=10)
    pg.set_timeout(datetime.timedelta(seconds=77))
    assert pg.timeout == pg._gloo.options._timeout == datetime.timedelta(seconds=77)
    dist.set_timeout(datetime.timedelta(seconds=5), pg)
    assert pg.timeout == pg._gloo.options._timeout == datetime.timedelta(seconds=5)
    with pytest.raises(TypeError, match="timedelta"):
        pg.set_timeout(5)


def test_shutdown_releases_the_transport():
    """shutdown (destroy_process_group's call) drops the group's gloo
    transport, so its worker threads are joined then rather than at the
    interpreter's exit; using the group afterwards is a clear error, and
    torchtpu's exit hook shuts down groups a program left alive."""
    import gc
    import weakref
    from torchtpu.distributed import _host
    pg = _host.ProcessGroupTPU(dist.HashStore(), 0, 1, 10)
    x = torch.ones(2, device="tpu")
    pg.allreduce([x]).wait()
    gloo = weakref.ref(pg._gloo)
    left = _host.ProcessGroupTPU(dist.HashStore(), 0, 1, 10)
    pg.shutdown()
    gc.collect()
    assert gloo() is None  # the gloo group (and its threads) is gone
    with pytest.raises(RuntimeError, match="used after destroy_process_group"):
        pg.allreduce([x])
    pg.shutdown()  # twice is fine
    assert left in _host._live_groups and pg not in _host._live_groups
    _host.release_all()
    assert not _host._live_groups


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
