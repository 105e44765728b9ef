"""The in-memory program cache is bounded by default.

Each loaded program costs the process memory and about four memory mappings
on XLA's CPU plugin; unbounded, a process that compiles many shapes (PyTorch's
own test suites compile ~16,000 in one process) exhausts Linux's mapping
limit and the plugin crashes mid-compile. These run fresh processes with a
small bound and check that least-recently-used programs are evicted, that
the mappings stop growing, and that an evicted shape compiles again and
still gives PyTorch's CPU result."""
import json
import os
import subprocess
import sys
import textwrap

import torchtpu._env as env

PROGRAM = textwrap.dedent("""
    import json, sys, torch, torchtpu
    def maps():
        return sum(1 for _ in open("/proc/self/maps"))
    n = int(sys.argv[1])
    wrong, rows = [], []
    for rnd in range(2):  # the second round finds most first-round programs evicted
        for i in range(1, n + 1):
            x = torch.arange(i * 3, dtype=torch.float32).reshape(i, 3) / 7
            got = ((x.to("tpu") * 2 + 1).sin().sum(0)).cpu()
            want = (x * 2 + 1).sin().sum(0)
            if not torch.allclose(got, want, atol=1e-5, rtol=1e-5):
                wrong.append((rnd, i))
            if i % 10 == 0:
                rows.append(maps())
    st = torch.tpu._get_cache_stats()
    print(json.dumps({"wrong": wrong, "maps": rows, "live": st["live_programs"],
                      "evictions": st["program_cache_evictions"],
                      "bytes": st["program_cache_bytes"], "compiles": st["compiles"],
                      "disk_hits": st["disk_hits"], "disk_writes": st["disk_writes"]}))
""")


def run(n, bound=None, cache_dir=""):
    e = dict(os.environ, TORCHTPU_CACHE_DIR=cache_dir)  # "": every program compiled here
    e.pop("TORCHTPU_PROGRAM_CACHE_MAX_BYTES", None)
    if bound is not None:
        e["TORCHTPU_PROGRAM_CACHE_MAX_BYTES"] = bound
    p = subprocess.run([sys.executable, "-c", PROGRAM, str(n)], env=e, text=True,
                       capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_default_bound_is_set():
    os.environ.pop("TORCHTPU_PROGRAM_CACHE_MAX_BYTES", None)
    assert env.program_cache_max_bytes() == env.DEFAULT_PROGRAM_CACHE_MAX_BYTES == 1 << 30


def test_small_bound_evicts_and_recompiles_correctly():
    # 2 MiB holds about 7 programs (256 KiB each plus text); 30 shapes of
    # three ops each make 90, twice over.
    r = run(30, "2M")
    assert r["wrong"] == []
    assert r["evictions"] > 60
    assert 0 < r["live"] <= 10
    assert 0 < r["bytes"] <= 2 << 20
    # The second round compiles again what was evicted.
    assert r["compiles"] > 150
    # Mappings stop growing once the cache is full (the last rows within a
    # few dozen of each other), where unbounded they grow ~4 per program.
    late = r["maps"][2:]
    assert max(late) - min(late) < 60, r["maps"]


def test_small_bound_with_disk_cache(tmp_path):
    """With the disk cache on, an entry is sized from the disk cache's
    serialised payload (not serialised a second time); evicted programs come
    back from disk with the same results and the same bound."""
    r = run(30, "2M", str(tmp_path))
    assert r["wrong"] == []
    assert r["disk_writes"] >= 90 and r["disk_hits"] > 60
    assert r["evictions"] > 60
    assert 0 < r["live"] <= 10
    assert 0 < r["bytes"] <= 2 << 20


def test_unbounded_when_zero():
    r = run(15, "0")
    assert r["wrong"] == []
    assert r["evictions"] == 0
    assert r["live"] >= 45
