"""Every test runs with torchtpu imported: the "tpu" device is registered.

The persistent compilation cache points at a fresh directory for the test
session, so tests see real compiles whatever ~/.cache/torchtpu holds."""
import os
import tempfile

os.environ["TORCHTPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="torchtpu-test-cache-")

import torchtpu  # noqa: F401,E402
