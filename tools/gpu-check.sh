#!/usr/bin/env bash
# Every GPU check in one run, about 8 minutes (hard limits below add up to 480 s plus start-up):
#   1. the CUDA tests (tests/gpu_backend/test_gpu.py, one worker: one GPU): CUDA against CPU,
#      CUDA's greedy outputs against the kit's float64 reference (spec/RUNNING.md section 5), and
#      the paged attention path (compiled flex_attention, gpu_backend/paged_flex_attention.py)
#      against the gather path (test_cuda_paged_attention_equals_gather: its first compile takes
#      tens of seconds);
#   2. benchmarks/gpu.sh: TTFT warm/cold, paged decode, memory, generated scenarios per minute
#      on CUDA, every figure printed (sections stop starting at 240 s; a failing one is reported
#      and the next runs).
#   tools/gpu-check.sh            # exit 0 only when both parts passed
# Python: $PYTHON, else .venv/bin/python; it needs a CUDA build of torch.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
export PYTHON="$PY"
"$PY" -c 'import sys, torch; print("torch", torch.__version__, "cuda", torch.version.cuda); sys.exit(0 if torch.cuda.is_available() else 1)' \
  || { echo "gpu-check: no CUDA device (torch.cuda.is_available() is False)" >&2; exit 2; }
started=$(date +%s)
tests_rc=0
bench_rc=0
echo "== 1/2 CUDA tests (limit 210 s)"
timeout 210 "$PY" -m pytest -q -rA -p no:cacheprovider -m gpu tests/gpu_backend/test_gpu.py || tests_rc=$?
echo "== 1/2 done: exit $tests_rc after $(( $(date +%s) - started )) s"
echo "== 2/2 benchmarks/gpu.sh (limit 270 s)"
GPU_BENCH_TIMEOUT=270 benchmarks/gpu.sh --limit 240 || bench_rc=$?
echo "== 2/2 done: exit $bench_rc"
echo "gpu-check: tests exit $tests_rc, benchmarks exit $bench_rc, $(( $(date +%s) - started )) s in all"
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
