"""nn modules as PyTorch's test_modules (ModuleInfo-based) exercises them:
forward, backward and the layout of results, each against the CPU.

- RNN cells: at::lstm_cell / at::gru_cell hand the gates to
  _thnn_fused_lstm_cell / _thnn_fused_gru_cell on a PrivateUse1 device
  (PyTorch has only CUDA kernels for them), so nn.LSTM, nn.GRU and their
  cells need the core's rules (lower/rnn.c).
- channels_last: the CPU kernels of hardswish, prelu, glu, group norm and
  the 2-d/3-d reflection/replication pads give channels_last results (and
  gradients) for channels_last inputs (shim/layout.cpp)."""
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchtpu  # noqa: F401


def close(t, c, tol=1e-5):
    torch.testing.assert_close(t.cpu(), c, atol=tol, rtol=tol)


def pair(cls, *args, dtype=torch.float32, **kw):
    """The same module on the CPU and on tpu (the tpu one a copy)."""
    torch.manual_seed(0)
    m = cls(*args, **kw).to(dtype)
    mt = cls(*args, **kw).to(dtype).to("tpu")
    mt.load_state_dict(m.state_dict())
    return m, mt


def first(y):
    return y[0] if isinstance(y, tuple) else y


# --- RNN cells and layers ---------------------------------------------------------------------

@pytest.mark.parametrize("cls", [nn.LSTMCell, nn.GRUCell, nn.LSTM, nn.GRU])
@pytest.mark.parametrize("bias", [True, False])
def test_rnn_forward_backward_as_on_cpu(cls, bias):
    m, mt = pair(cls, 5, 7, bias=bias)
    x = torch.randn(3, 4, 5) if cls in (nn.LSTM, nn.GRU) else torch.randn(4, 5)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    y, yt = first(m(xc)), first(mt(xt))
    close(yt, y)
    g = torch.randn_like(y)
    y.backward(g)
    yt.backward(g.to("tpu"))
    close(xt.grad, xc.grad)
    for (name, p), (_, pt) in zip(m.named_parameters(), mt.named_parameters()):
        assert pt.grad is not None, name
        close(pt.grad, p.grad)


def test_lstm_cell_state_and_hidden_gradients():
    """Gradient through only the cell state (grad_hy undefined), through a
    given (h, c), and a second derivative (create_graph: PyTorch's
    differentiable composite over the forward's results)."""
    m, mt = pair(nn.LSTMCell, 3, 4)
    x, h0, c0 = torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 4)
    ins = [t.clone().requires_grad_() for t in (x, h0, c0)]
    ins_t = [t.to("tpu").requires_grad_() for t in (x, h0, c0)]
    _, c = m(ins[0], (ins[1], ins[2]))
    _, ct = mt(ins_t[0], (ins_t[1], ins_t[2]))
    close(ct, c)
    c.sum().backward()
    ct.sum().backward()
    for a, b in zip(ins_t, ins):
        close(a.grad, b.grad)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    gx, = torch.autograd.grad(m(xc)[0].pow(2).sum(), xc, create_graph=True)
    gxt, = torch.autograd.grad(mt(xt)[0].pow(2).sum(), xt, create_graph=True)
    close(gxt, gx)
    gx.sum().backward()
    gxt.sum().backward()
    close(xt.grad, xc.grad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_gru_cell_dtypes(dtype):
    m, mt = pair(nn.GRUCell, 3, 4, dtype=dtype)
    x = torch.randn(2, 3, dtype=dtype)
    r, rt = m(x), mt(x.to("tpu"))
    assert rt.dtype == dtype
    close(rt, r, tol=1e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-7)


def test_fused_cell_bad_shapes_raise():
    t = lambda *s: torch.randn(*s, device="tpu")  # noqa: E731
    with pytest.raises(RuntimeError, match="to have same size"):
        torch.ops.aten._thnn_fused_lstm_cell(t(2, 8), t(2, 7), t(2, 2))
    with pytest.raises(RuntimeError, match="Expected 2-dimensional"):
        torch.ops.aten._thnn_fused_gru_cell(t(2, 3, 6), t(2, 3, 6), t(2, 2))
    with pytest.raises(RuntimeError, match="argument #3"):
        torch.ops.aten._thnn_fused_gru_cell(t(2, 6), t(2, 6), t(2, 3))


# --- channels_last results ------------------------------------------------------------------

CL_FNS = {
    "hardswish": F.hardswish,
    "prelu": lambda x: F.prelu(x, torch.full((x.shape[1],), 0.25, device=x.device)),
    "glu": lambda x: F.glu(x, 1),
    "group_norm": lambda x: F.group_norm(x, 2, torch.ones(x.shape[1], device=x.device),
                                         torch.zeros(x.shape[1], device=x.device)),
    "reflection_pad": lambda x: F.pad(x, (1, 2) * (x.dim() - 2), mode="reflect"),
    "replication_pad": lambda x: F.pad(x, (1, 2) * (x.dim() - 2), mode="replicate"),
}


@pytest.mark.parametrize("name", sorted(CL_FNS))
@pytest.mark.parametrize("fmt", ["channels_last", "channels_last_3d"])
def test_channels_last_results_as_on_cpu(name, fmt):
    fn = CL_FNS[name]
    shape = (2, 4, 5, 6) if fmt == "channels_last" else (2, 4, 3, 5, 6)
    x = torch.randn(shape).to(memory_format=getattr(torch, fmt))
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y, yt = fn(xc), fn(xt)
        g = torch.randn_like(y)
        y.backward(g)
        yt.backward(g.to("tpu"))
    close(yt, y)
    close(xt.grad, xc.grad)
    assert yt.stride() == y.stride(), (yt.stride(), y.stride())
    assert xt.grad.stride() == xc.grad.stride(), (xt.grad.stride(), xc.grad.stride())


# --- weight norm (lower/weight_norm.c) ---------------------------------------------------------

@pytest.mark.parametrize("dim", [0, -1, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weight_norm_parametrization_as_on_cpu(dim, dtype, no_fallback):
    """nn.utils.parametrizations.weight_norm over dim 0 and the last dim
    (_weight_norm_interface and its backward) and a middle dim (PyTorch's
    composite norm_except_dim): outputs and the gradients of g and v."""
    torch.manual_seed(0)
    ref = nn.utils.parametrizations.weight_norm(nn.Linear(5, 3).to(dtype), dim=dim)
    dev = nn.utils.parametrizations.weight_norm(nn.Linear(5, 3).to(dtype), dim=dim)
    dev.load_state_dict(ref.state_dict())
    dev = dev.to("tpu")
    x = torch.randn(4, 5).to(dtype)
    y_ref, y_dev = ref(x), dev(x.to("tpu"))
    y_ref.square().sum().backward()
    y_dev.square().sum().backward()
    tol = {} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(y_dev.cpu(), y_ref, **tol)
    for (name, p_ref), (_, p_dev) in zip(ref.named_parameters(), dev.named_parameters()):
        torch.testing.assert_close(p_dev.grad.cpu(), p_ref.grad, **tol, msg=name)


def test_weight_norm_interface_ops_as_on_cpu(no_fallback):
    """The two ops themselves in float64 on a 3-d weight (a conv's), norms
    shaped like g."""
    gen = torch.Generator().manual_seed(0)
    for dim in (0, 2):
        v = torch.randn(4, 3, 2, dtype=torch.float64, generator=gen)
        g = torch.randn(*(s if d == dim else 1 for d, s in enumerate(v.shape)),
                        dtype=torch.float64, generator=gen)
        grad = torch.randn(v.shape, dtype=torch.float64, generator=gen)
        ref = torch._weight_norm_interface(v, g, dim)
        out = torch._weight_norm_interface(v.to("tpu"), g.to("tpu"), dim)
        for a, b in zip(out, ref):
            assert a.shape == b.shape
            torch.testing.assert_close(a.cpu(), b)
        bref = torch.ops.aten._weight_norm_interface_backward(grad, v, g, ref[1], dim)
        bout = torch.ops.aten._weight_norm_interface_backward(
            grad.to("tpu"), v.to("tpu"), g.to("tpu"), out[1], dim)
        for a, b in zip(bout, bref):
            assert a.shape == b.shape
            torch.testing.assert_close(a.cpu(), b)


def test_weight_norm_conv_old_api_as_on_cpu(no_fallback):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ref = nn.utils.weight_norm(nn.Conv1d(3, 4, 3))
        dev = nn.utils.weight_norm(nn.Conv1d(3, 4, 3))
    dev.load_state_dict(ref.state_dict())
    dev = dev.to("tpu")
    x = torch.randn(2, 3, 8)
    ref(x).sum().backward()
    dev(x.to("tpu")).sum().backward()
    torch.testing.assert_close(dev.weight_v.grad.cpu(), ref.weight_v.grad)
    torch.testing.assert_close(dev.weight_g.grad.cpu(), ref.weight_g.grad)
