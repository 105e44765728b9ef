"""torch_xla.utils.utils (xu): the helpers PyTorch/XLA scripts use."""
import os
import shutil
import tempfile


class SampleGenerator:
    """Yields `data` sample_count times (fake data for benchmarks); len() is sample_count."""

    def __init__(self, data, sample_count):
        self._data = data
        self._count = sample_count

    def __iter__(self):
        for _ in range(self._count):
            yield self._data

    def __len__(self):
        return self._count


class DataWrapper:
    """Base of data holders whose tensors are listed by get_tensors()."""

    def get_tensors(self):
        raise NotImplementedError("DataWrapper subclasses implement get_tensors()")

    def from_tensors(self, tensors):
        raise NotImplementedError("DataWrapper subclasses implement from_tensors()")


class TmpFolder:
    """A temporary directory removed when the object is."""

    def __init__(self):
        self.name = tempfile.mkdtemp()

    def __del__(self):
        shutil.rmtree(self.name, ignore_errors=True)


def getenv_as(name, type, defval=None):  # noqa: A002  PyTorch/XLA's signature
    value = os.environ.get(name)
    if value is None:
        return defval
    if type is bool:
        return value.lower() in ("1", "true", "yes", "on")
    return type(value)


def check_env_flag(name, default=""):
    return os.environ.get(name, default).upper() in ("ON", "1", "YES", "TRUE", "Y")


def parse_xla_device(device):
    """("TPU", 0) for "tpu:0"/"xla:0"."""
    kind, _, index = str(device).partition(":")
    return kind.upper(), int(index or 0)


def __getattr__(name):
    raise AttributeError(f"torch_xla.utils.utils.{name} is not provided by torchtpu's "
                         "migration layer (docs/migrating_from_torch_xla.md)")
