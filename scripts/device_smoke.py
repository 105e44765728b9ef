"""The Python part of scripts/device_check.sh: torchtpu's "tpu" device on
whatever plugin the core loads (TORCHTPU_PLUGIN_PATH: XLA's CUDA plugin on a
lent GPU machine, the CPU plugin standing in elsewhere), each result compared
with PyTorch's own on the CPU.

    python scripts/device_smoke.py OUT.json [--llama]

Checks (each one a record: name, ok, max_abs_diff, seconds, error):
  tensors        matmul, add, softmax, sum, indexing, a host round trip
  sdpa           scaled_dot_product_attention (causal), the lowering's path:
                 TORCHTPU_CPU_ATTENTION_KERNEL=0 keeps the CPU plugin's kernel out
  mlp_step       an MLP's forward, backward and SGD step against the CPU's
  compiled_step  the same step under torch.compile(backend="tpu")
--llama adds the llama debug model's training step (forward, loss, backward,
AdamW), seconds per step on tpu strict eager and tpu torch.compile, and, on a
machine with CUDA, PyTorch's own eager and torch.compile (inductor) on "cuda":
the figures docs/portability.md asks for. Writes OUT.json and prints one line
per check; exit status 1 when any check failed."""
import json
import os
import sys
import time
import traceback

os.environ.setdefault("TORCHTPU_CPU_ATTENTION_KERNEL", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import torch  # noqa: E402

RESULTS = []


def check(name):
    def wrap(fn):
        t0 = time.perf_counter()
        rec = {"name": name, "ok": False, "max_abs_diff": None, "error": None}
        try:
            diff = fn()
            rec["max_abs_diff"] = float(diff) if diff is not None else None
            rec["ok"] = diff is None or diff <= 1e-4
            if not rec["ok"]:
                rec["error"] = f"max abs diff {diff:g} above 1e-4"
        except Exception as e:  # recorded, then the next check runs
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = traceback.format_exc()[-2000:]
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        RESULTS.append(rec)
        print(f"{'PASS' if rec['ok'] else 'FAIL'} {name} {rec['seconds']}s"
              + (f" diff {rec['max_abs_diff']:.3g}" if rec["max_abs_diff"] is not None else "")
              + (f" {rec['error']}" if rec["error"] else ""), flush=True)
        return fn
    return wrap


def diff(a, b):
    return (a.detach().cpu().double() - b.detach().double()).abs().max().item()


def main():
    out = sys.argv[1]
    import torchtpu

    info = torchtpu.runtime_info()
    print("runtime:", {k: info.get(k) for k in ("platform", "platform_version", "plugin_path",
                                                "device_count", "device_kind")}, flush=True)
    torch.manual_seed(0)

    @check("tensors")
    def _():
        a, b = torch.randn(64, 48), torch.randn(48, 32)
        ta, tb = a.to("tpu"), b.to("tpu")
        d = [diff(ta @ tb, a @ b), diff(ta + 1.5, a + 1.5),
             diff(torch.softmax(ta, -1), torch.softmax(a, -1)),
             diff(ta.sum(0), a.sum(0)), diff(ta[3:40:2, ::3], a[3:40:2, ::3])]
        assert torch.equal(ta.cpu(), a)
        return max(d)

    @check("sdpa")
    def _():
        q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
        f = torch.nn.functional.scaled_dot_product_attention
        return diff(f(q.to("tpu"), k.to("tpu"), v.to("tpu"), is_causal=True), f(q, k, v, is_causal=True))

    def mlp_step(device, compiled):
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
        model = model.to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(16, 32, generator=torch.Generator().manual_seed(2)).to(device)
        y = torch.randn(16, 8, generator=torch.Generator().manual_seed(3)).to(device)
        fwd = (lambda: torch.nn.functional.mse_loss(model(x), y))  # noqa: E731
        if compiled:
            fwd = torch.compile(fwd, backend="tpu")
        for _ in range(2):
            loss = fwd()
            loss.backward()
            opt.step()
            opt.zero_grad()
        return loss, [p.detach() for p in model.parameters()]

    def step_diff(compiled):
        l_cpu, p_cpu = mlp_step("cpu", False)
        l_tpu, p_tpu = mlp_step("tpu", compiled)
        return max([diff(l_tpu, l_cpu)] + [diff(a, b) for a, b in zip(p_tpu, p_cpu)])

    check("mlp_step")(lambda: step_diff(False))
    check("compiled_step")(lambda: step_diff(True))

    figures = {}
    if "--llama" in sys.argv:
        figures = llama_figures()
    with open(out, "w") as f:
        json.dump({"runtime": {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v))
                               for k, v in info.items()},
                   "torch": torch.__version__, "checks": RESULTS, "llama": figures}, f, indent=1)
    return 0 if all(r["ok"] for r in RESULTS) else 1


def llama_figures():
    """Seconds per llama debug training step: tpu strict, tpu compile and, with
    CUDA, cuda eager and cuda torch.compile; medians of 5 after 3 warm-up."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(os.path.dirname(here), "bench"))
    from step_timing import time_steps
    from train_step import torch_path

    from torchtpu.models import build_model

    torch.manual_seed(0)
    model = build_model("llama", "debugmodel")
    tokens = torch.randint(0, model.args.vocab_size, (4, 129))
    paths = {"tpu_strict": ("tpu", None), "tpu_compile": ("tpu", "tpu")}
    if torch.cuda.is_available():
        paths.update({"cuda_eager": ("cuda", None), "cuda_compile": ("cuda", "inductor")})
    figures = {}
    for name, (device, backend) in paths.items():
        t0 = time.perf_counter()
        try:
            sec, loss = time_steps(torch_path(model, device, tokens, 1e-3, backend), 3, 5)
            figures[name] = {"ms_per_step": round(sec * 1e3, 2), "loss": loss,
                             "seconds_total": round(time.perf_counter() - t0, 1)}
        except Exception as e:
            figures[name] = {"error": f"{type(e).__name__}: {e}"}
        print(f"llama {name}: {figures[name]}", flush=True)
    return figures


if __name__ == "__main__":
    sys.exit(main())
