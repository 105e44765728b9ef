"""Runs a function on N ranks in N fresh processes, the way torchrun would
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
and returns what each rank's call returned. Used by the distributed tests.

    results = run("dist_workers:collectives", world_size=2, timeout=120, args={...})

`target` is "module:function"; the function gets `args` (a JSON-able dict)
and returns a JSON-able value. Every rank runs under a wall-clock bound:
past `timeout` seconds all ranks are killed and TimeoutError is raised; a
rank that fails raises RuntimeError carrying its traceback (and the others')."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(target, world_size, timeout, args=None, env=None, expect_failure=False):
    """Returns [result of rank 0, ...]. With expect_failure, returns
    [(returncode, stderr text, result or None), ...] instead of raising when a
    rank fails (a timeout still raises)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="torchtpu-ranks-") as tmp:
        procs = []
        for rank in range(world_size):
            e = dict(os.environ)
            e.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                      "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1",
                      "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
                      "PYTHONUNBUFFERED": "1"})
            e.pop("TORCHTPU_CPU_DEVICES", None)
            e.update(env or {})
            out = os.path.join(tmp, f"rank{rank}.json")
            err = open(os.path.join(tmp, f"rank{rank}.err"), "w+")
            cmd = [sys.executable, "-c",
                   "from torchtpu.testing.multiprocess import _rank_main; _rank_main()",
                   target, json.dumps(args or {}), out]
            procs.append((subprocess.Popen(cmd, env=e, stdout=err, stderr=subprocess.STDOUT), err,
                          out))
        deadline = time.monotonic() + timeout
        try:
            for p, _, _ in procs:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            texts = _texts(procs, kill=True)
            raise TimeoutError(f"{target} on {world_size} ranks: not done after {timeout} s\n"
                               + "\n".join(f"--- rank {r} ---\n{t[-3000:]}"
                                           for r, t in enumerate(texts))) from None
        texts = _texts(procs)
        results = []
        for (p, _, out), text in zip(procs, texts):
            value = None
            if os.path.exists(out):
                with open(out) as f:
                    value = json.load(f)
            results.append((p.returncode, text, value))
        if expect_failure:
            return results
        if any(rc != 0 for rc, _, _ in results):
            raise RuntimeError(f"{target} on {world_size} ranks failed:\n" + "\n".join(
                f"--- rank {r} (exit {rc}) ---\n{text[-4000:]}"
                for r, (rc, text, _) in enumerate(results) if rc != 0))
        return [value for _, _, value in results]


def _texts(procs, kill=False):
    texts = []
    for p, err, _ in procs:
        if kill and p.poll() is None:
            p.kill()
            p.wait()
        err.seek(0)
        texts.append(err.read())
        err.close()
    return texts


def _rank_main():
    import importlib

    target, args, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    module, name = target.split(":")
    result = getattr(importlib.import_module(module), name)(args)
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)
