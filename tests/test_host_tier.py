"""The host tier and background compiles (strict eager's answer to first runs
and new shapes; torchtpu.set_host_tier).

A new op signature's first calls run with PyTorch's CPU kernels on host
copies while its program compiles in the background; once ready, the
signature runs on the device. Every result here is compared with PyTorch's
own CPU result, across the switch from the host to the device: sizes around
edges (1, 63, 64, 65, ...), each called several times so that the same call
runs on the host first and on the device later (torchtpu.wait_compiles()
in between). Also: what the tier must not take (random ops, unmarked
writes, large calls, debug and fused eager), writes through views, the
counters, memory, and exit with compiles still queued.

The rest of the suite runs with the tier off (tests/conftest.py)."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu import _core


@pytest.fixture(autouse=True)
def tier_on():
    prev = torchtpu.host_tier()
    torchtpu.set_host_tier(compile_after=2, max_bytes=4 << 20)
    yield
    torchtpu.wait_compiles()
    torchtpu.set_host_tier(*prev)


def stats():
    return _core.stats()


def host_then_device(fn, *inputs, atol=1e-5, rtol=1e-5, calls=3):
    """Runs fn on tpu copies of `inputs` `calls` times, waiting for the
    background compiles before the last call, and checks each result against
    the CPU. Returns how many of the calls ran on the host."""
    cpu = fn(*inputs)
    dev_in = [x.to("tpu") if isinstance(x, torch.Tensor) else x for x in inputs]
    host0 = stats()["host_calls"]
    for i in range(calls):
        if i == calls - 1:
            torchtpu.wait_compiles()
        out = fn(*dev_in)
        outs_c = cpu if isinstance(cpu, tuple) else (cpu,)
        outs_d = out if isinstance(out, tuple) else (out,)
        for c, d in zip(outs_c, outs_d):
            assert d.device.type == "tpu"
            assert d.dtype == c.dtype and d.shape == c.shape
            torch.testing.assert_close(d.cpu(), c, atol=atol, rtol=rtol, equal_nan=True)
    return stats()["host_calls"] - host0


SIZES = [1, 2, 63, 64, 65, 127, 128, 129]

OPS = {
    "add": lambda x, y: x + y * 0.5,
    "gelu": lambda x, y: F.gelu(x) - y,
    "sum": lambda x, y: x.sum(-1) + y.sum(-1),
    "mean_dim0": lambda x, y: (x * y).mean(0),
    "max": lambda x, y: torch.max(x, dim=-1),
    "softmax": lambda x, y: x.softmax(-1),
    "log_softmax": lambda x, y: F.log_softmax(x, dim=0),
    "matmul": lambda x, y: x @ y.T,
    "layer_norm": lambda x, y: F.layer_norm(x, x.shape[-1:]),
    "cumsum": lambda x, y: x.cumsum(-1),
    "cat": lambda x, y: torch.cat([x, y, x[:1]], 0),
    "sort": lambda x, y: torch.sort(x, dim=-1),
    "where": lambda x, y: torch.where(x > 0, x, y),
    "index_select": lambda x, y: x.index_select(0, torch.arange(x.shape[0]).flip(0).to(x.device)),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_ops_across_sizes_host_then_device(name):
    fn = OPS[name]
    hosted = 0
    for n in SIZES:
        x, y = torch.randn(n, 8), torch.randn(n, 8)
        if name in ("matmul",):
            x, y = torch.randn(n, 16), torch.randn(n, 16)
        hosted += host_then_device(fn, x, y)
    assert hosted > 0  # the first calls of each size ran on the host


def test_attention_and_embedding_across_lengths():
    emb = torch.nn.Embedding(50, 16)
    emb_t = torch.nn.Embedding(50, 16).to("tpu")
    emb_t.load_state_dict(emb.state_dict())
    for length in (1, 7, 8, 9, 31, 32, 33):
        ids = torch.randint(0, 50, (2, length))
        for i in range(3):
            if i == 2:
                torchtpu.wait_compiles()
            q = emb(ids).view(2, length, 2, 8).transpose(1, 2)
            qt = emb_t(ids.to("tpu")).view(2, length, 2, 8).transpose(1, 2)
            ref = F.scaled_dot_product_attention(q, q, q, is_causal=True)
            out = F.scaled_dot_product_attention(qt, qt, qt, is_causal=True)
            torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-5)


def test_a_signature_used_once_never_compiles():
    s0 = stats()
    x = torch.randn(37, 5).to("tpu")
    y = (x * 3).cpu()
    s1 = stats()
    torch.testing.assert_close(y, x.cpu() * 3)
    assert s1["host_calls"] > s0["host_calls"]
    assert s1["compiles"] + s1["compiles_pending"] == s0["compiles"] + s0["compiles_pending"]


def test_hot_signature_moves_to_the_device():
    x = torch.randn(41, 3).to("tpu")
    for _ in range(3):
        (x - 1).cpu()
    torchtpu.wait_compiles()
    s0 = stats()
    for _ in range(5):
        (x - 1).cpu()
    s1 = stats()
    assert s1["host_calls"] == s0["host_calls"]
    assert s1["op_calls"] > s0["op_calls"]
    assert s1["background_compiles"] >= 1


def test_in_place_and_out_through_views():
    base = torch.randn(6, 9)
    t = base.to("tpu")
    for i in range(3):
        if i == 2:
            torchtpu.wait_compiles()
        base[:, 2:5].mul_(2).add_(1)
        t[:, 2:5].mul_(2).add_(1)
        out_c, out_t = torch.empty(6, 3), torch.empty(6, 3, device="tpu")
        torch.add(base[:, :3], 1, out=out_c)
        torch.add(t[:, :3], 1, out=out_t)
        torch.testing.assert_close(t.cpu(), base)
        torch.testing.assert_close(out_t.cpu(), out_c)


def test_batch_norm_running_stats_are_written():
    """native_batch_norm writes running_mean/var without saying so in its
    schema: it must not run on the host tier."""
    bn, bn_t = torch.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4).to("tpu")
    for n in (2, 3):
        x = torch.randn(n, 4, 5, 5)
        bn(x), bn_t(x.to("tpu"))
        torch.testing.assert_close(bn_t.running_mean.cpu(), bn.running_mean)
        torch.testing.assert_close(bn_t.running_var.cpu(), bn.running_var)


def test_random_ops_stay_on_the_device_generator():
    """A seed gives the same draws whether a signature is cold or warm."""
    def draws():
        torch.manual_seed(3)
        x = torch.ones(17, 3, device="tpu")
        return F.dropout(x, 0.5).cpu(), torch.rand(17, 3, device="tpu").cpu()
    first = draws()
    torchtpu.wait_compiles()
    second = draws()
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def test_cpu_kernel_refusal_runs_on_the_device():
    """convolution_overrideable's CPU kernel only raises: the call compiles
    and runs on the device instead."""
    conv = torch.nn.Conv2d(3, 4, 3)
    conv_t = torch.nn.Conv2d(3, 4, 3).to("tpu")
    conv_t.load_state_dict(conv.state_dict())
    x = torch.randn(1, 3, 9, 7)
    torch.testing.assert_close(conv_t(x.to("tpu")).cpu(), conv(x), atol=1e-5, rtol=1e-5)


def test_large_calls_compile_at_once():
    torchtpu.set_host_tier(max_bytes=1024)
    s0 = stats()
    x = torch.randn(64, 64).to("tpu")
    torch.testing.assert_close((x.exp()).cpu(), x.cpu().exp())
    s1 = stats()
    assert s1["compiles"] > s0["compiles"]
    assert s1["host_calls"] == s0["host_calls"]


def test_a_slice_of_a_large_storage_counts_the_storage():
    """The host tier would copy the whole storage, not the slice."""
    torchtpu.set_host_tier(max_bytes=64 << 10)
    table = torch.randn(64 << 10)  # 256 KiB
    t = table.to("tpu")
    s0 = stats()
    torch.testing.assert_close((t[:5] * 3).cpu(), table[:5] * 3)
    assert stats()["host_calls"] == s0["host_calls"]
    small = torch.randn(5).to("tpu")
    (small * 3).cpu()
    assert stats()["host_calls"] == s0["host_calls"] + 1


@pytest.mark.parametrize("mode", ["debug", "fused"])
def test_debug_and_fused_never_use_the_host(mode):
    x = torch.randn(23, 3).to("tpu")
    s0 = stats()
    with torchtpu.mode(mode):
        y = (x * 2 + 1).relu()
    torch.testing.assert_close(y.cpu(), (x.cpu() * 2 + 1).relu())
    assert stats()["host_calls"] == s0["host_calls"]


def test_errors_are_pytorchs():
    x = torch.randn(5, 3).to("tpu")
    with pytest.raises(IndexError):
        torch.nn.functional.embedding(torch.tensor([7]).to("tpu"), x)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        x @ torch.randn(4, 2).to("tpu")


def test_training_matches_the_cpu_and_the_device_path():
    """A small MLP trained on batches of 12 different sizes: losses per step
    equal the CPU's, and the device-only path's (tier off) to 1e-5."""
    def train(device, compile_after):
        if device == "tpu":
            torchtpu.set_host_tier(compile_after=compile_after)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(),
                                    torch.nn.LayerNorm(32), torch.nn.Linear(32, 3)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(1)
        losses = []
        for step in range(12):
            n = 3 + 5 * step
            x, y = torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g)
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses
    ref = train("cpu", None)
    tier = train("tpu", 2)
    device = train("tpu", 0)
    for a, b, c in zip(ref, tier, device):
        assert abs(a - b) <= 1e-5 * abs(a)
        assert abs(c - b) <= 1e-5 * abs(c)


def test_no_device_memory_leaks():
    x = torch.randn(19, 7).to("tpu")
    (x * 2).sum().cpu()
    torchtpu.wait_compiles()
    before = stats()["bytes_in_use"]
    for n in range(1, 30):
        y = torch.cat([x[:n % 19 + 1], x], 0).softmax(-1)
        y.sum().cpu()
        del y
    assert stats()["bytes_in_use"] == before


def test_exit_with_compiles_queued():
    """The process exits cleanly while the background compiler has work."""
    code = textwrap.dedent("""
        import torch, torchtpu
        torchtpu.set_host_tier(compile_after=1)
        x = torch.randn(3, 3).to("tpu")
        for n in range(1, 60):
            y = torch.randn(n, 3).to("tpu")
            (y @ x).tanh().sum().cpu()
        print("pending", torchtpu._core.stats()["compiles_pending"] > 0)
    """)
    env = dict(os.environ, TORCHTPU_CACHE_DIR="off")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "pending" in p.stdout


@pytest.mark.parametrize("name,value", [("TORCHTPU_COMPILE_AFTER", "soon"),
                                        ("TORCHTPU_HOST_TIER_MAX_BYTES", "big"),
                                        ("TORCHTPU_OP_OPT_LEVEL", "9")])
def test_bad_settings_raise(name, value):
    env = dict(os.environ, **{name: value})
    p = subprocess.run([sys.executable, "-c", "import torchtpu"], capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode != 0
    assert name in p.stderr


def test_generate_tokens_match_the_cpu():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, num_attention_heads=4,
                                   num_key_value_heads=2, num_hidden_layers=2,
                                   intermediate_size=64, max_position_embeddings=128)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (1, 5))
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=24, min_new_tokens=24, do_sample=False)
        s0 = stats()
        out = model.to("tpu").generate(ids.to("tpu"), max_new_tokens=24, min_new_tokens=24,
                                       do_sample=False)
    assert torch.equal(out.cpu(), ref)
    assert stats()["host_calls"] > s0["host_calls"]


def test_explainer_names_the_shape_of_a_background_compile(capfd):
    """A background compile is explained by what differed when the call was
    lowered (the new shape), not by a diff of the call with itself."""
    before = _core.recompile_causes()
    torchtpu.explain_recompiles(True)
    try:
        for rows in (37, 38):
            x = torch.randn(rows, 11).to("tpu")
            for i in range(3):
                if i == 2:
                    torchtpu.wait_compiles()
                torch.atan2(x, x + 1)
        torch.tpu.synchronize()
    finally:
        torchtpu.explain_recompiles(False)
    err = capfd.readouterr().err
    line = [ln for ln in err.splitlines() if "aten::atan2" in ln and "[37, 11] -> [38, 11]" in ln]
    assert line and "times on the host first" in line[0], err
    after = _core.recompile_causes()
    assert after.get("storage", 0) == before.get("storage", 0), (before, after)


# --- host copies: the host tier's values stay on the host until a program reads them ---------

def _device_only():
    """The tier off for a block: every op runs a compiled program."""
    import contextlib

    @contextlib.contextmanager
    def block():
        prev = torchtpu.host_tier()
        torchtpu.set_host_tier(compile_after=0)
        try:
            yield
        finally:
            torchtpu.set_host_tier(*prev)
    return block()


def test_a_chain_of_host_calls_moves_nothing_to_the_device():
    x = torch.randn(5, 1229)  # a shape no other test uses: a compiled signature runs on the device
    d = x.to("tpu")
    torch.tpu.synchronize()
    s0 = stats()
    y = ((d * 3) + 1).tanh()  # three cold signatures: the host's
    s1 = stats()
    assert s1["host_calls"] == s0["host_calls"] + 3
    assert s1["host_to_device_bytes"] == s0["host_to_device_bytes"]
    assert s1["device_to_host_bytes"] - s0["device_to_host_bytes"] <= x.numel() * 4
    assert s1["bytes_in_use"] == s0["bytes_in_use"]  # y holds no device memory yet
    assert s1["host_copy_bytes"] > s0["host_copy_bytes"]
    torch.testing.assert_close(y.cpu(), ((x * 3) + 1).tanh())
    torch.testing.assert_close(y[2, 1:4].cpu(), ((x * 3) + 1).tanh()[2, 1:4])
    with _device_only():  # a program reads y: uploaded then
        z = y.sin()
    assert stats()["host_to_device_bytes"] > s1["host_to_device_bytes"]
    torch.testing.assert_close(z.cpu(), ((x * 3) + 1).tanh().sin())


def test_a_host_copy_follows_every_write():
    x = torch.randn(6, 4)
    y = torch.sigmoid(x.to("tpu"))  # on the host
    ref = torch.sigmoid(x)
    torch.testing.assert_close(y[1].cpu(), ref[1])
    with _device_only():
        y.add_(1)  # a device write replaces the value
    ref.add_(1)
    torch.testing.assert_close(y.cpu(), ref)
    y.mul_(2)  # a cold write: the whole storage's new value, on the host
    ref.mul_(2)
    torch.testing.assert_close(y.cpu(), ref)
    with _device_only():
        torch.testing.assert_close(y.sum(0).cpu(), ref.sum(0))
    y[0] = 5.0  # a host write into part of the storage
    ref[0] = 5.0
    torch.testing.assert_close(y.cpu(), ref)
    w = torch.exp(x.to("tpu"))  # on the host, then grown
    w.resize_(40)
    torch.testing.assert_close(w[:24].cpu(), torch.exp(x).reshape(-1))


def test_cold_writes_through_views_keep_the_rest_of_the_storage():
    base = torch.randn(4, 6)
    big = base.to("tpu")
    big[1:3, 2:5].add_(1)  # cold, a view of a device storage
    base[1:3, 2:5].add_(1)
    torch.testing.assert_close(big.cpu(), base)
    out = torch.empty(3, 2).to("tpu")
    torch.mul(big[:3, :2], 2, out=out)
    torch.testing.assert_close(out.cpu(), base[:3, :2] * 2)
    with _device_only():
        torch.testing.assert_close((big * 1).cpu(), base)


@pytest.mark.parametrize("reader", ["fused", "compile", "graph", "copy"])
def test_every_executor_reads_a_host_value(reader):
    x = torch.randn(9, 5)
    y = torch.cos(x.to("tpu"))  # on the host
    ref = torch.cos(x) * 2 + 1

    def f(t):
        return t * 2 + 1

    if reader == "fused":
        with torchtpu.mode("fused"):
            out = f(y)
    elif reader == "compile":
        out = torch.compile(f, backend="tpu")(y)
    elif reader == "graph":
        static_in = torch.cos(x.to("tpu"))  # a host value as the capture's input
        g = torch.tpu.TPUGraph()
        with torch.tpu.graph(g):
            static_out = f(static_in)
        g.replay()
        out = static_out
    else:
        out = y.to("tpu:0", copy=True)
        ref = torch.cos(x)
    torch.testing.assert_close(out.cpu(), ref)


def test_host_copies_are_freed_with_their_storages():
    torch.tpu.synchronize()
    base = stats()
    for n in range(1, 20):
        a = torch.randn(n, 3).to("tpu")
        b = (a * 2).softmax(-1)  # cold: a is read (a cached copy), b on the host
        b[0].cpu()
        del a, b
    s = stats()
    assert s["host_copy_bytes"] == base["host_copy_bytes"]
    assert s["bytes_in_use"] == base["bytes_in_use"]


def test_storages_never_written_stay_without_a_value():
    """A cold call or a partial read of a storage nothing wrote yet keeps no
    host copy of its implicit zeros: a device program then still sees the
    storage's real size (it saw a 0-element value before)."""
    x = torch.empty(3, device="tpu")
    torch.testing.assert_close((x + 1).cpu(), x.cpu() + 1)  # cold
    z = torch.empty(2, 3, device="tpu")
    z[1].cpu()  # a partial read
    with _device_only():
        torch.testing.assert_close((x * 1).cpu(), x.cpu())
        torch.testing.assert_close((z * 1).cpu(), z.cpu())


def test_a_partial_write_into_a_host_value_stays_on_the_host():
    # a shape no other test uses: a signature compiled earlier in the process
    # (or in the persistent cache) would run on the device and leave no host value
    x = torch.randn(4, 1237)
    s0 = stats()
    y = torch.tanh(x.to("tpu"))  # a host value
    assert stats()["host_calls"] == s0["host_calls"] + 1
    s0 = stats()
    y[2, 1:3] = torch.tensor([7.0, 8.0])
    ref = torch.tanh(x)
    ref[2, 1:3] = torch.tensor([7.0, 8.0])
    assert stats()["host_to_device_bytes"] == s0["host_to_device_bytes"]
    torch.testing.assert_close(y.cpu(), ref)
    with _device_only():
        torch.testing.assert_close((y * 2).cpu(), ref * 2)
