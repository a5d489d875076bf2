#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv.
#
# Installs the CPU build of torch first when no NVIDIA GPU is present: a bare `torch`
# requirement would otherwise pull a multi-GB CUDA build. Then installs the project with
# its test and benchmark extras (the benchmark smoke test draws the plot). Safe to re-run;
# prints the interpreter path on the last line.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${KVCONFORM_VENV:-.venv}
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true

TORCH_VERSION=2.13.0
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip install --quiet "torch==$TORCH_VERSION"
  else
    # The CPU wheel: from the local disk where the workplace provides it, else PyTorch's CPU index.
    "$VENV/bin/python" -m pip install --quiet "torch==$TORCH_VERSION" \
      || "$VENV/bin/python" -m pip install --quiet "torch==$TORCH_VERSION" \
           --index-url https://download.pytorch.org/whl/cpu
  fi
fi
"$VENV/bin/python" -m pip install --quiet -e ".[test,bench]"
echo "$VENV/bin/python"
