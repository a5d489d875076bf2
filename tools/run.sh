#!/usr/bin/env bash
# The main job: set up .venv (CPU torch where no NVIDIA GPU exists), then run the
# conformance suite (`kvconform run`) with the given arguments; the default is the bundled
# backend on small default engines.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(tools/setup_env.sh | tail -n 1)
exec "$(dirname "$PY")/kvconform" run "$@"
