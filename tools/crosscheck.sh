#!/usr/bin/env bash
# Cross-check a runtime's own cache classes against the oracle (docs/crosscheck.md).
#
#   tools/crosscheck.sh vllm==0.32.0|vllm==0.33.0|sglang==0.5.23 [kvconform crosscheck options]
#
# Opt-in, not part of the default tests (the pytest marker `external` runs it). Installs the
# runtime into .kvconform-cache/crosscheck/<runtime>-<version>/ the first time (minutes; see
# tools/crosscheck/install.sh), then runs `kvconform crosscheck --runtime SPEC` at low priority
# (nice 10: the installs and long streams are heavy on a shared 2-core machine). Default report:
# kvconform-crosscheck/<runtime>-<version>/. Exit status: kvconform's.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SPEC="${1:?usage: tools/crosscheck.sh vllm==0.32.0|vllm==0.33.0|sglang==0.5.23 [options]}"
shift
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
exec nice -n 10 "$PYTHON" -m conformance.cli crosscheck --runtime "$SPEC" "$@"
