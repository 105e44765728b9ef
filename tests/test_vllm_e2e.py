"""vLLM end to end on "tpu" through torchtpu's platform plugin: a tiny
Llama, a tiny Mixtral-style MoE and a tiny Qwen2-MoE (routed plus gated
shared experts) saved from configs, greedy generation for
prompts of different lengths, compared token for token with Hugging Face
generate on the CPU with the same weights; seeded sampling reproduces
itself.

Runs when vLLM is installed (scripts/setup_vllm.sh), skipped otherwise.
The engine runs in a subprocess: vLLM initialises torch.distributed and
process-wide state that must not leak into the rest of the test session."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed (bash scripts/setup_vllm.sh installs vLLM 0.29.0 for 'tpu')")

LENGTHS = [3, 5, 9, 17, 30, 2, 12, 40]
NEW_TOKENS = 32

ENGINE = r"""
import json, sys
from vllm import LLM, SamplingParams
path, prompts, new = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
llm = LLM(model=path, skip_tokenizer_init=True, dtype="float32", max_model_len=96,
          max_num_seqs=8, max_num_batched_tokens=64, kv_cache_memory_bytes=8 << 20, seed=0,
          **json.loads(sys.argv[4]))
ins = [{"prompt_token_ids": p} for p in prompts]
greedy = llm.generate(ins, SamplingParams(max_tokens=new, temperature=0.0, ignore_eos=True))
sp = SamplingParams(max_tokens=8, temperature=1.0, top_p=0.9, seed=1234, ignore_eos=True)
s1 = llm.generate(ins[:3], sp)
s2 = llm.generate(ins[:3], sp)
tok = lambda outs: [list(o.outputs[0].token_ids) for o in outs]
# each worker's rank, device and the shape of its shard of the first q/k/v projection
shard = lambda w: [w.rank, str(w.device), list(w.get_model().model.layers[0].self_attn
                                            .qkv_proj.weight.shape)]
print("RESULT " + json.dumps({"greedy": tok(greedy), "s1": tok(s1), "s2": tok(s2),
                              "workers": llm.collective_rpc(shard)}))
"""


def _save(model, tmp_path_factory, name):
    path = tmp_path_factory.mktemp(name)
    model.save_pretrained(path)
    return str(path), model


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256)
    return _save(LlamaForCausalLM(cfg).eval(), tmp_path_factory, "tiny_llama")


@pytest.fixture(scope="module")
def tiny_mixtral(tmp_path_factory):
    from transformers import MixtralConfig, MixtralForCausalLM
    torch.manual_seed(0)
    cfg = MixtralConfig(vocab_size=256, hidden_size=64, intermediate_size=96,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=256, num_local_experts=4,
                        num_experts_per_tok=2)
    return _save(MixtralForCausalLM(cfg).eval(), tmp_path_factory, "tiny_mixtral")


@pytest.fixture(scope="module")
def tiny_qwen2_moe(tmp_path_factory):
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM
    torch.manual_seed(0)
    cfg = Qwen2MoeConfig(vocab_size=256, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, num_experts=4, num_experts_per_tok=2,
                         moe_intermediate_size=32, shared_expert_intermediate_size=48,
                         norm_topk_prob=False)
    model = Qwen2MoeForCausalLM(cfg).eval()
    # a visible shared-expert gate: random init keeps sigmoid(gate(x)) near 1/2
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.shared_expert_gate.weight.mul_(4)
    return _save(model, tmp_path_factory, "tiny_qwen2_moe")


def _check(path, hf, lengths, new_tokens, **engine_kwargs):
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 250, (n,), generator=g).tolist() for n in lengths]
    # warm-up off: it compiles every bucket, the test needs a few (bench/serving.py
    # checks warm-up: 0 compiles after it)
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", TORCHTPU_VLLM="1",
               TORCHTPU_VLLM_WARMUP="0")
    proc = subprocess.run([sys.executable, "-c", ENGINE, path, json.dumps(prompts),
                           str(new_tokens), json.dumps(engine_kwargs)],
                          capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    got = json.loads(lines[-1][len("RESULT "):])
    # Hugging Face on the CPU: greedy, no stop at EOS (vLLM's ignore_eos keeps
    # EOS a candidate token, as a generation_config without eos does).
    want = []
    with torch.no_grad():
        for p in prompts:
            out = hf.generate(torch.tensor([p]), max_new_tokens=new_tokens, do_sample=False,
                              eos_token_id=None, pad_token_id=0)
            want.append(out[0, len(p):].tolist())
    assert got["greedy"] == want
    assert got["s1"] == got["s2"]
    assert all(len(t) == 8 for t in got["s1"])
    return got


def test_llm_generate_matches_hf_on_cpu(tiny_llama):
    _check(*tiny_llama, LENGTHS, NEW_TOKENS)


def test_moe_generate_matches_hf_on_cpu(tiny_mixtral):
    _check(*tiny_mixtral, LENGTHS, NEW_TOKENS)


def test_shared_expert_moe_generate_matches_hf_on_cpu(tiny_qwen2_moe):
    _check(*tiny_qwen2_moe, LENGTHS, NEW_TOKENS)


def test_tensor_parallel_generate_matches_hf_on_cpu(tiny_llama):
    """tensor_parallel_size=2: two worker processes, each on its own "tpu"
    device (XLA's CPU plugin gives each process one), vLLM's collectives on
    torchtpu's "tpu" c10d backend; the sharded model gives the greedy tokens
    of the unsharded one on the CPU."""
    got = _check(*tiny_llama, LENGTHS[:4], 8, tensor_parallel_size=2,
                 distributed_executor_backend="mp")
    # two ranks, each holding half of the q/k/v heads: [(4 + 2 + 2) * 16 / 2, 64]
    assert sorted(w[0] for w in got["workers"]) == [0, 1]
    assert all(w[1].startswith("tpu") and w[2] == [64, 64] for w in got["workers"])
