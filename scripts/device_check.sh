#!/usr/bin/env bash
# device_check.sh — what to run on a lent accelerator machine, in under five
# minutes, from a working tree of at most 64 MiB (build outputs are made
# there, nothing is downloaded). Where no accelerator plugin is installed the
# CPU plugin stands in, so CI runs the same script.
#
#   OUT=/some/dir bash scripts/device_check.sh [--llama]
#
# Steps, each timed and recorded; a failed step does not stop the later ones:
#   env           machine, GPU (nvidia-smi), python, torch, the plugin chosen
#   build_core    make core and the core's C tests (no PyTorch needed)
#   core_tests    core/tests: test_abi test_pjrt test_collective test_runtime
#                 against the plugin (TORCHTPU_PLUGIN_PATH)
#   plugin_check  python torchtpu/tools/plugin_check.py PLUGIN --json
#   build_shim    make shim against the machine's torch (skipped when torch is
#                 missing; a failure is recorded: the shim targets torch 2.13)
#   smoke         scripts/device_smoke.py: tensors, sdpa (the lowering, not the
#                 CPU attention kernel), an MLP step and a compiled step, each
#                 against PyTorch on the CPU; --llama adds the llama debug
#                 step's timings (tpu strict / compile; cuda eager / compile)
#
# The plugin: $PLUGIN if set; else XLA's CUDA plugin from the machine's Python
# (jax_plugins/xla_cuda13 or xla_cuda12 / xla_cuda_plugin.so); else none set,
# and the core's discovery picks the CPU plugin.
#
# Results under $OUT (default ./device_check_out):
#   summary.txt         one line per step: STATUS STEP SECONDS DETAIL, STATUS
#                       one of PASS FAIL SKIP; the last line "RESULT PASS|FAIL"
#   env.txt             the machine and versions
#   <step>.log          each step's output
#   plugin_check.json   the tool's report (lines, ok, step, error)
#   smoke.json          the smoke checks (and llama figures)
# Exit status: 0 when no step failed.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-device_check_out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LLAMA=0
for a in "$@"; do [ "$a" = "--llama" ] && LLAMA=1; done
if [ -x .venv/bin/python ]; then PY=${PYTHON:-.venv/bin/python}; else PY=${PYTHON:-python3}; fi
JOBS=$(nproc 2>/dev/null || echo 2)
: > "$OUT/summary.txt"
FAILED=0

# step NAME TIMEOUT COMMAND...: runs it, logs to $OUT/NAME.log, records it.
step() {
  local name=$1 limit=$2; shift 2
  local t0 t1 rc
  t0=$(date +%s.%N)
  # Through bash -c, so that exported functions (run_core_tests) run too.
  timeout "$limit" bash -c '"$@"' bash "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  local detail
  detail=$(tail -n 1 "$OUT/$name.log" | tr -s '\t ' ' ' | cut -c1-160)
  if [ $rc -eq 0 ]; then
    echo "PASS $name $secs $detail" >> "$OUT/summary.txt"
  else
    [ $rc -eq 124 ] && detail="timed out after ${limit}s; $detail"
    echo "FAIL $name $secs rc=$rc $detail" >> "$OUT/summary.txt"
    FAILED=$((FAILED + 1))
  fi
  tail -n 1 "$OUT/summary.txt"
  return $rc
}

skip() {
  echo "SKIP $1 0.0 $2" >> "$OUT/summary.txt"
  tail -n 1 "$OUT/summary.txt"
}

# --- the plugin -------------------------------------------------------------------

if [ -z "${PLUGIN:-}" ]; then
  PLUGIN=$("$PY" - <<'EOF' 2>/dev/null
import importlib.util, os
for pkg in ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12"):
    try:
        spec = importlib.util.find_spec(pkg)
    except ImportError:
        continue
    if spec and spec.submodule_search_locations:
        so = os.path.join(list(spec.submodule_search_locations)[0], "xla_cuda_plugin.so")
        if os.path.isfile(so):
            print(so)
            break
EOF
)
fi
if [ -n "$PLUGIN" ]; then export TORCHTPU_PLUGIN_PATH=$PLUGIN; else unset TORCHTPU_PLUGIN_PATH; fi
export TORCHTPU_SITE_PACKAGES=${TORCHTPU_SITE_PACKAGES:-$("$PY" -c "import site; print(':'.join(site.getsitepackages()))")}
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}

# --- env ------------------------------------------------------------------------

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm), $(nproc) cores"
  echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo none)"
  echo "python: $("$PY" -V 2>&1) ($PY)"
  echo "torch: $("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo none)"
  echo "plugin: ${PLUGIN:-(discovery: the CPU plugin)}"
  echo "uptime: $(uptime)"
} > "$OUT/env.txt"
cat "$OUT/env.txt"
echo "PASS env 0.0 $(grep '^gpu:' "$OUT/env.txt" | cut -c1-120)" >> "$OUT/summary.txt"

# --- core -------------------------------------------------------------------------

CORE_TESTS=${CORE_TESTS:-"test_abi test_pjrt test_collective test_runtime"}
bins=""
for t in $CORE_TESTS; do bins="$bins build/tests/$t"; done
# shellcheck disable=SC2086
step build_core 240 make -j"$JOBS" PYTHON="$PY" core $bins

run_core_tests() {
  local failed=0
  for t in $CORE_TESTS; do
    echo "== $t"
    if timeout 120 "build/tests/$t"; then echo "ok $t"; else echo "FAILED $t"; failed=$((failed + 1)); fi
  done
  echo "core tests: $failed failed of $(echo $CORE_TESTS | wc -w)"
  return $failed
}
export -f run_core_tests
export CORE_TESTS
step core_tests 300 run_core_tests

# --- plugin_check -------------------------------------------------------------------

run_plugin_check() {
  "$PY" torchtpu/tools/plugin_check.py ${PLUGIN:+"$PLUGIN"} > "$OUT/plugin_check.txt" 2>&1
  local rc=$?
  cat "$OUT/plugin_check.txt"
  "$PY" torchtpu/tools/plugin_check.py ${PLUGIN:+"$PLUGIN"} --json 2>/dev/null | tail -n 1 > "$OUT/plugin_check.json"
  return $rc
}
export -f run_plugin_check
export OUT PY PLUGIN
step plugin_check 120 run_plugin_check

# --- shim and Python -----------------------------------------------------------------

if ! "$PY" -c "import torch" > /dev/null 2>&1; then
  skip build_shim "no torch in $PY"
  skip smoke "no torch in $PY"
elif step build_shim 300 make -j"$JOBS" PYTHON="$PY" shim; then
  args=()
  [ $LLAMA -eq 1 ] && args+=(--llama)
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  step smoke 420 "$PY" scripts/device_smoke.py "$OUT/smoke.json" ${args[@]+"${args[@]}"}
else
  skip smoke "the shim did not build against this torch (build_shim.log)"
fi

if [ $FAILED -eq 0 ]; then echo "RESULT PASS" >> "$OUT/summary.txt"; else echo "RESULT FAIL ($FAILED steps)" >> "$OUT/summary.txt"; fi
echo "device_check: $(tail -n 1 "$OUT/summary.txt"); results in $OUT"
[ $FAILED -eq 0 ]
