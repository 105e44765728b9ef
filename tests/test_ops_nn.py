"""The nn-family lowerings (conv.c, norm.c, index.c, loss.c, foreach.c)
against PyTorch's CPU results, forward and backward through autograd. Where
an op should run natively the test runs under fallback mode "error"."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu
from torchtpu.testing import native_only

T = lambda t: t.to("tpu")  # noqa: E731


def close(tpu, cpu, tol=1e-5):
    torch.testing.assert_close(tpu.cpu(), cpu, atol=tol, rtol=tol)


# --- convolution and pooling -------------------------------------------------------------

@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1),
                                dict(groups=2, dilation=2, padding=2),
                                dict(stride=(2, 1), padding=(0, 1))])
def test_conv2d_forward_backward(transposed, kw):
    torch.manual_seed(0)
    m = nn.ConvTranspose2d(4, 6, 3, **kw) if transposed else nn.Conv2d(4, 6, 3, **kw)
    mt = copy.deepcopy(m).to("tpu")
    x = torch.randn(2, 4, 9, 8, requires_grad=True)
    xt = T(x.detach()).requires_grad_()
    with native_only():
        y, yt = m(x), mt(xt)
        g = torch.randn_like(y)
        y.backward(g)
        yt.backward(T(g))
    close(yt, y, 1e-4)
    close(xt.grad, x.grad, 1e-4)
    close(mt.weight.grad, m.weight.grad, 1e-4)
    close(mt.bias.grad, m.bias.grad, 1e-4)


def test_cnn_net_parity_with_running_stats():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
        nn.MaxPool2d(3, 2, 1, ceil_mode=True),
        nn.AvgPool2d(2, ceil_mode=True, count_include_pad=False),
        nn.AdaptiveAvgPool2d((3, 2)), nn.Flatten(), nn.LayerNorm(24), nn.Linear(24, 2))
    nt = copy.deepcopy(net).to("tpu")
    x = torch.randn(2, 3, 11, 10)
    with native_only():
        y, yt = net(x), nt(T(x))
        y.sum().backward()
        yt.sum().backward()
    close(yt, y, 1e-4)
    for (name, p), pt in zip(net.named_parameters(), nt.parameters()):
        close(pt.grad, p.grad, 1e-4)
    close(nt[1].running_mean, net[1].running_mean)
    close(nt[1].running_var, net[1].running_var)
    net.eval()
    nt.eval()
    with native_only():
        close(nt(T(x)), net(x), 1e-4)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("momentum", [0.1, 0.7])
def test_batch_norm_with_update_matches_cpu(dtype, tol, momentum):
    # The training form export / torch.compile trace: outputs, the in-place
    # running stats and the input/weight/bias grads (batch_norm_backward).
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 2).to(dtype).requires_grad_()
    w, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    xt, wt, bt = (T(t.detach()).requires_grad_() for t in (x, w, b))
    rmt, rvt = T(rm), T(rv)
    want = torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, momentum, 1e-5)
    with native_only():
        got = torch.ops.aten._batch_norm_with_update(xt, wt, bt, rmt, rvt, momentum, 1e-5)
    for g, e in zip(got, want):
        assert g.dtype == e.dtype and g.shape == e.shape
        close(g, e, tol)
    close(rmt, rm)
    close(rvt, rv)
    grad = torch.randn(x.shape).to(dtype)
    want[0].backward(grad)
    with native_only():
        got[0].backward(T(grad))
    for t, e in ((xt, x), (wt, w), (bt, b)):
        close(t.grad, e.grad, tol if t is xt else 1e-4)


def test_batch_norm_functional_out_and_no_update():
    torch.manual_seed(0)
    x, w = torch.randn(6, 2, 3), torch.randn(2)
    rm, rv = torch.randn(2), torch.rand(2) + 0.5
    want = torch.ops.aten._batch_norm_with_update_functional(x, w, None, rm, rv, 0.2, 1e-3)
    with native_only():
        got = torch.ops.aten._batch_norm_with_update_functional(T(x), T(w), None, T(rm), T(rv),
                                                                0.2, 1e-3)
    assert len(got) == len(want) == 6
    for g, e in zip(got, want):
        close(g, e)
    # .out writes all four results; running stats updated in place
    rm2, rv2 = rm.clone(), rv.clone()
    outs_t = [torch.empty(0, device="tpu") for _ in range(3)] + [
        torch.empty(0, dtype=torch.uint8, device="tpu")]
    rmt, rvt = T(rm), T(rv)
    with native_only():
        torch.ops.aten._batch_norm_with_update.out(T(x), T(w), None, rmt, rvt, 0.2, 1e-3,
                                                   out=outs_t[0], save_mean=outs_t[1],
                                                   save_invstd=outs_t[2], reserve=outs_t[3])
    want = torch.ops.aten._batch_norm_with_update(x, w, None, rm2, rv2, 0.2, 1e-3)
    for g, e in zip(outs_t, want):
        close(g, e)
    close(rmt, rm2)
    close(rvt, rv2)
    # the evaluation twin: running stats used, not updated, saves empty
    # (PyTorch's own composite calls the CPU kernel directly)
    rmt, rvt = T(rm), T(rv)
    want = torch.ops.aten._batch_norm_no_update(x, w, None, rm, rv, 0.2, 1e-3)
    with native_only():
        got = torch.ops.aten._batch_norm_no_update(T(x), T(w), None, rmt, rvt, 0.2, 1e-3)
    for g, e in zip(got, want):
        assert g.dtype == e.dtype and g.shape == e.shape
        close(g, e)
    close(rmt, rm)
    with pytest.raises(RuntimeError, match="running_mean and running_var must be defined"):
        torch.ops.aten._batch_norm_no_update(T(x), None, None, None, None, 0.1, 1e-5)


def test_batch_norm_with_update_opinfo_native():
    from torchtpu.testing import opinfo
    for dtype in (torch.float32, torch.bfloat16):
        op, = opinfo.entries_by_key(["_batch_norm_with_update"])
        opinfo.assert_native_pass("_batch_norm_with_update", op, dtype=dtype, limit=3)


def test_pools_and_group_norm():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 7, 9, requires_grad=True)
    xt = T(x.detach()).requires_grad_()

    def f(v):
        a = F.max_pool2d(v, 2, 2, dilation=1)
        b = F.avg_pool2d(v, 3, 2, 1, count_include_pad=True)
        c = F.adaptive_avg_pool2d(v, (2, 4))  # uneven windows
        d = F.group_norm(v, 2)
        return a.sum() + b.pow(2).sum() + c.pow(2).sum() + d.pow(2).sum()

    with native_only():
        y, yt = f(x), f(xt)
        y.backward()
        yt.backward()
    close(yt, y, 1e-4)
    close(xt.grad, x.grad, 1e-4)


def test_max_pool_indices_match():
    x = torch.randn(1, 2, 6, 6)
    with native_only():
        vt, it = F.max_pool2d(T(x), 3, 2, 1, return_indices=True)
    v, i = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    close(vt, v)
    assert torch.equal(it.cpu(), i)


def test_conv_bad_input_raises_clearly():
    w = T(torch.randn(6, 3, 3, 3))
    with pytest.raises(RuntimeError, match="to have 3 channels"):
        F.conv2d(T(torch.randn(1, 4, 8, 8)), w)


# --- indexing, sort, cumulative ------------------------------------------------------------

def test_gather_scatter_family():
    torch.manual_seed(0)
    a = torch.randn(4, 5, 6)
    i = torch.randint(0, 5, (4, 3, 6))
    src = torch.randn(4, 3, 6)
    with native_only():
        close(T(a).gather(1, T(i)), a.gather(1, i))
        close(T(a).scatter(1, T(i), 1.5), a.scatter(1, i, 1.5))
        close(T(a).scatter_add(1, T(i), T(src)), a.scatter_add(1, i, src))
        for red in ["sum", "prod", "mean", "amax", "amin"]:
            for inc in [True, False]:
                close(T(a).scatter_reduce(1, T(i), T(src), red, include_self=inc),
                      a.scatter_reduce(1, i, src, red, include_self=inc))


def test_advanced_indexing_and_index_put():
    torch.manual_seed(0)
    a = torch.randn(4, 5, 6)
    i2 = torch.tensor([-1, 0, 3])
    with native_only():
        close(T(a)[T(i2)], a[i2])
        close(T(a)[:, T(i2)], a[:, i2])
        close(T(a)[T(i2), :, T(i2)], a[i2, :, i2])
        close(T(a)[:, T(i2), T(i2[:, None])], a[:, i2, i2[:, None]])
        b, bt = a.clone(), T(a)
        idx = torch.tensor([0, 2, 0])
        b[:, idx] = 7.0
        bt[:, T(idx)] = 7.0
        close(bt, b)
        b.index_put_((idx,), torch.ones(5, 6), accumulate=True)
        bt.index_put_((T(idx),), T(torch.ones(5, 6)), accumulate=True)
        close(bt, b)


def test_sort_topk_cumsum_with_grads():
    torch.manual_seed(0)
    a = torch.randn(4, 5, 6)
    with native_only():
        for desc in [False, True]:
            v, ix = torch.sort(T(a), dim=1, descending=desc, stable=True)
            ev, eix = torch.sort(a, dim=1, descending=desc, stable=True)
            close(v, ev)
            assert torch.equal(ix.cpu(), eix)
        v, ix = torch.topk(T(a), 3, 2)
        ev, eix = torch.topk(a, 3, 2)
        close(v, ev)
        assert torch.equal(ix.cpu(), eix)
        close(T(a).cumsum(1), a.cumsum(1))
        close(T(a).cumprod(2), a.cumprod(2), 1e-4)
        i = torch.randint(0, 5, (3, 4))
        assert torch.equal(T(i).cumsum(0).cpu(), i.cumsum(0))
        x = torch.randn(5, 4, requires_grad=True)
        xt = T(x.detach()).requires_grad_()
        ix = torch.tensor([[0, 1, 4], [2, 2, 3]])
        sel = torch.tensor([1, -1])

        def f(v, ix, sel):
            return (v.gather(0, ix).sum() + v[sel].pow(2).sum() + v.cumsum(0).sum()
                    + torch.sort(v, 1)[0][:, :2].sum())

        f(x, ix, sel).backward()
        f(xt, T(ix), T(sel)).backward()
    close(xt.grad, x.grad)


def test_boolean_mask_index_runs_natively():
    """x[mask] turns the mask into its nonzero() columns on the device (one
    count read to the host, as on CUDA); no CPU fallback."""
    a = torch.randn(3, 4)
    m = a > 0
    with native_only():
        got = T(a)[T(m)]
    assert torch.equal(got.cpu(), a[m])


# --- losses ------------------------------------------------------------------------------

@pytest.mark.parametrize("name,fn", [
    ("bce", lambda x, t, w: F.binary_cross_entropy(torch.sigmoid(x), t, weight=w)),
    ("bce_sum", lambda x, t, w: F.binary_cross_entropy(torch.sigmoid(x), t, reduction="sum")),
    ("bce_logits", lambda x, t, w: F.binary_cross_entropy_with_logits(x, t, pos_weight=w[0])),
    ("smooth_l1", lambda x, t, w: F.smooth_l1_loss(x, t, beta=0.5)),
    ("smooth_l1_none", lambda x, t, w: F.smooth_l1_loss(x, t, reduction="none").sum()),
    ("huber", lambda x, t, w: F.huber_loss(x, t, delta=0.7)),
])
def test_losses(name, fn):
    torch.manual_seed(0)
    x = torch.randn(4, 5) * 2
    t, w = torch.rand(4, 5), torch.rand(4, 5)
    xc, xt = x.clone().requires_grad_(), T(x).requires_grad_()
    with native_only():
        a, b = fn(xc, t, w), fn(xt, T(t), T(w))
        a.backward()
        b.backward()
    close(b, a)
    close(xt.grad, xc.grad)


# --- optimizers (foreach) ------------------------------------------------------------------

def _train(dev, make_opt, steps=3):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)).to(dev)
    opt = make_opt(m.parameters())
    x = torch.randn(8, 6).to(dev)
    for _ in range(steps):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        if dev == "tpu":
            with native_only():  # the optimizer step itself runs natively
                opt.step()
        else:
            opt.step()
    return [p.detach().cpu() for p in m.parameters()]


@pytest.mark.parametrize("foreach", [True, False])
@pytest.mark.parametrize("name", ["adam", "adamw", "adam_amsgrad", "sgd"])
def test_optimizer_steps(name, foreach):
    make = {
        "adam": lambda p: torch.optim.Adam(p, lr=1e-2, foreach=foreach),
        "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=foreach),
        "adam_amsgrad": lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1,
                                                   amsgrad=True, foreach=foreach),
        "sgd": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, weight_decay=0.01,
                                         foreach=foreach),
    }[name]
    if not foreach:  # the per-tensor path uses ops other families own
        old = torchtpu.fallback_mode()
        torchtpu.set_fallback_mode("silent")
        try:
            cpu, tpu = _train("cpu", make), _train_lenient(make)
        finally:
            torchtpu.set_fallback_mode(old)
    else:
        cpu, tpu = _train("cpu", make), _train("tpu", make)
    for a, b in zip(cpu, tpu):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)


def _train_lenient(make_opt, steps=3):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)).to("tpu")
    opt = make_opt(m.parameters())
    x = torch.randn(8, 6).to("tpu")
    for _ in range(steps):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
    return [p.detach().cpu() for p in m.parameters()]


def test_foreach_norm_and_functional_add():
    ps = [torch.randn(3, 4), torch.randn(5)]
    pt = [T(p) for p in ps]
    with native_only():
        for ordv in [2, 1, float("inf")]:
            for a, b in zip(torch._foreach_norm(pt, ordv), torch._foreach_norm(ps, ordv)):
                close(a, b)
        for a, b in zip(torch._foreach_add(pt, pt, alpha=2), torch._foreach_add(ps, ps, alpha=2)):
            close(a, b)


def test_foreach_length_mismatch_raises():
    with pytest.raises(RuntimeError, match="same number of tensors|same length|Tensor lists"):
        torch._foreach_add_([T(torch.ones(2)), T(torch.ones(2))], [T(torch.ones(2))])


# --- attention ----------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_with_grads(causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4, requires_grad=True) for _ in range(3))
    qt, kt, vt = (T(t.detach()).requires_grad_() for t in (q, k, v))
    mask = None if causal else torch.rand(5, 5) > 0.3
    old = torchtpu.fallback_mode()
    torchtpu.set_fallback_mode("silent")  # tril / isneginf belong to other families
    try:
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        ot = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=None if mask is None else T(mask),
                                            is_causal=causal)
        o.sum().backward()
        ot.sum().backward()
    finally:
        torchtpu.set_fallback_mode(old)
    close(ot, o, 1e-5)
    for a, b in zip((qt, kt, vt), (q, k, v)):
        close(a.grad, b.grad, 1e-5)
