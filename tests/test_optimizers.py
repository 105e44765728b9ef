"""Every optimizer of torch.optim over the inputs PyTorch's own optimizer
tests are parametrised with (torch.testing._internal.common_optimizers'
optim_db, the data TestOptimRenewed runs on): each implementation
(for-loop, foreach, fused) takes a few steps on tpu and on the CPU from the
same parameters and gradients; parameters and state must agree.

The tpu runs refuse the CPU fallback (set_fallback_mode("error")): the
optimizers' ops all have rules — the foreach kernels, the fused Adam(W), SGD
and Adagrad steps, and Rprop's `grad[sign.eq(etaminus)] = 0` (index_put
with one bool mask and a scalar: a select, lower/index.c)."""
import warnings

import pytest
import torch
from torch.nn import Parameter
from torch.testing._internal.common_optimizers import optim_db

import torchtpu

INFOS = {i.name: i for i in optim_db if not i.only_supports_sparse_grads}


def impls(info):
    out = [{"foreach": False}, {"foreach": True}] if "foreach" in info.supported_impls else [{}]
    if "fused" in info.supported_impls:
        out.append({"fused": True})
    return out


def steps(info, kwargs, device, n=3):
    shapes = [(6, 5), (6, 5)] if info.name == "Muon" else [(6, 5), (6,), (3, 4, 2)]
    gen = torch.Generator().manual_seed(0)
    params = [Parameter(torch.randn(s, generator=gen).to(device)) for s in shapes]
    opt = info.optim_cls(params, **kwargs)
    for i in range(n):
        grads = [torch.randn(p.shape, generator=gen) for p in params]

        def closure():
            for p, g in zip(params, grads):
                p.grad = g.to(device)
            return torch.tensor(1.0 + i, device=device)
        if info.step_requires_closure:
            opt.step(closure)
        else:
            closure()
            opt.step()
    return params, [opt.state[p] for p in params]


@pytest.mark.parametrize("name", sorted(INFOS))
def test_optimizer_steps_as_on_cpu(name, no_fallback):
    info = INFOS[name]
    for oi in info.optim_inputs_func(device="tpu"):
        for impl in impls(info):
            kwargs = dict(oi.kwargs, **impl)
            cpu_kwargs = {k: v.cpu() if torch.is_tensor(v) else v for k, v in kwargs.items()}
            cpu_kwargs.pop("fused", None)  # the for-loop result is the reference
            if cpu_kwargs.get("capturable"):
                cpu_kwargs["capturable"] = False
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref_p, ref_s = steps(info, cpu_kwargs, "cpu")
                got_p, got_s = steps(info, kwargs, "tpu")
            what = f"{name} {oi.desc} {impl}"
            for a, b in zip(got_p, ref_p):
                torch.testing.assert_close(a.detach().cpu(), b.detach(), atol=1e-5, rtol=1e-4,
                                           msg=lambda m: f"{what}: params: {m}")
            for sa, sb in zip(got_s, ref_s):
                assert sorted(sa) == sorted(sb), what
                for k, v in sb.items():
                    if torch.is_tensor(v):
                        torch.testing.assert_close(sa[k].cpu().to(v.dtype), v, atol=1e-5,
                                                   rtol=1e-4, msg=lambda m: f"{what}: {k}: {m}")


def test_fused_steps_with_grad_scale_and_found_inf(no_fallback):
    """The GradScaler path: grads unscaled and written back; found_inf == 1
    leaves params, grads and state as they were."""
    def lists(d):
        gen = torch.Generator().manual_seed(0)
        return [torch.randn(4, 3, generator=gen).to(d) for _ in range(3)]
    for found in (0.0, 1.0):
        for first in (True, False):
            res = {}
            for d in ("cpu", "tpu"):
                p, g, buf = lists(d), [x * 2 for x in lists(d)], [x / 2 for x in lists(d)]
                torch._fused_sgd_(p, g, buf, weight_decay=0.1, momentum=0.9, lr=0.01,
                                  dampening=0.1, nesterov=True, maximize=True,
                                  is_first_step=first, grad_scale=torch.tensor(4.0, device=d),
                                  found_inf=torch.tensor(found, device=d))
                s, st = [x.abs() for x in lists(d)], [torch.tensor(3.0, device=d)] * 3
                q = [x.clone() for x in lists(d)]
                torch._fused_adagrad_(q, g, s, st, lr=0.1, lr_decay=0.01, weight_decay=0.1,
                                      eps=1e-10, maximize=False,
                                      grad_scale=torch.tensor(2.0, device=d),
                                      found_inf=torch.tensor(found, device=d))
                res[d] = [t.cpu() for t in p + g + buf + q + s]
            for a, b in zip(res["tpu"], res["cpu"]):
                torch.testing.assert_close(a, b)


def test_amp_unscale_and_update_scale_as_on_cpu(no_fallback):
    """GradScaler's two ops run on the device and match the CPU's kernels:
    grads of each float dtype unscaled, found_inf set by an inf or a NaN in
    any grad (never reset), and the scale backing off, growing after
    growth_interval clean steps, or kept when the grown scale overflows."""
    vals = [torch.randn(3, 4).half(), torch.randn(5).bfloat16(), torch.randn(2, 2), torch.tensor(1.5)]
    for bad in (None, float("inf"), float("nan")):
        res = {}
        for d in ("cpu", "tpu"):
            grads = [v.clone().to(d) for v in vals]
            if bad is not None:
                grads[1][3] = bad
            found, inv = torch.zeros(1, device=d), torch.full((1,), 0.125, device=d)
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
            res[d] = [t.cpu() for t in grads + [found]]
        for a, b in zip(res["tpu"], res["cpu"]):
            torch.testing.assert_close(a, b, equal_nan=True, atol=0, rtol=0)
    for start, found in ((65536.0, 0.0), (65536.0, 1.0), (3e38, 0.0)):
        for tracker in (0, 1, 2):
            res = {}
            for d in ("cpu", "tpu"):
                s = torch.full((1,), start, device=d)
                t = torch.full((1,), tracker, dtype=torch.int32, device=d)
                r = torch._amp_update_scale_(s, t, torch.full((1,), found, device=d), 2.0, 0.5, 3)
                assert r is s
                res[d] = (s.cpu(), t.cpu())
            assert torch.equal(res["tpu"][0], res["cpu"][0]), (start, found, tracker, res)
            assert torch.equal(res["tpu"][1], res["cpu"][1]), (start, found, tracker, res)


def test_grad_scaler_training_as_on_cpu(no_fallback):
    """A GradScaler loop (a step with an inf input skipped, the scale grown
    every 2 clean steps) gives the CPU's weights and scale."""
    def run(d):
        torch.manual_seed(0)
        m = torch.nn.Linear(8, 4).to(d)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(d, init_scale=2.0 ** 16, growth_interval=2)
        xs = torch.randn(6, 2, 8, generator=torch.Generator().manual_seed(1))
        scales = []
        for i in range(6):
            x = xs[i].to(d)
            if i == 3:
                x[0, 0] = float("inf")
            opt.zero_grad()
            scaler.scale(m(x).sum()).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        return m.weight.detach().cpu(), scales
    (wc, sc), (wt, st) = run("cpu"), run("tpu")
    assert st == sc
    torch.testing.assert_close(wt, wc)


def test_amp_ops_refuse_bad_arguments():
    d = "tpu"
    one_i = torch.zeros(1, dtype=torch.int32, device=d)
    with pytest.raises(RuntimeError, match="current_scale must be a 1-element tensor"):
        torch._amp_update_scale_(torch.ones(2, device=d), one_i, torch.zeros(1, device=d), 2.0, 0.5, 3)
    with pytest.raises(RuntimeError, match="growth_tracker must be an int tensor"):
        torch._amp_update_scale_(torch.ones(1, device=d), torch.zeros(1, device=d),
                                 torch.zeros(1, device=d), 2.0, 0.5, 3)
    with pytest.raises(RuntimeError, match="inv_scale must be a float tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(
            [torch.ones(2, device=d)], torch.zeros(1, device=d), torch.ones(1, dtype=torch.float64, device=d))


# --- x[mask] = v ------------------------------------------------------------------------------

def both(fn):
    out = {}
    for d in ("cpu", "tpu"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out[d] = ("ok", fn(d).cpu())
        except Exception as e:  # noqa: BLE001 - compared below
            out[d] = ("raise", e)
    (kc, rc), (kt, rt) = out["cpu"], out["tpu"]
    assert kc == kt, (out["cpu"], out["tpu"])
    if kc == "ok":
        assert rt.dtype == rc.dtype and torch.equal(rt, rc), (rt, rc)
    else:
        assert type(rt) is type(rc) and str(rt).startswith(str(rc).split("\n")[0]), (rt, rc)


X = lambda d, dt=torch.float32: torch.arange(24, dtype=dt).reshape(2, 3, 4).to(d)  # noqa: E731


@pytest.mark.parametrize("case", [
    lambda d: X(d).index_put_((X(d) > 5,), torch.tensor(0.0, device=d)),
    lambda d: X(d).index_put_((X(d) > 5,), torch.tensor(1.0, device=d), accumulate=True),
    lambda d: X(d).index_put_((X(d)[:, :, 0] > 3,), torch.arange(4.0, device=d)),
    lambda d: X(d).index_put_((X(d)[:, :, 0] > 3,), torch.arange(4.0, device=d).reshape(1, 4)),
    lambda d: X(d, torch.int64).index_put_((X(d) > 3,), torch.tensor(7, device=d)),
])
def test_mask_index_put_runs_on_device(case, no_fallback):
    both(case)


def test_mask_index_put_python_syntax_and_errors():
    def setitem(expr):
        def f(d):
            x = X(d)
            exec(expr, {"x": x, "torch": torch, "d": d})
            return x
        return f
    for expr in ("x[x < 4] = -1", "x[:, x[0, :, 0] > 3] = torch.tensor([9.0], device=d)",
                 "x[..., x[0, 0] > 1] = -2", "x[x > 100] = 5",
                 # PyTorch's errors (these run through the CPU's checks)
                 "x[x[:, :2] > 3] = 0", "x[x[:, :, 0] > 3] = torch.arange(3.0, device=d)"):
        both(setitem(expr))


# --- foreach kernels, from PyTorch's test_foreach -------------------------------------------

@pytest.mark.parametrize("exponent", ["list", True, False, [True, False]])
def test_foreach_pow_of_bool_as_on_cpu(exponent):
    """PyTorch's pow takes a bool base only to the powers 0 and 1 (a copy or
    ones); a bool tensor exponent is refused."""
    def f(d):
        xs = [torch.tensor([True, False, True], device=d), torch.tensor([[False, True]], device=d)]
        return torch.cat([t.flatten() for t in torch._foreach_pow(xs, xs if exponent == "list" else exponent)])
    both(f)


B = lambda d: torch.tensor([True, False], device=d)  # noqa: E731
I = lambda d: torch.tensor([1, 2], device=d)  # noqa: E731


@pytest.mark.parametrize("case", [
    # PyTorch's sub_check: any bool operand is refused, each with its text
    lambda d: B(d) - 1, lambda d: I(d) - B(d), lambda d: B(d) - B(d), lambda d: I(d) - True,
    lambda d: torch.rsub(B(d), 1), lambda d: torch._foreach_sub([B(d)], 1)[0],
    lambda d: torch._foreach_sub([B(d)], [I(d)])[0], lambda d: torch._foreach_sub([B(d)], [B(d)])[0],
    # a bool tensor list with an integer Scalar computes in int64, with a bool one in bool
    lambda d: torch._foreach_add([B(d)], 1)[0], lambda d: torch._foreach_add([B(d)], True)[0],
    lambda d: torch._foreach_mul([B(d)], [2])[0], lambda d: torch._foreach_maximum([B(d)], 1)[0],
    lambda d: torch._foreach_clamp_min([B(d)], [1])[0], lambda d: torch._foreach_pow([B(d)], 1)[0],
    lambda d: torch._foreach_add([B(d)], 2.5)[0], lambda d: torch._foreach_div([B(d)], 2)[0],
])
def test_bool_operands_as_on_cpu(case):
    both(case)
