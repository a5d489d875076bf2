"""Peer profiles: what an OpenAI-compatible server must report as cached (spec/peer-profiles.md).

Stdlib only. One module per profile (peer_llama, peer_vllm, peer_sglang, peer_trtllm), one
function per rule, and one small simulator per profile that keeps the cache state a sequence of
requests leaves behind:

    sim = simulator("vllm-apc", {"block_size": 16})
    c = sim.predict(PeerRequest(ids))            # the count the server must report
    sim.commit(PeerRequest(ids), sampled_ids)    # what the request leaves cached
    sim.reset()                                  # PEER-API-4

A request's *computed sequence* is its prompt followed by every sampled id but the last
(`computed_sequence`): the last sampled token is never fed back through the model.
"""
from __future__ import annotations

from .peer_common import ImageItem, PeerProfileError, PeerRequest, common_prefix, computed_sequence
from .peer_llama import LlamaSlot, LlamaSlots, choose_slot, llama_cpp_cached, llama_cpp_slot_after
from .peer_sglang import RadixCache, sglang_cached, sglang_namespace
from .peer_trtllm import BlockKey, TrtllmBlockPool, trtllm_cached
from .peer_vllm import VllmBlockPool, leading_hits, vllm_block_keys, vllm_cached, vllm_extra_keys

PEER_PROFILES_VERSION = "1.1.0"
PROFILES = ("llama.cpp-server", "vllm-apc", "sglang-radix", "trtllm-kv-reuse")
SETTINGS = {
    "llama.cpp-server": {"slots": 1, "slot_prompt_similarity": 0.1, "cache_ram_mib": 0},
    "vllm-apc": {"block_size": 16, "cache_blocks": None, "enable_prefix_caching": True, "eagle": False},
    "sglang-radix": {"page_size": 1, "pool_tokens": None, "radix_cache": True},
    "trtllm-kv-reuse": {"tokens_per_block": 32, "enable_block_reuse": True, "enable_partial_reuse": True,
                        "copy_on_partial_reuse": True, "max_blocks": None},
}
"""Each profile's settings and their defaults (None: unset)."""

MAX_UNIT = 1 << 20
"""The largest block, page or pool size a setting may name (tokens); the peer suite also bounds
sizes by the server's own context length."""
KINDS = {
    "block_size": "size", "page_size": "size", "slots": "size", "tokens_per_block": "size",
    "cache_blocks": "count", "pool_tokens": "count", "max_blocks": "count",
    "cache_ram_mib": "count0", "slot_prompt_similarity": "fraction",
    "enable_prefix_caching": "bool", "eagle": "bool", "radix_cache": "bool", "enable_block_reuse": "bool",
    "enable_partial_reuse": "bool", "copy_on_partial_reuse": "bool",
}
"""What a setting's value may be: size (an integer 1..MAX_UNIT), count (an integer >= 1, or None:
unbounded), count0 (an integer >= 0), fraction (a number in [0, 1]), bool (true or false)."""

__all__ = ["ImageItem", "PeerProfileError", "PeerRequest", "common_prefix", "computed_sequence", "LlamaSlot",
           "LlamaSlots", "choose_slot",
           "llama_cpp_cached", "llama_cpp_slot_after", "RadixCache", "sglang_cached", "sglang_namespace",
           "VllmBlockPool", "leading_hits", "BlockKey", "TrtllmBlockPool", "trtllm_cached", "vllm_block_keys", "vllm_cached", "vllm_extra_keys", "PROFILES",
           "SETTINGS", "KINDS", "MAX_UNIT", "PEER_PROFILES_VERSION", "check_settings", "check_value", "simulator",
           "count_rule"]


def check_value(key: str, value):
    """`value` if it fits the setting's kind (KINDS), else PeerProfileError naming what fits."""
    kind = KINDS[key]
    if kind == "bool":
        if type(value) is not bool:
            raise PeerProfileError(f"setting {key} must be true or false, got {value!r}")
        return value
    if kind == "fraction":
        if type(value) not in (int, float) or not 0 <= value <= 1:
            raise PeerProfileError(f"setting {key} must be a number in [0, 1], got {value!r}")
        return float(value)
    if kind == "count" and value is None:
        return None
    low = 0 if kind == "count0" else 1
    high = MAX_UNIT if kind == "size" else None
    if type(value) is not int or value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high else f">= {low}"
        raise PeerProfileError(f"setting {key} must be an integer {bound}, got {value!r}")
    return value


def check_settings(profile: str, settings: dict | None) -> dict:
    """The profile's settings with defaults filled in; unknown keys or bad values raise."""
    if profile not in SETTINGS:
        raise PeerProfileError(f"unknown peer profile {profile!r} (one of {', '.join(PROFILES)})")
    out = dict(SETTINGS[profile])
    for key, value in (settings or {}).items():
        if key not in out:
            known = ", ".join(out) or "none"
            raise PeerProfileError(f"{profile} has no setting {key!r} (settings: {known})")
        try:
            out[key] = check_value(key, value)
        except PeerProfileError as e:
            raise PeerProfileError(f"{profile} {e}") from None
    return out


def simulator(profile: str, settings: dict | None = None):
    """A fresh cache of the profile (reset, predict, commit)."""
    s = check_settings(profile, settings)
    if profile == "llama.cpp-server":
        return LlamaSlots(s["slots"], s["slot_prompt_similarity"], s["cache_ram_mib"])
    if profile == "vllm-apc":
        return VllmBlockPool(s["block_size"], s["cache_blocks"], s["enable_prefix_caching"], s["eagle"])
    if profile == "trtllm-kv-reuse":
        return TrtllmBlockPool(s["tokens_per_block"], s["enable_block_reuse"], s["enable_partial_reuse"],
                               s["copy_on_partial_reuse"], s["max_blocks"])
    return RadixCache(s["page_size"], s["pool_tokens"], s["radix_cache"])


def count_rule(profile: str) -> str:
    """The rule that defines the reported count of the profile."""
    return {"llama.cpp-server": "PEER-LCPP-1", "vllm-apc": "PEER-VLLM-3", "sglang-radix": "PEER-SGL-1",
            "trtllm-kv-reuse": "PEER-TRT-3"}[profile]
