#!/usr/bin/env bash
# The main job: set up (idempotent), then a training run on the "tpu" device.
# Extra arguments go to the trainer.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
exec .venv/bin/python -m torchtpu.demo "$@"
