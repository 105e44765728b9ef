"""Training-step throughput of the llama debug model (torchtpu.models.llama,
"debugmodel" flavour unless --flavor says otherwise): forward, cross-entropy,
backward and AdamW, on every path in one run:

    tpu strict eager     every op its own cached program
    tpu fused eager      the step recorded and flushed as one program (when
                         torchtpu.modes exists in this build)
    tpu torch.compile    torch.compile(backend="tpu") of forward+loss (AOTAutograd
                         makes the backward graph) and of the optimizer step, set
                         up as the trainer's training.compile does
                         (torchtpu.compile.compile_training)
    tpu whole step       the trainer's training.compile_mode = "step"
                         (torchtpu.trainer.graph_step): forward, loss, backward,
                         grad norm and AdamW traced as one graph, replayed as
                         one program per step
    cpu eager            PyTorch on the CPU
    cpu inductor         torch.compile (inductor, C++ code generation) on the CPU;
                         skipped, with the reason, when it fails
    jax jit              the same model and AdamW in JAX (bench/jax_llama.py), one
                         jax.jit program on XLA's CPU backend; skipped when jax is
                         missing: install with `.venv/bin/pip install jax`
                         (about 620 MB; jax 0.10.2 is what was measured)

    python bench/train_step.py [--flavor debugmodel] [--batch 4] [--seq 128]
                               [--warmup 3] [--steps 5] [--skip inductor,jax]
                               [--model llama|moe] [--ranks 2] [--dp simple|ddp]

--ranks N (N > 1) adds, in the same run, the tpu strict eager, torch.compile
and whole-step paths on N ranks (N processes on this machine, the global
batch split over them; bench/train_step_ranks.py), with SimpleFSDP (--dp
simple, the default) or DDP (--dp ddp); their tokens/s count the global
batch, so they compare with the 1-rank rows directly.

Each step ends by reading the loss (a host sync), on every path. Prints
tokens/s per path and its ratio to JAX and to CPU eager (higher is better),
the final losses (the paths start from the same weights and see the same
tokens, so they should agree), and per tpu path the programs compiled and
the programs one step launches. On a
machine without a TPU, "tpu" is XLA's CPU plugin: the figures compare
dispatch and fusion, not accelerators."""
import argparse
import copy
import time
import traceback

import torch
import torch.nn.functional as F

import torchtpu
from torchtpu.compile import compile_training
from torchtpu.models import build_model
from torchtpu.trainer.graph_step import programs_during


TPU_PATHS = ("strict", "fused", "compile", "step")


def loss_of(model, tokens):
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def time_steps(step, warmup, steps):
    """Seconds per step (median of `steps` after `warmup`) and the last loss."""
    for _ in range(warmup):
        loss = step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], loss


def torch_path(model, device, tokens, lr, compile_backend=None, fused=False):
    """A step function for a PyTorch path: model and AdamW on `device`."""
    model = copy.deepcopy(model).to(device)
    tokens = tokens.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    fwd = lambda: loss_of(model, tokens)  # noqa: E731
    opt_step = opt.step
    if compile_backend == "tpu":  # as the trainer does: lr and Adam's steps on the device
        fwd, opt_step = compile_training(fwd, opt, device)
    elif compile_backend is not None:
        fwd = torch.compile(fwd, backend=compile_backend)
        opt_step = torch.compile(opt.step, backend=compile_backend)

    def step():
        loss = fwd()
        loss.backward()
        opt_step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    if fused:
        from torchtpu import modes

        def fused_step():
            with modes.mode("fused"):
                return step()
        return fused_step
    return step


def whole_step_path(model, tokens, lr):
    """The trainer's compile_mode = "step" on the bench's AdamW (torch's
    defaults but lr; no clipping, the grad norm is computed as the trainer
    logs it)."""
    from torchtpu.trainer.graph_step import WholeStep

    model = copy.deepcopy(model).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    cfg = {"training": {"max_norm": 0.0, "gradient_accumulation_steps": 1,
                        "mixed_precision": "float32"}}
    ws = WholeStep(model, opt, cfg, "tpu")
    xs = tokens[:, :-1].unsqueeze(0).contiguous().to("tpu")  # [accum=1, batch, seq]
    ys = tokens[:, 1:].unsqueeze(0).contiguous().to("tpu")

    def step():
        loss, _ = ws(xs, ys)
        return loss.item()
    return step


def jax_path(model, tokens, lr):
    import jax  # noqa: F401

    import jax_llama

    args = model.args
    params = jax_llama.params_from_torch(model.state_dict(), args)
    state = {"p": params, "o": jax_llama.adamw_init(params)}
    train = jax_llama.make_train_step(args, lr=lr)
    tok = jax_llama.jnp.asarray(tokens.numpy().astype("int32"))

    def step():
        state["p"], state["o"], loss = train(state["p"], state["o"], tok)
        return float(loss)
    return step


def fused_available():
    try:
        from torchtpu import modes
    except ImportError:
        return False
    return hasattr(modes, "mode")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="llama")
    p.add_argument("--flavor", default="debugmodel")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--skip", default="", help="comma-separated paths to skip: strict,fused,"
                   "compile,step,cpu,inductor,jax")
    p.add_argument("--ranks", type=int, default=1, help="also run strict, compile and step "
                   "on this many ranks (> 1)")
    p.add_argument("--dp", default="simple", choices=("simple", "ddp"),
                   help="data parallelism of the --ranks rows: SimpleFSDP or DDP")
    a = p.parse_args()
    if a.ranks > 1 and a.batch % a.ranks:
        p.error(f"--batch {a.batch} must divide over --ranks {a.ranks}")
    skip = set(filter(None, a.skip.split(",")))
    torchtpu.set_fallback_mode("silent")

    torch.manual_seed(0)
    model = build_model(a.model, a.flavor)
    tokens = torch.randint(0, model.args.vocab_size, (a.batch, a.seq + 1))
    ntok = a.batch * a.seq

    paths = [
        ("cpu", "cpu eager", lambda: torch_path(model, "cpu", tokens, a.lr)),
        ("inductor", "cpu inductor", lambda: torch_path(model, "cpu", tokens, a.lr, "inductor")),
        ("strict", "tpu strict eager", lambda: torch_path(model, "tpu", tokens, a.lr)),
        ("fused", "tpu fused eager", lambda: torch_path(model, "tpu", tokens, a.lr, fused=True)),
        ("compile", "tpu torch.compile", lambda: torch_path(model, "tpu", tokens, a.lr, "tpu")),
        ("step", "tpu whole step", lambda: whole_step_path(model, tokens, a.lr)),
        ("jax", "jax jit (xla cpu)", lambda: jax_path(model, tokens, a.lr)),
    ]
    results = {}  # key -> (seconds per step, loss, tpu programs compiled, programs per step)
    for key, name, make in paths:
        if key in skip:
            continue
        if key == "fused" and not fused_available():
            print(f"{name}: skipped (torchtpu.modes is not in this build)")
            continue
        compiles0 = torch.tpu._get_cache_stats()["compiles"]
        try:
            step = make()
            sec, loss = time_steps(step, a.warmup, a.steps)
            programs = programs_during(step)[1] if key in TPU_PATHS else None
        except Exception as e:  # a peer failing is reported, not fatal
            print(f"{name}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
            if key not in ("inductor", "jax"):
                traceback.print_exc()
            continue
        results[key] = (sec, loss, torch.tpu._get_cache_stats()["compiles"] - compiles0, programs)

    info = torchtpu.runtime_info()
    print(f"\n{a.model} {a.flavor}: batch {a.batch} x seq {a.seq} = {ntok} tokens/step, "
          f"{a.warmup} warm-up + {a.steps} timed steps (median); tpu = {info['platform']} "
          f"plugin; torch {torch.__version__}")
    ref_jax = results.get("jax", (None,))[0]
    ref_cpu = results.get("cpu", (None,))[0]
    print(f"{'path':<22}{'ms/step':>10}{'tokens/s':>11}{'vs jax':>8}{'vs cpu':>8}"
          f"{'loss':>10}{'compiles':>10}{'programs':>10}")
    for key, name, _ in paths:
        if key not in results:
            continue
        sec, loss, compiles, programs = results[key]
        vs_jax = f"{ref_jax / sec:.2f}" if ref_jax else "-"
        vs_cpu = f"{ref_cpu / sec:.2f}" if ref_cpu else "-"
        comp = str(compiles) if key in TPU_PATHS else ""
        progs = str(programs) if programs is not None else ""
        print(f"{name:<22}{sec * 1e3:>10.1f}{ntok / sec:>11.0f}{vs_jax:>8}{vs_cpu:>8}"
              f"{loss:>10.4f}{comp:>10}{progs:>10}")
    print("(vs jax, vs cpu: that path's tokens/s over the reference's; >1 is faster; "
          "programs: tpu programs launched by one step after the timed ones)")
    if a.ranks > 1:
        ranks_section(a, results, skip, ntok)


RANK_PATHS = (("strict", "tpu strict eager"), ("compile", "tpu torch.compile"),
              ("step", "tpu whole step"))


def ranks_section(a, one_rank, skip, ntok):
    """The tpu paths on a.ranks ranks (bench/train_step_ranks.py), printed
    beside the 1-rank rows of this run: tokens/s of the global batch, the
    ratio to the same path on one rank and to eager on a.ranks ranks."""
    import os

    from torchtpu.testing.multiprocess import run

    here = os.path.dirname(os.path.abspath(__file__))
    env = {"PYTHONPATH": os.pathsep.join([os.path.dirname(here), here,
                                          os.environ.get("PYTHONPATH", "")]),
           "TORCHTPU_FALLBACK": "silent"}
    paths = [k for k, _ in RANK_PATHS if k not in skip]
    args = {"model": a.model, "flavor": a.flavor, "batch": a.batch, "seq": a.seq,
            "warmup": a.warmup, "steps": a.steps, "lr": a.lr, "dp": a.dp, "paths": paths}
    try:
        res = run("train_step_ranks:rank_paths", a.ranks, timeout=1800, env=env, args=args)[0]
    except Exception as e:  # reported, the 1-rank table stands
        print(f"\n{a.ranks} ranks: skipped ({type(e).__name__}: {str(e)[-2000:]})")
        return
    dp = "SimpleFSDP" if a.dp == "simple" else "DDP"
    print(f"\n{a.ranks} ranks, {dp}, the same global batch ({a.batch // a.ranks} rows per rank); "
          f"host collectives (gloo)")
    print(f"{'path':<22}{'ms/step':>10}{'tokens/s':>11}{'vs 1rk':>8}{'vs eager':>9}"
          f"{'loss':>10}{'compiles':>10}{'programs':>10}{'segments':>10}")
    eager = res.get("strict", {}).get("sec")
    for key, name in RANK_PATHS:
        if key not in res:
            continue
        r = res[key]
        sec = r["sec"]
        one = one_rank.get(key, (None,))[0]
        vs_one = f"{one / sec:.2f}" if one else "-"
        vs_eager = f"{eager / sec:.2f}" if eager else "-"
        seg = "" if r["segments"] is None else str(r["segments"])
        print(f"{name:<22}{sec * 1e3:>10.1f}{ntok / sec:>11.0f}{vs_one:>8}{vs_eager:>9}"
              f"{r['loss']:>10.4f}{r['compiles']:>10}{r['programs']:>10}{seg:>10}")
    print(f"(vs 1rk: over the same path's 1-rank tokens/s above; vs eager: over strict eager on "
          f"{a.ranks} ranks; ms/step: the slowest rank's median; loss: the ranks' mean; "
          f"compiles, programs: rank 0's; segments: the whole step's device programs between "
          f"the host collectives)")


if __name__ == "__main__":
    main()
