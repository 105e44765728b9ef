"""The import hook: `import torch_xla.X.Y` gives the module torchtpu.xla.X.Y.

A sys.meta_path finder, placed first by install(), answers for "torch_xla"
and its submodules only; its loader imports the torchtpu.xla module and
returns that same object, so torch_xla.core.xla_model and
torchtpu.xla.core.xla_model are one module (one state). Nothing named
torch_xla is installed anywhere: without the hook (a process that never
imports torchtpu.xla) a real PyTorch/XLA install imports as usual. A
torch_xla submodule this layer does not provide raises ModuleNotFoundError
naming it and the migration guide."""
import importlib
import importlib.abc
import importlib.util
import sys

PREFIX = "torch_xla"
TARGET = "torchtpu.xla"
GUIDE = "docs/migrating_from_torch_xla.md"


def target_name(fullname):
    """torch_xla.core.xla_model -> torchtpu.xla.core.xla_model."""
    return TARGET + fullname[len(PREFIX):]


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target):
        self.target = target

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        if spec.name == PREFIX:
            from . import _device

            _device.enable()  # a PyTorch/XLA script: "xla" means this process's tpu
        return module

    def exec_module(self, module):
        # Already executed under its torchtpu.xla name; the import system set
        # __spec__ to the alias's, give the module its own back.
        module.__spec__ = self.own_spec


class TorchXlaFinder(importlib.abc.MetaPathFinder):
    """Resolves torch_xla[.*] to torchtpu.xla[.*]."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != PREFIX and not fullname.startswith(PREFIX + "."):
            return None
        name = target_name(fullname)
        try:
            found = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            found = None
        if found is None:
            raise ModuleNotFoundError(
                f"{fullname}: this PyTorch/XLA module has no torchtpu equivalent yet "
                f"(torchtpu's migration layer provides the modules listed in {GUIDE})",
                name=fullname)
        spec = importlib.util.spec_from_loader(fullname, _AliasLoader(name),
                                               is_package=found.submodule_search_locations
                                               is not None)
        if found.submodule_search_locations is not None:
            spec.submodule_search_locations = list(found.submodule_search_locations)
        return spec


def install():
    """Puts the finder first on sys.meta_path (idempotent)."""
    if not any(isinstance(f, TorchXlaFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, TorchXlaFinder())


def installed():
    return any(isinstance(f, TorchXlaFinder) for f in sys.meta_path)
