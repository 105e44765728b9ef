"""Copies XLA adds to a compiled training step: what the optimized program of
the llama step does besides the model's math.

    python bench/step_copies.py [--flavor debugmodel] [--batch 4] [--seq 128] [--path step,fused]

For each path (the whole step, the trainer's compile_mode "step", as in
bench/train_step.py; and fused eager, whose one program per step donates
nothing) it runs two steps in a subprocess with XLA_FLAGS asking the plugin
to dump the optimized HLO (XLA_FLAGS is part of the persistent cache's key,
so the step compiles afresh), then reads the largest module's entry
computation and prints its fusions, dots and `copy` instructions with their
bytes, the copies of entry parameters apart.

Why: a parameter whose buffer the program donates (written in place; README,
"torch.compile") gets its new value in that buffer only where XLA can put
it there. XLA copies the parameter at entry, one read and one write of it
per step, when the op making the new value cannot share the old one's
buffer (a fusion's result shares an operand's buffer only when the two have
one shape; torchtpu.compile's _flat_updates computes pointwise updates on the
flat storage for that) or when a read of the old value is not ordered
before that write (the weights' copies that remain: the backward matmul
dX = dY W, for one, reads the old weight and is no ancestor of W's update).
The count is deterministic, unlike a step's time on a shared host: it is the
figure to watch when changing how the step's program is built. On a machine without a TPU the plugin is XLA's
CPU one; XLA's TPU and GPU compilers use the same copy insertion pass, after
fusion choices of their own.
"""
import argparse
import os
import sys
import tempfile

from torchtpu.testing import hlo_dump


def child(a):
    """Runs two steps of the path (the dump happens at the first compile)."""
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torchtpu
    import train_step as ts

    torchtpu.set_fallback_mode("silent")
    torch.manual_seed(0)
    model = ts.build_model("llama", a.flavor)
    tokens = torch.randint(0, model.args.vocab_size, (a.batch, a.seq + 1))
    if a.child == "step":
        step = ts.whole_step_path(model, tokens, 1e-3)
    else:
        step = ts.torch_path(model, "tpu", tokens, 1e-3, fused=True)
    for _ in range(2):
        step()


def summarize(path):
    """Counts of the entry computation's instructions, and the count and bytes
    of its copies of parameters and of other values."""
    instrs = hlo_dump.entry_instructions(path)
    counts = {}
    for i in instrs:
        counts[i.op] = counts.get(i.op, 0) + 1
    of_params = hlo_dump.param_copies(instrs)
    copied = {i.name for i in of_params}
    others = [i for i in instrs if i.op == "copy" and i.name not in copied]
    copies = {kind: [len(c), sum(i.nbytes for i in c)]
              for kind, c in (("param", of_params), ("other", others))}
    return counts, copies


def dump_module(a, path, dump):
    """Runs two steps of `path` ("step" or "fused") in a child process that
    dumps its optimized programs into the folder `dump`; the largest one's
    file (the step's program). RuntimeError, with the reason, when the child
    fails or nothing was dumped."""
    proc = hlo_dump.run_dumping([os.path.abspath(__file__), "--child", path, "--flavor",
                                 a.flavor, "--batch", str(a.batch), "--seq", str(a.seq)], dump)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise RuntimeError(f"the {path} child failed ({tail})")
    files = hlo_dump.optimized_modules(dump)
    if not files:
        raise RuntimeError("no optimized module was dumped (XLA_FLAGS ignored by this plugin?)")
    return max(files, key=os.path.getsize)


def run_path(a, path):
    with tempfile.TemporaryDirectory() as dump:
        try:
            counts, copies = summarize(dump_module(a, path, dump))
        except RuntimeError as e:
            print(f"{path}: {e}")
            return
    pc, pb = copies["param"]
    oc, ob = copies["other"]
    print(f"{path:6s} {counts.get('parameter', 0):7d} {counts.get('fusion', 0):8d} "
          f"{counts.get('dot', 0):5d} {pc:13d} {pb / 2**20:8.1f} {oc:13d} {ob / 2**20:8.1f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--flavor", default="debugmodel")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--path", default="step,fused", help="comma-separated: step, fused")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a)
        return
    print(f"llama {a.flavor}: batch {a.batch} x seq {a.seq}; the largest optimized module's "
          "entry computation")
    print("path    params  fusions  dots  param copies      MiB  other copies      MiB")
    for path in filter(None, a.path.split(",")):
        run_path(a, path)


if __name__ == "__main__":
    main()
