#!/usr/bin/env bash
# Everything CI runs: the core's layering check, setup, the core's C tests
# (plain and ASan+UBSan), then the Python test suite on the real XLA CPU plugin.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 scripts/check_layers.py
bash scripts/setup.sh
make -j2 PYTHON=.venv/bin/python ctest
.venv/bin/python -m pytest tests/ -q
