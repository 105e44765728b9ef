"""User code written for CUDA, run unchanged on "tpu": the defects it exposed
(issue 10), each compared with PyTorch's own CPU result.

- model.to("tpu") keeps tied weights tied (_has_compatible_shallow_copy_type);
- dtype= arguments reach the rules (ScalarType? read with its real type);
- integer histc (CUDA's semantics) and grouped_mm with int32 offsets, the
  path transformers' MoE layers take;
- `import torch` alone loads torchtpu (the torch.backends entry point);
- copy.deepcopy of tpu tensors and modules runs on the device afterwards."""
import copy
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import torchtpu


# --- tied weights ---------------------------------------------------------------------


class TiedLM(nn.Module):
    """GPT-2's shape in miniature: the lm_head shares the embedding's weight."""

    def __init__(self, vocab=16, dim=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mid = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.mid(self.emb(ids))))


def test_shallow_copy_type_is_compatible_between_cpu_and_tpu():
    cpu, tpu = torch.zeros(2), torch.zeros(2, device="tpu")
    assert torch._has_compatible_shallow_copy_type(cpu, tpu)
    assert torch._has_compatible_shallow_copy_type(tpu, cpu)
    assert torch._has_compatible_shallow_copy_type(tpu, tpu)
    p = nn.Parameter(torch.zeros(2))
    p.data = tpu  # what Module._apply does; raised before
    assert p.device.type == "tpu" and isinstance(p, nn.Parameter)


def test_to_tpu_keeps_tied_weights_tied():
    torch.manual_seed(0)
    cpu = TiedLM()
    dev = copy.deepcopy(cpu).to("tpu")
    assert dev.head.weight is dev.emb.weight
    assert len(list(dev.parameters())) == len(list(cpu.parameters()))
    ids = torch.randint(0, 16, (3, 5))
    for m, d in ((cpu, "cpu"), (dev, "tpu")):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        m(ids.to(d)).logsumexp(-1).mean().backward()
        opt.step()
    assert dev.head.weight is dev.emb.weight
    torch.testing.assert_close(dev.emb.weight.cpu(), cpu.emb.weight, atol=1e-5, rtol=1e-5)
    # And back: .cpu() keeps them tied too.
    back = dev.cpu()
    assert back.head.weight is back.emb.weight


# --- dtype= arguments -----------------------------------------------------------------

i32 = torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=torch.int32)
bf = torch.tensor([[1.5, -2.25, 3.0], [0.5, 7.0, -1.0]], dtype=torch.bfloat16)
f32 = torch.tensor([[1.5, -2.25, 3.0], [0.5, 7.0, -1.0]])

DTYPE_CASES = {
    "cumsum_i32": (lambda x: torch.cumsum(x, 0, dtype=torch.int32), i32),
    "cumsum_f32": (lambda x: torch.cumsum(x, 1, dtype=torch.float32), bf),
    "cumprod_i32": (lambda x: torch.cumprod(x, 1, dtype=torch.int32), i32),
    "sum_f32": (lambda x: torch.sum(x, dtype=torch.float32), bf),
    "sum_dim_f32": (lambda x: torch.sum(x, 1, dtype=torch.float32), bf),
    "sum_i32": (lambda x: x.sum(dtype=torch.int32), i32),
    "nansum_f32": (lambda x: torch.nansum(x, dtype=torch.float32), bf),
    "mean_f32": (lambda x: torch.mean(x, dtype=torch.float32), bf),
    "mean_dim_f32": (lambda x: torch.mean(x, 0, dtype=torch.float32), bf),
    "prod_i32": (lambda x: torch.prod(x, dtype=torch.int32), i32),
    "prod_dim_i32": (lambda x: torch.prod(x, 1, dtype=torch.int32), i32),
    "softmax_f32": (lambda x: torch.softmax(x, -1, dtype=torch.float32), bf),
    "log_softmax_f32": (lambda x: torch.log_softmax(x, -1, dtype=torch.float32), bf),
    "vector_norm_f32": (lambda x: torch.linalg.vector_norm(x, dtype=torch.float32), bf),
    "vector_norm_dim_f32": (lambda x: torch.linalg.vector_norm(x, 2, 1, dtype=torch.float32), bf),
    "sum_f32_to_bf16": (lambda x: torch.sum(x, 1, dtype=torch.bfloat16), f32),
    "full_like_i32": (lambda x: torch.full_like(x, 3, dtype=torch.int32), f32),
    "zeros_like_bf16": (lambda x: torch.zeros_like(x, dtype=torch.bfloat16), f32),
    "ones_like_i16": (lambda x: torch.ones_like(x, dtype=torch.int16), f32),
    "new_full_i32": (lambda x: x.new_full((2,), 5, dtype=torch.int32), f32),
    "to_f16": (lambda x: x.to(dtype=torch.float16), f32),
    "arange_i32": (lambda x: torch.arange(4, device=x.device, dtype=torch.int32), f32),
    "full_bf16": (lambda x: torch.full((2,), 1.5, device=x.device, dtype=torch.bfloat16), f32),
}


@pytest.mark.parametrize("name", sorted(DTYPE_CASES))
def test_dtype_argument_is_honoured(name, no_fallback):
    fn, x = DTYPE_CASES[name]
    want = fn(x)
    got = fn(x.to("tpu"))
    assert got.device.type == "tpu"
    assert got.dtype == want.dtype, f"{name}: {got.dtype} on tpu, {want.dtype} on the CPU"
    torch.testing.assert_close(got.cpu(), want, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax])
def test_softmax_backward_input_dtype(fn, no_fallback):
    # _softmax_backward_data(..., ScalarType input_dtype) gives the input's dtype.
    grads = []
    for device in ("cpu", "tpu"):
        x = bf.clone().to(device).requires_grad_()
        y = fn(x, -1, dtype=torch.float32)
        assert y.dtype == torch.float32
        (y * torch.arange(3.0, device=device)).sum().backward()
        grads.append(x.grad)
    assert grads[1].dtype == grads[0].dtype == torch.bfloat16
    torch.testing.assert_close(grads[1].cpu(), grads[0], atol=1e-2, rtol=1e-2)


def test_memory_format_argument_is_honoured(no_fallback):
    x = torch.randn(2, 3, 4, 4)
    want = x.clone(memory_format=torch.channels_last)
    got = x.to("tpu").clone(memory_format=torch.channels_last)
    assert got.stride() == want.stride()
    assert got.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(got.cpu(), want)
    e = torch.empty_like(x.to("tpu"), memory_format=torch.channels_last)
    assert e.stride() == torch.empty_like(x, memory_format=torch.channels_last).stride()


# --- integer histc, grouped_mm --------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_histc_of_integers_follows_cuda(dtype, no_fallback):
    # The CPU has no integer histc; CUDA counts in the input's dtype. For
    # integers the bin index (x - min) * bins / (max - min) is exact in both
    # integer and float arithmetic, so the CPU's float histc is the reference.
    x = torch.tensor([0, 1, 1, 3, 5, 2, 7, 7, 0, 4])
    if dtype != torch.uint8:
        x = torch.cat([x, torch.tensor([-1, -3])])
    x = x.to(dtype)
    for bins, lo, hi in ((4, 0, 3), (8, 0, 7), (3, 0, 0), (5, 1, 6)):
        want = torch.histc(x.float(), bins=bins, min=lo, max=hi).to(dtype)
        got = torch.histc(x.to("tpu"), bins=bins, min=lo, max=hi)
        assert got.dtype == dtype
        assert torch.equal(got.cpu(), want), (bins, lo, hi)


def test_histc_rejects_bad_input_clearly():
    with pytest.raises(RuntimeError, match="histc.*bool"):
        torch.histc(torch.tensor([True, False], device="tpu"), bins=3)
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histc(torch.tensor([1.0], device="tpu"), bins=0)


def test_moe_routing_path_of_transformers(no_fallback):
    # transformers' grouped_mm experts: histc of int32 expert ids, cumsum to
    # int32 offsets, then grouped_mm; on CPU the ids go through float.
    torch.manual_seed(0)
    experts, tokens, dim = 4, 10, 8
    ids = torch.randint(0, experts, (tokens,), dtype=torch.int32)
    x = torch.randn(tokens, dim)
    w = torch.randn(experts, dim, dim)
    order = torch.argsort(ids, stable=True)

    def route(ids, x, w, float_histc):
        h = torch.histc(ids.float() if float_histc else ids, bins=experts, min=0, max=experts - 1)
        offs = torch.cumsum(h, 0, dtype=torch.int32)
        assert offs.dtype == torch.int32
        return torch._grouped_mm(x[order.to(x.device)], w, offs=offs)

    want = route(ids, x, w, True)
    got = route(ids.to("tpu"), x.to("tpu"), w.to("tpu"), False)
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)


# --- deepcopy -------------------------------------------------------------------------


def test_deepcopy_of_tpu_tensors_and_modules_stays_on_device():
    torchtpu.set_fallback_mode("warn")
    before = sum(torchtpu.fallback_counts().values())
    t = torch.randn(5, device="tpu")
    t2 = copy.deepcopy(t)
    assert t2.dtype == t.dtype and t2.device == t.device
    torch.testing.assert_close((t2 * 2).cpu(), t.cpu() * 2)
    bn = nn.BatchNorm1d(3).to("tpu")
    bn2 = copy.deepcopy(bn)
    x = torch.randn(4, 3)
    torch.testing.assert_close(bn2(x.to("tpu")).cpu(), copy.deepcopy(bn).cpu()(x),
                               atol=1e-5, rtol=1e-5)
    assert sum(torchtpu.fallback_counts().values()) == before


def test_views_of_another_element_size_read_and_write_the_bytes(no_fallback):
    want = torch.arange(6, dtype=torch.float32)
    x = want.to("tpu")
    assert torch.equal(x.view(torch.uint8).cpu(), want.view(torch.uint8))
    assert torch.equal(x.view(torch.int16).cpu(), want.view(torch.int16))
    x.view(torch.uint8)[8:12] = torch.tensor([0, 0, 128, 63], dtype=torch.uint8).to("tpu")
    want.view(torch.uint8)[8:12] = torch.tensor([0, 0, 128, 63], dtype=torch.uint8)
    torch.testing.assert_close((x + 1).cpu(), want + 1)
    import io
    buf = io.BytesIO()
    w = torch.randn(3, 4)
    torch.save({"w": w}, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location="tpu")["w"]
    torch.testing.assert_close((loaded @ loaded.T).cpu(), w @ w.T)


# --- autoload -------------------------------------------------------------------------


def _run(code, **env):
    e = dict(os.environ)
    e.update(env)
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


def _declared_entry_point():
    import tomllib
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    return project["entry-points"]["torch.backends"]["tpu"]


def test_import_torch_alone_loads_torchtpu(tmp_path):
    # The entry point pyproject.toml declares, as an installed distribution's
    # metadata on the path (an editable install of another checkout may
    # predate it), in a fresh process that never imports torchtpu.
    value = _declared_entry_point()
    assert value == "torchtpu._autoload:autoload"
    info = tmp_path / "torchtpu_autoload_check-0.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torchtpu-autoload-check\n"
                                   "Version: 0.0.0\n")
    (info / "entry_points.txt").write_text(f"[torch.backends]\ntpu = {value}\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join([root, str(tmp_path), os.environ.get("PYTHONPATH", "")])
    out = _run("import torch, sys; x = torch.ones(2, device='tpu') * 3; "
               "print(x.device, x.cpu().tolist(), torch.tpu.is_available(), "
               "torch.accelerator.current_accelerator())", PYTHONPATH=path)
    assert out == "tpu:0 [3.0, 3.0] True tpu"
    off = _run("import torch, sys; print('torchtpu' in sys.modules)", PYTHONPATH=path,
               TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert off == "False"


# --- torch.compile's default backend -----------------------------------------------------


def test_compile_default_backend_on_tpu_tensors(no_fallback):
    # Inductor's own "tpu" (Pallas) device would fail with "No module named
    # 'torch_tpu'"; graphs on tpu tensors go to the "tpu" backend.
    torch.manual_seed(0)
    torch._dynamo.reset()
    m = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    dev = copy.deepcopy(m).to("tpu")
    x = torch.randn(3, 4)
    before = torchtpu.compile.stats()["graphs"]
    compiled = torch.compile(dev)
    got = compiled(x.to("tpu"))
    got.sum().backward()
    m(x).sum().backward()
    assert torchtpu.compile.stats()["graphs"] > before
    torch.testing.assert_close(got.cpu(), m(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dev[0].weight.grad.cpu(), m[0].weight.grad, atol=1e-5, rtol=1e-5)


def test_compile_modes_and_options():
    torch._dynamo.reset()
    f = lambda a: torch.sin(a) * 2  # noqa: E731
    x = torch.randn(5)
    # Each ignored setting is named once per process: forget what earlier
    # tests (transformers' static-cache compile) already warned about.
    torchtpu.compile._warned_options.clear()
    with pytest.warns(UserWarning, match="no effect"):
        got = torch.compile(f, mode="reduce-overhead")(x.to("tpu"))
    torch.testing.assert_close(got.cpu(), f(x))
    torch._dynamo.reset()
    got = torch.compile(f, backend="tpu", mode="max-autotune")(x.to("tpu"))
    torch.testing.assert_close(got.cpu(), f(x))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown mode 'fastest'"):
        torch.compile(f, backend="tpu", mode="fastest")(x.to("tpu"))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown options.*'bogus'"):
        torch.compile(f, backend="tpu", options={"bogus": 1})(x.to("tpu"))
    with pytest.raises(RuntimeError, match="Unexpected optimization option bogus"):
        torch.compile(f, options={"bogus": 1})
    # CPU graphs keep Inductor.
    torch._dynamo.reset()
    before = torchtpu.compile.stats()["graphs"]
    torch.testing.assert_close(torch.compile(f)(x), f(x))
    assert torchtpu.compile.stats()["graphs"] == before


# --- fused optimizers, _assert_async --------------------------------------------------------


@pytest.mark.parametrize("opt_name,kw", [
    ("AdamW", {}), ("AdamW", {"amsgrad": True}), ("AdamW", {"maximize": True}),
    ("Adam", {"weight_decay": 0.1}), ("AdamW", {"lr": "tensor"}),
])
def test_fused_adam_runs_natively(opt_name, kw, no_fallback):
    torch.manual_seed(0)
    kw = dict(kw)
    ps = [torch.randn(5, 3), torch.randn(7)]
    grads = [[torch.randn_like(p) for p in ps] for _ in range(3)]
    finals = []
    for device in ("cpu", "tpu"):
        params = [p.clone().to(device).requires_grad_() for p in ps]
        lr = torch.tensor(1e-2, device=device) if kw.get("lr") == "tensor" else 1e-2
        opts = {k: v for k, v in kw.items() if k != "lr"}
        opt = getattr(torch.optim, opt_name)(params, lr=lr, fused=True, **opts)
        for step in grads:
            for p, g in zip(params, step):
                p.grad = g.to(device)
            opt.step()
        finals.append(([p.detach().cpu() for p in params],
                       [s["exp_avg_sq"].cpu() for s in opt.state.values()]))
    for a, b in zip(finals[1][0] + finals[1][1], finals[0][0] + finals[0][1]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_fused_adamw_with_grad_scaler_skips_inf_steps(no_fallback):
    # found_inf == 1 leaves params and state untouched; grad_scale unscales.
    p_cpu = torch.randn(4)
    for device in ("cpu", "tpu"):
        p = p_cpu.clone().to(device)
        g = torch.full_like(p, 8.0)
        m, v = torch.zeros_like(p), torch.zeros_like(p)
        step = torch.tensor(1.0, device=device)
        scale = torch.tensor(4.0, device=device)
        for found in (1.0, 0.0):
            torch._fused_adamw_([p], [g], [m], [v], [], [step], lr=0.1, beta1=0.9, beta2=0.999,
                                weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False,
                                grad_scale=scale, found_inf=torch.tensor(found, device=device))
            if found == 1.0:
                assert torch.equal(p.cpu(), p_cpu) and torch.equal(m.cpu(), torch.zeros(4))
        if device == "cpu":
            want = (p.clone(), g.clone(), m.clone(), v.clone())
        else:
            for a, b in zip((p, g, m, v), want):
                torch.testing.assert_close(a.cpu(), b, atol=1e-6, rtol=1e-6)


def test_assert_async(no_fallback):
    torch._assert_async(torch.tensor(1, device="tpu"))
    torch._assert_async(torch.tensor(0.5, device="tpu"), "unused")
    with pytest.raises(RuntimeError, match="single nonzero value, but got zero"):
        torch._assert_async(torch.tensor(0, device="tpu"))
    with pytest.raises(RuntimeError, match="my message"):
        torch._assert_async(torch.tensor(False, device="tpu"), "my message")
    with pytest.raises(RuntimeError, match="more than one value"):
        torch._assert_async(torch.ones(2, device="tpu"))
