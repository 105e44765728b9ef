"""Hugging Face transformers (pinned in scripts/setup.sh) on "tpu", unchanged:
models built from tiny configs with random weights (nothing is downloaded),
each run on "tpu" against the same weights on the CPU.

Per architecture (see ARCHS): forward logits; one AdamW step from the
model's own loss (parameters after the step compared, tied weights still
tied); greedy generate() with the default (dynamic) KV cache; for some,
generate() with cache_implementation="static" and torch.compile of the
forward. Every run is in torchtpu's "error" fallback mode: an op without a
tpu lowering fails the test instead of running on the CPU.

All models share one set of sizes (hidden 32, 4 heads, 2 layers, batch 2,
7 tokens), so most per-op programs compile once for the whole file."""
import copy

import pytest
import torch

import torchtpu

transformers = pytest.importorskip("transformers")

VOCAB, HIDDEN, HEADS, LAYERS, FF = 64, 32, 4, 2, 64
BATCH, SEQ, NEW = 2, 7, 3

common = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_attention_heads=HEADS,
              num_hidden_layers=LAYERS, intermediate_size=FF, max_position_embeddings=64)


def _llama():
    return transformers.LlamaForCausalLM, transformers.LlamaConfig(**common, num_key_value_heads=2)


def _mistral():
    return transformers.MistralForCausalLM, transformers.MistralConfig(
        **common, num_key_value_heads=2, sliding_window=4)


def _qwen2():
    return transformers.Qwen2ForCausalLM, transformers.Qwen2Config(**common, num_key_value_heads=2)


def _gemma():
    return transformers.GemmaForCausalLM, transformers.GemmaConfig(
        **common, num_key_value_heads=2, head_dim=8)


def _phi():
    return transformers.PhiForCausalLM, transformers.PhiConfig(**common, partial_rotary_factor=0.5)


def _gpt2():
    return transformers.GPT2LMHeadModel, transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=HIDDEN, n_head=HEADS, n_layer=LAYERS, n_positions=64)


def _mixtral():
    return transformers.MixtralForCausalLM, transformers.MixtralConfig(
        **common, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)


def _qwen2_moe():
    return transformers.Qwen2MoeForCausalLM, transformers.Qwen2MoeConfig(
        **common, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=32)


def _bert():
    return transformers.BertForMaskedLM, transformers.BertConfig(**common)


def _roberta():
    return transformers.RobertaForMaskedLM, transformers.RobertaConfig(**common, pad_token_id=1)


def _t5():
    return transformers.T5ForConditionalGeneration, transformers.T5Config(
        vocab_size=VOCAB, d_model=HIDDEN, d_kv=8, d_ff=FF, num_layers=LAYERS, num_heads=HEADS,
        decoder_start_token_id=0, tie_word_embeddings=True)


def _bart():
    return transformers.BartForConditionalGeneration, transformers.BartConfig(
        vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FF,
        decoder_ffn_dim=FF, max_position_embeddings=64)


def _vit():
    return transformers.ViTForImageClassification, transformers.ViTConfig(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=FF, image_size=16, patch_size=8, num_labels=5)


# name: (builder, kind, checks beyond forward + train step)
ARCHS = {
    "llama": (_llama, "causal", {"generate", "static", "compile"}),
    "mistral": (_mistral, "causal", {"generate"}),
    "qwen2": (_qwen2, "causal", {"generate"}),
    "gemma": (_gemma, "causal", {"generate"}),
    "phi": (_phi, "causal", {"generate"}),
    "gpt2": (_gpt2, "causal", {"generate", "static"}),
    "mixtral": (_mixtral, "causal", {"generate"}),
    "qwen2_moe": (_qwen2_moe, "causal", {"generate"}),
    "bert": (_bert, "masked", {"compile"}),
    "roberta": (_roberta, "masked", set()),
    "t5": (_t5, "seq2seq", {"generate"}),
    "bart": (_bart, "seq2seq", {"generate"}),
    "vit": (_vit, "image", {"compile"}),
}


def _inputs(kind, device):
    g = torch.Generator().manual_seed(1)
    if kind == "image":
        x = {"pixel_values": torch.randn(BATCH, 3, 16, 16, generator=g),
             "labels": torch.randint(0, 5, (BATCH,), generator=g)}
    else:
        ids = torch.randint(2, VOCAB, (BATCH, SEQ), generator=g)
        x = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
             "labels": torch.randint(2, VOCAB, (BATCH, SEQ), generator=g)}
        if kind == "seq2seq":
            x["labels"] = x["labels"][:, :5].contiguous()
    return {k: v.to(device) for k, v in x.items()}


def _pair(name):
    builder, kind, checks = ARCHS[name]
    cls, config = builder()
    for key, value in list(config.to_dict().items()):
        if ("dropout" in key or "pdrop" in key) and isinstance(value, float):
            setattr(config, key, 0.0)  # the two devices would draw different masks
    torch.manual_seed(0)
    cpu = cls(config).float()
    dev = copy.deepcopy(cpu).to("tpu")
    return cpu, dev, kind, checks


def _tied(model):
    """(input embedding, output embedding) parameters when the config ties them."""
    if not getattr(model.config, "tie_word_embeddings", False):
        return None
    out = model.get_output_embeddings()
    if out is None:
        return None
    return model.get_input_embeddings().weight, out.weight


def _close(a, b, what, tol=2e-4):
    torch.testing.assert_close(a.detach().cpu().float(), b.detach().float(), atol=tol, rtol=tol,
                               msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("name", list(ARCHS))
def test_forward_and_adamw_step(name, no_fallback):
    cpu, dev, kind, _ = _pair(name)
    tied = _tied(cpu)
    if tied is not None:
        assert tied[0] is tied[1]
        dtied = _tied(dev)
        assert dtied[0] is dtied[1], "model.to('tpu') untied the embeddings"
    x_cpu, x_dev = _inputs(kind, "cpu"), _inputs(kind, "tpu")

    cpu.eval(), dev.eval()
    with torch.no_grad():
        _close(dev(**x_dev).logits, cpu(**x_cpu).logits, f"{name} logits")

    cpu.train(), dev.train()
    results = []
    for m, x in ((cpu, x_cpu), (dev, x_dev)):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1)
        loss = m(**x).loss
        loss.backward()
        opt.step()
        results.append(loss)
    _close(results[1], results[0], f"{name} loss")
    pc, pd = dict(cpu.named_parameters()), dict(dev.named_parameters())
    assert pc.keys() == pd.keys()
    for k in pc:
        _close(pd[k], pc[k], f"{name} {k} after AdamW", tol=1e-3)
    if tied is not None:
        dtied = _tied(dev)
        assert dtied[0] is dtied[1]


GENERATE = [n for n, (_, _, c) in ARCHS.items() if "generate" in c]
STATIC = [n for n, (_, _, c) in ARCHS.items() if "static" in c]
COMPILE = [n for n, (_, _, c) in ARCHS.items() if "compile" in c]


def _generate(model, x, **kw):
    return model.generate(input_ids=x["input_ids"], attention_mask=x["attention_mask"],
                          max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                          pad_token_id=0, **kw)


@pytest.mark.parametrize("name", GENERATE)
def test_greedy_generate_with_kv_cache(name, no_fallback):
    cpu, dev, kind, _ = _pair(name)
    cpu.eval(), dev.eval()
    want = _generate(cpu, _inputs(kind, "cpu"))
    got = _generate(dev, _inputs(kind, "tpu"))
    assert got.device.type == "tpu"
    assert torch.equal(got.cpu(), want), f"{name}: {got.cpu().tolist()} vs {want.tolist()}"


@pytest.mark.parametrize("name", STATIC)
def test_greedy_generate_with_static_cache(name, no_fallback):
    cpu, dev, kind, _ = _pair(name)
    cpu.eval(), dev.eval()
    want = _generate(cpu, _inputs(kind, "cpu"))
    calls = torchtpu.compile.stats()["calls"]
    got = _generate(dev, _inputs(kind, "tpu"), cache_implementation="static")
    assert torch.equal(got.cpu(), want), f"{name}: {got.cpu().tolist()} vs {want.tolist()}"
    # transformers compiles the static-cache decode step (its default for
    # "tpu" is the "tpu" backend); with the CUDA default CompileConfig
    # (Inductor, reduce-overhead) the step is routed to the "tpu" backend too.
    assert torchtpu.compile.stats()["calls"] > calls
    if name == "llama":
        # Each ignored setting is named once per process: forget what earlier
        # tests (test_user_code's compile modes) already warned about.
        torchtpu.compile._warned_options.clear()
        with pytest.warns(UserWarning, match="no effect"):
            got = _generate(dev, _inputs(kind, "tpu"), cache_implementation="static",
                            compile_config=transformers.CompileConfig())
        assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("name", COMPILE)
def test_torch_compile_forward(name, no_fallback):
    cpu, dev, kind, _ = _pair(name)
    cpu.eval(), dev.eval()
    torch._dynamo.reset()
    before = torchtpu.compile.stats()["graphs"]
    compiled = torch.compile(dev)  # the default backend: routed to "tpu"
    with torch.no_grad():
        got = compiled(**_inputs(kind, "tpu")).logits
        want = cpu(**_inputs(kind, "cpu")).logits
    assert torchtpu.compile.stats()["graphs"] > before
    _close(got, want, f"{name} compiled logits")
