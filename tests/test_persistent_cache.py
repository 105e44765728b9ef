"""The persistent compilation cache: counters, reuse by a second process,
corrupt entries, concurrent writers, the size bound, and turning it off.

Each scenario runs the same small program set (eager ops, a Linear layer's
forward and backward) in fresh subprocesses sharing a cache directory, and
reads their counters back as JSON."""
import json
import os
import subprocess
import sys
import textwrap

import torch

import torchtpu

PROGRAM = textwrap.dedent("""
    import json, sys, torch, torchtpu
    torch.manual_seed(0)
    x = torch.arange(12.0).reshape(3, 4).to("tpu")
    y = (x * 2 + 1).exp().sum(1)
    m = torch.nn.Linear(4, 2).to("tpu")
    m(x).square().mean().backward()
    out = {"y": y.cpu().tolist(), "grad": m.weight.grad.cpu().tolist()}
    out.update({k: v for k, v in torch.tpu._get_cache_stats().items() if k != "entries"})
    print(json.dumps(out))
""")


def run(cache_dir, extra_env=None, start_only=False):
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(cache_dir))
    env.pop("TORCHTPU_EXPLAIN_RECOMPILES", None)
    env.update(extra_env or {})
    p = subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p if start_only else finish(p)


def finish(p):
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def entries(cache_dir):
    return sorted(f for f in os.listdir(cache_dir) if f.endswith(".ttexe"))


def test_counters_in_process():
    s0 = torch.tpu._get_cache_stats()
    a = torch.randn(11, 3, device="tpu")
    a.sin()
    a.sin()
    torch.tpu.synchronize()
    s1 = torch.tpu._get_cache_stats()
    for key in ("requests", "hits", "compiles", "compile_seconds", "sig_hits", "disk_hits",
                "disk_misses", "disk_writes", "disk_errors", "disk_load_seconds", "entries"):
        assert key in s1
    assert s1["sig_hits"] > s0["sig_hits"]  # the second sin reuses its plan
    # Every in-memory miss is one disk lookup: a hit or a miss.
    assert s1["requests"] - s1["hits"] == s1["disk_hits"] + s1["disk_misses"]
    assert s1["disk_writes"] == s1["compiles"]
    assert s1["disk_errors"] == 0
    sin = [e for e in s1["entries"] if e["label"] == "aten::sin"]
    assert sin and len(sin[0]["key"]) == 32 and sin[0]["uses"] >= 1
    assert os.path.exists(os.path.join(torchtpu.cache_dir(), sin[0]["key"] + ".ttexe"))


def test_second_process_loads_instead_of_compiling(tmp_path):
    first = run(tmp_path)
    assert first["compiles"] > 0 and first["disk_hits"] == 0
    assert first["disk_writes"] == first["compiles"]
    assert len(entries(tmp_path)) == first["compiles"]
    second = run(tmp_path)
    assert second["compiles"] == 0
    assert second["disk_hits"] == first["compiles"]
    assert second["disk_load_seconds"] > 0
    assert second["y"] == first["y"] and second["grad"] == first["grad"]


def test_other_xla_flags_compile_anew(tmp_path):
    # XLA_FLAGS sets the plugin's compiler options: an entry compiled under
    # other flags is another program, not a hit.
    first = run(tmp_path, {"XLA_FLAGS": ""})
    other = run(tmp_path, {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"})
    assert other["disk_hits"] == 0 and other["compiles"] == first["compiles"]
    again = run(tmp_path, {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"})
    assert again["compiles"] == 0 and again["disk_hits"] == first["compiles"]
    assert other["y"] == first["y"] and again["grad"] == first["grad"]


def test_corrupt_entries_are_recompiled_and_rewritten(tmp_path):
    first = run(tmp_path)
    files = [os.path.join(tmp_path, f) for f in entries(tmp_path)]
    assert len(files) >= 3
    with open(files[0], "r+b") as f:  # truncated
        f.truncate(os.path.getsize(files[0]) // 2)
    with open(files[1], "r+b") as f:  # bytes overwritten inside the executable
        f.seek(os.path.getsize(files[1]) - 100)
        f.write(b"\xff" * 16)
    with open(files[2], "wb") as f:  # a foreign file
        f.write(b"not a torchtpu cache entry" * 10)
    second = run(tmp_path)
    assert second["disk_rejected"] == 3
    assert second["compiles"] == 3 and second["disk_writes"] == 3
    assert second["disk_hits"] == first["compiles"] - 3
    assert second["y"] == first["y"] and second["grad"] == first["grad"]
    third = run(tmp_path)  # the rewritten files are good
    assert third["compiles"] == 0 and third["disk_rejected"] == 0


def test_concurrent_writers_leave_valid_entries(tmp_path):
    procs = [run(tmp_path, start_only=True) for _ in range(2)]
    results = [finish(p) for p in procs]
    assert all(r["disk_errors"] == 0 for r in results)
    assert results[0]["y"] == results[1]["y"]
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
    after = run(tmp_path)
    assert after["compiles"] == 0 and after["disk_rejected"] == 0
    assert after["disk_hits"] == results[0]["compiles"] + results[0]["disk_hits"]


def test_size_bound_evicts_least_recently_used(tmp_path):
    r = run(tmp_path, {"TORCHTPU_CACHE_MAX_BYTES": "20000"})
    assert r["disk_evictions"] > 0
    assert sum(os.path.getsize(os.path.join(tmp_path, f)) for f in entries(tmp_path)) <= 20000


def test_off_and_unwritable(tmp_path):
    off = run(tmp_path, {"TORCHTPU_CACHE_DIR": "0"})
    assert off["disk_hits"] == off["disk_misses"] == off["disk_writes"] == 0
    assert off["compiles"] > 0
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    # Its parent is a file: the directory cannot be made, so the cache is off
    # (with a warning, see test_cache_security.py) and nothing is counted.
    bad = run(blocker / "cache")
    assert bad["disk_errors"] == bad["disk_writes"] == bad["disk_hits"] == 0
    assert bad["compiles"] > 0
    assert bad["y"] == off["y"]
