#!/usr/bin/env bash
# Set up and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,tau2,swe
exec .venv/bin/python -m pytest -q "$@"
