#!/usr/bin/env bash
# The test command: set up .venv (CPU torch where no NVIDIA GPU exists) and run the default
# test suite on all cores. Extra arguments go to pytest (e.g. `tools/test.sh -m slow`);
# `tools/test.sh --print-workers` prints the number of pytest workers it would start.
set -euo pipefail
cd "$(dirname "$0")/.."
# Count the cores first: GNU nproc honours OMP_NUM_THREADS and OMP_THREAD_LIMIT, so asking it
# after the export below would always answer 1. `env -u` asks for the CPUs this process may use.
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
# One worker more than the cores: tests wait too (processes that start torch, a browser,
# backends made to hang until a timeout), and the spare worker runs meanwhile. On 2 cores the
# default run took 271 s with 2 workers and 243 s with 3.
WORKERS=${KVCONFORM_TEST_WORKERS:-$((CORES + 1))}
# Compiled modules are written (to __pycache__, ignored by git) even where the environment sets
# PYTHONDONTWRITEBYTECODE: the tests start several hundred Python processes, and each would compile
# the kit's modules again (tests/robustness: 120 s of CPU without, 107 s with, from a cold cache).
unset PYTHONDONTWRITEBYTECODE
# One BLAS thread per pytest worker: the workers already use every core.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
if [ "${1:-}" = "--print-workers" ]; then echo "$WORKERS"; exit 0; fi
PY=$(tools/setup_env.sh | tail -n 1)
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${GPUS:-0}" -gt 0 ] && [ "$#" -eq 0 ]; then
  # A GPU machine: the CPU tests on every core, then the CUDA tests one worker per GPU (workers
  # sharing one device would contend for its memory and time each other's kernels).
  rc=0
  "$PY" -m pytest -n "$WORKERS" --dist worksteal -q -m 'not slow and not ray and not external and not gpu' || rc=$?
  "$PY" -m pytest -n "$GPUS" -q -m 'gpu and not slow' || rc=$((rc ? rc : $?))
  exit "$rc"
fi
exec "$PY" -m pytest -n "$WORKERS" --dist worksteal -q "$@"
