"""Two processes checkpointing into one folder at once: neither deletes the
other's temporary file in flight, so every save of both lands (before, each
save removed every *.tmp in the folder and the other's rename failed)."""
import os
import subprocess
import sys
import textwrap

from torchtpu.trainer import checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WRITER = textwrap.dedent("""
    import sys, torch
    from torchtpu.trainer import checkpoint
    folder, first = sys.argv[1], int(sys.argv[2])
    state = {"w": torch.randn(256, 256)}  # ~256 KB: a save takes a while
    for step in range(first, 60, 2):
        checkpoint.save(dict(state, step=step), folder, step)
    print("done")
""")


def test_two_writers_keep_every_save(tmp_path):
    folder = str(tmp_path)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, folder, str(k)], env=env,
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for k in (0, 1)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "done" in out, err[-2000:]
    assert checkpoint.list_steps(folder) == list(range(60))
    assert not [n for n in os.listdir(folder) if n.endswith(".tmp")]
    step, state = checkpoint.load_latest(folder)
    assert step == 59 and state["step"] == 59


def test_stale_temp_of_dead_writer_removed_live_one_kept(tmp_path):
    folder = str(tmp_path)
    host = checkpoint._host()
    dead = tmp_path / f"step-5.pt.{host}.999999999.00ff.tmp"  # no such pid
    live = tmp_path / f"step-6.pt.{host}.{os.getpid()}.00ff.tmp"  # this process
    other_host = tmp_path / "step-7.pt.elsewhere.1.00ff.tmp"  # recent, another host
    for f in (dead, live, other_host):
        f.write_bytes(b"partial")
    checkpoint.save({"step": 1}, folder, 1)
    left = sorted(os.listdir(folder))
    assert dead.name not in left
    assert live.name in left and other_host.name in left
