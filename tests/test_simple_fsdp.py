"""SimpleFSDP in the trainer (issue 13): parallelism.fsdp = "simple".

Three launches, each a bounded set of trainer runs (tests/dist_workers.py
train_runs), then checks per run:
  - 4 ranks, SimpleFSDP HSDP (2 replicas x 2 shards), llama, 20 steps, DCP
    checkpoints at steps 18 and 20; SimpleFSDP MoE (4 shards), 20 steps;
  - 2 ranks: SimpleFSDP llama and MoE (eager), llama (tiny) under training.compile,
    llama with bf16 gathers and f32 reduction, the MoE run again under FSDP2,
    and two resumptions of the 4-rank run's step-18 checkpoint on 2 ranks
    (SimpleFSDP and FSDP2 fully_shard);
  - one process (this one): llama and MoE on the same global batch of 4
    rows (2 ranks x 2, 4 ranks x 1): the references.
Losses match the one-process run within 1e-4 relative per step; the
resumptions give the uninterrupted run's next-step losses."""
import json
import shutil

import pytest

from test_distributed_train import ENV, config
from torchtpu import train as trainer
from torchtpu.testing.multiprocess import run
from torchtpu.trainer.config import ConfigError, load_config

STEPS = 20
LOCAL_BATCH = 2
SAVE_AT = 18  # the 4-rank run saves here (and at the end); resumptions start here


ONE_PROCESS = {"fsdp": "fully_shard", "data_parallel_shard_degree": -1}


def cfg(tmp, name, model="llama", steps=STEPS, local_batch=LOCAL_BATCH, par=None, model_=None,
        **sections):
    c = config(tmp / name, steps=steps, local_batch=local_batch,
               parallelism=dict({"fsdp": "simple", "data_parallel_shard_degree": 2}, **(par or {})))
    c["model"].update(name=model, **(model_ or {}))
    for k, v in sections.items():
        c[k].update(v)
    return c


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("simple_fsdp")

    def single(name, model, flavor="debugmodel"):
        c = load_config(overrides=cfg(tmp, name, model=model, local_batch=2 * LOCAL_BATCH,
                                      model_={"flavor": flavor}, par=ONE_PROCESS))
        return {str(k): v for k, v in trainer.train(c, log=lambda *a: None)["losses"].items()}

    # the references first: one process, the global batch of 4 rows
    ref = {"llama": single("single_llama", "llama"), "moe": single("single_moe", "moe"),
           "tiny": single("single_tiny", "llama", "tiny")}
    ck = {"enable": True, "interval": SAVE_AT, "keep_latest_k": 0}
    # 4 ranks x 1 row: the same global batch as 2 ranks x 2 rows
    four = run("dist_workers:train_runs", 4, timeout=600, env=ENV, args={"cfgs": {
        "hsdp": cfg(tmp, "hsdp", local_batch=LOCAL_BATCH // 2, checkpoint=ck,
                    par={"data_parallel_replicate_degree": 2}),
        "moe": cfg(tmp, "moe4", model="moe", local_batch=LOCAL_BATCH // 2,
                   par={"data_parallel_shard_degree": 4})}})[0]
    saved = tmp / "hsdp" / "checkpoint"
    assert sorted(p.name for p in saved.iterdir()) == [f"step-{SAVE_AT}.dcp", f"step-{STEPS}.dcp"]
    shutil.rmtree(saved / f"step-{STEPS}.dcp")
    for name in ("resume_simple", "resume_fsdp2"):  # each resumes (and saves) in its own folder
        shutil.copytree(saved, tmp / name / "checkpoint")
    resume = dict(ck, resume=True)
    # the MoE layer's load-balancing check (test_moe_aux_loss_over_ranks_is_one_process)
    # rides on the 2-rank launch
    two = run("dist_workers:moe_aux_and_train_runs", 2, timeout=1200, env=ENV, args={"cfgs": {
        "llama": cfg(tmp, "llama"),
        "moe": cfg(tmp, "moe", model="moe"),
        "moe_fsdp2": cfg(tmp, "moe_fsdp2", model="moe", par={"fsdp": "fully_shard"}),
        # Dynamo traces the tiny flavour in a fraction of the debug model's time
        "compiled": cfg(tmp, "compiled", model_={"flavor": "tiny"}, training={"compile": True}),
        "bf16": cfg(tmp, "bf16", training={"mixed_precision_param": "bfloat16",
                                           "mixed_precision_reduce": "float32"}),
        "resume_simple": cfg(tmp, "resume_simple", checkpoint=resume),
        "resume_fsdp2": cfg(tmp, "resume_fsdp2", checkpoint=resume, par={"fsdp": "fully_shard"}),
    }})[0]
    out = {"four": four, "two": two, "ref": ref}
    (tmp / "runs.json").write_text(json.dumps(out))  # every run's losses, to read after a failure
    return out


def assert_close_per_step(got, want, rtol=1e-4):
    assert sorted(got, key=int) == sorted(want, key=int)
    for step, loss in want.items():
        assert abs(got[step] - loss) <= rtol * abs(loss), f"step {step}: {got[step]} vs {loss}"


def test_two_ranks_llama_matches_one_process(runs):
    r = runs["two"]["llama"]
    assert r["param"] == "DTensor(Shard(dim=0),)"  # stored sharded
    assert_close_per_step(r["losses"], runs["ref"]["llama"])


def test_four_ranks_hsdp_llama_matches_one_process(runs):
    r = runs["four"]["hsdp"]
    assert r["param"] == "DTensor(Replicate(), Shard(dim=0))"
    assert_close_per_step(r["losses"], runs["ref"]["llama"])


def test_two_ranks_moe_matches_fsdp2_and_one_process(runs):
    """The load-balancing loss counts the assignments of both ranks
    (models/moe.py): its mean over the ranks, and its gradient's, is the
    one process's, so SimpleFSDP's and FSDP2's MoE runs follow the
    one-process run (with per-rank counts they drifted by up to 2.8e-2)."""
    got, fsdp2, one = (runs["two"]["moe"]["losses"], runs["two"]["moe_fsdp2"]["losses"],
                       runs["ref"]["moe"])
    assert_close_per_step(got, one)
    assert_close_per_step(fsdp2, one)


def test_four_ranks_moe_matches_one_process(runs):
    r = runs["four"]["moe"]
    assert r["param"] == "DTensor(Shard(dim=0),)"
    assert_close_per_step(r["losses"], runs["ref"]["moe"])


def test_moe_aux_loss_over_ranks_is_one_process(runs):
    """On 2 ranks, each with half the batch: the ranks' mean of the
    load-balancing loss and of its router gradient equal one process's on the
    whole batch (on the CPU), eager and compiled; with per-rank counts they
    do not."""
    import torch
    out = runs["two"]["moe_aux"]
    want = torch.tensor(out["want"])
    assert max(out["counts"]) > 1.5 * min(out["counts"]), out["counts"]  # loads are uneven
    for key in ("eager", "compiled"):
        torch.testing.assert_close(torch.tensor(out[key]), want, rtol=1e-5, atol=1e-7,
                                   msg=lambda m, key=key: f"{key}: {m}")
    assert not torch.allclose(torch.tensor(out["per_rank"]), want, rtol=1e-3, atol=0)


def test_moe_global_capacity_drops_as_one_process(runs):
    """The same layer's output: with the global capacity each rank's rows are
    the one-process output's (the same assignments dropped); with
    capacity_scope "rank" they are not."""
    out = runs["two"]["moe_aux"]
    assert out["ref_dropped"] > 0 and out["dropped"] == out["ref_dropped"], out
    assert out["global_err"] <= 1e-5 * out["ref_max"], out
    assert out["rank_err"] > 1e-2 * out["ref_max"], out


def test_compiled_matches_eager_one_process(runs):
    r = runs["two"]["compiled"]
    assert_close_per_step(r["losses"], runs["ref"]["tiny"])
    c = r["compile"]
    # forward, backward and optimizer graphs; the gathers split the forward,
    # the reduce-scatters the backward
    assert c["graphs_per_step"] == 3, c
    assert c["collective_groups_per_step"] >= 2, c
    assert c["segments_per_step"] > c["graphs_per_step"], c
    at2, end = c["after_step_2"], c["end"]
    for key in ("graphs", "programs_compiled", "captures", "recaptures", "capture_failures"):
        assert end[key] == at2[key], (key, at2, end)  # nothing compiles after step 2
    assert end["capture_failures"] == 0, end
    # every later segment run replays its captured program
    assert end["replays"] - at2["replays"] == (STEPS - 2) * c["segments_per_step"], (at2, end)


def test_bf16_gather_f32_reduce_trains_close_to_f32(runs):
    f32, bf16 = runs["two"]["llama"]["losses"], runs["two"]["bf16"]["losses"]
    assert any(bf16[s] != f32[s] for s in f32)  # the gathers really ran in bf16
    assert_close_per_step(bf16, f32, rtol=2e-2)
    first, last = [bf16[str(s)] for s in range(1, 6)], [bf16[str(s)] for s in range(16, 21)]
    assert sum(last) / 5 < sum(first) / 5 - 1.0, bf16  # it learns


@pytest.mark.parametrize("name", ["resume_simple", "resume_fsdp2"])
def test_dcp_from_4_ranks_resumes_on_2(runs, name):
    """The HSDP 4-rank checkpoint of step 18 resumed on 2 ranks, by SimpleFSDP
    and by FSDP2: steps 19 and 20 give the uninterrupted run's losses."""
    full, got = runs["four"]["hsdp"]["losses"], runs["two"][name]["losses"]
    for step in (str(SAVE_AT + 1), str(STEPS)):
        assert abs(got[step] - full[step]) <= 1e-5 * abs(full[step]), (step, got[step], full[step])
    assert got["1"] == full["1"]  # the history came with the checkpoint


def test_config_is_checked():
    with pytest.raises(ConfigError, match="parallelism.fsdp = 'simpel'"):
        load_config(overrides={"parallelism": {"fsdp": "simpel"}})
    with pytest.raises(ConfigError, match="mixed_precision_param = 'fp8'"):
        load_config(overrides={"training": {"mixed_precision_param": "fp8"}})
    from torchtpu.trainer import parallel
    c = load_config(overrides={"parallelism": {"fsdp": "simple",
                                               "data_parallel_replicate_degree": 2,
                                               "data_parallel_shard_degree": 1}})
    with pytest.raises(ValueError, match="needs data_parallel_shard_degree > 1"):
        parallel.check(c, world=2)
    c = load_config(overrides={"parallelism": {"fsdp": "simple"},
                               "training": {"mixed_precision_param": "bfloat16"}})
    assert parallel.check(c, world=2) == (1, 2, 1)
    with pytest.raises(ValueError, match="SimpleFSDP's gather and reduce dtypes"):
        parallel.check(c, world=1)
    c["parallelism"]["fsdp"] = "fully_shard"
    with pytest.raises(ValueError, match="SimpleFSDP's gather and reduce dtypes"):
        parallel.check(c, world=2)
