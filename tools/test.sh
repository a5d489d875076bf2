#!/usr/bin/env bash
# The test command: set up .venv (CPU torch where no NVIDIA GPU exists) and run the default
# test suite on all cores. Extra arguments go to pytest (e.g. `tools/test.sh -m slow`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(tools/setup_env.sh | tail -n 1)
# One BLAS thread per pytest worker: the workers already use every core.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
WORKERS=${KVCONFORM_TEST_WORKERS:-$(nproc)}
exec "$PY" -m pytest -n "$WORKERS" -q "$@"
