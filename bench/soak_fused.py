"""Soak (not a test): fused-eager training of a small MLP with torchtpu.sync()
only every N steps, printing per flush the graph size and compile seconds
(the recompile explainer's entries), to show whether a flush's compile time
stays bounded as graphs grow.

    TORCH_TPU_DEFER_AND_FUSE=1 python bench/soak_fused.py [--steps 300] [--sync-every 100]
        [--max-instructions N]
"""
import argparse
import os
import time

os.environ.setdefault("TORCH_TPU_DEFER_AND_FUSE", "1")
os.environ.setdefault("TORCHTPU_CACHE_DIR", "off")

import torch  # noqa: E402

import torchtpu  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--sync-every", type=int, default=100)
    ap.add_argument("--max-instructions", type=int, default=None,
                    help="fused eager's compile-cost bound (default: the core's)")
    args = ap.parse_args()
    torchtpu.modes.set_fuse_limit(max_instructions=args.max_instructions)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10)).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64, device="tpu"), torch.randint(0, 10, (32,), device="tpu")
    seen, t0 = 0, time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % args.sync_every == 0:
            torchtpu.sync()
            entries = torch.tpu._get_cache_stats()["entries"]
            new = entries[seen:]
            seen = len(entries)
            worst = max((e["compile_seconds"] for e in new), default=0.0)
            fs = torchtpu.modes.fused_stats()
            print(f"step {step:5d}  loss {loss.item():.4f}  programs compiled {len(new):3d}  "
                  f"slowest compile {worst:6.2f} s  graphs {fs['graphs']:4d} "
                  f"(split by a bound {fs['bound_splits']:3d}, last {fs['last_graph_ops']} ops / "
                  f"{fs['last_graph_instructions']} instructions)  "
                  f"wall {time.perf_counter() - t0:7.1f} s", flush=True)


if __name__ == "__main__":
    main()
