"""DLPack of tpu tensors (torch.from_dlpack, torch.utils.dlpack, Tensor.__dlpack__,
torch.asarray of a capsule): the result aliases the tpu tensor as on the CPU
(same data_ptr(), writes through either seen by the other, views kept), keeps
its storage alive, leaks nothing, copies when asked; errors are PyTorch's.

Each scenario runs on the CPU and on tpu and the two results are compared."""
import gc

import pytest
import torch
from torch.utils import dlpack as tud

import torchtpu

# How a tensor reaches an importer: each returns the importer's tensor.
ROUTES = {
    "from_dlpack(tensor)": lambda t: torch.from_dlpack(t),
    "from_dlpack(capsule)": lambda t: torch.from_dlpack(t.__dlpack__()),
    "from_dlpack(versioned capsule)": lambda t: torch.from_dlpack(t.__dlpack__(max_version=(1, 0))),
    "utils from_dlpack(to_dlpack)": lambda t: tud.from_dlpack(tud.to_dlpack(t)),
    "asarray(to_dlpack)": lambda t: torch.asarray(tud.to_dlpack(t)),
    "asarray(versioned capsule)": lambda t: torch.asarray(t.__dlpack__(max_version=(1, 0))),
    "from_dlpack(tensor, device=its device)": lambda t: torch.from_dlpack(t, device=t.device),
    "asarray(capsule, device, copy=False)": lambda t: torch.asarray(
        tud.to_dlpack(t), device=t.device, copy=False),
}

VIEWS = {
    "whole": lambda x: x,
    "offset block": lambda x: x[1:, 2:],
    "transposed": lambda x: x.t(),
    "steps": lambda x: x[::2, 1::2],
    "row": lambda x: x[2],
    "column": lambda x: x[:, 3],
    "element": lambda x: x[1, 2],
    "expanded": lambda x: x[1:2].expand(3, 5),
    "empty": lambda x: x[4:],
}

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64,
          torch.complex64, torch.complex128, torch.uint16, torch.uint32, torch.uint64]


@pytest.fixture(autouse=True)
def quiet_fallback():
    torchtpu.set_fallback_mode("silent")  # uint16/32/64 writes run on the CPU
    yield
    torchtpu.set_fallback_mode("warn")


def both(scenario):
    """scenario(device) -> a tuple of values; returns (cpu's, tpu's) with
    tensors moved to the CPU."""
    def run(device):
        out = scenario(device)
        return tuple(v.cpu() if isinstance(v, torch.Tensor) else v for v in out)
    return run("cpu"), run("tpu")


def assert_same(cpu, tpu):
    assert len(cpu) == len(tpu)
    for c, t in zip(cpu, tpu):
        if isinstance(c, torch.Tensor):
            torch.testing.assert_close(t, c, rtol=0, atol=0, equal_nan=True)
        else:
            assert t == c


def grid(device, dtype=torch.float32):
    return torch.arange(20, dtype=torch.int64).reshape(4, 5).to(dtype).to(device)


# --- aliasing ---------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("view", VIEWS)
def test_alias_both_ways(route, view):
    def scenario(device):
        x = grid(device)
        v = VIEWS[view](x)
        a = ROUTES[route](v)
        same_ptr = a.data_ptr() == v.data_ptr()
        shape = (a.shape, a.stride(), a.dtype, a.device.type == device)
        first = a.clone()
        if view != "expanded" and a.numel() > 0:
            a.add_(100)  # seen by x
            x.mul_(-1)  # seen by a
        return same_ptr, shape, first, a, x

    cpu, tpu = both(scenario)
    assert cpu[0] and tpu[0]
    assert_same(cpu, tpu)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_alias_every_dtype(dtype):
    def scenario(device):
        src = torch.tensor([[0, 1, 0, 1, 1], [1, 0, 1, 1, 0], [7, 0, 3, 1, 2]])
        x = src.to(dtype).to(device)
        v = x[1:, 1::2]
        a = torch.from_dlpack(v)
        c = torch.asarray(tud.to_dlpack(v))
        a[0, 0] = x[0, 1]  # write through the alias
        x[2, 1] = x[0, 0]  # and through the original
        return a.data_ptr() == v.data_ptr(), c.data_ptr() == v.data_ptr(), a.dtype, a, c, x

    cpu, tpu = both(scenario)
    assert tpu[0] and tpu[1]
    assert_same(cpu, tpu)


def test_dlpack_device_and_capsule_device():
    x = torch.ones(3, device="tpu")
    kind, index = x.__dlpack_device__()
    assert (kind, index) == (tud.DLDeviceType.kDLExtDev, 0)
    # the same answer as PyTorch's C++ side, which makes the capsules
    assert (int(kind), index) == torch._C._torchDeviceToDLDevice(x.device)
    assert torch.ones(3).__dlpack_device__() == (tud.DLDeviceType.kDLCPU, 0)


def test_alias_of_an_alias_and_several_exports():
    def scenario(device):
        x = grid(device)
        a1 = torch.from_dlpack(x[1:])
        a2 = torch.from_dlpack(tud.to_dlpack(x[2:]))
        b = torch.from_dlpack(a1[1:])  # re-export an imported tensor
        del a1  # a2 and b keep working: other exports of the same storage live
        gc.collect()
        b.add_(1)
        return b.data_ptr() == a2.data_ptr(), b.stride(), x + a2.sum(), a2 * 2, b

    cpu, tpu = both(scenario)
    assert tpu[0]
    assert_same(cpu, tpu)


def test_ops_mixing_the_alias_and_the_original():
    def scenario(device):
        x = grid(device)
        a = torch.from_dlpack(x.t())
        y = x @ a  # the same bytes on both sides
        torch.add(x[:, 0], a[1], out=a[2])  # out= into the alias, an input through it
        return y, a, x

    assert_same(*both(scenario))


# --- lifetime and memory ------------------------------------------------------------


def test_alias_outlives_the_original():
    def scenario(device):
        x = grid(device, torch.float64)
        a = torch.from_dlpack(x[1:, 1:])
        cap = tud.to_dlpack(x[2])
        del x
        gc.collect()
        r = torch.from_dlpack(cap)  # a capsule also keeps its storage
        del cap
        gc.collect()
        a.mul_(2)
        return a.stride(), a, a.sum(), r

    assert_same(*both(scenario))


def allocated():
    torch.tpu.synchronize()  # fused mode allocates when its pending ops run
    return torch.tpu.memory_allocated()


def test_memory_counters_back_to_baseline():
    gc.collect()
    base = allocated()
    x = torch.arange(1000.0, device="tpu")
    held = allocated()
    assert held >= base + 4000
    a = torch.from_dlpack(x[10:])
    c = torch.asarray(tud.to_dlpack(x[::3]))
    cap = x.__dlpack__(max_version=(1, 0))  # never consumed
    assert allocated() == held  # aliases allocate nothing
    del x
    gc.collect()
    assert allocated() == held  # the aliases hold the storage
    torch.testing.assert_close(a[-3:].cpu(), torch.arange(997.0, 1000.0))
    del a, c
    gc.collect()
    assert allocated() == held  # the capsule still does
    del cap
    gc.collect()
    assert allocated() == base

    # copies own their memory, and give it back
    x = torch.arange(1000.0, device="tpu")
    d = torch.from_dlpack(x, copy=True)
    assert allocated() == held + 4000
    del x, d
    gc.collect()
    assert allocated() == base


# --- copies and devices -------------------------------------------------------------


@pytest.mark.parametrize("how", ["from_dlpack copy", "__dlpack__ copy", "asarray copy",
                                 "asarray dtype", "asarray clone"])
def test_copies_do_not_alias(how):
    def scenario(device):
        x = grid(device)
        v = x[1:, ::2]
        if how == "from_dlpack copy":
            c = torch.from_dlpack(v, copy=True)
        elif how == "__dlpack__ copy":
            c = torch.from_dlpack(v.__dlpack__(max_version=(1, 0), copy=True))
        elif how == "asarray copy":
            c = torch.asarray(tud.to_dlpack(v), copy=True)
        elif how == "asarray dtype":
            c = torch.asarray(tud.to_dlpack(v), dtype=torch.float64)
        else:
            c = torch.asarray(tud.to_dlpack(v), device=device, copy=True)
        shared = c.data_ptr() == v.data_ptr()
        c.add_(1)
        return shared, c, x

    cpu, tpu = both(scenario)
    assert not cpu[0] and not tpu[0]
    assert_same(cpu, tpu)


def test_across_devices():
    x = grid("cpu")
    t = x.to("tpu")
    # tpu -> CPU and CPU -> tpu copy, as CUDA <-> CPU do
    got = torch.from_dlpack(t[1:], device="cpu")
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, x[1:])
    got = torch.from_dlpack(x[::2], device="tpu:0")
    assert got.device == torch.device("tpu:0")
    torch.testing.assert_close(got.cpu(), x[::2])
    got = torch.asarray(tud.to_dlpack(t.t()), device="cpu")
    torch.testing.assert_close(got, x.t())
    # a producer asked for another device (DLPack's dl_device) copies there
    got = torch.from_dlpack(x.__dlpack__(dl_device=(tud.DLDeviceType.kDLExtDev, 0)))
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), x)
    got = torch.from_dlpack(t.__dlpack__(dl_device=(tud.DLDeviceType.kDLCPU, 0)))
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, x)
    got = torch.from_dlpack(t.__dlpack__(dl_device=(tud.DLDeviceType.kDLExtDev, 0)))
    assert got.data_ptr() == t.data_ptr()  # its own device: an alias
    # NumPy asks for a CPU copy with device="cpu" (and refuses the device otherwise)
    np = pytest.importorskip("numpy")
    np.testing.assert_array_equal(np.from_dlpack(t[1:], device="cpu"), x[1:].numpy())


# --- errors -------------------------------------------------------------------------


def error_of(fn):
    with pytest.raises(Exception) as info:
        fn()
    return type(info.value), str(info.value)


def same_error(make):
    """make(device) -> a callable that raises; the same type and text on both."""
    cpu, tpu = error_of(make("cpu")), error_of(make("tpu"))
    assert tpu == cpu


def test_errors_as_on_cpu():
    same_error(lambda d: torch.ones(3, device=d, requires_grad=True).__dlpack__)
    same_error(lambda d: torch.ones(3, dtype=torch.complex64, device=d).conj().__dlpack__)
    same_error(lambda d: lambda: torch.ones(3, device=d).__dlpack__(stream=object()))
    same_error(lambda d: lambda: torch.ones(3, device=d).__dlpack__(copy=1))
    for bad in ["x", (12.0, 0), (12,), (True, 0), (12, 0, 1)]:
        same_error(lambda d: lambda: torch.ones(3, device=d).__dlpack__(dl_device=bad))
    same_error(lambda d: lambda: tud.to_dlpack(torch.ones(3, device=d), 5))

    def twice(d):
        cap = tud.to_dlpack(torch.ones(3, device=d))
        torch.from_dlpack(cap)
        return lambda: torch.from_dlpack(cap)
    same_error(twice)
    same_error(lambda d: lambda: torch.asarray(tud.to_dlpack(torch.ones(3, device=d)),
                                               dtype=torch.int64, copy=False))
    # an alias's storage is PyTorch's import, not resizable, on both
    same_error(lambda d: lambda: torch.from_dlpack(torch.ones(6, device=d)[2:]).resize_(5))


def test_cross_device_errors_mirror_each_other():
    # copy=False across devices: the same refusal both ways (CUDA's too)
    kind_a, text_a = error_of(lambda: torch.from_dlpack(torch.ones(3, device="tpu"),
                                                        device="cpu", copy=False))
    kind_b, text_b = error_of(lambda: torch.from_dlpack(torch.ones(3), device="tpu:0",
                                                        copy=False))
    assert kind_a is kind_b is ValueError
    assert text_a.startswith("cannot move DLPack tensor from device")
    assert text_b.startswith("cannot move DLPack tensor from device")
    kind_a, text_a = error_of(lambda: torch.asarray(tud.to_dlpack(torch.ones(3, device="tpu")),
                                                    device="cpu", copy=False))
    kind_b, text_b = error_of(lambda: torch.asarray(tud.to_dlpack(torch.ones(3)),
                                                    device="tpu", copy=False))
    assert (kind_a, text_a) == (ValueError, "can't alias tensor from device 'tpu:0' to 'cpu'.")
    assert (kind_b, text_b) == (ValueError, "can't alias tensor from device 'cpu' to 'tpu'.")
    kind_a, text_a = error_of(lambda: torch.ones(3, device="tpu").__dlpack__(
        dl_device=(tud.DLDeviceType.kDLCPU, 0), copy=False))
    assert (kind_a, text_a) == (
        ValueError, "cannot move (i.e. copy=False) tensor from tpu:0 to cpu without copying.")


def test_foreign_tpu_storage_still_refused():
    # a tpu capsule whose storage this process never exported (PyTorch's C
    # exchange API, another library) is refused with a clear error, not read
    managed = {}

    def grab(t):
        cap = torch._C._to_dlpack._torchtpu_original(t)  # PyTorch's own export, unpatched
        managed["t"] = t
        return cap

    a = torch.from_dlpack(grab(torch.arange(4.0, device="tpu")[1:]))
    with pytest.raises(RuntimeError, match="not allocated by the tpu allocator"):
        a.sum()
