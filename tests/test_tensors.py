"""Real tensors on "tpu": factories, dtype round trips, printing, views that
share storage, in-place writes through views. Every value is compared with
PyTorch's own CPU result."""
import pytest
import torch

import torchtpu  # noqa: F401

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
          torch.int64, torch.float16, torch.bfloat16, torch.float32]


@pytest.mark.parametrize("dtype", DTYPES + [torch.float64])
def test_round_trip(dtype):
    if dtype == torch.float64 and not torchtpu.runtime_info()["supports_f64"]:
        pytest.skip("device has no float64")
    cpu = (torch.randn(4, 5) * 10).to(dtype)
    back = cpu.to("tpu").cpu()
    assert back.dtype == dtype
    assert torch.equal(back, cpu)


def test_factories():
    assert torch.equal(torch.zeros(2, 3, device="tpu").cpu(), torch.zeros(2, 3))
    assert torch.equal(torch.ones(2, 3, device="tpu").cpu(), torch.ones(2, 3))
    assert torch.equal(torch.full((2, 2), 7.5, device="tpu").cpu(),
                       torch.full((2, 2), 7.5))
    assert torch.equal(torch.arange(10, device="tpu").cpu(), torch.arange(10))
    assert torch.equal(torch.arange(1, 4, 0.5, device="tpu").cpu(),
                       torch.arange(1, 4, 0.5))
    e = torch.empty(3, 4, device="tpu")
    assert e.shape == (3, 4) and e.device.type == "tpu"


def test_random_factories():
    torch.manual_seed(0)
    r = torch.rand(1000, device="tpu").cpu()
    assert r.min() >= 0 and r.max() < 1 and abs(r.mean() - 0.5) < 0.05
    n = torch.randn(4000, device="tpu").cpu()
    assert abs(n.mean()) < 0.1 and abs(n.std() - 1) < 0.1
    i = torch.randint(3, 9, (1000,), device="tpu").cpu()
    assert i.dtype == torch.int64 and i.min() == 3 and i.max() == 8
    # Same seed, same numbers; different seed, different numbers.
    torch.manual_seed(123)
    a = torch.rand(16, device="tpu").cpu()
    torch.manual_seed(123)
    b = torch.rand(16, device="tpu").cpu()
    c = torch.rand(16, device="tpu").cpu()
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("n", [0, 1, 2, 10, 1000])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.int16])
def test_randperm_is_a_permutation(n, dtype, no_fallback):
    p = torch.randperm(n, device="tpu", dtype=dtype)
    assert p.dtype == dtype and p.device.type == "tpu" and p.shape == (n,)
    assert torch.equal(torch.sort(p.cpu().long())[0], torch.arange(n))
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch.randperm(n, out=out)
    assert torch.equal(torch.sort(out.cpu().long())[0], torch.arange(n))


def test_randperm_generator_and_spread(no_fallback):
    g = torch.Generator(device="tpu")
    g.manual_seed(3)
    a = torch.randperm(50, device="tpu", generator=g).cpu()
    g.manual_seed(3)
    b = torch.randperm(50, device="tpu", generator=g).cpu()
    c = torch.randperm(50, device="tpu", generator=g).cpu()
    assert torch.equal(a, b) and not torch.equal(a, c)
    # Each of 4 values lands in each of 4 places about a quarter of the time.
    torch.manual_seed(0)
    counts = torch.zeros(4, 4)
    for _ in range(400):
        counts[torch.arange(4), torch.randperm(4, device="tpu").cpu()] += 1
    assert counts.min() > 60 and counts.max() < 140, counts


@pytest.mark.parametrize("n, dtype, match", [
    (-1, torch.int64, "negative"),
    (300, torch.uint8, "too large for result tensor type"),
    (3000, torch.float16, "n cannot be greater than 2049 for Half type"),
])
def test_randperm_bad_n_raises_like_cpu(n, dtype, match):
    with pytest.raises(RuntimeError):
        torch.randperm(n, dtype=dtype)
    with pytest.raises(RuntimeError, match=match):
        torch.randperm(n, dtype=dtype, device="tpu")


def test_printing():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3).to("tpu")
    s = str(x)
    assert "device='tpu:0'" in s and "5." in s


def test_views_share_storage():
    base_cpu = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    base = base_cpu.to("tpu")
    views = {
        "view": lambda t: t.view(6, 4),
        "reshape": lambda t: t.reshape(2, 12),
        "transpose": lambda t: t.transpose(0, 1),
        "permute": lambda t: t.view(2, 2, 6).permute(2, 0, 1),
        "slice": lambda t: t[1:3, ::2],
        "select": lambda t: t[2],
        "unsqueeze": lambda t: t.unsqueeze(1),
        "as_strided": lambda t: t.as_strided((3, 3), (5, 1), 2),
        "expand": lambda t: t[0:1].expand(3, 6),
    }
    for name, f in views.items():
        v = f(base)
        assert v.untyped_storage().data_ptr() == base.untyped_storage().data_ptr(), name
        assert torch.equal(v.cpu(), f(base_cpu)), name


def test_inplace_through_view_is_seen_by_aliases():
    cpu = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    dev = cpu.to("tpu")
    for t in (cpu, dev):
        col = t[:, 1]
        row = t[2]
        col.add_(100)        # strided view
        row.mul_(2)          # dense view with offset
        t.t()[3:5, 0:2].sub_(1)  # transposed slice
        t[0, 0] = -5.0       # setitem on a 0-d view
    assert torch.equal(dev.cpu(), cpu)
    # Another alias created before the writes sees them too.
    cpu2 = torch.zeros(3, 3)
    dev2 = cpu2.to("tpu")
    alias_c, alias_d = cpu2.view(9), dev2.view(9)
    cpu2.diagonal().fill_(1)
    dev2.diagonal().fill_(1)
    assert torch.equal(alias_d.cpu(), alias_c)


def test_copy_between_views_and_dtypes():
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    d = a.to("tpu")
    d[1:, 2:] = torch.tensor([[7.0, 8.0], [9.0, 10.0]])  # CPU -> tpu view
    a[1:, 2:] = torch.tensor([[7.0, 8.0], [9.0, 10.0]])
    assert torch.equal(d.cpu(), a)
    assert torch.equal(d.to(torch.int32).cpu(), a.to(torch.int32))
    assert torch.equal(d.t().contiguous().cpu(), a.t().contiguous())
    assert d.t()[1, 2].item() == a.t()[1, 2].item()


def test_item_and_tolist():
    x = torch.tensor([[1.5, 2.5]], device="tpu")
    assert x[0, 1].item() == 2.5
    assert x.tolist() == [[1.5, 2.5]]
    assert torch.tensor(3, device="tpu").item() == 3


def test_pickle_round_trips_tpu_tensors_and_storages():
    """pickle.dumps of tpu tensors (views, bfloat16, requires_grad), modules
    and storages: rebuilt on the same device with the same values; CPU
    storages keep PyTorch's own reduction."""
    import pickle
    import warnings
    x = torch.randn(4, 8, device="tpu")
    for t in (x, x[1:3, ::2], x.t(), torch.randn(3, dtype=torch.bfloat16, device="tpu").requires_grad_()):
        r = pickle.loads(pickle.dumps(t))
        assert r.device == t.device and r.dtype == t.dtype and r.requires_grad == t.requires_grad
        assert r.shape == t.shape and r.stride() == t.stride()
        assert torch.equal(r.detach().cpu(), t.detach().cpu())
    m = torch.nn.Linear(3, 2).to("tpu")
    r = pickle.loads(pickle.dumps(m))
    assert r.weight.device.type == "tpu" and torch.equal(r.weight.detach().cpu(), m.weight.detach().cpu())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage is deprecated
        typed = x.storage()
    r = pickle.loads(pickle.dumps(typed))
    assert r.device == x.device and r.dtype == torch.float32 and r.size() == 32
    u = pickle.loads(pickle.dumps(x.untyped_storage()))
    assert u.device == x.device and u.nbytes() == 128
    assert torch.equal(torch.empty(0, device="tpu").set_(u).cpu(), x.cpu().flatten())
    # Tensors pickle without TypedStorage's deprecation warning, on either device.
    torch.storage._reset_warn_typed_storage_removal()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = torch.randn(3)
        assert torch.equal(pickle.loads(pickle.dumps(c)), c)
        assert torch.equal(pickle.loads(pickle.dumps(x)).cpu(), x.cpu())


@pytest.mark.parametrize("alpha", [0.05, 0.3, 1.0, 2.5, 10.0, 300.0])
def test_standard_gamma_moments(alpha, no_fallback):
    """Gamma(alpha, 1) on the device: mean and variance alpha, within 6
    standard errors over 20,000 draws (a fixed seed); positive results."""
    torch.manual_seed(0)
    n = 20000
    x = torch._standard_gamma(torch.full((n,), alpha, device="tpu")).cpu().double()
    assert x.min() > 0
    assert abs(x.mean() - alpha) < 6 * (alpha / n) ** 0.5
    # The sample variance's standard error: sqrt((m4 - var^2) / n), m4 = 3a^2 + 6a.
    assert abs(x.var() - alpha) < 6 * ((3 * alpha ** 2 + 6 * alpha - alpha ** 2) / n) ** 0.5


def test_gamma_dirichlet_beta_distributions(no_fallback):
    torch.manual_seed(0)
    z = torch._standard_gamma(torch.tensor([0.0, 2.0], device="tpu")).cpu()
    assert z[0] == torch.finfo(torch.float32).tiny and z[1] > 0  # alpha 0: the smallest normal
    for dt in (torch.float64, torch.float16, torch.bfloat16):
        assert torch._standard_gamma(torch.full((4,), 2.0, dtype=dt, device="tpu")).dtype == dt
    conc = torch.tensor([0.5, 1.0, 3.0])
    d = torch.distributions.Dirichlet(conc.to("tpu")).sample((20000,)).cpu().double()
    torch.testing.assert_close(d.sum(-1), torch.ones(20000, dtype=torch.float64))
    assert (d.mean(0) - conc / conc.sum()).abs().max() < 0.01
    b = torch.distributions.Beta(torch.tensor(2.0, device="tpu"),
                                 torch.tensor(5.0, device="tpu")).sample((20000,)).cpu()
    assert abs(b.mean() - 2 / 7) < 0.01 and b.min() > 0 and b.max() < 1
    g = torch.Generator(device="tpu")
    g.manual_seed(1)
    a = torch._standard_gamma(torch.ones(8, device="tpu"), generator=g).cpu()
    g.manual_seed(1)
    assert torch.equal(a, torch._standard_gamma(torch.ones(8, device="tpu"), generator=g).cpu())
