"""One executable per op signature: changing only scalar values (alpha, fill
values, learning rate) never compiles again."""
import torch

import torchtpu  # noqa: F401


def compiles():
    return torch.tpu._get_cache_stats()["compiles"]


def test_scalar_values_do_not_recompile():
    x = torch.randn(8, 8, device="tpu")
    y = torch.randn(8, 8, device="tpu")
    torch.add(x, y, alpha=0.5)
    x.mul(3.0)
    torch.full((8, 8), 1.0, device="tpu")
    x.clone().add_(y, alpha=1.0)
    start = compiles()
    for v in (0.25, 1.5, -2.0, 7.0):
        torch.add(x, y, alpha=v)
        x.mul(v)
        torch.full((8, 8), v, device="tpu")
        x.clone().add_(y, alpha=v)
    torch.tpu.synchronize()
    assert compiles() == start


def test_new_shape_compiles_once():
    a = torch.randn(3, 5, device="tpu")
    start = compiles()
    a.exp()
    after_first = compiles()
    a.exp()
    a.exp()
    assert after_first >= start
    assert compiles() == after_first
    stats = torch.tpu._get_cache_stats()
    assert stats["requests"] >= stats["hits"] >= 0
    assert stats["compile_seconds"] > 0


def test_optimizer_lr_change_does_not_recompile():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(8, 4, device="tpu")

    def step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    step()
    step()
    start = compiles()
    for lr in (0.05, 0.01, 0.2):
        for group in opt.param_groups:
            group["lr"] = lr
        step()
    torch.tpu.synchronize()
    assert compiles() == start
