#!/usr/bin/env bash
# Benchmark items 2-5 on an NVIDIA GPU, in under 8 minutes (benchmarks/gpu.py; tools/gpu-check.sh adds the CUDA tests).
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
# hard stop at 470 s ($GPU_BENCH_TIMEOUT): sections also stop starting after --limit (450 s), the
# JSON keeps finished ones, and a section that fails is reported while the next one runs (exit 1)
exec timeout "${GPU_BENCH_TIMEOUT:-470}" "$PY" -m benchmarks.gpu "$@"
