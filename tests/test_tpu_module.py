"""torch.tpu where CUDA-written code relies on torch.cuda: device properties,
memory statistics with torch.cuda's keys, streams and events with their
ordering and timing semantics, torch.accelerator on "tpu"."""
import gc

import pytest
import torch

import torchtpu  # noqa: F401

# What CUDA-written training code (TorchTitan, transformers, FSDP2, timing
# loops) calls on torch.cuda; each must exist on torch.tpu.
CUDA_NAMES_USED = [
    "is_available", "device_count", "current_device", "set_device", "device",
    "synchronize", "get_device_name", "get_device_properties", "get_device_capability",
    "mem_get_info", "memory_stats", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats", "empty_cache",
    "memory_summary", "Stream", "Event", "stream", "current_stream", "default_stream",
    "set_stream", "StreamContext", "manual_seed", "manual_seed_all", "get_rng_state",
    "set_rng_state", "is_bf16_supported", "OutOfMemoryError", "reset_max_memory_allocated",
    "memory_stats_as_nested_dict", "reset_accumulated_memory_stats", "ipc_collect",
    "is_current_stream_capturing", "get_sync_debug_mode",
]


def test_torch_tpu_has_what_cuda_code_calls():
    missing = [n for n in CUDA_NAMES_USED if not hasattr(torch.tpu, n)]
    assert not missing, missing
    assert set(torch.tpu.__all__) <= set(dir(torch.tpu))
    for n in CUDA_NAMES_USED:
        assert n in dir(torch.cuda), f"{n} is not a torch.cuda name"


def test_device_properties():
    p = torch.tpu.get_device_properties(0)
    assert p.name == torchtpu.runtime_info()["device_kind"]
    assert p.total_memory > 0
    assert isinstance(p.multi_processor_count, int) and p.multi_processor_count >= 1
    assert (p.major, p.minor) == torch.tpu.get_device_capability()
    assert torch.tpu.get_device_properties("tpu").total_memory == p.total_memory
    with pytest.raises(AssertionError, match="Invalid device id"):
        torch.tpu.get_device_properties(torch.tpu.device_count())
    free, total = torch.tpu.mem_get_info()
    assert 0 <= free <= total and total == p.total_memory
    free2, total2 = torch.accelerator.get_memory_info(torch.device("tpu", 0))
    assert total2 == total and 0 <= free2 <= total2


def test_memory_stats_keys_and_values():
    gc.collect()  # tensors left by earlier tests' tracebacks must not be freed mid-test
    torch.tpu.synchronize()
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    before = torch.tpu.memory_stats()  # num_ooms counts since the process started
    x = torch.empty(1024, 256, device="tpu").fill_(1.0)  # 1 MiB, materialised
    torch.tpu.synchronize()
    st = torch.tpu.memory_stats()
    for key in ("active_bytes.all.peak", "reserved_bytes.all.peak", "allocated_bytes.all.current",
                "allocated_bytes.all.peak", "active_bytes.all.current", "requested_bytes.all.current",
                "num_alloc_retries", "num_ooms", "allocation.all.current"):
        assert key in st, key
    assert st["allocated_bytes.all.current"] - base == x.numel() * 4
    assert st["allocated_bytes.all.peak"] >= st["allocated_bytes.all.current"]
    assert st["num_ooms"] == before["num_ooms"] and st["num_alloc_retries"] == 0
    # torch.accelerator reads the same allocator statistics.
    acc = torch.accelerator.memory_stats(torch.device("tpu", 0))
    assert acc["allocated_bytes.all.current"] == st["allocated_bytes.all.current"]
    nested = torch.tpu.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == st["allocated_bytes.all.current"]
    peak = torch.tpu.max_memory_allocated()
    del x
    assert torch.tpu.memory_allocated() == base
    assert torch.tpu.max_memory_allocated() == peak
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == base
    assert "allocated_bytes.all.current" in torch.tpu.memory_summary()


def test_streams_are_distinct_and_current_per_block():
    default = torch.tpu.current_stream()
    assert default == torch.tpu.default_stream() and default.stream_id == 0
    s1, s2 = torch.tpu.Stream(), torch.tpu.Stream()
    assert s1 != s2 and s1 != default
    assert isinstance(s1, torch.tpu.Stream) and not isinstance(torch.Stream(device="cpu"),
                                                               torch.tpu.Stream)
    with torch.tpu.stream(s1):
        assert torch.tpu.current_stream() == s1
        assert torch.accelerator.current_stream() == s1
        with torch.tpu.stream(s2):
            assert torch.tpu.current_stream() == s2
        assert torch.tpu.current_stream() == s1
    assert torch.tpu.current_stream() == default
    with torch.tpu.stream(None):
        assert torch.tpu.current_stream() == default


def test_work_on_a_side_stream_is_ordered_like_cuda():
    # The pattern FSDP2 and overlap code use: produce on a side stream, make
    # the main stream wait, consume; and in-place writes on the main stream
    # after an event the side stream waited for.
    a = torch.randn(64, 64)
    x = a.to("tpu")
    side = torch.tpu.Stream()
    side.wait_stream(torch.tpu.current_stream())
    with torch.tpu.stream(side):
        y = x @ x
        y.add_(1)
        done = side.record_event()
    torch.tpu.current_stream().wait_event(done)
    z = (y * 2).sum(0)
    x.mul_(0)  # after the side stream's reads, in program order
    torch.testing.assert_close(z.cpu(), ((a @ a + 1) * 2).sum(0), atol=1e-3, rtol=1e-4)
    assert done.query() and side.query()
    side.synchronize()
    assert torch.equal(x.cpu(), torch.zeros(64, 64))


def test_event_timing():
    x = torch.randn(256, 256, device="tpu")
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    assert isinstance(start, torch.tpu.Event) and start.query()  # never recorded: done
    start.record()
    for _ in range(20):
        x = torch.tanh(x @ x)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert ms > 0
    assert end.elapsed_time(start) == pytest.approx(-ms)
    plain = torch.tpu.Event()
    plain.record()
    with pytest.raises(ValueError, match="enable_timing"):
        plain.elapsed_time(end)
    # torch.Event on the accelerator is the same thing.
    a, b = torch.Event(device="tpu", enable_timing=True), torch.Event(device="tpu", enable_timing=True)
    a.record()
    b.record()
    assert a.elapsed_time(b) >= 0


def test_accelerator_api():
    assert torch.accelerator.current_accelerator().type == "tpu"
    assert torch.accelerator.device_count() == torch.tpu.device_count()
    assert torch.accelerator.current_stream() == torch.tpu.current_stream()
    torch.accelerator.synchronize()
    s = torch.tpu.Stream()
    torch.accelerator.set_stream(s)
    try:
        assert torch.tpu.current_stream() == s
    finally:
        torch.accelerator.set_stream(torch.tpu.default_stream())


def test_accelerator_device_capability_lists_tpu_dtypes():
    dtypes = torch.accelerator.get_device_capability(torch.device("tpu", 0))["supported_dtypes"]
    for d in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32):
        assert d in dtypes
        assert torch.zeros(2, dtype=d, device="tpu").cpu().dtype == d
    assert (torch.float64 in dtypes) == torchtpu.runtime_info()["supports_f64"]
    assert torch.complex64 in dtypes
    assert torch.zeros(2, dtype=torch.complex64, device="tpu").cpu().dtype == torch.complex64
    assert (torch.complex128 in dtypes) == torchtpu.runtime_info()["supports_f64"]
    assert torch.complex32 not in dtypes


def test_torch_tpu_amp_mirrors_torch_cuda_amp():
    """torch.tpu.amp's autocast, GradScaler, custom_fwd and custom_bwd, as
    code written for torch.cuda.amp uses them; autocast defaults to bfloat16."""
    from torch.tpu.amp import GradScaler, autocast, custom_bwd, custom_fwd
    assert torch.get_autocast_dtype("tpu") == torch.bfloat16
    m = torch.nn.Linear(4, 2).to("tpu")
    x = torch.randn(3, 4, device="tpu")
    with torch.tpu.amp.autocast():
        assert m(x).dtype == torch.bfloat16
    with torch.autocast("tpu"):
        assert m(x).dtype == torch.bfloat16
    with autocast(dtype=torch.float16):
        assert m(x).dtype == torch.float16
    with autocast(enabled=False):
        assert m(x).dtype == torch.float32

    @autocast()
    def forward(inp):
        return m(inp)
    assert forward(x).dtype == torch.bfloat16

    scaler = GradScaler(init_scale=1024.0, growth_interval=1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler.scale(m(x).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 2048.0

    class Twice(torch.autograd.Function):
        @staticmethod
        @custom_fwd(cast_inputs=torch.float32)
        def forward(ctx, t):
            return t * 2

        @staticmethod
        @custom_bwd
        def backward(ctx, g):
            return g * 2

    t = torch.randn(3, device="tpu", dtype=torch.bfloat16, requires_grad=True)
    with autocast():
        out = Twice.apply(t)
    assert out.dtype == torch.float32
    out.sum().backward()
    assert torch.equal(t.grad.float().cpu(), torch.full((3,), 2.0))
