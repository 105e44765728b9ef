"""Fused eager replays a recorded graph instead of lowering it again.

Once a step's op sequence has been recorded, later steps match each op's
signature against the recorded trace and reuse its lowering (no StableHLO is
built) and, when the step ends with the same live outputs, its executable.
Every divergence (another op, another shape, a data-dependent branch, a flush
at another point, another set of live tensors) must fall back to lowering and
give the same numbers as the CPU."""
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu import modes


def stats():
    return modes.fused_stats()


def mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def train(device, steps, hook=None):
    model = mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(5, 8, generator=g), torch.randn(5, 4, generator=g))
            for _ in range(steps)]
    xs, ys = [x for x, _ in data], [y for _, y in data]
    losses, per_step = [], []
    for i in range(steps):
        before = stats() if device == "tpu" else None
        opt.zero_grad()
        out = model(xs[i].to(device))
        if hook:
            out = hook(i, out)
        loss = F.mse_loss(out, ys[i].to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if device == "tpu":
            after = stats()
            per_step.append({k: after[k] - before[k] for k in ("lowered_ops", "replayed_ops")})
    return losses, per_step


def test_repeated_step_is_replayed_not_lowered():
    ref, _ = train("cpu", 6)
    with torchtpu.mode("fused"):
        got, per_step = train("tpu", 6)
        c0 = torch.tpu._get_cache_stats()["compiles"]
        again, per_step2 = train("tpu", 3)
        c1 = torch.tpu._get_cache_stats()["compiles"]
    for a, b in zip(ref, got):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a))
    # After the first steps (the first optimizer step creates momentum
    # buffers, so step 2 differs from step 1), every op is replayed.
    steady = per_step[3:]
    assert all(s["lowered_ops"] == 0 and s["replayed_ops"] > 0 for s in steady), per_step
    # A fresh model on the same shapes: the same ops again, nothing compiled.
    assert c1 == c0
    assert again == got[:3]


def test_data_dependent_branch_diverges_correctly():
    def hook(i, out):
        return out * 2 if i % 3 == 2 else out  # a different op on some steps

    ref, _ = train("cpu", 9, hook)
    with torchtpu.mode("fused"):
        got, per_step = train("tpu", 9, hook)
    for a, b in zip(ref, got):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a))
    # The two shapes of the step are both recorded: late steps lower nothing.
    assert all(s["lowered_ops"] == 0 for s in per_step[6:]), per_step


def test_flush_midway_and_live_intermediate():
    kept = {}

    def hook(i, out):
        h = out.relu()
        if i % 2:
            kept[i] = h          # an intermediate that stays alive: a new output
            float(h.sum())       # and a flush in the middle of the step
        return h

    ref_kept = {}

    def ref_hook(i, out):
        h = out.relu()
        if i % 2:
            ref_kept[i] = h
        return h

    ref, _ = train("cpu", 6, ref_hook)
    with torchtpu.mode("fused"):
        got, _ = train("tpu", 6, hook)
        values = {i: t.cpu() for i, t in kept.items()}
    for a, b in zip(ref, got):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a))
    for i, t in values.items():
        torch.testing.assert_close(t, ref_kept[i], rtol=1e-5, atol=1e-6)


def test_shape_change_records_a_new_trace():
    x_cpu = [torch.randn(n, 8) for n in (3, 3, 7, 7, 3)]
    w = torch.randn(8, 8)
    with torchtpu.mode("fused"):
        wt = w.to("tpu")
        outs = [((x.to("tpu") @ wt).sin() + 1).sum(0).cpu() for x in x_cpu]
    for x, o in zip(x_cpu, outs):
        torch.testing.assert_close(o, ((x @ w).sin() + 1).sum(0), rtol=1e-5, atol=1e-5)


def test_accumulated_step_runs_one_program_with_no_compile_or_lowering():
    # Gradient accumulation (three micro-batches) and AdamW: after warm-up a
    # step is one program, found by its trace: nothing lowered, nothing
    # compiled, every op replayed, and the same numbers as the CPU.
    from torchtpu.trainer.graph_step import programs_during

    g = torch.Generator().manual_seed(2)
    micro = [(torch.randn(5, 8, generator=g), torch.randn(5, 4, generator=g)) for _ in range(3)]

    def setup(device):
        model = mlp().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        data = [(x.to(device), y.to(device)) for x, y in micro]

        def step():
            opt.zero_grad()
            for x, y in data:
                (F.mse_loss(model(x), y) / len(data)).backward()
            opt.step()
            return model[0].weight.sum().item()
        return model, step

    ref_model, ref_step = setup("cpu")
    ref = [ref_step() for _ in range(6)]
    with torchtpu.mode("fused"):
        model, step = setup("tpu")
        got = [step() for _ in range(3)]
        per_step = []
        for _ in range(3):
            s0, c0 = stats(), torch.tpu._get_cache_stats()["compiles"]
            out, programs = programs_during(step)
            got.append(out)
            s1, c1 = stats(), torch.tpu._get_cache_stats()["compiles"]
            per_step.append({"compiles": c1 - c0, "programs": programs,
                             **{k: s1[k] - s0[k] for k in ("graphs", "ops", "lowered_ops",
                                                           "replayed_ops")}})
    for s in per_step:
        assert s["compiles"] == 0 and s["lowered_ops"] == 0, per_step
        assert s["graphs"] == 1 and s["programs"] == 1, per_step
        assert s["replayed_ops"] == s["ops"] > 0, per_step
    for a, b in zip(ref, got):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (ref, got)
    for p, q in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-5, atol=1e-6)
