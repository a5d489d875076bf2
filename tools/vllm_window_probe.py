#!/usr/bin/env python3
"""Probe a real vLLM's prefix cache with prompts of token ids, around a sliding window.

    python tools/vllm_window_probe.py --base-url URL --model NAME --block-size B --window W OUT.json

For tools/real-vllm.sh's sliding-window run. The kit's peer cases lay chat prompts out at block
boundaries; what a sliding-window group keeps of a finished request shows better with prompts
whose shared prefix is far from where the first request ended. Each probe starts from an emptied
cache (`POST /reset_prefix_cache`, trusted only when it answers success) and sends its prompts
one at a time through `POST /v1/completions` with the prompt as token ids (`max_tokens` 1,
greedy), recording `usage.prompt_tokens` and `usage.prompt_tokens_details.cached_tokens`.
Beside each count stands what the kit's `vllm-apc` profile as it is now (full attention only:
every full block of a computed sequence stays cached) predicts, so that the two readings can be
compared; the count the server reports is the observation, the prediction is not a verdict.
Prompt lengths are relative to B and W, so the probes mean the same at any block size.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx

from reference.peers import PeerRequest, simulator      # the oracle (run with the kit's python)

FIRST_ID = 1000


def ids(seed: int, n: int) -> list:
    """n distinct-looking token ids (no two probes' fillers share a prefix)."""
    return [FIRST_ID + ((seed * 7919 + i * 104729) % 50000) for i in range(n)]


def probes(B: int, W: int) -> dict:
    long = 6 * B + 8
    a = ids(1, long)
    far, near = 3 * B + 4, 5 * B
    return {
        f"replay {long}": [a, a],
        f"share {far} of {long} (far from where A ended)": [a, a[:far] + ids(2, long - far)],
        f"share {far} of {long}, twice": [a, a[:far] + ids(2, long - far), a[:far] + ids(3, long - far)],
        f"share {near} of {long}": [a, a[:near] + ids(4, long - near)],
        f"extend {long} by {3 * B}": [a, a + ids(5, 3 * B)],
        f"replay W - 1 = {W - 1}": [a[:W - 1], a[:W - 1]],
        f"replay W = {W}": [a[:W], a[:W]],
        f"replay W + 1 = {W + 1}": [a[:W + 1], a[:W + 1]],
        f"replay 3B + 1 = {3 * B + 1}": [a[:3 * B + 1], a[:3 * B + 1]],
    }


def reset(client: httpx.Client, url: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        doc = client.post(url + "/reset_prefix_cache").json()
        if not (isinstance(doc, dict) and doc.get("success") is False):
            return
        if time.monotonic() > deadline:
            raise SystemExit("the cache could not be emptied: /reset_prefix_cache kept answering success false")
        time.sleep(0.25)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--block-size", type=int, required=True)
    ap.add_argument("--window", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("out")
    a = ap.parse_args()
    url = a.base_url.rstrip("/")
    rows = []
    with httpx.Client(timeout=a.timeout) as client:
        for name, prompts in probes(a.block_size, a.window).items():
            reset(client, url)
            sim = simulator("vllm-apc", {"block_size": a.block_size})
            for k, prompt in enumerate(prompts):
                doc = client.post(url + "/v1/completions", json={"model": a.model, "prompt": prompt, "max_tokens": 1,
                                                                 "temperature": 0}).json()
                usage = doc.get("usage") or {}
                request = PeerRequest(list(prompt))
                predicted = sim.predict(request)
                sim.commit(request, [0])
                rows.append({"probe": name, "request": k, "prompt_tokens": usage.get("prompt_tokens"),
                             "reported": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
                             "full_attention_reading": predicted})
                print(f"{name:48} request {k}: N = {usage.get('prompt_tokens')}, reported "
                      f"{rows[-1]['reported']}, full-attention reading {predicted}", file=sys.stderr)
    Path(a.out).write_text(json.dumps({"block_size": a.block_size, "window": a.window, "model": a.model,
                                       "probes": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
