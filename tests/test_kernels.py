"""Custom kernels (torchtpu.kernels): JAX functions, Pallas kernels (interpret
mode) and C functions through XLA's FFI as torch ops. Each kernel runs in
strict eager, fused eager and torch.compile(backend="tpu"), forward and
backward against the PyTorch reference (float32, 1e-5); under fused eager and
compile the kernel lies in one program with its neighbours; a second call
compiles nothing; opcheck passes; bad kernels raise naming the kernel."""
import pytest
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu import compile as tpu_compile

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
import torchtpu.kernels as K  # noqa: E402

ATOL = 1e-5


def close(ref, got, what, atol=ATOL):
    got = got.detach().cpu()
    assert ref.shape == got.shape, f"{what}: shape {tuple(ref.shape)} vs {tuple(got.shape)}"
    diff = (ref.detach().double() - got.double()).abs().max().item() if ref.numel() else 0.0
    assert diff <= atol, f"{what}: max abs diff {diff}"


def compiles():
    return torch.tpu._get_cache_stats()["compiles"]


# --- the kernels under test ------------------------------------------------------------------

@K.jax_op("tt_test::sinmul")
def sinmul(a, b):                       # elementwise
    return jnp.sin(a) * b


@K.jax_op("tt_test::rowsumsq")
def rowsumsq(a):                        # a reduction
    return jnp.sum(a * a, axis=-1)


def _flash():
    from torchtpu.kernels.flash_attention import flash_attention
    return flash_attention


def _gmm():
    from torchtpu.kernels.gmm import gmm
    return gmm


def _gmm_ref(lhs, rhs, sizes):
    outs, s = [], 0
    for g in range(rhs.shape[0]):
        n = int(sizes[g])
        outs.append(lhs[s:s + n] @ rhs[g])
        s += n
    outs.append(lhs[s:] @ rhs[0] * 0)
    return torch.cat(outs)


def _rms():
    from torchtpu.kernels.ffi import rmsnorm_example
    return rmsnorm_example()


def _rms_ref(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


# name: (kernel(*tensors), reference(*cpu tensors), inputs (cpu), which require grad)
def cases():
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    c = {
        "jax_elementwise": (lambda a, b: sinmul(torch.tanh(a), b) * 2,
                            lambda a, b: torch.sin(torch.tanh(a)) * b * 2,
                            [r(4, 8), r(4, 8)], [True, True]),
        "jax_reduction": (lambda a: rowsumsq(a * 0.5) + 1,
                          lambda a: (a * 0.5).pow(2).sum(-1) + 1, [r(3, 16)], [True]),
        "pallas_flash_attention": (
            lambda q, k, v: _flash()(q * 1.0, k, v) + 0.5,
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                           enable_gqa=True) + 0.5,
            [r(1, 4, 64, 16), r(1, 2, 64, 16), r(1, 2, 64, 16)], [True, True, True]),
        "pallas_gmm": (
            lambda x, w, s: _gmm()(x * 1.0, w, s) - 1,
            lambda x, w, s: _gmm_ref(x, w, s) - 1,
            [r(64, 16), r(4, 16, 32), torch.tensor([10, 0, 30, 20], dtype=torch.int32)],
            [True, True, False]),
        "c_rmsnorm": (lambda x, w: _rms()(x * 2.0, w) + 1,
                      lambda x, w: _rms_ref(x * 2.0, w) + 1, [r(4, 32), r(32)], [True, True]),
    }
    return c


CASES = cases()
MODES = ["strict", "fused", "compile"]


def run(mode, fn, inputs, seed_grad):
    """Forward + backward of fn on "tpu" in `mode`; returns (out, grads) on the CPU."""
    xs = [x.to("tpu").requires_grad_(rg) for x, rg in zip(*inputs)]
    if mode == "compile":
        fn = torch.compile(fn, backend="tpu")
    ctx = torchtpu.mode("fused") if mode == "fused" else torchtpu.mode("strict")
    with ctx:
        out = fn(*xs)
        out.backward(seed_grad.to("tpu"))
        res = out.detach().cpu(), [x.grad.cpu() if x.grad is not None else None for x in xs]
    return res


pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # conftest.py


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(CASES))
def test_forward_backward(name, mode):
    fn, ref_fn, inputs, needs = CASES[name]
    ref_in = [x.clone().requires_grad_(rg) for x, rg in zip(inputs, needs)]
    ref = ref_fn(*ref_in)
    seed = torch.linspace(-1, 1, ref.numel()).reshape(ref.shape)
    ref.backward(seed)
    out, grads = run(mode, fn, (inputs, needs), seed)
    close(ref, out, f"{name} {mode} forward")
    for i, (x, gr) in enumerate(zip(ref_in, grads)):
        if x.requires_grad:
            close(x.grad, gr, f"{name} {mode} grad of input {i}")
    # A second call compiles nothing.
    before = compiles()
    run(mode, fn, (inputs, needs), seed)
    assert compiles() == before, f"{name} {mode}: the second call compiled {compiles() - before}"
    if mode == "compile":
        st = tpu_compile.stats()
        assert st["capture_failures"] == 0 and st["captures"] >= 2, st


@pytest.mark.parametrize("name", list(CASES))
def test_fused_one_program(name):
    """Neighbours and kernel run as one program in fused eager (no grad)."""
    fn, _, inputs, needs = CASES[name]
    xs = [x.to("tpu") for x in inputs]
    torchtpu.sync()
    with torch.no_grad(), torchtpu.mode("fused"):
        fn(*xs).cpu()  # warm: export and compile
        before = torchtpu.modes.fused_stats()["graphs"]
        c0 = compiles()
        fn(*xs).cpu()
        st = torchtpu.modes.fused_stats()
    assert st["graphs"] - before == 1, st
    assert st["last_graph_ops"] >= 3, st  # a neighbour before, the kernel, one after
    assert compiles() == c0


@pytest.mark.parametrize("name", list(CASES))
def test_compile_one_program(name):
    """Under torch.compile the forward graph (neighbours + kernel) is one
    captured program: one compile, one capture, no fallback."""
    fn, _, inputs, _ = CASES[name]
    xs = [x.to("tpu") for x in inputs]
    cf = torch.compile(fn, backend="tpu")
    with torch.no_grad():
        cf(*xs)
        st = tpu_compile.stats()
        assert st["graphs"] == 1 and st["captures"] == 1 and st["capture_failures"] == 0, st
        c0 = compiles()
        cf(*xs).cpu()
    assert compiles() == c0


def _op_of(name):
    return {"jax_elementwise": torch.ops.tt_test.sinmul.default,
            "jax_reduction": torch.ops.tt_test.rowsumsq.default,
            "pallas_flash_attention": _flash(),
            "pallas_gmm": _gmm(),
            "c_rmsnorm": _rms()}[name]


def _op_inputs(name):
    _, _, inputs, needs = CASES[name]
    if name == "jax_elementwise":
        return inputs, needs
    if name == "jax_reduction":
        return inputs, needs
    return inputs, needs


@pytest.mark.parametrize("name", list(CASES))
def test_opcheck(name):
    """opcheck on "tpu" (its autograd-registration test knows only
    CPU/CUDA/XPU tensors, so that one runs on CPU inputs through the op's CPU
    implementation: JAX on the host)."""
    op = _op_of(name)
    inputs, needs = _op_inputs(name)
    tpu_args = tuple(x.to("tpu").requires_grad_(rg) for x, rg in zip(inputs, needs))
    res = torch.library.opcheck(op, tpu_args, test_utils=(
        "test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    assert all(v == "SUCCESS" for v in res.values()), res
    cpu_args = tuple(x.clone().requires_grad_(rg) for x, rg in zip(inputs, needs))
    res = torch.library.opcheck(op, cpu_args, test_utils=("test_autograd_registration",))
    assert all(v == "SUCCESS" for v in res.values()), res


# --- errors --------------------------------------------------------------------------------

def test_function_that_does_not_export():
    @K.jax_op("tt_test::bad_export")
    def bad(a):
        return jnp.asarray(a.sum() > 0, dtype=jnp.float32) if bool(a.sum() > 0) else a

    x = torch.ones(3, device="tpu")
    with pytest.raises(Exception, match=r"tt_test::bad_export.*(export|eval_shape)"):
        bad(x)
    assert (x + 1).cpu().tolist() == [2.0, 2.0, 2.0]  # still usable


def test_fake_real_shape_mismatch():
    @K.jax_op("tt_test::liar", out_shapes=lambda a: [(a[0], (1,) + tuple(a[1]))])
    def liar(a):
        return a * 2

    x = torch.ones(3, device="tpu")
    with pytest.raises(Exception, match=r"tt_test::liar.*fake implementation gives \(f32\[1,3\]\).*returns \(f32\[3\]\)"):
        liar(x)
    assert (x * 3).cpu().tolist() == [3.0, 3.0, 3.0]


def test_kernel_name_needs_namespace():
    with pytest.raises(K.KernelError, match="namespace"):
        K.jax_op("nonamespace", lambda a: a)


def test_c_kernel_missing_library_and_symbol():
    from torchtpu.kernels.ffi import c_op, example_library
    with pytest.raises(K.KernelError, match=r"tt_test::nolib.*cannot load library /nonexistent/libnope.so"):
        c_op("tt_test::nolib", "/nonexistent/libnope.so", "f", inputs=["x"],
             out_shapes=lambda x: [x])
    with pytest.raises(K.KernelError, match=r"tt_test::nosym.*has no symbol no_such_symbol"):
        c_op("tt_test::nosym", example_library(), "no_such_symbol", inputs=["x"],
             out_shapes=lambda x: [x])
    assert (torch.ones(2, device="tpu") * 2).cpu().tolist() == [2.0, 2.0]


def test_c_kernel_that_fails():
    from torchtpu.kernels.ffi import c_op, example_library
    op = c_op("tt_test::fails", example_library(), "always_fails", inputs=["x"],
              out_shapes=lambda x: [x])
    x = torch.ones(3, device="tpu")
    with pytest.raises(Exception, match=r"C kernel tt_test::fails failed: this kernel always fails"):
        op(x).cpu()
    assert (x + 1).cpu().tolist() == [2.0, 2.0, 2.0]  # still usable


def test_c_kernel_custom_call_in_program():
    """The C kernel is a typed-FFI custom call inside the fused program."""
    rms = _rms()
    x, w = torch.randn(2, 8, device="tpu"), torch.randn(8, device="tpu")
    with torch.no_grad(), torchtpu.mode("fused"):
        (rms(x + 1, w) * 3).cpu()
        st = torchtpu.modes.fused_stats()
    assert st["last_graph_ops"] == 3, st


# --- the kernels in the trainer ----------------------------------------------------------

def _train_cfg(tmp_path, model, steps, **model_overrides):
    from torchtpu.trainer.config import load_config
    m = {"name": model, "flavor": "tiny", "dropout": 0.0}
    m.update(model_overrides)
    return load_config(overrides={
        "job": {"dump_folder": str(tmp_path)},
        "model": m,
        "optimizer": {"lr": 3e-3},
        "lr_scheduler": {"warmup_steps": 2},
        "training": {"device": "tpu", "steps": steps, "local_batch_size": 2, "seq_len": 32,
                     "seed": 0},
        "checkpoint": {"enable": False},
        "metrics": {"log_freq": 1, "peak_flops": 1e9, "plot": False, "progress_bar": False},
    })


def _same_losses(a, b, atol=1e-4):
    assert sorted(a) == sorted(b)
    for step in a:
        assert abs(a[step] - b[step]) <= atol, f"step {step}: {a[step]} vs {b[step]}"


def test_trainer_flash_attention_matches_sdpa(tmp_path):
    """--model.attention flash trains like SDPA (tiny llama, 3 steps here;
    bench/kernels.py --train runs the debug model for 20)."""
    from torchtpu import train as trainer
    quiet = lambda *a, **k: None  # noqa: E731
    sdpa = trainer.train(_train_cfg(tmp_path / "sdpa", "llama", 3), log=quiet)
    flash = trainer.train(_train_cfg(tmp_path / "flash", "llama", 3,
                                     use_splash_attention_kernel=True), log=quiet)
    _same_losses(sdpa["losses"], flash["losses"])


def test_trainer_gmm_matches_bmm(tmp_path):
    from torchtpu import train as trainer
    quiet = lambda *a, **k: None  # noqa: E731
    ref = trainer.train(_train_cfg(tmp_path / "bmm", "moe", 3), log=quiet)
    gmm = trainer.train(_train_cfg(tmp_path / "gmm", "moe", 3, use_gmm_kernel=True), log=quiet)
    _same_losses(ref["losses"], gmm["losses"])
