"""Every test runs with torchtpu imported: the "tpu" device is registered.

The persistent compilation cache points at a fresh directory for the test
session (removed at exit), so tests see real compiles whatever
~/.cache/torchtpu holds.

The host tier is off (TORCHTPU_COMPILE_AFTER=0) unless a run sets it: tests
check the device's programs against PyTorch's CPU results, and the host
tier runs a new signature's first calls with PyTorch's CPU kernels, which
would compare the CPU with itself. tests/test_host_tier.py turns it on."""
import atexit
import os
import shutil
import tempfile

_cache = tempfile.mkdtemp(prefix="torchtpu-test-cache-")
os.environ["TORCHTPU_CACHE_DIR"] = _cache
os.environ.setdefault("TORCHTPU_COMPILE_AFTER", "0")
atexit.register(shutil.rmtree, _cache, ignore_errors=True)

import torchtpu  # noqa: F401,E402


import pytest  # noqa: E402


@pytest.fixture
def no_fallback():
    """No CPU fallback allowed inside the test: an op without a tpu rule raises."""
    prev = torchtpu.fallback_mode()
    torchtpu.set_fallback_mode("error")
    yield
    torchtpu.set_fallback_mode(prev)


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches and torchtpu.compile's counters start empty and are
    emptied again after the test. A file applies it to all its tests with
    `pytestmark = pytest.mark.usefixtures("fresh_dynamo")`."""
    import torch
    from torchtpu import compile as tpu_compile
    torch._dynamo.reset()
    tpu_compile.reset_stats()
    yield
    torch._dynamo.reset()
