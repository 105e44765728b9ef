"""The core's layering check (scripts/check_layers.py): clean on this tree,
and failing, with the offending include printed, on a copy of the tree that
breaks each rule. Runs without building anything."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "check_layers.py")


def run_check(root):
    p = subprocess.run([sys.executable, SCRIPT, "--root", root],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout


def test_tree_is_layered():
    rc, out = run_check(ROOT)
    assert rc == 0, out
    assert "layering check: ok" in out


@pytest.fixture
def tree(tmp_path):
    for sub in ("core/src", "core/include", "shim"):
        shutil.copytree(os.path.join(ROOT, sub), tmp_path / sub,
                        ignore=shutil.ignore_patterns("*.o", "*.d"))
    return tmp_path


def add_include(path, header):
    text = path.read_text()
    path.write_text(f'#include "{header}"\n' + text)


@pytest.mark.parametrize("where,header,expect", [
    ("core/src/lower/ctx.c", "runtime/runtime.h", "from the layer above it"),
    ("core/src/hlo/hlo.c", "pjrt/pjrt.h", "from its peer layer pjrt"),
    ("core/src/base/buf.c", "torchtpu.h", "public API header"),
    ("core/src/runtime/storage.c", "runtime/fused.h", "an executor's own header"),
    ("core/src/runtime/graph.c", "runtime/strict.h", "an executor's own header"),
    ("core/src/lower/ctx.c", "hlo/hlo_internal.h", "a private header of hlo/"),
    ("shim/device.cpp", "runtime/runtime.h", "only the public header"),
])
def test_each_rule_fails_and_names_the_include(tree, where, header, expect):
    add_include(tree / where, header)
    rc, out = run_check(str(tree))
    assert rc == 1
    line = next(l for l in out.splitlines() if l.startswith(where))
    assert f'#include "{header}"' in line and expect in line, out
