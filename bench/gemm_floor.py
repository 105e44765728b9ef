"""The matmul floor of the compiled training step: how long the whole step's
matrix products take on their own, through XLA's CPU plugin and through
PyTorch's CPU matmuls (MKL, what Inductor calls), beside the two steps.

    python bench/gemm_floor.py [--flavor debugmodel] [--batch 4] [--seq 128] [--steps 15]

It runs the trainer's whole step (compile_mode = "step", as in
bench/train_step.py) in a child process that dumps its optimized XLA program
(bench/step_copies.py), reads every dot of that program (the ones inside
YNNPACK fusions too: torchtpu.testing.hlo_dump.dots), and builds two programs
of those dots alone, on fresh inputs of their shapes:

    tpu dots        torch.compile(backend="tpu") of one einsum per dot: one
                    XLA program; XLA folds the einsums' transposes back into
                    the dots, so it runs the step's dot forms
    cpu dots (MKL)  the same einsums, eager on the CPU: PyTorch's matmuls

Then it times four paths in turns (one step of each per round, the median per
path; bench/step_timing.py): the whole step, Inductor's step (torch.compile
on the CPU, as bench/train_step.py's "cpu inductor"), and the two dot
programs. It prints each path's time and share, and what a whole step at
1.1x Inductor's speed would have to take against the tpu dots alone.

Why: on a machine without a TPU both steps spend most of their time in
float32 matmuls, so the whole step can beat Inductor by no more than XLA's
matmul kernels beat PyTorch's on the same products. The dots read inputs
no other product wrote (colder caches than in a step), on both sides alike:
the figure to compare is the ratio of the two dot rows, not their times."""
import argparse
import string
import tempfile

import torch

import torchtpu
import train_step as ts
from step_copies import dump_module
from step_timing import time_interleaved
from torchtpu.testing import hlo_dump


def einsum_spec(dot):
    """An einsum equation for `dot` whose result has the dot's dimension order
    (batch dims, lhs free dims, rhs free dims)."""
    names = iter(string.ascii_letters)
    lhs, rhs = [None] * len(dot.lhs), [None] * len(dot.rhs)
    for i, j in zip(dot.lhs_batch + dot.lhs_contract, dot.rhs_batch + dot.rhs_contract):
        lhs[i] = rhs[j] = next(names)
    lhs = [n or next(names) for n in lhs]
    rhs = [n or next(names) for n in rhs]
    lhs_free = [n for i, n in enumerate(lhs) if i not in dot.lhs_batch + dot.lhs_contract]
    rhs_free = [n for i, n in enumerate(rhs) if i not in dot.rhs_batch + dot.rhs_contract]
    out = [lhs[i] for i in dot.lhs_batch] + lhs_free + rhs_free
    return f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"


def dot_flops(dot):
    """2 x (lhs elements) x (rhs elements that are neither batch nor contracted)."""
    n = 1
    for d in dot.lhs:
        n *= d
    for i, d in enumerate(dot.rhs):
        if i not in dot.rhs_batch + dot.rhs_contract:
            n *= d
    return 2 * n


def dots_path(dots, device):
    """A step function running every dot once on `device`: one compiled program
    on tpu, eager einsums on the CPU."""
    specs = [einsum_spec(d) for d in dots]
    inputs = [torch.randn(shape, device=device) for d in dots for shape in (d.lhs, d.rhs)]

    def all_dots(*xs):
        return [torch.einsum(s, xs[2 * i], xs[2 * i + 1]) for i, s in enumerate(specs)]

    run = all_dots if device == "cpu" else torch.compile(all_dots, backend="tpu")

    def step():
        run(*inputs)
        if device != "cpu":
            torch.tpu.synchronize()
        return 0.0
    return step


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--flavor", default="debugmodel")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=15)
    a = p.parse_args()
    torchtpu.set_fallback_mode("silent")
    with tempfile.TemporaryDirectory() as dump:
        dots = [d for d in hlo_dump.dots(dump_module(a, "step", dump)) if d.dtype == "f32"]
    flops = sum(dot_flops(d) for d in dots)

    torch.manual_seed(0)
    model = ts.build_model("llama", a.flavor)
    tokens = torch.randint(0, model.args.vocab_size, (a.batch, a.seq + 1))
    paths = {"tpu whole step": ts.whole_step_path(model, tokens, 1e-3),
             "cpu inductor": ts.torch_path(model, "cpu", tokens, 1e-3, "inductor"),
             "tpu dots": dots_path(dots, "tpu"),
             "cpu dots (MKL)": dots_path(dots, "cpu")}
    for step in paths.values():
        for _ in range(a.warmup):
            step()
    sec = {k: s for k, (s, _) in time_interleaved(paths, a.steps).items()}

    print(f"\nllama {a.flavor}: batch {a.batch} x seq {a.seq}; the whole step's optimized "
          f"program has {len(dots)} float32 dots, {flops / 1e9:.2f} GFLOP; {a.steps} rounds, "
          f"median; torch {torch.__version__}")
    print(f"{'path':<18}{'ms':>9}{'GFLOP/s':>10}")
    for k, s in sec.items():
        rate = f"{flops / s / 1e9:10.1f}" if "dots" in k else ""
        print(f"{k:<18}{s * 1e3:>9.1f}{rate}")
    step, ind = sec["tpu whole step"], sec["cpu inductor"]
    tdots, cdots = sec["tpu dots"], sec["cpu dots (MKL)"]
    print(f"whole step tokens/s: {ind / step:.2f}x Inductor's; "
          f"the dots alone: tpu {tdots / cdots:.2f}x the time of MKL's")
    print(f"the dots alone are {100 * tdots / step:.0f}% of the whole step's time; "
          f"MKL's are {100 * cdots / ind:.0f}% of Inductor's step")
    print(f"1.1x Inductor's tokens/s means a whole step of {ind / 1.1 * 1e3:.1f} ms; "
          f"the tpu dots alone take {tdots * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
