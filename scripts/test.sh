#!/usr/bin/env bash
# Everything CI runs: the core's layering check, setup, the core's C tests
# (plain and ASan+UBSan), the fuzz target over its committed corpus and
# earlier findings (libFuzzer, clang >= 15; a deterministic replay: `make
# fuzz-explore` is the mutating run), a subset of the Python suite over the
# sanitized core, then the Python test suite on the real XLA CPU plugin.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 scripts/check_layers.py
bash scripts/setup.sh
make -j2 PYTHON=.venv/bin/python ctest

# The fuzz target needs clang >= 15 and its libFuzzer runtime: installed here
# when this runs as root with apt (a CI machine); otherwise the step says it
# is skipped.
have_clang() { for v in 19 18 17 16 15; do command -v "clang-$v" >/dev/null && return 0; done; return 1; }
if ! have_clang && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get install -y -q clang-16 libclang-rt-16-dev >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q clang-16 libclang-rt-16-dev >/dev/null 2>&1; } ||
    echo "fuzz: could not install clang-16"
fi
make -j2 PYTHON=.venv/bin/python fuzz-run

# A subset of the Python suite over the ASan+UBSan core (about 4 minutes).
make -j2 PYTHON=.venv/bin/python pytest-asan

.venv/bin/python -m pytest tests/ -q --durations=30
