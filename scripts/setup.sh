#!/usr/bin/env bash
# Create .venv (Python 3.11) and install trace-rl with the extras given as arguments (default: dev).
# torch goes first, pinned to 2.13.0; everything else is installed under that constraint so pip never
# replaces it. Where pip's index serves the CUDA build (plain PyPI on Linux), set TORCH_INDEX_URL to
# https://download.pytorch.org/whl/cpu for the CPU one.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
extras=${1:-dev}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
.venv/bin/python -m pip install -q -c constraints.txt -e ".[${extras}]"
