"""Custom kernels vs the plain PyTorch composition on "tpu", in one run.

    python bench/kernels.py            # µs/call of each kernel and its composition
    python bench/kernels.py --train    # + the llama debug model, 20 steps, SDPA vs flash

Each pair runs the same forward on the same inputs in strict eager (one
program per op, so the composition pays one launch per op while a kernel is
one program) and in fused eager (both become one program). Times are medians
of `--iters` calls after a warm-up (export and compile excluded).

On this machine the "tpu" device is XLA's CPU plugin and the Pallas kernels
run in interpret mode (loops of dynamic slices): their figures say what the
splice costs, not what Mosaic kernels do on a TPU.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import torchtpu


def median_us(fn, iters):
    fn()
    torchtpu.sync()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        out = fn()
        torchtpu.sync()
        torch.tpu.synchronize() if hasattr(torch, "tpu") else None
        out = out if isinstance(out, torch.Tensor) else out[0]
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def cases():
    import jax.numpy as jnp

    import torchtpu.kernels as K
    from torchtpu.kernels.ffi import rmsnorm_example
    from torchtpu.kernels.flash_attention import flash_attention
    from torchtpu.kernels.gmm import gmm

    gelu = K.jax_op("bench::gelu_tanh", lambda x: 0.5 * x * (1 + jnp.tanh(
        0.7978845608 * (x + 0.044715 * x ** 3))))
    sumsq = K.jax_op("bench::rowsumsq", lambda x: jnp.sum(x * x, axis=-1))
    rms = rmsnorm_example()
    t = lambda *s, dtype=torch.float32: torch.randn(*s).to(dtype).to("tpu")  # noqa: E731
    x = t(256, 1024)
    q, k, v = t(1, 8, 256, 64), t(1, 4, 256, 64), t(1, 4, 256, 64)
    lhs, rhs = t(512, 128), t(8, 128, 128)
    sizes = torch.tensor([64] * 8, dtype=torch.int32).to("tpu")
    w = t(1024)
    def gmm_ref():
        outs = [lhs[i * 64:(i + 1) * 64] @ rhs[i] for i in range(8)]
        return torch.cat(outs)
    return [
        ("jax gelu(tanh) [256,1024]", lambda: gelu(x),
         lambda: 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))),
        ("jax sum(x*x,-1) [256,1024]", lambda: sumsq(x), lambda: (x * x).sum(-1)),
        ("pallas flash attn 8/4 heads L256 D64", lambda: flash_attention(q, k, v),
         lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)),
        ("pallas gmm 8x[64,128]@[128,128]", lambda: gmm(lhs, rhs, sizes), gmm_ref),
        ("C rmsnorm (FFI) [256,1024]", lambda: rms(x, w),
         lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w),
    ]


def bench_ops(iters):
    print(f"{'kernel':40s} {'mode':7s} {'kernel µs':>10s} {'torch µs':>10s} {'ratio':>6s}")
    with torch.no_grad():
        for name, kern, ref in cases():
            for mode in ("strict", "fused"):
                with torchtpu.mode(mode):
                    a = median_us(kern, iters)
                    b = median_us(ref, iters)
                print(f"{name:40s} {mode:7s} {a:10.1f} {b:10.1f} {a / b:6.2f}")


def bench_train(steps):
    from torchtpu import train as trainer
    from torchtpu.trainer.config import load_config
    runs = {}
    for attention in ("sdpa", "flash"):
        cfg = load_config(path="torchtpu/configs/llama_debug.toml", overrides={
            "model": {"attention": attention},
            "training": {"steps": steps},
            "checkpoint": {"enable": False},
            "metrics": {"log_freq": steps, "plot": False, "progress_bar": False,
                        "peak_flops": 1e9},
            "job": {"dump_folder": f"outputs/bench_kernels_{attention}"}})
        t0 = time.perf_counter()
        runs[attention] = trainer.train(cfg, log=lambda *a, **k: None)["losses"]
        print(f"llama debugmodel, {attention}: {steps} steps in {time.perf_counter() - t0:.1f} s, "
              f"loss {runs[attention][1]:.4f} -> {runs[attention][steps]:.4f}")
    diff = max(abs(runs["sdpa"][s] - runs["flash"][s]) for s in runs["sdpa"])
    print(f"max |loss(sdpa) - loss(flash)| over {steps} steps: {diff:.2e}")
    return diff


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--train", action="store_true")
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    print(f"torchtpu on {torchtpu.runtime_info()['platform']}")
    bench_ops(a.iters)
    if a.train:
        bench_train(a.steps)


if __name__ == "__main__":
    main()
