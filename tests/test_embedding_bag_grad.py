"""EmbeddingBag's gradients on "tpu" (torchtpu/_embedding_bag.py) against
PyTorch's CPU kernels: every mode, padding_idx, per_sample_weights,
include_last_offset, an empty bag, float32/float64/bfloat16, and no CPU
fallback.

scale_grad_by_freq is checked against its definition (each row's gradient
divided by its index's count, as F.embedding and CUDA's kernel do), not
against the CPU kernel: that one divides by the count of the i-th distinct
index instead of the row's own (`counts[indices_data[i]]` in
_embedding_bag_dense_backward_cpu_sum_mean, i the group number), so a row
whose index is not the i-th distinct one gets another row's scale."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import torchtpu  # noqa: F401

IDX = torch.tensor([3, 1, 3, 7, 0, 3, 9, 3, 2])


def cases():
    for mode in ("sum", "mean", "max"):
        for pad in (None, 3):
            for psw in ((False, True) if mode == "sum" else (False,)):
                for last in (False, True):
                    yield mode, pad, psw, last


def run(device, w, p, mode, pad, last, sgf, grad_seed=1):
    off = torch.tensor([0, 2, 2, 5, 9] if last else [0, 2, 2, 5])  # bag 1 is empty
    wd = w.detach().clone().to(device).requires_grad_()
    pd = p.detach().clone().to(device).requires_grad_() if p is not None else None
    out = F.embedding_bag(IDX.to(device), wd, off.to(device), mode=mode, padding_idx=pad,
                          per_sample_weights=pd, scale_grad_by_freq=sgf, include_last_offset=last)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed), dtype=w.dtype)
    out.backward(g.to(device))
    return out.detach().cpu(), wd.grad.cpu(), pd.grad.cpu() if pd is not None else None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_embedding_bag_grads_like_cpu(dtype):
    tol = dict(rtol=1.6e-2, atol=1e-2) if dtype == torch.bfloat16 else {}
    for mode, pad, psw, last in cases():
        w = torch.randn(10, 4, generator=torch.Generator().manual_seed(0), dtype=dtype)
        p = torch.rand(9, generator=torch.Generator().manual_seed(2), dtype=dtype) if psw else None
        want = run("cpu", w, p, mode, pad, last, False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a CPU fallback warns
            got = run("tpu", w, p, mode, pad, last, False)
        for a, b in zip(got, want):
            if b is not None:
                torch.testing.assert_close(a, b, **tol, msg=lambda m: f"{mode} {pad} {psw} {last}: {m}")


def test_embedding_bag_scale_grad_by_freq():
    counts = torch.bincount(IDX, minlength=10).clamp_min(1).double().unsqueeze(1)
    for mode, pad, psw, last in cases():
        if mode == "max":
            continue  # PyTorch refuses scale_grad_by_freq with max
        w = torch.randn(10, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        p = torch.rand(9, generator=torch.Generator().manual_seed(2), dtype=torch.float64) if psw else None
        plain = run("cpu", w, p, mode, pad, last, False)[1]
        got = run("tpu", w, p, mode, pad, last, True)[1]
        torch.testing.assert_close(got, plain / counts)


def test_embedding_bag_training_step_like_cpu():
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(20, 6, mode="mean", padding_idx=0)
    bag_t = torch.nn.EmbeddingBag(20, 6, mode="mean", padding_idx=0).to("tpu")
    bag_t.load_state_dict(bag.state_dict())
    opt = torch.optim.SGD(bag.parameters(), lr=0.5)
    opt_t = torch.optim.SGD(bag_t.parameters(), lr=0.5)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randint(0, 20, (4, 5), generator=g)
        for m, o, d in ((bag, opt, "cpu"), (bag_t, opt_t, "tpu")):
            o.zero_grad()
            m(x.to(d)).square().sum().backward()
            o.step()
        torch.testing.assert_close(bag_t.weight.detach().cpu(), bag.weight.detach())


def test_sparse_grad_is_sparse_coo_as_on_cpu():
    """sparse=True: a sparse COO gradient on tpu (torchtpu/_sparse.py), equal to the CPU's."""
    w = torch.randn(10, 4)
    grads = []
    for dev in ("cpu", "tpu"):
        wd = w.clone().to(dev).requires_grad_()
        out = F.embedding_bag(IDX.to(dev), wd, torch.tensor([0, 4], device=dev), sparse=True)
        out.square().sum().backward()
        grads.append(wd.grad)
    assert grads[1].layout == torch.sparse_coo and grads[1].device.type == "tpu"
    torch.testing.assert_close(grads[1].cpu().to_dense(), grads[0].to_dense())
