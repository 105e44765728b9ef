"""Time to the first training step with a cold and a warm persistent
compilation cache.

Runs the same child process twice on one fresh cache directory
(TORCHTPU_CACHE_DIR): the first compiles every program and writes it to the
directory, the second loads them. The child builds the llama model
(torchtpu.models, "debugmodel" flavour unless --flavor says otherwise), moves
it to "tpu" and runs one training step (forward, cross-entropy, backward,
AdamW, reading the loss), timing each phase.

    python bench/cache_warm_start.py [--flavor debugmodel] [--batch 2] [--seq 64]
                                     [--mode strict|fused|compile] [--keep DIR]

Prints, for both runs: the process's wall time, import and setup (import +
model to "tpu") times, the first step's time, the programs compiled and loaded, the seconds spent compiling and loading; then
warm/cold ratios (target: first step warm <= 0.2x cold). The losses must
agree (same weights, same tokens)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch, torch.nn.functional as F
import torchtpu
from torchtpu.models import build_model
t_import = time.perf_counter() - t0
flavor, batch, seq, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.manual_seed(0)
model = build_model("llama", flavor).to("tpu")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
tokens = torch.randint(0, model.args.vocab_size, (batch, seq + 1)).to("tpu")
torch.tpu.synchronize()
t_setup = time.perf_counter() - t0

def fwd():
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))

def step():
    loss = fwd_fn()
    loss.backward()
    opt_step()
    opt.zero_grad(set_to_none=True)
    return loss.item()

fwd_fn, opt_step = fwd, opt.step
if mode == "compile":
    fwd_fn = torch.compile(fwd, backend="tpu")
    opt_step = torch.compile(opt.step, backend="tpu")
t1 = time.perf_counter()
if mode == "fused":
    from torchtpu import modes
    with modes.mode("fused"):
        loss = step()
else:
    loss = step()
t_step = time.perf_counter() - t1
st = torch.tpu._get_cache_stats()
st.pop("entries")
print(json.dumps(dict(st, loss=loss, t_import=t_import, t_setup=t_setup, t_step=t_step,
                      t_total=time.perf_counter() - t0)))
"""


def run_child(cache_dir, args):
    env = dict(os.environ, TORCHTPU_CACHE_DIR=cache_dir)
    env.pop("TORCHTPU_EXPLAIN_RECOMPILES", None)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD, args.flavor, str(args.batch),
                        str(args.seq), args.mode], env=env, text=True, capture_output=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"child failed:\n{p.stderr}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["wall"] = wall
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--flavor", default="debugmodel")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--mode", default="strict", choices=["strict", "fused", "compile"])
    p.add_argument("--keep", default=None, help="use (and keep) this cache directory; "
                   "it should be empty for a cold first run")
    args = p.parse_args()
    tmp = None
    cache_dir = args.keep
    if cache_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="torchtpu-warm-start-")
        cache_dir = tmp.name
    cold = run_child(cache_dir, args)
    warm = run_child(cache_dir, args)
    files = [f for f in os.listdir(cache_dir) if f.endswith(".ttexe")]
    nbytes = sum(os.path.getsize(os.path.join(cache_dir, f)) for f in files)

    print(f"llama {args.flavor}, batch {args.batch}, seq {args.seq}, {args.mode} mode; "
          f"cache {len(files)} files, {nbytes / 2**20:.1f} MiB")
    print(f"{'':8} {'process s':>10} {'import s':>9} {'setup s':>8} {'1st step s':>11} {'compiles':>9} "
          f"{'compile s':>10} {'disk hits':>10} {'load s':>7} {'loss':>10}")
    for name, r in (("cold", cold), ("warm", warm)):
        print(f"{name:8} {r['wall']:10.2f} {r['t_import']:9.2f} {r['t_setup']:8.2f} {r['t_step']:11.2f} "
              f"{r['compiles']:9d} {r['compile_seconds']:10.2f} {r['disk_hits']:10d} "
              f"{r['disk_load_seconds']:7.2f} {r['loss']:10.4f}")
    step_ratio = warm["t_step"] / cold["t_step"]
    to_first = (warm["t_setup"] + warm["t_step"]) / (cold["t_setup"] + cold["t_step"])
    print(f"warm/cold: first step {step_ratio:.3f}x, setup + first step {to_first:.3f}x, "
          f"whole process {warm['wall'] / cold['wall']:.3f}x (target first step <= 0.2x)")
    if abs(warm["loss"] - cold["loss"]) > 1e-6 * max(1.0, abs(cold["loss"])):
        print(f"WARNING: losses differ: cold {cold['loss']} warm {warm['loss']}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
