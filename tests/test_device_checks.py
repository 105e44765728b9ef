"""Device-side checks: value preconditions PyTorch checks on the host (indices
in range, class targets, integer division by zero) are computed inside the
tpu programs and raised at the next synchronisation, with PyTorch CPU's
exception type and the core of its message (CUDA's device-side asserts).

Every case runs on the CPU first: the exception it raises there is the one
the tpu must raise (at the sync at the latest)."""
import pytest
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu import _core

DEV = "tpu"


def _x():
    return torch.arange(12, dtype=torch.float32).reshape(3, 4)


def _cases():
    """name -> fn(device) for inputs that PyTorch CPU rejects."""
    def t(v, dev, dtype=torch.int64):
        return torch.tensor(v, dtype=dtype, device=dev)

    return {
        "index_select": lambda d: _x().to(d).index_select(0, t([0, 5], d)),
        "index_select_neg": lambda d: _x().to(d).index_select(0, t([-1], d)),
        "gather": lambda d: _x().to(d).gather(0, t([[0, 5, 0, 0]], d)),
        "gather_neg": lambda d: _x().to(d).gather(0, t([[-1, 0, 0, 0]], d)),
        "scatter": lambda d: _x().to(d).scatter_(0, t([[0, 5, 0, 0]], d), 1.0),
        "scatter_add": lambda d: _x().to(d).scatter_add_(0, t([[0, 5, 0, 0]], d),
                                                         torch.ones(1, 4, device=d)),
        "index_put_": lambda d: _x().to(d).index_put_((t([5], d),), torch.tensor(1.0, device=d)),
        "index_add_": lambda d: _x().to(d).index_add_(0, t([5], d), torch.ones(1, 4, device=d)),
        "index_copy_": lambda d: _x().to(d).index_copy_(0, t([3], d), torch.ones(1, 4, device=d)),
        "getitem": lambda d: _x().to(d)[t([5], d)],
        "getitem_neg": lambda d: _x().to(d)[t([-4], d)],
        "setitem": lambda d: _x().to(d).__setitem__(t([1, 3], d), 1.0),
        "embedding": lambda d: F.embedding(t([[1, 3]], d), _x().to(d)),
        "take": lambda d: _x().to(d).take(t([12], d)),
        "take_neg": lambda d: _x().to(d).take(t([-13], d)),
        "nll_loss": lambda d: F.nll_loss(torch.zeros(2, 3, device=d), t([0, 5], d)),
        "nll_loss_neg": lambda d: F.nll_loss(torch.zeros(2, 3, device=d), t([0, -1], d)),
        "nll_loss2d": lambda d: F.nll_loss(torch.zeros(2, 3, 2, 2, device=d),
                                           torch.full((2, 2, 2), 4, device=d)),
        "cross_entropy": lambda d: F.cross_entropy(torch.zeros(2, 3, device=d), t([0, 3], d)),
        "div_floor": lambda d: torch.div(t([1, 2], d), t([1, 0], d), rounding_mode="floor"),
        "div_trunc": lambda d: torch.div(t([1, 2], d), t([1, 0], d), rounding_mode="trunc"),
        "floor_divide": lambda d: t([7], d) // t([0], d),
        "remainder": lambda d: t([7], d) % t([0], d),
        "remainder_scalar": lambda d: t([7], d) % 0,
        "fmod_int32": lambda d: torch.fmod(t([7], d, torch.int32), t([0], d, torch.int32)),
        # more true positions in the mask than source has elements (was: the
        # last source element repeated)
        "masked_scatter_": lambda d: torch.zeros(2, 5, device=d).masked_scatter_(
            torch.tensor([True, False, True], device=d).repeat(2, 2)[:, :5], torch.ones(4, device=d)),
        "masked_scatter_empty_source": lambda d: torch.zeros(4, device=d).masked_scatter_(
            torch.tensor([False, True, False, False], device=d), torch.ones(0, device=d)),
    }


CASES = _cases()
# Where our text differs from CPU's, the part that must appear. (one_hot
# checks its classes on the host, as on the CPU: test_conformance.)
KEY = {}


def _cpu_error(fn):
    with pytest.raises(Exception) as info:
        fn("cpu")
    return info.type, str(info.value).splitlines()[0]


def _run_and_sync(fn):
    out = fn(DEV)
    if isinstance(out, torch.Tensor):
        out.cpu()
    torch.tpu.synchronize()


@pytest.mark.parametrize("name", sorted(CASES))
def test_raises_like_cpu(name):
    fn = CASES[name]
    etype, msg = _cpu_error(fn)
    with pytest.raises(etype) as info:
        _run_and_sync(fn)
    assert KEY.get(name, msg) in str(info.value), (str(info.value), msg)
    assert "device-side check in " in str(info.value)
    # The device is usable afterwards and the error does not come back.
    assert torch.ones(3, device=DEV).add(1).sum().item() == 6
    torch.tpu.synchronize()


def test_message_starts_with_pytorch_text():
    with pytest.raises(IndexError) as info:
        _run_and_sync(CASES["index_select"])
    assert str(info.value).startswith("index out of range in self (device-side check in "
                                      "index_select")


VALID = {
    "index_select": lambda d: _x().to(d).index_select(1, torch.tensor([3, 0, 3], device=d)),
    "gather": lambda d: _x().to(d).gather(1, torch.tensor([[3], [0], [2]], device=d)),
    "scatter_add": lambda d: _x().to(d).scatter_add_(0, torch.tensor([[2, 0, 1, 2]], device=d),
                                                     torch.ones(1, 4, device=d)),
    "getitem_neg": lambda d: _x().to(d)[torch.tensor([-1, -3, 2], device=d)],
    "setitem_neg": lambda d: _x().to(d).index_put_((torch.tensor([-1], device=d),),
                                                   torch.tensor(5.0, device=d)),
    "take_neg": lambda d: _x().to(d).take(torch.tensor([-12, 11], device=d)),
    "embedding": lambda d: F.embedding(torch.tensor([[2, 0]], device=d), _x().to(d)),
    "nll_ignore": lambda d: F.nll_loss(torch.zeros(2, 3, device=d).log_softmax(1),
                                       torch.tensor([1, -100], device=d)),
    "floor_divide": lambda d: torch.tensor([7, -7], device=d) // torch.tensor([2, 2], device=d),
    "remainder": lambda d: torch.tensor([7, -7], device=d) % 3,
    "float_div_zero": lambda d: torch.tensor([1.0], device=d) // torch.tensor([0.0], device=d),
    "masked_scatter_": lambda d: torch.zeros(2, 5, device=d).masked_scatter_(
        torch.tensor([True, False, True, True, False], device=d), torch.arange(6.0, device=d)),
    "masked_scatter_no_true": lambda d: torch.zeros(4, device=d).masked_scatter_(
        torch.zeros(4, dtype=torch.bool, device=d), torch.ones(0, device=d)),
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_inputs_match_cpu(name):
    fn = VALID[name]
    want = fn("cpu")
    got = fn(DEV)
    torch.tpu.synchronize()
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)


def test_raised_at_sync_not_at_the_op():
    x = _x().to(DEV)
    y = x.index_select(0, torch.tensor([7], device=DEV))  # no raise: values are on the device
    z = y + 1
    with pytest.raises(IndexError, match="index out of range in self"):
        z.sum().item()


def test_debug_mode_raises_at_the_op():
    with torchtpu.mode("debug"):
        with pytest.raises(IndexError, match="index out of range in self"):
            _x().to(DEV).index_select(0, torch.tensor([7], device=DEV))
    torch.tpu.synchronize()


def test_fused_mode_names_the_failing_op():
    with torchtpu.mode("fused"):
        x = _x().to(DEV)
        a = (x * 2).relu()
        b = a.gather(1, torch.tensor([[0], [9], [1]], device=DEV))
        c = b.exp().sum()
        with pytest.raises(RuntimeError, match=r"index 9 is out of bounds.*device-side check "
                                               r"in gather"):
            c.item()
        # The graph replays (a trace) with the checks of its ops.
        for bad in (True, False):
            x = _x().to(DEV)
            idx = torch.tensor([[0], [9 if bad else 3], [1]], device=DEV)
            s = (x * 2).relu().gather(1, idx).exp().sum()
            if bad:
                with pytest.raises(RuntimeError, match="device-side check in gather"):
                    s.item()
            else:
                want = (_x() * 2).relu().gather(1, idx.cpu()).exp().sum()
                torch.testing.assert_close(s.cpu(), want)
    torch.tpu.synchronize()


def test_fused_dead_result_still_checked():
    with torchtpu.mode("fused"):
        x = _x().to(DEV)
        x.index_select(0, torch.tensor([4], device=DEV))  # result dropped at once
        with pytest.raises(IndexError):
            torch.tpu.synchronize()


def test_compiled_function_raises():
    def f(w, idx, tgt):
        return F.cross_entropy(F.embedding(idx, w).sum(1), tgt)

    g = torch.compile(f, backend="tpu")
    w = torch.randn(5, 3, device=DEV)
    good = g(w, torch.tensor([[0, 4]], device=DEV), torch.tensor([2], device=DEV))
    torch.testing.assert_close(good.cpu(), f(w.cpu(), torch.tensor([[0, 4]]), torch.tensor([2])))
    with pytest.raises(IndexError, match="index out of range in self"):
        g(w, torch.tensor([[0, 5]], device=DEV), torch.tensor([2], device=DEV)).item()
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):
        g(w, torch.tensor([[0, 1]], device=DEV), torch.tensor([3], device=DEV)).item()


def test_embedding_forward_backward_training_step():
    emb = torch.nn.Embedding(4, 3).to(DEV)
    out = emb(torch.tensor([[1, 4]], device=DEV)).sum()
    out.backward()
    with pytest.raises(IndexError, match="index out of range in self"):
        emb.weight.grad.cpu()
    emb.zero_grad()
    emb(torch.tensor([[1, 3]], device=DEV)).sum().backward()
    assert emb.weight.grad.cpu()[1].sum().item() == 3


def test_setting_off_means_no_raise():
    torchtpu.set_device_checks(False)
    try:
        assert not torchtpu.device_checks()
        _x().to(DEV).index_select(0, torch.tensor([7], device=DEV)).cpu()  # clamped
        (torch.tensor([1], device=DEV) // torch.tensor([0], device=DEV)).cpu()
        torch.tpu.synchronize()
        assert _core.stats()["device_checks_pending"] == 0
    finally:
        torchtpu.set_device_checks(True)
    with pytest.raises(IndexError):  # the plans with checks come back
        _x().to(DEV).index_select(0, torch.tensor([7], device=DEV)).cpu()


def test_env_setting_is_validated(monkeypatch):
    from torchtpu import _env
    monkeypatch.setenv("TORCHTPU_DEVICE_CHECKS", "0")
    assert _env.device_checks() is False
    monkeypatch.setenv("TORCHTPU_DEVICE_CHECKS", "maybe")
    with pytest.raises(ValueError, match="TORCHTPU_DEVICE_CHECKS"):
        _env.validate()
    monkeypatch.delenv("TORCHTPU_DEVICE_CHECKS")
    assert _env.device_checks() is True


def test_no_transfer_per_op_and_no_leak():
    x = _x().to(DEV)
    idx = torch.tensor([2, 0], device=DEV)
    x.index_select(0, idx).cpu()
    torch.tpu.synchronize()
    before = _core.stats()
    outs = [x.index_select(0, idx) for _ in range(300)]
    mid = _core.stats()
    assert mid["device_to_host_bytes"] == before["device_to_host_bytes"]
    assert mid["device_check_reads"] == before["device_check_reads"]  # none read per op
    assert mid["device_checks_pending"] == before["device_checks_pending"] + 300
    del outs
    torch.tpu.synchronize()
    after = _core.stats()
    assert after["device_checks_pending"] == 0
    assert after["device_check_reads"] == before["device_check_reads"] + 300
    assert after["bytes_in_use"] == before["bytes_in_use"]
    assert after["buffers_in_use"] == before["buffers_in_use"]
