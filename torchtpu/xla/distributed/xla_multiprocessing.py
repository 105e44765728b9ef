"""torch_xla.distributed.xla_multiprocessing (xmp): one process per device.

    xmp.spawn(_mp_fn, args=(flags,))    # _mp_fn(index, flags) in every process

spawn starts one process per local device, as torchrun would (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT set; the
device LOCAL_RANK made current), each running fn(global ordinal, *args).
The processes are fresh interpreters that import torchtpu.xla (so torch_xla
resolves) and then the parent's main script as `__mp_main__` (its
`if __name__ == "__main__":` block does not run), as multiprocessing's
spawn does; fn and args are pickled. Under torchrun (the environment is
already there) fn runs in this process. nprocs=1 runs fn(0, *args) here;
another nprocs starts that many processes (XLA's CPU plugin makes as many
devices as asked; PyTorch/XLA ignores such an nprocs and uses every device)."""
import os
import pickle
import subprocess
import sys
import tempfile
import time

import torch

from ...testing.multiprocess import free_port


def _local_devices():
    """Devices on this host, asked of a short-lived interpreter: a TPU's
    chips belong to the first process that opens them, and the workers
    must."""
    from ... import _core
    if _core._rt is not None:
        return torch.tpu.device_count()
    out = subprocess.run([sys.executable, "-c",
                          "import torch, torchtpu; print(torch.tpu.device_count())"],
                         capture_output=True, text=True, check=True)
    return max(1, int(out.stdout.strip().splitlines()[-1]))


def _main_path():
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path and os.path.exists(path) and getattr(main, "__spec__", None) is None:
        return os.path.abspath(path)
    return None


def spawn(fn, args=(), nprocs=None, join=True, daemon=False, start_method="spawn"):
    """Runs fn(index, *args) in one process per device and waits for them;
    raises RuntimeError naming the process that failed (its traceback is on
    stderr). The other processes are stopped when one fails."""
    del daemon, start_method  # fresh interpreters always (spawn)
    if not join:
        raise NotImplementedError("torch_xla.distributed.xla_multiprocessing.spawn(join=False) "
                                  "is not supported on torchtpu: spawn waits for its processes")
    if torch.distributed.is_torchelastic_launched():
        from ... import xla  # noqa: F401
        from .. import _world
        fn(_world.rank(), *args)
        return None
    if nprocs == 1:
        fn(0, *args)
        return None
    n = nprocs or _local_devices()
    with tempfile.TemporaryDirectory(prefix="torchtpu-xmp-") as tmp:
        # Two files: the child loads the main script (meta) before it can
        # unpickle a fn defined there (job).
        meta, job = os.path.join(tmp, "meta.pkl"), os.path.join(tmp, "job.pkl")
        with open(meta, "wb") as f:
            pickle.dump({"main": _main_path(), "argv": list(sys.argv),
                         "sys_path": list(sys.path), "cwd": os.getcwd()}, f)
        with open(job, "wb") as f:
            pickle.dump((fn, tuple(args)), f)
        port = str(free_port())
        procs = []
        for rank in range(n):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
            if int(env.get("TORCHTPU_CPU_DEVICES", "0") or 0) < n:
                env["TORCHTPU_CPU_DEVICES"] = str(n)  # XLA's CPU plugin: a device per process
            procs.append(subprocess.Popen([sys.executable, "-m", "torchtpu.xla._child", meta, job],
                                          env=env))
        _wait(procs)
    return None


def _wait(procs):
    failed = None
    while failed is None and any(p.poll() is None for p in procs):
        failed = next((r for r, p in enumerate(procs) if p.poll() not in (None, 0)), None)
        time.sleep(0.05)
    if failed is None:
        failed = next((r for r, p in enumerate(procs) if p.returncode != 0), None)
    if failed is not None:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        raise RuntimeError(f"xmp.spawn: process {failed} of {len(procs)} exited with code "
                           f"{procs[failed].returncode} (its traceback is above)")


class MpModelWrapper:
    """Holds a model shared by the processes; to(device) moves a copy there
    (each process has its own copy with spawn, as in PyTorch/XLA)."""

    def __init__(self, model):
        self._model = model

    def to(self, device):
        from .. import _device
        return self._model.to(_device.map_device(device))


class MpSerialExecutor:
    """Runs functions one process at a time (in rank order)."""

    def run(self, fn):
        from ..core import xla_model as xm
        from .. import _world
        result = None
        for r in range(_world.world_size()):
            if r == _world.rank():
                result = fn()
            xm.rendezvous("torch_xla.MpSerialExecutor")
        return result


def __getattr__(name):
    raise AttributeError(f"torch_xla.distributed.xla_multiprocessing.{name} is not provided by "
                         "torchtpu's migration layer (docs/migrating_from_torch_xla.md)")
