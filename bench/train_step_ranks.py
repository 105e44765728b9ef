"""bench/train_step.py --ranks N: the tpu paths on N ranks (one process per
rank, launched by torchtpu.testing.multiprocess.run as torchrun would).

Each rank builds the bench's model and tokens from the same seed, takes its
rows of the global batch (batch / N), and times, with the 1-rank rows' step
(forward, cross-entropy, backward, AdamW; the loss read back each step):

    strict   eager, parallelism.fsdp = simple (SimpleFSDP: a gather per
             parameter read, a reduce-scatter per gradient, through the
             process group) or DDP
    compile  torch.compile(backend="tpu") of forward+loss and of the optimizer
             step (torchtpu.compile.compile_training, the trainer's
             training.compile); SimpleFSDP's graphs are split around their
             collectives
    step     the trainer's training.compile_mode = "step"
             (torchtpu.trainer.graph_step.WholeStep): the step as one traced
             graph, its segments replayed between the host collectives

Returns per path (seconds per step: the median of the steps timed, the
slowest rank's; the ranks' mean loss; programs compiled and programs one step
launches on rank 0; the step's device segments)."""
import copy

import torch
import torch.distributed as dist

import torchtpu
from torchtpu.compile import compile_training
from torchtpu.models import build_model
from torchtpu.trainer import parallel
from torchtpu.trainer.config import load_config
from torchtpu.trainer.graph_step import WholeStep, programs_during

import train_step


def _config(args, world):
    par = ({"fsdp": "simple", "data_parallel_shard_degree": world}
           if args["dp"] == "simple" else
           {"data_parallel_replicate_degree": world, "data_parallel_shard_degree": 1})
    return load_config(overrides={
        "model": {"name": args["model"], "flavor": args["flavor"]},
        "training": {"device": "tpu", "max_norm": 0.0, "gradient_accumulation_steps": 1},
        "parallelism": par})


def _path(key, model, cfg, par, tokens, lr):
    """(step function, the whole step or None) for one path on this rank."""
    model = parallel.apply(copy.deepcopy(model).to("tpu"), par, "tpu")
    tokens = tokens.to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    if key == "step":
        core = parallel.unwrap(model)
        ws = WholeStep(core, opt, cfg, "tpu", par)
        xs = tokens[:, :-1].unsqueeze(0).contiguous()  # [accum=1, batch, seq]
        ys = tokens[:, 1:].unsqueeze(0).contiguous()
        return (lambda: ws(xs, ys)[0].item()), ws
    fwd = lambda: train_step.loss_of(model, tokens)  # noqa: E731
    opt_step = opt.step
    if key == "compile":
        fwd, opt_step = compile_training(fwd, opt, "tpu")

    def step():
        loss = fwd()
        loss.backward()
        opt_step()
        opt.zero_grad(set_to_none=True)
        return loss.item()
    return step, None


def rank_paths(args):
    torchtpu.set_fallback_mode("silent")
    world = int(__import__("os").environ["WORLD_SIZE"])
    cfg = _config(args, world)
    par = parallel.setup(cfg)
    torch.manual_seed(0)  # the parent's model and tokens
    model = build_model(args["model"], args["flavor"])
    tokens = torch.randint(0, model.args.vocab_size, (args["batch"], args["seq"] + 1))
    tokens = parallel.local_rows(tokens, par)
    out = {}
    for key in args["paths"]:
        compiles0 = torch.tpu._get_cache_stats()["compiles"]
        step, ws = _path(key, model, cfg, par, tokens, args["lr"])
        dist.barrier()
        sec, loss = train_step.time_steps(step, args["warmup"], args["steps"])
        programs = programs_during(step)[1]
        compiles = torch.tpu._get_cache_stats()["compiles"] - compiles0
        both = torch.tensor([sec, loss], dtype=torch.float64)
        slowest = both.clone()
        dist.all_reduce(both, group=parallel._cpu_group())
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=parallel._cpu_group())
        out[key] = {"sec": float(slowest[0]), "loss": float(both[1]) / world,
                    "compiles": compiles, "programs": programs,
                    "segments": ws.segments if ws is not None else None}
    dist.destroy_process_group()
    return out
