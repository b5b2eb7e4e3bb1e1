#!/usr/bin/env bash
# Set up and run the test suite (lint of the packages first, then pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,tau2,swe
.venv/bin/ruff check trace_envs trace_train trace_moe generated_envs trace_rl_assets benchmarks tests/packaging setup.py
exec .venv/bin/python -m pytest -q "$@"
