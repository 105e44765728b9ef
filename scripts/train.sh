#!/usr/bin/env bash
# The main job: set up (idempotent), then train the Llama debug model on the
# "tpu" device (torchtpu/configs/llama_debug.toml: 300 steps, a few minutes on
# two CPU cores). Metrics lines, a checkpoint and outputs/llama_debug/loss.png.
# Extra arguments go to the trainer, e.g. --training.steps 50 or
# --checkpoint.resume false (a run continues from the newest checkpoint in
# outputs/ by default); --config picks another file (moe_debug.toml).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
exec .venv/bin/python -m torchtpu.train --config torchtpu/configs/llama_debug.toml "$@"
