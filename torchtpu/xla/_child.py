"""One process of xmp.spawn: `python -m torchtpu.xla._child meta.pkl job.pkl`.

Imports torchtpu.xla (torch_xla then resolves), makes the device LOCAL_RANK
current, loads the parent's main script as __mp_main__ (also __main__, so a
function pickled from it resolves; its `if __name__ == "__main__":` block
does not run), then unpickles (fn, args) and calls fn(global ordinal, *args)."""
import os
import pickle
import runpy
import sys
import types

import torch

import torchtpu.xla  # noqa: F401  the import hook, before the script's imports
from torchtpu.xla import _device, _world


def _load_main(path):
    main = types.ModuleType("__mp_main__")
    main.__file__ = path
    sys.modules["__mp_main__"] = sys.modules["__main__"] = main
    main.__dict__.update(runpy.run_path(path, run_name="__mp_main__"))


def main():
    with open(sys.argv[1], "rb") as f:
        meta = pickle.load(f)
    with open(sys.argv[2], "rb") as f:
        raw = f.read()
    sys.path[:] = meta["sys_path"]
    sys.argv[:] = meta["argv"]
    os.chdir(meta["cwd"])
    torch.tpu.set_device(_world.local_rank())
    _device.enable()
    if meta["main"]:
        _load_main(meta["main"])
    fn, args = pickle.loads(raw)
    fn(_world.rank(), *args)


if __name__ == "__main__":
    main()
