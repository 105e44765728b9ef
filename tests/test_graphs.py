"""torch.tpu.graph / TPUGraph / make_graphed_callables (torchtpu/graphs.py):
a captured region replays as one program with static buffers (new input
values copied in, results in the same output tensors), and what cannot be
captured raises. The reference is the same model run by PyTorch on the CPU
from the same weights and inputs."""
import copy

import pytest
import torch

import torchtpu
import torchtpu.profiler


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 4))


def programs(fn):
    """The programs fn launched (the core's profile ring)."""
    with torchtpu.profiler.trace() as t:
        fn()
    return t.events


def test_replay_static_buffers_one_program():
    cpu = mlp()
    m = copy.deepcopy(cpu).to("tpu")
    static_x = torch.randn(8, 16, device="tpu")
    g = torch.tpu.TPUGraph()
    with torch.no_grad():
        m(static_x)  # warm-up: compiles the ops
        assert not torch.tpu.is_current_stream_capturing()
        with torch.tpu.graph(g):
            assert torch.tpu.is_current_stream_capturing()
            static_y = torch.softmax(m(static_x), dim=-1)
        assert not torch.tpu.is_current_stream_capturing()
    out_ptr, in_ptr = static_y.data_ptr(), static_x.data_ptr()
    for seed in range(3):
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(seed))
        static_x.copy_(x)
        replay = programs(g.replay)
        assert [e["kind"] for e in replay] == ["graph"]  # one program per replay
        with torch.no_grad():
            want = torch.softmax(cpu(x), dim=-1)
        torch.testing.assert_close(static_y.cpu(), want, rtol=1e-5, atol=1e-6)
        assert static_y.data_ptr() == out_ptr and static_x.data_ptr() == in_ptr
    assert g.replays == 3
    with torch.no_grad():
        eager = programs(lambda: torch.softmax(m(static_x), dim=-1))
    assert len(eager) > 1  # the same work in eager: a program per op


def test_training_step_replays():
    """Forward, backward and an SGD step with momentum captured as one
    program: replays with new batches give the parameters and loss that the
    same steps give in PyTorch on the CPU. Capturing runs the region once
    (unlike CUDA): the CPU run takes that step too."""
    cpu = mlp()
    m = copy.deepcopy(cpu).to("tpu")
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.1, momentum=0.9)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen))
               for _ in range(3)]

    def step(model, o, x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        o.step()
        o.zero_grad()
        return loss

    static_x, static_y = batches[0][0].to("tpu"), batches[0][1].to("tpu")
    step(m, opt, static_x, static_y)  # eager: compiles, makes the momentum buffers
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        static_loss = step(m, opt, static_x, static_y)  # runs once: step 2
    losses = [step(cpu, opt_cpu, x, y).item() for x, y in [batches[0]] + batches]
    for x, y in batches[1:]:
        static_x.copy_(x)
        static_y.copy_(y)
        assert [e["kind"] for e in programs(g.replay)] == ["graph"]
    for p_tpu, p_cpu in zip(m.parameters(), cpu.parameters()):
        torch.testing.assert_close(p_tpu.cpu(), p_cpu, rtol=1e-4, atol=1e-5)
    assert static_loss.item() == pytest.approx(losses[-1], rel=1e-4)


def test_host_read_in_region_raises():
    x = torch.randn(4, device="tpu")
    g = torch.tpu.TPUGraph()
    with pytest.raises(RuntimeError, match="read on the host"):
        with torch.tpu.graph(g):
            y = x * 2
            if y.sum().item() > 0:  # data-dependent: the value would be baked in
                y = y + 1
    assert torchtpu.get_mode() == "strict"  # the capture was left
    assert not torch.tpu.is_current_stream_capturing()
    torch.testing.assert_close((x * 3).cpu(), x.cpu() * 3)
    with pytest.raises(RuntimeError, match="read on the host"):
        with torch.tpu.graph(torch.tpu.TPUGraph()):
            torch.nonzero(x > 0)
    with pytest.raises(RuntimeError, match="nothing was captured"):
        g.replay()


def test_host_values_in_region_are_constants():
    """Values copied in from the host inside the region are copied once, at
    capture: the replays reuse them (the CPU computes the same)."""
    x = torch.randn(4, device="tpu")
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        y = x * torch.tensor([1.0, 2.0, 3.0, 4.0], device="tpu") + torch.ones(4).to("tpu")
    for seed in range(2):
        v = torch.randn(4, generator=torch.Generator().manual_seed(seed))
        x.copy_(v)
        g.replay()
        torch.testing.assert_close(y.cpu(), v * torch.tensor([1.0, 2.0, 3.0, 4.0]) + 1)


def test_make_graphed_callables_matches_eager():
    cpu = mlp()
    m = copy.deepcopy(cpu).to("tpu")
    sample = torch.randn(8, 16, device="tpu", requires_grad=True)
    graphed = torch.tpu.make_graphed_callables(m, (sample,))
    assert graphed is m
    gen = torch.Generator().manual_seed(2)
    for _ in range(3):
        x = torch.randn(8, 16, generator=gen)
        xt = x.to("tpu").requires_grad_()
        xc = x.clone().requires_grad_()
        fwd = programs(lambda: graphed(xt))
        out = graphed(xt)
        assert [e["kind"] for e in fwd if e["kind"] == "graph"] == ["graph"]
        (out * out).sum().backward()
        want = cpu(xc)
        (want * want).sum().backward()
        torch.testing.assert_close(out.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    for p_tpu, p_cpu in zip(m.parameters(), cpu.parameters()):
        torch.testing.assert_close(p_tpu.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5)
