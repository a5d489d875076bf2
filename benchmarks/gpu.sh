#!/usr/bin/env bash
# Items 2-5 of issue 6 on an NVIDIA GPU, in under 8 minutes (benchmarks/gpu.py).
#   benchmarks/gpu.sh [--smoke] [extra args of python -m benchmarks.gpu]
# Python: $PYTHON, else .venv/bin/python, else python3; it needs a CUDA build of torch plus the
# project's dependencies (pip install -e '.[bench]'). Results: benchmarks/results/gpu.{json,png,md}.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ] && .venv/bin/python -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    PY=.venv/bin/python
  else
    PY=python3
  fi
fi
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
# hard stop at 470 s: sections also stop starting after 450 s, and the JSON keeps finished ones
exec timeout 470 "$PY" -m benchmarks.gpu "$@"
