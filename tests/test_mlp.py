"""A 2-layer MLP trained with SGD + momentum on "tpu" gives, step by step,
the losses and weights the same run gives on the CPU."""
import copy

import torch
import torch.nn as nn

import torchtpu  # noqa: F401


def make_data(n=64, d=16, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return x, y


def train(model, x, y, device, steps):
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def test_mlp_parity_50_steps():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    x, y = make_data()
    cpu_losses, cpu_model = train(copy.deepcopy(model), x, y, "cpu", 50)
    tpu_losses, tpu_model = train(copy.deepcopy(model), x, y, "tpu", 50)
    for step, (c, t) in enumerate(zip(cpu_losses, tpu_losses)):
        assert abs(c - t) <= 1e-5 * abs(c), f"step {step}: cpu {c} tpu {t}"
    assert tpu_losses[-1] < 0.5 * tpu_losses[0]  # it learns
    for (name, pc), pt in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        torch.testing.assert_close(pt.cpu(), pc, atol=1e-4, rtol=1e-4, msg=name)


def test_training_leaks_no_device_memory():
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    x, y = make_data()
    train(model, x, y, "tpu", 3)
    del model
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == before
