"""Bad input gives a Python exception naming the op, shapes and cause; the
process stays usable afterwards. Plugin problems are tested in subprocesses,
since the runtime is created once per process."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torchtpu  # noqa: F401


def still_usable():
    assert (torch.arange(3, device="tpu") * 2).cpu().tolist() == [0, 2, 4]


def test_mismatched_shapes():
    a, b = torch.randn(2, 3, device="tpu"), torch.randn(4, 5, device="tpu")
    with pytest.raises(RuntimeError) as e:
        a + b
    msg = str(e.value)
    assert "add" in msg and "[2, 3]" in msg and "[4, 5]" in msg
    with pytest.raises(RuntimeError, match="mm"):
        a @ b
    still_usable()


def test_mixing_devices():
    a, b = torch.randn(2, 3, device="tpu"), torch.randn(2, 3)
    with pytest.raises(RuntimeError) as e:
        a + b
    msg = str(e.value)
    assert "add" in msg and "cpu" in msg and "tpu" in msg
    still_usable()


def test_unsupported_dtype():
    with pytest.raises(NotImplementedError) as e:
        torch.zeros(3, dtype=torch.qint8, device="tpu")  # quantized: no tpu storage
    assert "quantized" in str(e.value).lower()
    still_usable()


def test_inplace_cast_error():
    x = torch.ones(3, dtype=torch.int64, device="tpu")
    with pytest.raises(RuntimeError, match="can't be cast"):
        x.add_(torch.randn(3, device="tpu"))
    still_usable()


def run_python(code, **env):
    full = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          env=full, capture_output=True, text=True, timeout=300)


PROBE = """
import torch, torchtpu
try:
    torch.ones(2, device="tpu")
except RuntimeError as e:
    print("ERROR:", e)
print("alive")
"""


def test_missing_plugin_path():
    r = run_python(PROBE, TORCHTPU_PLUGIN_PATH="/nonexistent/libnothing.so")
    assert r.returncode == 0, r.stderr
    assert "ERROR:" in r.stdout and "/nonexistent/libnothing.so" in r.stdout
    assert "alive" in r.stdout


def test_invalid_plugin_file(tmp_path):
    bad = tmp_path / "not_a_plugin.so"
    bad.write_text("this is not a shared library")
    r = run_python(PROBE, TORCHTPU_PLUGIN_PATH=str(bad))
    assert r.returncode == 0, r.stderr
    assert "ERROR:" in r.stdout and "not_a_plugin.so" in r.stdout


def test_incompatible_api_version(tmp_path):
    # A library whose GetPjrtApi reports PJRT API 99.0: built here from C.
    src = tmp_path / "future.c"
    src.write_text(textwrap.dedent("""
        #include <stddef.h>
        struct version { size_t struct_size; void *ext; int major, minor; };
        struct api { size_t struct_size; void *ext; struct version v; void *fns[64]; };
        static struct api a = {sizeof(struct api), 0, {sizeof(struct version), 0, 99, 0}};
        const struct api *GetPjrtApi(void) { return &a; }
    """))
    lib = tmp_path / "libfuture.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    r = run_python(PROBE, TORCHTPU_PLUGIN_PATH=str(lib))
    assert r.returncode == 0, r.stderr
    assert "ERROR:" in r.stdout and "99" in r.stdout
