"""Training semantics on "tpu", each against the same computation on the CPU:
autograd through the Llama and MoE models, every optimizer (SGD with momentum
and Nesterov, Adam, AdamW; foreach and single-tensor), clip_grad_norm_, LR
schedulers, torch.autocast("tpu", bfloat16), torch.manual_seed, torch.save /
torch.load of state dicts (map_location="tpu"), .to("tpu"), .bfloat16(),
.half()."""
import copy
import io

import pytest
import torch
import torch.nn.functional as F

import torchtpu  # noqa: F401
from torchtpu.models import build_model


@pytest.fixture(autouse=True)
def _quiet_fallbacks():
    mode = torchtpu.fallback_mode()
    torchtpu.set_fallback_mode("silent")
    yield
    torchtpu.set_fallback_mode(mode)


def batch(n=2, s=16, vocab=258, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (n, s + 1), generator=g)
    return x[:, :-1], x[:, 1:]


def lm_loss(model, x, y):
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    aux = model.aux_loss()
    return loss if aux is None else loss + aux


def tiny(name="llama"):
    torch.manual_seed(0)
    return build_model(name, "tiny")


# --- autograd -----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["llama", "moe"])
def test_gradients_match_cpu(name):
    model = tiny(name)
    x, y = batch()
    grads = {}
    for dev in ("cpu", "tpu"):
        m = copy.deepcopy(model).to(dev)
        loss = lm_loss(m, x.to(dev), y.to(dev))
        loss.backward()
        grads[dev] = (loss.item(), {k: p.grad.cpu() for k, p in m.named_parameters()})
    assert abs(grads["cpu"][0] - grads["tpu"][0]) <= 1e-5 * abs(grads["cpu"][0])
    for k, g in grads["cpu"][1].items():
        torch.testing.assert_close(grads["tpu"][1][k], g, atol=1e-6, rtol=1e-4, msg=k)


# --- optimizers, clipping, schedulers -----------------------------------------------

OPTIMIZERS = {
    "sgd_momentum": lambda p, fe: torch.optim.SGD(p, lr=0.05, momentum=0.9, foreach=fe),
    "sgd_nesterov": lambda p, fe: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True,
                                                  weight_decay=0.01, foreach=fe),
    "adam": lambda p, fe: torch.optim.Adam(p, lr=3e-3, foreach=fe),
    "adamw": lambda p, fe: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.1, foreach=fe),
}


def run_steps(model, dev, make_opt, steps=3, clip=1.0, foreach=None):
    m = copy.deepcopy(model).to(dev)
    opt = make_opt(m.parameters())
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=1),
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)], milestones=[1])
    out = []
    for i in range(steps):
        x, y = batch(seed=i)
        opt.zero_grad()
        loss = lm_loss(m, x.to(dev), y.to(dev))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(m.parameters(), clip, foreach=foreach)
        opt.step()
        sched.step()
        out.append((loss.item(), norm.item(), sched.get_last_lr()[0]))
    return out, m, opt


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "single_tensor"])
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_optimizer_parity(opt, foreach):
    model = tiny()
    make = lambda p: OPTIMIZERS[opt](p, foreach)  # noqa: E731
    cpu, mc, oc = run_steps(model, "cpu", make, foreach=foreach)
    tpu, mt, ot = run_steps(model, "tpu", make, foreach=foreach)
    for step, (c, t) in enumerate(zip(cpu, tpu)):
        assert abs(c[0] - t[0]) <= 1e-4 * abs(c[0]), f"{opt} step {step}: loss {c} vs {t}"
        assert abs(c[1] - t[1]) <= 1e-4 * abs(c[1]), f"{opt} step {step}: norm {c} vs {t}"
        assert c[2] == t[2]  # the schedule is host arithmetic
    # Adam's step is lr * m / sqrt(v): where a gradient is ~0, rounding
    # differences in it move the step by up to a few % of lr (3e-3).
    atol = 1e-4 if opt.startswith("adam") else 1e-5
    for (k, pc), pt in zip(mc.named_parameters(), mt.parameters()):
        assert pt.device.type == "tpu"
        torch.testing.assert_close(pt.detach().cpu(), pc.detach(), atol=atol, rtol=1e-4, msg=k)
    for (kc, sc), (kt, st) in zip(oc.state.items(), ot.state.items()):
        for name, vc in sc.items():
            vt = st[name]
            torch.testing.assert_close(vt.cpu(), vc.cpu(), atol=1e-6, rtol=1e-4, msg=name)


@pytest.mark.parametrize("foreach", [True, False])
def test_clip_grad_norm(foreach):
    torch.manual_seed(0)
    grads = [torch.randn(5, 7) * 3, torch.randn(11), torch.randn(2, 3, 4)]
    out = {}
    for dev in ("cpu", "tpu"):
        ps = [torch.zeros_like(g, device=dev, requires_grad=True) for g in grads]
        for p, g in zip(ps, grads):
            p.grad = g.to(dev, copy=True)  # the CPU clip must not touch `grads`
        norm = torch.nn.utils.clip_grad_norm_(ps, 1.5, foreach=foreach)
        out[dev] = (norm.cpu(), [p.grad.cpu() for p in ps])
    torch.testing.assert_close(out["tpu"][0], out["cpu"][0])
    for gt, gc in zip(out["tpu"][1], out["cpu"][1]):
        torch.testing.assert_close(gt, gc)
    total = torch.linalg.vector_norm(torch.cat([g.flatten() for g in out["tpu"][1]]))
    assert abs(total.item() - 1.5) < 1e-4


# --- mixed precision ----------------------------------------------------------------

def test_autocast_dtypes_follow_pytorch_policy():
    a = torch.randn(8, 8)
    at = a.to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        mm = at @ at
        lin = F.linear(at, at)
        sm = torch.softmax(mm, -1)
        ce = F.cross_entropy(mm, torch.arange(8, device="tpu"))
        add = at + at
    assert torch.amp.is_autocast_available("tpu")
    assert (mm.dtype, lin.dtype, sm.dtype, ce.dtype, add.dtype) == (
        torch.bfloat16, torch.bfloat16, torch.float32, torch.float32, torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = a @ a
    torch.testing.assert_close(mm.cpu(), ref)  # same rounding as CPU autocast
    assert (at @ at).dtype == torch.float32  # off again outside the region


def test_autocast_bf16_training_learns():
    model = tiny()
    x, y = batch(n=4, s=32)
    losses = {}
    for dev in ("cpu", "tpu"):
        m = copy.deepcopy(model).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        xs, ys = x.to(dev), y.to(dev)
        losses[dev] = []
        for _ in range(12):
            opt.zero_grad()
            with torch.autocast(dev, dtype=torch.bfloat16):
                loss = lm_loss(m, xs, ys)
            loss.backward()
            opt.step()
            losses[dev].append(loss.item())
        assert all(p.dtype == torch.float32 for p in m.parameters())  # master weights
    tpu, cpu = losses["tpu"], losses["cpu"]
    assert tpu[-1] < 0.6 * tpu[0], tpu
    assert abs(tpu[0] - cpu[0]) < 2e-2 * cpu[0]  # bf16 roundings differ a little


# --- seeds, dtypes, serialisation ---------------------------------------------------

def test_manual_seed_reproducible():
    def draw():
        torch.manual_seed(1234)
        return (torch.randn(64, device="tpu").cpu(), torch.rand(3, 3, device="tpu").cpu(),
                F.dropout(torch.ones(256, device="tpu"), 0.5).cpu())
    a, b = draw(), draw()
    for u, v in zip(a, b):
        assert torch.equal(u, v)
    torch.manual_seed(1235)
    assert not torch.equal(torch.randn(64, device="tpu").cpu(), a[0])
    dropped = (a[2] == 0).float().mean().item()
    assert 0.35 < dropped < 0.65 and torch.all((a[2] == 0) | (a[2] == 2))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_models(dtype):
    model = tiny()
    x, _ = batch()
    ref = model(x)
    low_cpu = copy.deepcopy(model).to(dtype)(x)
    m = copy.deepcopy(model).to("tpu")
    m = m.bfloat16() if dtype == torch.bfloat16 else m.half()
    assert all(p.dtype == dtype and p.device.type == "tpu" for p in m.parameters())
    out = m(x.to("tpu"))
    assert out.dtype == torch.float32  # the model returns float32 logits
    tol = 5e-2 if dtype == torch.bfloat16 else 1e-2
    torch.testing.assert_close(out.cpu(), ref, atol=tol * 8, rtol=tol)
    torch.testing.assert_close(out.cpu(), low_cpu, atol=tol * 4, rtol=tol)


def test_state_dict_round_trip():
    model = tiny("moe")
    x, y = batch()
    m = copy.deepcopy(model).to("tpu")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    lm_loss(m, x.to("tpu"), y.to("tpu")).backward()
    opt.step()

    buf = io.BytesIO()
    torch.save({"model": m.state_dict(), "opt": opt.state_dict()}, buf)
    for where in ("tpu", "cpu", None):
        buf.seek(0)
        state = torch.load(buf, map_location=where)
        want = "tpu" if where in ("tpu", None) else "cpu"
        assert all(v.device.type == want for v in state["model"].values())
        fresh = tiny("moe").to("tpu")
        fresh.load_state_dict(state["model"])
        for (k, a), b in zip(m.state_dict().items(), fresh.state_dict().values()):
            assert torch.equal(a.cpu(), b.cpu()), k

    # the optimizer continues exactly as if it had never been saved
    buf.seek(0)
    state = torch.load(buf, map_location="tpu")
    m2 = tiny("moe").to("tpu")
    m2.load_state_dict(state["model"])
    opt2 = torch.optim.AdamW(m2.parameters(), lr=1e-3)
    opt2.load_state_dict(state["opt"])
    x2, y2 = batch(seed=1)
    losses = []
    for mm, oo in ((m, opt), (m2, opt2)):
        oo.zero_grad()
        lm_loss(mm, x2.to("tpu"), y2.to("tpu")).backward()
        oo.step()
        losses.append(lm_loss(mm, x2.to("tpu"), y2.to("tpu")).item())
    assert losses[0] == losses[1]

    # saved from the CPU, loaded onto the tpu
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, map_location="tpu")
    assert all(v.device.type == "tpu" for v in state.values())
    assert all(torch.equal(v.cpu(), model.state_dict()[k]) for k, v in state.items())
