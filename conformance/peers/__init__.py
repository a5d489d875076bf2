"""The peer suite: OpenAI-compatible servers judged against a peer profile (spec/peer-profiles.md).

`kvconform run --backend openai --base-url URL --profile P` drives a server through
conformance/adapters/openai.py, case by case (scenarios.py), predicts every reported count with
the oracle (reference/peers.py) and judges it (judge.py); runner.py writes the same report
folder as any other run.

PEER_PROFILES is data: per profile, how its server is reset between cases (PEER-API-4; where a
server offers no reset, `case_salt` runs every case under a cache salt of its own), which
of its endpoints cross-check the kit's tokenization (PEER-TOK-1), how a request names a LoRA
adapter, and which cache keys it supports.
"""
from __future__ import annotations

from ..judge.peer_oracle import PROFILES, SETTINGS

PEER_PROFILES = {
    "llama.cpp-server": {
        "reset": "/slots/{slot}?action=erase",  # every slot, 0 .. slots - 1
        "crosscheck": "apply-template",      # POST /apply-template, then POST /tokenize
        "lora_field": None,                  # per-request adapters are not part of the profile
        "features": frozenset({"timings"}),
        "count_rule": "PEER-LCPP-1",
        "after_rule": "PEER-LCPP-2",
    },
    "vllm-apc": {
        "reset": "/reset_prefix_cache",
        "crosscheck": "tokenize-messages",   # POST /tokenize {messages}
        "lora_field": "model",
        "features": frozenset({"salt", "lora"}),
        "count_rule": "PEER-VLLM-3",
        "after_rule": "PEER-VLLM-4",
    },
    "sglang-radix": {
        "reset": "/flush_cache",
        "crosscheck": None,
        "lora_field": "lora_path",
        "features": frozenset({"salt", "lora", "extra_key"}),
        "count_rule": "PEER-SGL-1",
        "after_rule": "PEER-SGL-3",
    },
    "trtllm-kv-reuse": {
        "reset": None,                       # trtllm-serve offers none: each case runs under its own salt
        "crosscheck": None,
        "lora_field": "lora_request",        # {"lora_name": NAME, "lora_int_id": K}
        "features": frozenset({"salt", "lora", "case_salt"}),
        "count_rule": "PEER-TRT-3",
        "after_rule": "PEER-TRT-4",
    },
}
assert tuple(PEER_PROFILES) == PROFILES

__all__ = ["PEER_PROFILES", "PROFILES", "SETTINGS"]
