"""The trainer (torchtpu.train): the same run on "tpu" and on the CPU gives the
same loss at every step, for the dense and the MoE model; a resumed run
continues with exactly the loss of an uninterrupted one; an interrupted
checkpoint save leaves the previous checkpoint loadable; the command line
prints metrics and writes a checkpoint and a PNG."""
import os
import signal
import struct
import subprocess
import sys
import zlib

import pytest
import torch

import torchtpu  # noqa: F401
from torchtpu import train as trainer
from torchtpu.trainer import checkpoint
from torchtpu.trainer.config import ConfigError, load_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_config(tmp_path, device="tpu", model="llama", steps=4, **sections):
    """A few-second run: the tiny flavour, float32, no dropout, fixed seed."""
    overrides = {
        "job": {"dump_folder": str(tmp_path)},
        "model": {"name": model, "flavor": "tiny", "dropout": 0.0},
        "optimizer": {"lr": 3e-3},
        "lr_scheduler": {"warmup_steps": 2},
        "training": {"device": device, "steps": steps, "local_batch_size": 2, "seq_len": 32,
                     "seed": 0},
        "checkpoint": {"enable": False},
        "metrics": {"log_freq": 1, "peak_flops": 1e9, "plot": False, "progress_bar": False},
    }
    for section, values in sections.items():
        overrides[section].update(values)
    return load_config(overrides=overrides)


def quiet(*args, **kwargs):
    pass


def assert_parity(cpu, tpu, rel=1e-4):
    assert sorted(cpu) == sorted(tpu)
    for step in cpu:
        c, t = cpu[step], tpu[step]
        assert abs(c - t) <= rel * abs(c), f"step {step}: cpu {c} tpu {t}"


# --- parity -------------------------------------------------------------------------

def test_dense_trainer_parity_tpu_vs_cpu(tmp_path):
    cpu = trainer.train(tiny_config(tmp_path / "cpu", "cpu"), log=quiet)
    tpu = trainer.train(tiny_config(tmp_path / "tpu", "tpu"), log=quiet)
    assert_parity(cpu["losses"], tpu["losses"])
    assert_parity(cpu["grad_norms"], tpu["grad_norms"])
    assert tpu["losses"][4] < tpu["losses"][1]  # it learns


def test_moe_trainer_parity_tpu_vs_cpu_with_grad_accumulation(tmp_path):
    extra = {"training": {"gradient_accumulation_steps": 2}}
    cpu = trainer.train(tiny_config(tmp_path / "cpu", "cpu", "moe", **extra), log=quiet)
    tpu = trainer.train(tiny_config(tmp_path / "tpu", "tpu", "moe", **extra), log=quiet)
    assert_parity(cpu["losses"], tpu["losses"])
    assert_parity(cpu["grad_norms"], tpu["grad_norms"])
    for (name, pc), pt in zip(cpu["model"].named_parameters(), tpu["model"].parameters()):
        torch.testing.assert_close(pt.detach().cpu(), pc.detach(), atol=1e-5, rtol=1e-4,
                                   msg=name)


# --- checkpoints --------------------------------------------------------------------

def test_resume_continues_with_the_same_losses(tmp_path):
    ck = {"enable": True, "interval": 2, "keep_latest_k": 0}
    full = trainer.train(tiny_config(tmp_path / "full", steps=4, checkpoint=ck), log=quiet)

    part = tmp_path / "part"
    first = trainer.train(tiny_config(part, steps=2, checkpoint=ck), log=quiet)
    assert first["losses"] == {s: full["losses"][s] for s in (1, 2)}
    resumed = trainer.train(tiny_config(part, steps=4, checkpoint=dict(ck, resume=True)),
                            log=quiet)
    assert resumed["losses"][3] == full["losses"][3]  # the next step: identical
    assert resumed["losses"][4] == full["losses"][4]
    for pf, pr in zip(full["model"].parameters(), resumed["model"].parameters()):
        assert torch.equal(pf.detach().cpu(), pr.detach().cpu())


def _state(value):
    return {"step": value, "w": torch.full((256, 256), float(value), device="tpu")}


def test_failed_save_leaves_previous_checkpoint(tmp_path, monkeypatch):
    folder = str(tmp_path)
    checkpoint.save(_state(1), folder, 1)

    real_save = torch.save

    def save_half_then_fail(obj, f, *args, **kwargs):
        real_save(obj, f, *args, **kwargs)
        f.seek(f.tell() // 2)
        f.truncate()
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(torch, "save", save_half_then_fail)
    with pytest.raises(OSError, match="simulated"):
        checkpoint.save(_state(2), folder, 2)
    monkeypatch.undo()

    assert os.listdir(folder) == ["step-1.pt"]  # no partial or temporary file
    step, state = checkpoint.load_latest(folder, map_location="tpu")
    assert step == 1 and state["w"].device.type == "tpu"
    assert torch.equal(state["w"].cpu(), torch.full((256, 256), 1.0))


_KILLED_WRITER = r"""
import os, signal, sys, torch, torchtpu
from torchtpu.trainer import checkpoint
real_save = torch.save
def save_then_die(obj, f, *a, **k):
    real_save(obj, f, *a, **k)
    f.flush()
    f.seek(f.tell() // 2); f.truncate(); f.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # killed in the middle of writing
torch.save = save_then_die
checkpoint.save({"step": 2, "w": torch.full((256, 256), 2.0, device="tpu")}, sys.argv[1], 2)
"""


def test_writer_killed_mid_save_leaves_previous_checkpoint(tmp_path):
    folder = str(tmp_path)
    checkpoint.save(_state(1), folder, 1)
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, folder], cwd=REPO)
    assert proc.returncode == -signal.SIGKILL
    leftovers = sorted(os.listdir(folder))
    assert "step-2.pt" not in leftovers and any(n.endswith(".tmp") for n in leftovers)
    step, state = checkpoint.load_latest(folder)
    assert step == 1 and torch.equal(state["w"].cpu(), torch.full((256, 256), 1.0))
    checkpoint.save(_state(3), folder, 3)  # the next save cleans up
    assert sorted(os.listdir(folder)) == ["step-1.pt", "step-3.pt"]


def test_keep_latest_k(tmp_path):
    for s in range(1, 5):
        checkpoint.save(_state(s), str(tmp_path), s, keep_latest_k=2)
    assert checkpoint.list_steps(str(tmp_path)) == [3, 4]


# --- the command line ---------------------------------------------------------------

def _png_size(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", data[16:24])
    idat = data[data.index(b"IDAT") + 4:data.index(b"IEND") - 8]
    assert len(zlib.decompress(idat)) == h * (1 + 3 * w)
    return w, h


def test_command_line_run(tmp_path, capsys):
    trainer.main(["--config", os.path.join(REPO, "torchtpu/configs/llama_debug.toml"),
                  "--model.flavor", "tiny", "--training.steps", "3",
                  "--training.local_batch_size", "2", "--training.seq_len", "32",
                  "--job.dump_folder", str(tmp_path), "--metrics.log_freq", "1",
                  "--metrics.progress_bar", "false"])
    out = capsys.readouterr().out
    lines = [l for l in out.splitlines() if l.startswith("step:")]
    assert len(lines) == 3
    for key in ("loss:", "grad_norm:", "tps:", "tflops:", "mfu:", "memory:"):
        assert key in lines[-1]
    assert "measured peak" in out
    assert checkpoint.list_steps(str(tmp_path / "checkpoint")) == [3]
    assert _png_size(tmp_path / "loss.png") == (640, 400)


def test_config_errors():
    with pytest.raises(ConfigError, match="training.stepz"):
        load_config(argv=["--training.stepz", "3"])
    with pytest.raises(ConfigError, match="expected int"):
        load_config(argv=["--training.steps", "many"])
    cfg = load_config(os.path.join(REPO, "torchtpu/configs/moe_debug.toml"),
                      argv=["--checkpoint.resume", "--optimizer.lr=1e-3"])
    assert cfg["model"]["name"] == "moe" and cfg["checkpoint"]["resume"] is True
    assert cfg["optimizer"]["lr"] == 1e-3
