#!/usr/bin/env bash
# Set up and run the main job on the embedded default (retail-sim).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
exec .venv/bin/trace-rl expert "$@"
