"""bench/train_step.py's torchax rows (bench/torchax_llama.py, run in a
subprocess): the jit path trains the same weights on the same tokens as
PyTorch on the CPU, so its loss after a step agrees with PyTorch's. Skipped
when torchax is not installed (a benchmark peer, not a dependency)."""
import argparse
import copy
import importlib.util
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from torchtpu.models import build_model

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "bench"))
import train_step  # noqa: E402

needs_torchax = pytest.mark.skipif(importlib.util.find_spec("torchax") is None,
                                   reason="torchax is not installed")


def cpu_losses(model, tokens, lr, steps):
    model = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


@needs_torchax
def test_torchax_jit_matches_cpu():
    torch.manual_seed(0)
    model = build_model("llama", "tiny")
    tokens = torch.randint(0, model.args.vocab_size, (2, 17))
    a = argparse.Namespace(lr=1e-2, warmup=0, steps=3)
    got = train_step.torchax_results("llama", model, tokens, a, {"torchax_eager"})
    assert set(got) == {"torchax_jit"}
    sec, loss = got["torchax_jit"]
    ref = cpu_losses(model, tokens, a.lr, 3)
    # the last of 3 steps: two AdamW updates went into it, so a wrong update shows
    assert ref[-1] < ref[0] - 1e-3
    assert loss == pytest.approx(ref[-1], rel=1e-4)
    assert sec > 0


def test_torchax_rows_skip_other_models(capsys):
    torch.manual_seed(0)
    model = build_model("llama", "tiny")
    a = argparse.Namespace(lr=1e-3, warmup=0, steps=1)
    assert train_step.torchax_results("moe", model, torch.zeros(1, 2, dtype=torch.long), a,
                                      set()) == {}
    out = capsys.readouterr().out
    assert "torchax eager: skipped (the torchax rows run the llama model only" in out
    assert "torchax jit: skipped" in out
    assert train_step.torchax_results("llama", model, None, a, {"torchax"}) == {}
