#!/usr/bin/env bash
# Installs vLLM 0.29.0 for "tpu" into the project's virtual environment
# (docs/vllm.md), keeping its torch 2.13.0:
#
#   bash scripts/setup_vllm.sh          # after scripts/setup.sh
#   VENV=/path/to/venv bash scripts/setup_vllm.sh
#
# vLLM's wheels on the package index carry CUDA kernels and their own torch;
# its sdist builds as pure Python with VLLM_TARGET_DEVICE=empty. pip's
# resolver will not pick that sdist by version (the built metadata says
# 0.29.0+empty), so the file itself is fetched, checked against its sha256
# and installed with --no-deps --no-build-isolation (the venv's torch builds
# it). cargo is kept off the PATH so vLLM's optional Rust frontend is not
# built. vLLM's runtime dependencies are then installed one by one with
# --no-deps, each at the version range vLLM's requirements/common.txt gives,
# only those missing: none of them may pull another torch, and the script
# checks at the end that torch is still the version it found.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
VLLM_VERSION=0.29.0
SDIST_URL="https://files.pythonhosted.org/packages/88/fe/d87b6daf7f02a16464b50685dcf8e0ee7c6e12ad4d2b7107c41717d8566c/vllm-0.29.0.tar.gz"
SDIST_SHA256=c03feb07943ecae9e69e7dc424d7c5569ecf8d1292513aef2a4de67af381cd97
CACHE="${TORCHTPU_VLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchtpu/vllm}"
SDIST="${VLLM_SDIST:-$CACHE/vllm-$VLLM_VERSION.tar.gz}"

# Build-time only (vLLM's setup.py imports them): no torch among their deps.
BUILD_DEPS="setuptools-scm setuptools-rust vcs-versioning semantic_version"
# What `LLM(...)`, `vllm serve` and their imports need beyond what
# scripts/setup.sh installs (transformers, tokenizers, safetensors, numpy,
# pydantic, ...). Found by importing vLLM's entry points until nothing was
# missing.
RUNTIME_DEPS="cloudpickle msgspec pyzmq cbor2 pybase64 blake3 cachetools psutil py-cpuinfo
  setproctitle einops prometheus_client prometheus-fastapi-instrumentator partial-json-parser
  aiohttp multidict attrs yarl propcache aiohappyeyeballs aiosignal frozenlist
  openai openai-harmony distro jiter sniffio uvloop llguidance xgrammar apache-tvm-ffi
  fastapi starlette uvicorn watchfiles python-multipart model-hosting-container-standards
  jmespath sentencepiece"

start=$(date +%s)
[ -x "$PY" ] || { echo "setup_vllm: no Python at $PY; run scripts/setup.sh first" >&2; exit 1; }
TORCH_BEFORE=$("$PY" -c "import importlib.metadata as m; print(m.version('torch'))")
pip_q() { "$PY" -m pip install -q --no-deps "$@"; }
installed() { "$PY" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$1" 2>/dev/null; }

# --- the sdist ---------------------------------------------------------------------------------
if "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm') != '$VLLM_VERSION+empty')" 2>/dev/null \
    && [ "${FORCE:-0}" != 1 ]; then
  echo "setup_vllm: vllm $VLLM_VERSION+empty already installed (FORCE=1 rebuilds)"
else
  mkdir -p "$(dirname "$SDIST")"
  if [ ! -f "$SDIST" ]; then
    echo "setup_vllm: fetching $SDIST_URL"
    curl -sSfL -o "$SDIST.part" "$SDIST_URL"
    mv "$SDIST.part" "$SDIST"
  fi
  echo "$SDIST_SHA256  $SDIST" | sha256sum -c --quiet - \
    || { echo "setup_vllm: $SDIST does not match its sha256; delete it and rerun" >&2; exit 1; }
  for p in $BUILD_DEPS; do installed "$p" || pip_q "$p"; done
  echo "setup_vllm: building vllm $VLLM_VERSION (VLLM_TARGET_DEVICE=empty, pure Python)"
  NOCARGO_PATH=$(echo "$PATH" | tr ':' '\n' | grep -v -E 'cargo|rustup' | paste -sd: -)
  # TORCH_DEVICE_BACKEND_AUTOLOAD=0: the build imports torch, which need not
  # load torchtpu (a half-built tree must not fail vLLM's build).
  env PATH="$NOCARGO_PATH" CARGO=/nonexistent VLLM_TARGET_DEVICE=empty \
      TORCH_DEVICE_BACKEND_AUTOLOAD=0 MAX_JOBS=2 \
      "$PY" -m pip install -q --no-build-isolation --no-deps "$SDIST"
fi

# --- runtime dependencies, each alone --------------------------------------------------------------
REQS=$(mktemp)
tar -xOzf "$SDIST" "vllm-$VLLM_VERSION/requirements/common.txt" > "$REQS" 2>/dev/null || true
for p in $RUNTIME_DEPS; do
  installed "$p" && continue
  # the line of vLLM's requirements naming p (its version range), else p
  norm=$(echo "$p" | tr '_' '-' | tr 'A-Z' 'a-z')
  spec=$(sed 's/#.*//; s/;.*//; s/\[[^]]*\]//' "$REQS" | tr -d ' ' | awk -v p="$norm" '
    { n=tolower($0); sub(/[<>=!~].*/, "", n); gsub(/_/, "-", n); if (n==p) { print $0; exit } }')
  echo "setup_vllm: installing ${spec:-$p}"
  pip_q "${spec:-$p}"
done
rm -f "$REQS"

# --- torchtpu's entry point, torch unchanged ------------------------------------------------------
if ! "$PY" -c "
import importlib.metadata as m, sys
eps = m.entry_points(group='vllm.platform_plugins')
sys.exit(0 if any(e.value == 'torchtpu.vllm:register' for e in eps) else 1)" 2>/dev/null; then
  echo "setup_vllm: registering torchtpu's vllm.platform_plugins entry point (pip install -e .)"
  (cd "$ROOT" && "$PY" -m pip install -q -e . --no-build-isolation --no-deps)
fi
TORCH_AFTER=$("$PY" -c "import importlib.metadata as m; print(m.version('torch'))")
if [ "$TORCH_AFTER" != "$TORCH_BEFORE" ]; then
  echo "setup_vllm: torch changed from $TORCH_BEFORE to $TORCH_AFTER" >&2
  exit 1
fi
"$PY" -c "import vllm; from vllm import LLM; import torchtpu.vllm.platform" >/dev/null 2>&1 \
  || { echo "setup_vllm: 'from vllm import LLM' fails; run it to see why" >&2; exit 1; }
echo "setup_vllm: vllm $VLLM_VERSION on torch $TORCH_AFTER ready ($(( $(date +%s) - start )) s)"
