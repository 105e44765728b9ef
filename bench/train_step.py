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
    torchax eager        the same torch model through torchax 0.0.13 (PyTorch on
                         JAX): torchax tensors op by op, loss.backward() and
                         torch.optim.AdamW (bench/torchax_llama.py)
    torchax jit          torchax's jax.jit of the functional step: forward, loss,
                         jax.value_and_grad and AdamW in torch ops, one program;
                         both torchax rows run in a subprocess (torchax claims
                         PyTorch's PrivateUse1 slot, "tpu" here), llama only;
                         skipped when torchax is missing: install with
                         `.venv/bin/pip install --no-deps torchax==0.0.13`

    python bench/train_step.py [--flavor debugmodel] [--batch 4] [--seq 128]
                               [--warmup 3] [--steps 5] [--skip inductor,jax,torchax]
                               [--model llama|moe] [--ranks 2] [--dp simple|ddp]
    python bench/train_step.py --flavor small --batch 8 --seq 256 \
        --skip cpu,inductor,strict,fused,torchax_eager       # compute-bound: MFU

--ranks N (N > 1) adds, in the same run, the tpu strict eager, torch.compile
and whole-step paths on N ranks (N processes on this machine, the global
batch split over them; bench/train_step_ranks.py), with SimpleFSDP (--dp
simple, the default) or DDP (--dp ddp); their tokens/s count the global
batch, so they compare with the 1-rank rows directly.

Each step ends by reading the loss (a host sync), on every path. Prints
tokens/s per path and its ratio to JAX and to CPU eager (higher is better),
the final losses (the paths start from the same weights and see the same
tokens, so they should agree), and per tpu path the programs compiled and
the programs one step launches, and its MFU: model FLOPs per token
(torchtpu.models.flops_per_token, the trainer's formula: 6 x non-embedding
parameters + attention) x tokens/s over a matmul peak measured in the same run
(the best of a few 2048^3 float32 matmuls on "tpu"; the trainer's
measure_peak_flops). On a machine without a TPU, "tpu" is XLA's CPU plugin:
the figures compare dispatch and fusion, not accelerators, and the peak is
this CPU's matmul speed through the plugin."""
import argparse
import copy
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import traceback

import torch

import torchtpu
from step_timing import loss_of, time_interleaved, time_steps  # noqa: F401 (bench/ is the script's folder; train_step_ranks uses loss_of and time_steps)
from torchtpu.compile import compile_training
from torchtpu.models import build_model, flops_per_token
from torchtpu.trainer.graph_step import programs_during
from torchtpu.trainer.metrics import measure_peak_flops


TPU_PATHS = ("strict", "fused", "compile", "step")
TORCHAX_PATHS = (("torchax_eager", "torchax eager", "eager"),
                 ("torchax_jit", "torchax jit", "jit"))


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


def torchax_results(model_name, model, tokens, a, skip):
    """{key: (seconds per step, loss)} for the torchax rows not in `skip`
    ("torchax" skips both), run by bench/torchax_llama.py in a subprocess on
    the same weights and tokens; a row that cannot run is printed as skipped
    with the reason."""
    keys = [(key, name, path) for key, name, path in TORCHAX_PATHS
            if not skip & {"torchax", key}]
    if not keys:
        return {}
    reason = None
    if model_name != "llama":
        reason = f"the torchax rows run the llama model only, not {model_name!r}"
    elif importlib.util.find_spec("torchax") is None:
        reason = "torchax is not installed: .venv/bin/pip install --no-deps torchax==0.0.13"
    if reason is not None:
        for _, name, _ in keys:
            print(f"{name}: skipped ({reason})")
        return {}
    spec = {"args": dataclasses.asdict(model.args), "state_dict": model.state_dict(),
            "tokens": tokens, "lr": a.lr, "warmup": a.warmup, "steps": a.steps,
            "paths": [path for _, _, path in keys]}
    here = os.path.dirname(os.path.abspath(__file__))
    # no torch device-backend autoload there: `import torch` would import torchtpu
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = os.path.join(tmp, "torchax_spec.pt")
        torch.save(spec, spec_path)
        proc = subprocess.run([sys.executable, os.path.join(here, "torchax_llama.py"), spec_path],
                              env=env, capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        for _, name, _ in keys:
            print(f"{name}: skipped (bench/torchax_llama.py exited {proc.returncode}: {tail})")
        return {}
    out = json.loads(lines[-1])
    results = {}
    for key, name, path in keys:
        if isinstance(out[path], str):
            print(f"{name}: skipped ({out[path]})")
        else:
            results[key] = tuple(out[path])
    return results


def matmul_peak(n=2048, repeats=5):
    """FLOP/s of the best of `repeats` n^3 float32 matmuls on "tpu", through
    our runtime, as the trainer measures its MFU peak."""
    return measure_peak_flops("tpu", torch.float32, n=n, repeats=repeats)


def print_peer_ratios(results):
    """The issue's comparisons in one line per compiled tpu path: its tokens/s
    over Inductor's and over torchax jit's (>1: the tpu path is faster)."""
    refs = (("inductor", "cpu inductor"), ("torchax_jit", "torchax jit"))
    for key, name in (("compile", "tpu torch.compile"), ("step", "tpu whole step")):
        if key not in results:
            continue
        ratios = [f"{results[ref][0] / results[key][0]:.2f}x {ref_name}'s"
                  for ref, ref_name in refs if ref in results]
        if ratios:
            print(f"{name} tokens/s: " + ", ".join(ratios))


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
                   "compile,step,cpu,inductor,jax,torchax (both torchax rows), torchax_eager,"
                   "torchax_jit")
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
    ready, compiles = {}, {}  # key -> warmed-up step function; tpu programs compiled
    for key, name, make in paths:
        if key in skip:
            continue
        if key == "fused" and not fused_available():
            print(f"{name}: skipped (torchtpu.modes is not in this build)")
            continue
        compiles0 = torch.tpu._get_cache_stats()["compiles"]
        try:
            step = make()
            for _ in range(a.warmup):
                step()
            if key in TPU_PATHS:  # the host tier's background compiles, taken in
                torchtpu.wait_compiles()
                step()
        except Exception as e:  # a peer failing is reported, not fatal
            print(f"{name}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
            if key not in ("inductor", "jax"):
                traceback.print_exc()
            continue
        ready[key] = step
        compiles[key] = torch.tpu._get_cache_stats()["compiles"] - compiles0
    results = {}  # key -> (seconds per step, loss, tpu programs compiled, programs per step)
    for key, (sec, loss) in time_interleaved(ready, a.steps).items():
        programs = programs_during(ready[key])[1] if key in TPU_PATHS else None
        results[key] = (sec, loss, compiles[key], programs)
    for key, (sec, loss) in torchax_results(a.model, model, tokens, a, skip).items():
        results[key] = (sec, loss, None, None)
    paths += [(key, name, None) for key, name, _ in TORCHAX_PATHS]
    peak = matmul_peak() if any(k in results for k in TPU_PATHS) else None
    flops_tok = flops_per_token(model, a.seq)

    info = torchtpu.runtime_info()
    print(f"\n{a.model} {a.flavor}: batch {a.batch} x seq {a.seq} = {ntok} tokens/step, "
          f"{a.warmup} warm-up + {a.steps} timed steps (median; the in-process paths "
          f"take turns, one step each per round); tpu = {info['platform']} "
          f"plugin; torch {torch.__version__}")
    ref_jax = results.get("jax", (None,))[0]
    ref_cpu = results.get("cpu", (None,))[0]
    print(f"{'path':<22}{'ms/step':>10}{'tokens/s':>11}{'vs jax':>8}{'vs cpu':>8}"
          f"{'loss':>10}{'compiles':>10}{'programs':>10}{'MFU':>7}")
    for key, name, _ in paths:
        if key not in results:
            continue
        sec, loss, compiles, programs = results[key]
        vs_jax = f"{ref_jax / sec:.2f}" if ref_jax else "-"
        vs_cpu = f"{ref_cpu / sec:.2f}" if ref_cpu else "-"
        comp = str(compiles) if key in TPU_PATHS else ""
        progs = str(programs) if programs is not None else ""
        mfu = f"{100 * ntok / sec * flops_tok / peak:.1f}%" if key in TPU_PATHS else ""
        print(f"{name:<22}{sec * 1e3:>10.1f}{ntok / sec:>11.0f}{vs_jax:>8}{vs_cpu:>8}"
              f"{loss:>10.4f}{comp:>10}{progs:>10}{mfu:>7}")
    print("(vs jax, vs cpu: that path's tokens/s over the reference's; >1 is faster; "
          "programs: tpu programs launched by one step after the timed ones)")
    if peak is not None:
        print(f"MFU: {flops_tok / 1e6:.2f} MFLOP/token (training, seq {a.seq}) x tokens/s over "
              f"the matmul peak measured on tpu in this run, {peak / 1e9:.1f} GFLOP/s "
              f"(best of 5 2048^3 float32 matmuls)")
    print_peer_ratios(results)
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
