"""Activation checkpointing ([activation_checkpoint], torchtpu/trainer/
activation_checkpoint.py) on "tpu": peak device memory and tokens/s of a
training step (forward, cross-entropy, backward, AdamW) of the llama debug
model with none / selective every 2nd block / selective op-level / full
checkpointing, in one run, with each mode's ratio to none.

    python bench/activation_checkpoint.py [--name llama] [--flavor debugmodel]
        [--batch 8] [--seq 256] [--warmup 2] [--steps 3] [--compile]
        [--modes none,selective:2,selective:op,full]

The peak is torch.tpu.max_memory_allocated() over the timed steps (reset
after the warm-up), which includes the parameters, gradients and AdamW state
(the same in every mode); the plan's estimate of the activations
(torchtpu.trainer.plan, --dry-run) is printed beside it. --compile runs the
step as the trainer's training.compile does (torch.compile of forward+loss,
compiled optimizer step). The losses of every mode must agree: the
recomputation runs the same ops on the same inputs. On a machine without a
TPU, "tpu" is XLA's CPU plugin: the time ratios show the recomputation's cost
through that plugin, not a TPU's."""
import argparse
import time

import torch
import torch.nn.functional as F

import torchtpu  # noqa: F401  (registers "tpu")
from torchtpu.compile import compile_training
from torchtpu.models import build_model
from torchtpu.trainer import activation_checkpoint as AC
from torchtpu.trainer import plan


def run(args, mode, option):
    torch.manual_seed(0)
    model = build_model(args.name, args.flavor)
    ac = {"mode": mode, "selective_ac_option": option}
    AC.apply(model, ac)
    model.to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, model.args.vocab_size, (args.batch, args.seq + 1), generator=g)
    x, y = x[:, :-1].to("tpu"), x[:, 1:].to("tpu")

    def forward_loss(x, y):
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        aux = model.aux_loss()
        return loss, loss if aux is None else loss + aux

    step_fn = opt.step
    if args.compile:
        forward_loss, step_fn = compile_training(forward_loss, opt, "tpu")

    def step():
        loss, total = forward_loss(x, y)
        total.backward()
        step_fn()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    for _ in range(args.warmup):
        step()
    torch.tpu.synchronize()
    torch.tpu.reset_peak_memory_stats()
    t0 = time.perf_counter()
    losses = [step() for _ in range(args.steps)]
    dt = time.perf_counter() - t0
    est = plan.activation_bytes(model.args, hasattr(model, "active_params"),
                                args.batch * args.seq, 4, ac)["total"]
    return {"peak": torch.tpu.max_memory_allocated(), "tps": args.batch * args.seq * args.steps / dt,
            "loss": losses[-1], "estimate": est}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", default="llama")
    ap.add_argument("--flavor", default="debugmodel")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--modes", default="none,selective:2,selective:op,full")
    args = ap.parse_args()
    print(f"{args.name}/{args.flavor}, batch {args.batch} x seq {args.seq}, float32, "
          f"{'training.compile' if args.compile else 'strict eager'}, "
          f"{args.steps} timed steps after {args.warmup}")
    rows = []
    for spec in args.modes.split(","):
        mode, _, option = spec.partition(":")
        rows.append((spec, run(args, mode, option or "2")))
    base = rows[0][1]
    print(f"{'mode':<14} {'peak MiB':>9} {'vs none':>8} {'est. act MiB':>12} {'tokens/s':>9} "
          f"{'vs none':>8} {'loss':>10}")
    for spec, r in rows:
        print(f"{spec:<14} {r['peak'] / 2**20:9.1f} {r['peak'] / base['peak']:8.2f} "
              f"{r['estimate'] / 2**20:12.1f} {r['tps']:9.0f} {r['tps'] / base['tps']:8.2f} "
              f"{r['loss']:10.6f}")


if __name__ == "__main__":
    main()
