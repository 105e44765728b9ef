"""First runs and new shapes: how long a workload takes in a fresh process
with an empty compilation cache, against PyTorch's CPU eager in the same run.

Each row is one workload, each path one fresh process (and a fresh, empty
TORCHTPU_CACHE_DIR); the time is the workload's first run (moving the model
to the device included, imports and model construction not), then its second
run in the same process ("warm"). Rows:

  generate   Hugging Face generate() of a small Llama, greedy, the default
             (growing) KV cache: a new sequence length at every token
  finetune   fine-tuning a small BERT with dynamic padding (each batch padded
             to its own longest sequence, as DataCollatorWithPadding does):
             24 batches of >= 20 distinct lengths, AdamW
  eval       an evaluation loop of a small CNN whose last batch is smaller
  growth     one op set (linear, gelu, layer norm, softmax, matmul) run at 1
             length 200 times, then at 200 distinct lengths once each:
             compiles asked for in each case

Paths:
  cpu         PyTorch CPU eager (the reference every ratio divides by)
  tpu         "tpu" with the defaults: new signatures run on the host tier
              (PyTorch's CPU kernels on host copies) while their programs
              compile in the background (TORCHTPU_COMPILE_AFTER=2)
  tpu-device  "tpu", device only: every new signature compiles at its first
              call (TORCHTPU_COMPILE_AFTER=0), as before the host tier
  tpu-O0      device only, per-op programs at XLA's backend optimisation
              level 0 (TORCHTPU_OP_OPT_LEVEL=0): cheaper compiles, slower
              loops
  (--compile) the same under torch.compile: cpu-inductor, tpu-compile,
              tpu-compile-device

Each path runs --repeat times (fresh processes); times are the medians, ratios
those of the medians, the counts and checks the last run's.

Compiles are the programs compiled during the run (synchronous and
background) plus those still queued when it ended ("+N queued"); host is
the number of op calls the host tier ran. "check" compares each path's
results with the cpu path's: generated tokens identical, losses' largest
relative difference per step, eval logits' largest absolute difference.

    python bench/cold_start.py                       # every row, eager paths
    python bench/cold_start.py --rows generate --compile
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROWS = ("generate", "finetune", "eval", "growth")
EAGER_PATHS = ("cpu", "tpu", "tpu-device", "tpu-O0")
COMPILE_PATHS = ("cpu-inductor", "tpu-compile", "tpu-compile-device")

# Environment of each path (on top of an empty cache directory).
PATH_ENV = {
    "cpu": {},
    "tpu": {"TORCHTPU_COMPILE_AFTER": "2"},
    "tpu-device": {"TORCHTPU_COMPILE_AFTER": "0"},
    "tpu-O0": {"TORCHTPU_COMPILE_AFTER": "0", "TORCHTPU_OP_OPT_LEVEL": "0"},
    "cpu-inductor": {},
    "tpu-compile": {"TORCHTPU_COMPILE_AFTER": "2"},
    "tpu-compile-device": {"TORCHTPU_COMPILE_AFTER": "0"},
}


# --- workloads (run in the child) -------------------------------------------------------------

def _llama():
    import transformers
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, num_attention_heads=4,
                                   num_key_value_heads=2, num_hidden_layers=2,
                                   intermediate_size=128, max_position_embeddings=512)
    return transformers.LlamaForCausalLM(cfg).eval()


def run_generate(device, compiled, new_tokens):
    import torch
    torch.manual_seed(0)
    model = _llama()
    ids = torch.randint(0, 256, (1, 8))

    def once():
        nonlocal model
        model = model.to(device)
        if compiled and not hasattr(model, "_cold_compiled"):
            model.forward = torch.compile(model.forward, backend=_backend(device))
            model._cold_compiled = True
        with torch.no_grad():
            out = model.generate(ids.to(device), max_new_tokens=new_tokens,
                                 min_new_tokens=new_tokens, do_sample=False)
        return out.cpu()

    return once, lambda out: out[0].tolist()


def _bert():
    import transformers
    cfg = transformers.BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=128,
                                  max_position_embeddings=128, num_labels=3,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertForSequenceClassification(cfg)


def _padded_batches(n_batches=24, batch=8, seed=0):
    """DataCollatorWithPadding's batches: each padded to its longest sequence."""
    import torch
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in range(n_batches):
        lengths = torch.randint(6, 64, (batch,), generator=g)
        lengths[0] = 8 + 2 * b  # at least 24 distinct padded lengths
        longest = int(lengths.max())
        ids = torch.randint(1, 512, (batch, longest), generator=g)
        mask = (torch.arange(longest)[None, :] < lengths[:, None]).long()
        ids = ids * mask
        labels = torch.randint(0, 3, (batch,), generator=g)
        out.append((ids, mask, labels))
    return out


def run_finetune(device, compiled):
    import torch
    torch.manual_seed(0)
    model = _bert()
    batches = _padded_batches()

    def once():
        nonlocal model
        model = model.to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        fwd = torch.compile(model, backend=_backend(device)) if compiled else model
        losses = []
        for ids, mask, labels in batches:
            out = fwd(input_ids=ids.to(device), attention_mask=mask.to(device),
                      labels=labels.to(device))
            out.loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(out.loss.detach())
        return [float(x) for x in losses]

    return once, lambda losses: losses


def _cnn():
    import torch
    from torch import nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10)).eval()


def run_eval(device, compiled):
    import torch
    torch.manual_seed(0)
    model = _cnn()
    images = torch.randn(100, 3, 32, 32)

    def once():
        nonlocal model
        model = model.to(device)
        fwd = torch.compile(model, backend=_backend(device)) if compiled else model
        outs = []
        with torch.no_grad():
            for i in range(0, len(images), 16):  # 6 batches of 16, then 4
                outs.append(fwd(images[i:i + 16].to(device)).cpu())
        return torch.cat(outs)

    return once, lambda logits: logits.tolist()


def _op_set(x, w1, w2):
    import torch.nn.functional as F
    h = F.gelu(x @ w1)
    h = F.layer_norm(h, h.shape[-1:])
    a = (h @ h.T).softmax(-1)
    return (a @ h) @ w2


def run_growth(device, compiled):
    """Compiles asked for: one length 200 times, then 200 lengths once each."""
    import torch
    del compiled
    torch.manual_seed(0)
    w1, w2 = torch.randn(32, 64).to(device), torch.randn(64, 32).to(device)
    xs = [torch.randn(n, 32) for n in range(1, 201)]

    def asked():
        if device == "cpu":
            return 0
        s = torchtpu._core.stats()
        return s["compiles"] + s["compiles_pending"]

    import torchtpu
    before = asked()
    for _ in range(200):
        _op_set(xs[63].to(device), w1, w2).sum().item()
    one = asked() - before
    before = asked()
    for x in xs:
        _op_set(x.to(device), w1, w2).sum().item()
    many = asked() - before
    return (lambda: {"one_length": one, "lengths_200": many}), lambda r: r


def _backend(device):
    return "tpu" if device == "tpu" else "inductor"


def child(row, path, new_tokens):
    device = "cpu" if path.startswith("cpu") else "tpu"
    compiled = path in COMPILE_PATHS
    import torch  # noqa: F401 (loads torchtpu through its entry point)
    if device == "tpu":
        import torchtpu  # noqa: F401
    make = {"generate": lambda: run_generate(device, compiled, new_tokens),
            "finetune": lambda: run_finetune(device, compiled),
            "eval": lambda: run_eval(device, compiled),
            "growth": lambda: run_growth(device, compiled)}[row]
    once, result = make()
    t0 = time.perf_counter()
    first = once()
    cold = time.perf_counter() - t0
    stats = {}
    if device == "tpu":
        import torchtpu
        stats = torchtpu._core.stats()
    warm = None
    if row != "growth":
        t0 = time.perf_counter()
        once()
        warm = time.perf_counter() - t0
    out = {"cold": cold, "warm": warm, "result": result(first),
           "compiles": stats.get("compiles", 0), "queued": stats.get("compiles_pending", 0),
           "host": stats.get("host_calls", 0)}
    print("RESULT " + json.dumps(out), flush=True)


# --- the parent: one process per path -----------------------------------------------------------

def run_path(row, path, new_tokens, timeout):
    env = dict(os.environ)
    for k in ("TORCHTPU_COMPILE_AFTER", "TORCHTPU_OP_OPT_LEVEL"):
        env.pop(k, None)
    env.update(PATH_ENV[path])
    with tempfile.TemporaryDirectory(prefix="cold-start-cache-") as cache:
        env["TORCHTPU_CACHE_DIR"] = cache
        cmd = [sys.executable, os.path.abspath(__file__), "--child", row, path,
               "--new-tokens", str(new_tokens)]
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout} s"}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][:200]}


def run_repeated(row, path, args):
    """Runs a path args.repeat times; the last run with the median times."""
    runs = [run_path(row, path, args.new_tokens, args.timeout)
            for _ in range(1 if row == "growth" else max(args.repeat, 1))]
    bad = [r for r in runs if "error" in r]
    if bad:
        return bad[0]
    out = dict(runs[-1])
    for key in ("cold", "warm"):
        if out[key] is not None:
            out[key] = statistics.median(r[key] for r in runs)
    return out


def check(row, ref, res):
    if row == "generate":
        return "tokens identical" if ref == res else "TOKENS DIFFER"
    if row == "finetune":
        rel = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(ref, res))
        return f"loss rel diff {rel:.1e}"
    if row == "eval":
        diff = max(abs(a - b) for ra, rb in zip(ref, res) for a, b in zip(ra, rb))
        return f"logits max diff {diff:.1e}"
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--paths", default=None, help="comma-separated (default: the eager ones)")
    ap.add_argument("--compile", action="store_true", help="add the torch.compile paths")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per path")
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per path")
    ap.add_argument("--child", nargs=2, metavar=("ROW", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child[0], args.child[1], args.new_tokens)
    paths = args.paths.split(",") if args.paths else list(EAGER_PATHS)
    if args.compile:
        paths += [p for p in COMPILE_PATHS if p not in paths]
    print(f"cold start, fresh process and empty cache per path; load {os.getloadavg()[0]:.2f}")
    print(f"{'row':9} {'path':19} {'cold s':>8} {'x cpu':>7} {'warm s':>7} {'x cpu':>6} "
          f"{'compiles':>14} {'host':>7}  check")
    for row in args.rows.split(","):
        ref, results = None, {}
        for path in (["cpu"] if "cpu" not in paths else []) + paths:
            r = run_repeated(row, path, args)
            if "error" in r:
                print(f"{row:9} {path:19} failed: {r['error']}")
                continue
            if path == "cpu":
                ref = r
            results[path] = r
            if row == "growth":
                g = r["result"]
                print(f"{row:9} {path:19} compiles asked: 1 length x200: {g['one_length']}, "
                      f"200 lengths: {g['lengths_200']} "
                      f"({g['lengths_200'] / max(g['one_length'], 1):.1f}x)")
                continue
            xc = r["cold"] / ref["cold"] if ref else float("nan")
            xw = r["warm"] / ref["warm"] if ref else float("nan")
            comp = f"{r['compiles']}" + (f" +{r['queued']} queued" if r["queued"] else "")
            ok = check(row, ref["result"], r["result"]) if ref and path != "cpu" else ""
            print(f"{row:9} {path:19} {r['cold']:8.3f} {xc:7.2f} {r['warm']:7.3f} {xw:6.2f} "
                  f"{comp:>14} {r['host']:7d}  {ok}", flush=True)
        for a, b in (("tpu", "tpu-device"), ("tpu-compile", "tpu-compile-device")):
            if a in results and b in results and row != "growth":  # the host tier's part
                print(f"{row:9} {a} vs {b}: {check(row, results[b]['result'], results[a]['result'])}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
