"""[activation_checkpoint] on "tpu": full, selective every-N-th block and
op-level selective checkpointing train the same losses as no checkpointing
(strict eager and training.compile), for the llama and MoE models, and full
checkpointing lowers the measured peak device memory."""
import pytest
import torch

from torchtpu.train import train
from torchtpu.trainer import activation_checkpoint as AC
from torchtpu.trainer.config import ConfigError, load_config
from torchtpu.models import build_model

MODES = [("none", "2"), ("full", "2"), ("selective", "2"), ("selective", "op")]
_runs = {}


def _run(name, mode, option, compile=False):
    key = (name, mode, option, compile)
    if key not in _runs:
        cfg = load_config(overrides={
            "model": {"name": name, "flavor": "tiny"},
            "training": {"steps": 3, "local_batch_size": 8, "seq_len": 128,
                         "compile": bool(compile),
                         "compile_mode": "step" if compile == "step" else "graphs"},
            "activation_checkpoint": {"mode": mode, "selective_ac_option": option},
            "checkpoint": {"enable": False},
            "metrics": {"log_freq": 1, "plot": False, "progress_bar": False,
                        "peak_flops": 1e12}})
        r = train(cfg, log=lambda *a, **k: None)
        _runs[key] = (r["losses"], torch.tpu.max_memory_allocated(), r["model"])
    return _runs[key]


@pytest.mark.parametrize("name", ["llama", "moe"])
@pytest.mark.parametrize("mode,option", MODES[1:])
def test_losses_equal_eager(name, mode, option):
    ref, _, _ = _run(name, "none", "2")
    got, _, model = _run(name, mode, option)
    assert sorted(got) == sorted(ref) == [1, 2, 3]
    for step in ref:
        assert abs(got[step] - ref[step]) <= 1e-5, (step, got[step], ref[step])
    wrapped = [type(b).__name__ == "CheckpointWrapper" for b in model.layers]
    assert wrapped == {"full": [True, True], "selective": [False, True] if option == "2"
                       else [True, True]}[mode]


@pytest.mark.parametrize("name", ["llama", "moe"])
def test_full_lowers_peak_memory(name):
    _, none, _ = _run(name, "none", "2")
    _, full, _ = _run(name, "full", "2")
    assert 0 < full < none, (full, none)


@pytest.mark.parametrize("name,mode,option", [("llama", "full", "2"), ("llama", "selective", "op"),
                                              ("moe", "full", "2")])
def test_losses_equal_compiled(name, mode, option):
    ref, _, _ = _run(name, "none", "2")
    got, _, _ = _run(name, mode, option, compile=True)
    for step in ref:
        assert abs(got[step] - ref[step]) <= 1e-5, (step, got[step], ref[step])


def test_compiled_full_lowers_peak_memory():
    _, none, _ = _run("llama", "none", "2", compile=True)
    _, full, _ = _run("llama", "full", "2", compile=True)
    assert 0 < full < none, (full, none)


def test_gradients_equal_on_cpu():
    # the wrapped model's gradients are the unwrapped one's (same weights)
    torch.manual_seed(0)
    ref = build_model("llama", "tiny")
    x = torch.randint(0, 264, (2, 16))
    ref(x).square().mean().backward()
    for ac in ({"mode": "full", "selective_ac_option": "2"},
               {"mode": "selective", "selective_ac_option": "op"},
               {"mode": "selective", "selective_ac_option": "1"}):
        torch.manual_seed(0)
        m = build_model("llama", "tiny")
        assert AC.apply(m, ac) == 2
        m(x).square().mean().backward()
        assert m.state_dict().keys() == ref.state_dict().keys()  # checkpoints interchange
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=n)


@pytest.mark.parametrize("section,match", [
    ({"mode": "some"}, "activation_checkpoint.mode"),
    ({"mode": "selective", "selective_ac_option": "0"}, "selective_ac_option"),
    ({"mode": "selective", "selective_ac_option": "ops"}, "selective_ac_option")])
def test_bad_keys_are_config_errors(section, match):
    with pytest.raises(ConfigError, match=match):
        load_config(overrides={"activation_checkpoint": section})


@pytest.mark.parametrize("mode,option", [("full", "2"), ("selective", "op")])
def test_losses_equal_whole_step(mode, option):
    # training.compile_mode = step: the recomputation is traced into the
    # step's one program and reads the traced parameters
    ref, _, _ = _run("llama", "none", "2")
    got, _, _ = _run("llama", mode, option, compile="step")
    for step in ref:
        assert abs(got[step] - ref[step]) <= 1e-5, (step, got[step], ref[step])


def test_apply_twice_is_an_error():
    m = build_model("llama", "tiny")
    AC.apply(m, {"mode": "full", "selective_ac_option": "2"})
    with pytest.raises(ValueError, match="already checkpointed"):
        AC.apply(m, {"mode": "full", "selective_ac_option": "2"})


def test_dropout_masks_repeat_in_the_recomputation():
    # with dropout the RNG state is restored, so the recomputed forward draws
    # the same masks and the gradients are the unwrapped model's
    x = torch.randint(0, 264, (2, 16))
    grads = []
    for mode in ("none", "full"):
        torch.manual_seed(0)
        m = build_model("llama", "tiny", dropout=0.2)
        AC.apply(m, {"mode": mode, "selective_ac_option": "2"})
        torch.manual_seed(1)
        m(x).square().mean().backward()
        grads.append([p.grad for p in m.parameters()])
    for g, r in zip(*grads):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6)
