"""Storages are untyped bytes, as PyTorch expects: views of another element
size read and write the same bytes natively (no CPU fallback), compared with
the same views on the CPU."""
import copy

import pytest
import torch

import torchtpu


@pytest.fixture(autouse=True)
def strict_fallback():
    torchtpu.set_fallback_mode("error")
    yield
    torchtpu.set_fallback_mode("warn")


@pytest.mark.parametrize("src,dst", [
    (torch.float32, torch.uint8), (torch.float32, torch.int16),
    (torch.int64, torch.int32), (torch.uint8, torch.float32),
    (torch.int16, torch.float32), (torch.float32, torch.bool),
    (torch.bfloat16, torch.uint8), (torch.int32, torch.float16),
])
def test_read_through_a_view_of_another_width(src, dst):
    g = torch.Generator().manual_seed(0)
    if dst == torch.bool:  # every byte must be 0 or 1 to be a bool
        x = torch.randint(0, 2, (8, 24), generator=g, dtype=torch.uint8).view(src)
    elif src.is_floating_point:
        x = (torch.randn(8, 8, generator=g) * 4).to(src)
    else:
        x = torch.randint(0, 100, (8, 8), generator=g).to(src)
    want = x.view(dst)
    got = x.to("tpu").view(dst)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=0, atol=0)
    # strided and offset views of the reinterpreted storage, through an op
    # that moves bits without arithmetic (XLA flushes denormals in arithmetic)
    torch.testing.assert_close(torch.flip(got[1::2, 1:], [0]).cpu(),
                               torch.flip(want[1::2, 1:], [0]),
                               equal_nan=True, rtol=0, atol=0)


def test_write_through_a_narrower_view_keeps_the_rest():
    x = torch.arange(12, dtype=torch.float32)
    xt = x.to("tpu")
    for t in (x, xt):
        b = t.view(torch.uint8)
        b[4:8] = 0          # zero the bytes of element 1
        b[::16].fill_(7)    # the lowest byte of every 4th element
    torch.testing.assert_close(xt.cpu(), x, rtol=0, atol=0)


def test_untyped_storage_clone_and_deepcopy_run_natively():
    m = torch.nn.Linear(4, 3)
    mt = copy.deepcopy(m).to("tpu")
    clone = copy.deepcopy(mt)   # UntypedStorage.clone: a uint8 copy_
    x = torch.randn(2, 4)
    torch.testing.assert_close(clone(x.to("tpu")).cpu(), m(x), rtol=1e-6, atol=1e-6)
    s = torch.ones(5, device="tpu")
    u = s.untyped_storage().clone()
    t = torch.empty(0, device="tpu").set_(u, 0, (5,), (1,))
    assert (t + 1).cpu().tolist() == [2.0] * 5
