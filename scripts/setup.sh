#!/usr/bin/env bash
# Create .venv (Python 3.11) and install trace-rl with the extras given as arguments (default: dev).
# torch goes first, pinned to the CPU build; everything else is installed under that constraint so
# pip never pulls a multi-GB CUDA torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
extras=${1:-dev}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -c constraints.txt -e ".[${extras}]"
