#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv.
#
# Installs the CPU build of torch first when no NVIDIA GPU is present: a bare `torch`
# requirement would otherwise pull a multi-GB CUDA build. Then installs the project with
# its test, benchmark and mutation extras (the benchmark smoke test draws the plot; the mutation
# campaign's default test needs Cosmic Ray). Safe to re-run (a
# re-run with nothing to do takes a fraction of a second); prints the interpreter path on the
# last line.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${KVCONFORM_VENV:-.venv}
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi

TORCH_VERSION=2.13.0
if ! "$VENV/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)" \
    >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip install --quiet "torch==$TORCH_VERSION"
  else
    # The CPU wheel: from the local disk where the workplace provides it, else PyTorch's CPU index.
    "$VENV/bin/python" -m pip install --quiet "torch==$TORCH_VERSION" \
      || "$VENV/bin/python" -m pip install --quiet "torch==$TORCH_VERSION" \
           --index-url https://download.pytorch.org/whl/cpu
  fi
fi

# The project is installed again only when pyproject.toml changed or the environment does not
# import this checkout: an editable install follows source changes by itself, and a pip run that
# changes nothing costs about 5 s on every `tools/test.sh`.
STAMP="$VENV/.kvconform-pyproject.sha256"
WANT=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ] || ! "$VENV/bin/python" -c \
    "import sys, conformance, pytest; sys.exit(not conformance.__file__.startswith(sys.argv[1]))" "$(pwd)/" \
    >/dev/null 2>&1; then
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  "$VENV/bin/python" -m pip install --quiet -e ".[test,bench,mutate]"
  echo "$WANT" > "$STAMP"
fi
echo "$VENV/bin/python"
