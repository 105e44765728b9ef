"""Recurrent modules on "tpu" (lower/rnn.c): nn.LSTM, nn.GRU, nn.LSTMCell and
nn.GRUCell run PyTorch's fused cells (_thnn_fused_lstm_cell,
_thnn_fused_gru_cell and their backward), which PyTorch implements for CUDA
only; before these rules the modules failed on tpu. Outputs, final states and
every parameter's gradient are compared with the same module on the CPU, in
fallback mode "error" (nothing may run on the host)."""
import contextlib

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from torchtpu.testing import native_only


def gen(seed):
    return torch.Generator().manual_seed(seed)


def run_both(make, inputs, tol=1e-5):
    """Forward (all outputs) and backward of module make() on CPU and tpu, from
    the same weights; compares outputs and every gradient."""
    torch.manual_seed(0)
    cpu = make()
    tpu = make()
    tpu.load_state_dict(cpu.state_dict())
    tpu = tpu.to("tpu")
    results = []
    for dev, m in (("cpu", cpu), ("tpu", tpu)):
        ins = [x.detach().to(dev).requires_grad_(x.is_floating_point()) if isinstance(x, torch.Tensor)
               else tuple(t.to(dev) for t in x) for x in inputs]
        with native_only() if dev == "tpu" else contextlib.nullcontext():
            out = m(*ins)
            flat = [t for t in (out if isinstance(out, tuple) else (out,))
                    for t in (t if isinstance(t, tuple) else (t,))]
            flat = [t.data if hasattr(t, "batch_sizes") else t for t in flat]
            loss = sum((t.float() * torch.linspace(-1, 1, t.numel(), device=dev)
                        .reshape(t.shape)).sum() for t in flat)
            loss.backward()
        grads = [p.grad for p in m.parameters()] + [x.grad for x in ins
                                                    if isinstance(x, torch.Tensor)]
        results.append((flat, grads))
    (out_c, grad_c), (out_t, grad_t) = results
    for a, b in zip(out_t, out_c):
        torch.testing.assert_close(a.cpu(), b, rtol=tol, atol=tol)
    for a, b in zip(grad_t, grad_c):
        torch.testing.assert_close(a.cpu(), b, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("kw", [
    dict(num_layers=1),
    dict(num_layers=2, batch_first=True),
    dict(num_layers=2, bidirectional=True),
    dict(num_layers=1, bias=False),
    dict(num_layers=2, proj_size=3),
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_lstm_like_cpu(kw):
    x = torch.randn(5, 3, 4, generator=gen(1))
    run_both(lambda: nn.LSTM(4, 6, **kw), [x])


@pytest.mark.parametrize("kw", [
    dict(num_layers=1),
    dict(num_layers=2, batch_first=True),
    dict(num_layers=2, bidirectional=True),
    dict(num_layers=1, bias=False),
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_gru_like_cpu(kw):
    x = torch.randn(5, 3, 4, generator=gen(2))
    run_both(lambda: nn.GRU(4, 6, **kw), [x])


def test_lstm_with_initial_state_and_unbatched_input():
    x = torch.randn(5, 3, 4, generator=gen(3))
    h0 = torch.randn(2, 3, 6, generator=gen(4))
    c0 = torch.randn(2, 3, 6, generator=gen(5))
    run_both(lambda: nn.LSTM(4, 6, num_layers=2), [x, (h0, c0)])
    run_both(lambda: nn.GRU(4, 6), [x[:, 0]])  # [L, H_in]: no batch dim


def test_cells_like_cpu():
    x = torch.randn(3, 4, generator=gen(6))
    h = torch.randn(3, 6, generator=gen(7))
    c = torch.randn(3, 6, generator=gen(8))
    run_both(lambda: nn.LSTMCell(4, 6), [x, (h, c)])
    run_both(lambda: nn.GRUCell(4, 6), [x, h])
    run_both(lambda: nn.GRUCell(4, 6, bias=False), [x])


def test_packed_sequences():
    x = torch.randn(3, 3, 3, generator=gen(9))  # batch 3, time 3
    lengths = torch.tensor([3, 2, 1])

    class Packed(nn.Module):
        def __init__(self, cls):
            super().__init__()
            self.rnn = cls(3, 4, batch_first=True, bidirectional=True)  # noqa

        def forward(self, x):
            packed = pack_padded_sequence(x, lengths, batch_first=True)
            out, _ = self.rnn(packed)
            return pad_packed_sequence(out, batch_first=True)[0]

    run_both(lambda: Packed(nn.LSTM), [x])


def test_lstm_bfloat16():
    x = torch.randn(4, 2, 8, generator=gen(10)).to(torch.bfloat16)
    run_both(lambda: nn.LSTM(8, 8).to(torch.bfloat16), [x], tol=4e-2)


def test_cell_shape_errors_are_clear():
    cell = torch.ops.aten._thnn_fused_lstm_cell
    g = torch.randn(2, 8, device="tpu")
    with pytest.raises(RuntimeError, match="argument #3"):
        cell(g, g, torch.randn(2, 3, device="tpu"))
    with pytest.raises(RuntimeError, match="hidden_gates"):
        cell(g, torch.randn(2, 4, device="tpu"), torch.randn(2, 2, device="tpu"))
