#!/usr/bin/env bash
# Sets up a development checkout: .venv with pinned PyTorch and the CPU PJRT
# plugin, the native libraries, and torchtpu installed in editable mode.
# Idempotent, and quick when everything is already in place.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION=2.13.0
# The CPU PJRT plugin (XLA's, packaged on PyPI) is pinned below: 0.11.2.
PY=.venv/bin/python

if [ ! -x "$PY" ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi

# Install only what is missing (pip's resolver is slow even when satisfied).
mapfile -t missing < <("$PY" - "$TORCH_VERSION" <<'PYEOF'
import importlib.metadata as md, sys
want = {"torch": sys.argv[1], "lammps-jax-pjrt-cpu": "0.11.2",
        "numpy": None, "pytest": None, "expecttest": None,
        # tests/test_transformers.py; none of these requires torch.
        "transformers": "5.24.0", "huggingface-hub": "2.4.0", "tokenizers": "0.23.3",
        "safetensors": "0.8.0", "pyyaml": "6.0.4", "regex": "2026.11.19",
        "tqdm": "4.70.1", "typer": "0.29.2",
        # the "kernels" extra (pyproject.toml): JAX/Pallas kernels and their tests
        "jax": "0.10.2", "jaxlib": "0.10.2"}
for name, version in want.items():
    try:
        have = md.version(name).split("+")[0]
    except md.PackageNotFoundError:
        have = None
    if have is None or (version is not None and have != version):
        print(f"{name}=={version}" if version else name)
PYEOF
)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  # torch==2.13.0 resolves to the CPU build on this machine's local index.
  "$PY" -m pip install --quiet "${missing[@]}"
fi

make -j2 PYTHON="$PY"

# (Re)install when missing or when its metadata predates the Dynamo or the
# torch.backends (autoload) entry point.
if ! "$PY" -c "import importlib.metadata as m; m.version('torchtpu'); \
    assert any(e.name == 'tpu' for e in m.entry_points(group='torch_dynamo_backends')); \
    assert any(e.value.startswith('torchtpu') for e in m.entry_points(group='torch.backends'))" \
    2>/dev/null; then
  echo "setup: installing torchtpu (editable)"
  "$PY" -m pip install --quiet --no-build-isolation --no-deps -e .
fi
