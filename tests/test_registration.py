"""Importing torchtpu makes "tpu" a PyTorch device: torch.tpu mirrors
torch.cuda, torch.accelerator sees it, tensors and modules gain .tpu()."""
import torch

import torchtpu


def test_device_registered():
    assert torch._C._get_privateuse1_backend_name() == "tpu"
    d = torch.device("tpu:0")
    assert d.type == "tpu" and d.index == 0
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() >= 1


def test_torch_tpu_mirrors_cuda():
    for name in ("is_available", "device_count", "current_device", "set_device",
                 "device", "synchronize", "manual_seed", "manual_seed_all", "seed",
                 "initial_seed", "get_rng_state", "set_rng_state", "memory_allocated",
                 "max_memory_allocated", "reset_peak_memory_stats", "memory_stats",
                 "is_bf16_supported", "get_device_name"):
        assert name in torch.tpu.__all__, name
        assert callable(getattr(torch.tpu, name)), name
    assert torch.tpu.current_device() == 0
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
    torch.tpu.synchronize()
    assert isinstance(torch.tpu.get_device_name(), str)
    stats = torch.tpu.memory_stats()
    assert "allocated_bytes.all.current" in stats and "allocated_bytes.all.peak" in stats
    assert set(torch.tpu._get_cache_stats()) >= {"requests", "hits", "compiles",
                                                "compile_seconds", "sig_hits"}


def test_accelerator():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator().type == "tpu"
    assert torch.accelerator.device_count() == torch.tpu.device_count()
    assert torch.accelerator.current_device_index() == 0


def test_generated_methods():
    t = torch.ones(2).tpu()
    assert t.is_tpu and t.device.type == "tpu"
    m = torch.nn.Linear(2, 2).tpu()
    assert m.weight.device.type == "tpu"
    assert torch.equal(t.cpu(), torch.ones(2))


def test_runtime_info_keys():
    info = torchtpu.runtime_info()
    assert set(info) >= {"platform", "platform_version", "plugin_path", "api_version",
                         "device_count", "device_kind", "supports_f64"}
    assert info["device_count"] == torch.tpu.device_count()


def test_rng_state_round_trip():
    torch.tpu.manual_seed(1234)
    assert torch.tpu.initial_seed() == 1234
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    torch.tpu.manual_seed(99)
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.tpu.get_rng_state(), state)
    g = torch.Generator(device="tpu")
    g.manual_seed(7)
    assert g.initial_seed() == 7 and g.device.type == "tpu"
    torch.manual_seed(5)  # seeds the tpu generators too
    assert torch.tpu.initial_seed() == 5


def test_fallback_mode_switch():
    assert torchtpu.fallback_mode() in ("warn", "error", "silent")
    old = torchtpu.fallback_mode()
    try:
        torchtpu.set_fallback_mode("silent")
        assert torchtpu.fallback_mode() == "silent"
    finally:
        torchtpu.set_fallback_mode(old)
    assert isinstance(torchtpu.fallback_counts(), dict)
