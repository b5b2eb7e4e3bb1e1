#!/usr/bin/env bash
# Set up and run the main job: TRACE end to end on the embedded default (retail-sim, quick preset).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
exec .venv/bin/trace-rl pipeline preset=quick "$@"
