#!/usr/bin/env bash
# Sets up a development checkout: .venv with pinned PyTorch and the CPU PJRT
# plugin, the native libraries, and torchtpu installed in editable mode.
# Idempotent, and quick when everything is already in place.
#
#   bash scripts/setup.sh           # the default set-up (what CI runs)
#   bash scripts/setup.sh --vllm    # and vLLM 0.29.0 for serving on "tpu"
#                                   # (scripts/setup_vllm.sh, docs/vllm.md)
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_VLLM=0
for arg in "$@"; do
  case "$arg" in
    --vllm) WITH_VLLM=1 ;;
    *) echo "setup: unknown option $arg (accepted: --vllm)" >&2; exit 2 ;;
  esac
done

TORCH_VERSION=2.13.0
# The CPU PJRT plugin (XLA's, packaged on PyPI) is pinned below: 0.11.2.
PY=.venv/bin/python

if [ ! -x "$PY" ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi

# Install only what is missing (pip's resolver is slow even when satisfied).
# Two groups: packages installed with their dependencies, and the TorchTitan
# stack, installed with --no-deps (pinned to what it imports: its declared
# dependencies would pull another torch and wandb, and datasets' declared
# ones would downgrade huggingface-hub and fsspec below what transformers
# needs; the versions below import and run together, tests/test_torchtitan.py).
mapfile -t missing < <("$PY" - "$TORCH_VERSION" <<'PYEOF'
import importlib.metadata as md, sys
want = {"torch": sys.argv[1], "lammps-jax-pjrt-cpu": "0.11.2",
        "numpy": None, "pytest": None, "expecttest": None,
        # tests/test_transformers.py; none of these requires torch.
        "transformers": "5.24.0", "huggingface-hub": "2.4.0", "tokenizers": "0.23.3",
        "safetensors": "0.8.0", "pyyaml": "6.0.4", "regex": "2026.11.19",
        "tqdm": "4.70.1", "typer": "0.29.2",
        # the trainer's loss curve (torchtpu/trainer/plot.py); its dependencies
        # (pillow, numpy, ...) require no torch.
        "matplotlib": "3.11.2",
        # the "kernels" extra (pyproject.toml): JAX/Pallas kernels and their tests
        "jax": "0.10.2", "jaxlib": "0.10.2"}
# tests/test_torchtitan.py: torchtitan 0.3.0 and what it imports (triton: its
# MoE token dispatcher imports it at module level, even on CPU-only hosts);
# bench/torchax_llama.py (tests/test_bench_torchax.py): torchax, whose declared
# dependencies would pull another torch.
no_deps = {"torchax": "0.0.13", "torchtitan": "0.3.0", "tyro": "1.0.17",
           "docstring-parser": "0.18.0",
           "typeguard": "4.6.1", "spmd-types": "0.2.3", "torchdata": "0.11.0",
           "tensorboard": "2.21.0", "protobuf": "7.36.2", "absl-py": "2.5.1",
           "triton": "3.9.0", "datasets": "4.7.0", "pandas": "3.1.1",
           "python-dateutil": "4.0.0", "pyarrow": "26.0.1", "multiprocess": "0.70.18",
           "dill": "0.4.0", "httpx": "0.28.1", "requests": "2.34.2", "urllib3": "2.8.0",
           "certifi": "2026.10.19.post1", "xxhash": "4.1.0"}
for group, pins in (("deps", want), ("nodeps", no_deps)):
    for name, version in pins.items():
        try:
            have = md.version(name).split("+")[0]
        except md.PackageNotFoundError:
            have = None
        if have is None or (version is not None and have != version):
            print(group, f"{name}=={version}" if version else name)
PYEOF
)
with_deps=(); without_deps=()
for line in "${missing[@]}"; do
  case "$line" in
    "deps "*) with_deps+=("${line#deps }") ;;
    "nodeps "*) without_deps+=("${line#nodeps }") ;;
  esac
done
if [ ${#with_deps[@]} -gt 0 ]; then
  echo "setup: installing ${with_deps[*]}"
  # torch==2.13.0 resolves to the CPU build on this machine's local index.
  "$PY" -m pip install --quiet "${with_deps[@]}"
fi
if [ ${#without_deps[@]} -gt 0 ]; then
  echo "setup: installing (no dependencies) ${without_deps[*]}"
  "$PY" -m pip install --quiet --no-deps "${without_deps[@]}"
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

if [ "$WITH_VLLM" = 1 ]; then
  bash scripts/setup_vllm.sh
fi
