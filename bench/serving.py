"""Serving on "tpu" through vLLM (torchtpu/vllm, docs/vllm.md): offline
throughput of vLLM's LLM.generate on "tpu" against Hugging Face generate()
with the same weights, batched, on "tpu" and on the CPU, in one run; the
compiles vLLM's engine asks for after its warm-up (target: 0); and, with
--online, a `vllm serve` check (a completions and a chat request over HTTP).

    python bench/serving.py [--requests 64] [--new-tokens 32] [--repeat 3] [--online]

The model is a small Llama saved from a config (random weights, a byte-level
tokenizer with a chat template), written to a temporary directory. Requests:
--requests prompts of mixed lengths (4..--max-prompt tokens), greedy,
--new-tokens each, EOS ignored. Hugging Face runs one left-padded batch of
all requests with the default (growing) KV cache; vLLM schedules them itself
(continuous batching, chunked prefill; its prefix cache is emptied before
each timed run, so it prefills every prompt as HF does). "tokens/s" counts
generated tokens over the wall time of the generate call, the best of
--repeat timed runs (warm: each path runs once before them; the best, as
the 2-core development host is shared and a single run's time varies by
2x). "same" is how many requests' vLLM tokens equal Hugging Face's on the
CPU (near-ties of random weights may flip a few under batching).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch  # noqa: E402


def make_model(path, hidden, layers):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    vocab["<s>"], vocab["</s>"] = len(vocab), len(vocab) + 1
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
                          "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")
    fast.save_pretrained(path)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=hidden * 2,
                      num_hidden_layers=layers, num_attention_heads=hidden // 32,
                      num_key_value_heads=max(1, hidden // 64), max_position_embeddings=512,
                      bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"])
    LlamaForCausalLM(cfg).save_pretrained(path)
    return len(vocab)


def hf_generate(model, prompts, new_tokens, dev):
    """One left-padded batch, greedy, no stop at EOS."""
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    with torch.no_grad():
        out = model.generate(ids.to(dev), attention_mask=mask.to(dev), do_sample=False,
                             max_new_tokens=new_tokens, eos_token_id=None, pad_token_id=0)
    return out[:, width:].cpu().tolist()


def timed(fn, repeat=1, before=None):
    """fn's last output and its best wall time over `repeat` runs (`before`,
    untimed, ahead of each)."""
    best = None
    for _ in range(max(1, repeat)):
        if before is not None:
            before()
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return out, best


def online_check(path):
    """`vllm serve` on localhost: one completions and one chat request."""
    port = 18000 + os.getpid() % 1000
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="1")
    cmd = [os.path.join(os.path.dirname(sys.executable), "vllm"), "serve", path,
           "--port", str(port), "--dtype", "float32", "--max-model-len", "256",
           "--max-num-seqs", "8", "--max-num-batched-tokens", "128",
           "--kv-cache-memory-bytes", str(32 << 20)]
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({proc.returncode}); log: {log.name}")
            try:
                urllib.request.urlopen(base + "/v1/models", timeout=2)
                break
            except OSError:
                time.sleep(1)

        def post(route, body):
            req = urllib.request.Request(base + route, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
            return json.load(urllib.request.urlopen(req, timeout=300))
        c = post("/v1/completions", {"model": path, "prompt": "Hello, tpu", "max_tokens": 8,
                                     "temperature": 0})
        ch = post("/v1/chat/completions", {"model": path, "max_tokens": 8, "temperature": 0,
                                           "messages": [{"role": "user", "content": "Hi"}]})
        print(f"online: completions -> {c['choices'][0]['text']!r} "
              f"({c['usage']['completion_tokens']} tokens)")
        print(f"online: chat -> {ch['choices'][0]['message']['content']!r} "
              f"({ch['usage']['completion_tokens']} tokens)")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--max-prompt", type=int, default=96)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per path (best kept)")
    ap.add_argument("--online", action="store_true", help="also check `vllm serve`")
    ap.add_argument("--skip-hf-tpu", action="store_true")
    args = ap.parse_args()

    import torchtpu
    from transformers import AutoModelForCausalLM
    from vllm import LLM, SamplingParams

    path = tempfile.mkdtemp(prefix="serving-llama-")
    vocab = make_model(path, args.hidden, args.layers)
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(4, args.max_prompt + 1, (args.requests,), generator=g).tolist()
    prompts = [torch.randint(0, vocab - 2, (n,), generator=g).tolist() for n in lens]
    gen_tokens = args.requests * args.new_tokens
    rows = []

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    hf_generate(hf, prompts[:2], 2, "cpu")
    want, dt = timed(lambda: hf_generate(hf, prompts, args.new_tokens, "cpu"), args.repeat)
    rows.append(("HF generate, cpu (one batch)", dt, ""))

    if not args.skip_hf_tpu:
        hft = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval().to("tpu")
        for _ in range(2):   # first runs: the host tier, then the background compiles
            hf_generate(hft, prompts, args.new_tokens, "tpu")
            torchtpu.wait_compiles()
        c0 = torch.tpu._get_cache_stats()["compiles"]
        got_hf, dt = timed(lambda: hf_generate(hft, prompts, args.new_tokens, "tpu"),
                           args.repeat)
        c1 = torch.tpu._get_cache_stats()["compiles"]
        rows.append(("HF generate, tpu (one batch)", dt,
                     f"{c1 - c0} compiles in the timed runs"))
        del hft

    c_start = torch.tpu._get_cache_stats()["compiles"]
    t0 = time.perf_counter()
    llm = LLM(model=path, dtype="float32", max_model_len=args.max_prompt + args.new_tokens + 16,
              max_num_seqs=min(64, args.requests), max_num_batched_tokens=256,
              kv_cache_memory_bytes=64 << 20, seed=0)
    init_s = time.perf_counter() - t0
    c_warm = torch.tpu._get_cache_stats()["compiles"]
    sp = SamplingParams(max_tokens=args.new_tokens, temperature=0.0, ignore_eos=True)
    ins = [{"prompt_token_ids": p} for p in prompts]
    llm.generate(ins, sp, use_tqdm=False)
    # the same prompts again would hit vLLM's prefix cache and skip their
    # prefill, which Hugging Face has to do: emptied before each timed run
    f0 = torchtpu.modes.fused_stats()
    outs, dt = timed(lambda: llm.generate(ins, sp, use_tqdm=False), args.repeat,
                     before=llm.reset_prefix_cache)
    f1 = torchtpu.modes.fused_stats()
    c_after = torch.tpu._get_cache_stats()["compiles"]
    runs = max(1, args.repeat)
    graphs = (f1["graphs"] - f0["graphs"]) / runs
    donated = (f1["donated_bytes"] - f0["donated_bytes"]) / runs / 2**20
    got = [list(o.outputs[0].token_ids) for o in outs]
    same = sum(a == b for a, b in zip(got, want))
    rows.append(("vLLM LLM.generate, tpu", dt,
                 f"{c_after - c_warm} compiles after warm-up; same tokens as HF cpu: "
                 f"{same}/{args.requests}; per run {graphs:.0f} fused graphs, "
                 f"{donated:.0f} MiB written in place (donated)"))

    base = rows[0][1]
    print(f"serving: {args.requests} requests, prompts {min(lens)}..{max(lens)} tokens, "
          f"{args.new_tokens} new tokens each; Llama hidden {args.hidden}, {args.layers} "
          f"layers, float32; vLLM engine start (load + warm-up): {init_s:.1f} s, "
          f"{c_warm - c_start} compiles; best of {args.repeat} timed runs")
    print(f"| path | s | tokens/s | vs HF cpu | notes |\n| --- | --- | --- | --- | --- |")
    for name, dt, note in rows:
        print(f"| {name} | {dt:.2f} | {gen_tokens / dt:.0f} | {base / dt:.2f}x | {note} |")
    if args.online:
        del llm
        online_check(path)


if __name__ == "__main__":
    main()
