"""Peer profiles: what an OpenAI-compatible server must report as cached (spec/peer-profiles.md).

Stdlib only. One module per profile (peer_llama, peer_vllm, peer_sglang, peer_trtllm), one
function per rule, one small simulator per profile that keeps the cache state a sequence of
requests leaves behind, and one `PeerProfile` per profile (reference/peer_profile.py: settings,
where the server publishes them, rules, reset route, features), listed here in PEER_PROFILES:

    sim = simulator("vllm-apc", {"block_size": 16})
    c = sim.predict(PeerRequest(ids))            # the count the server must report
    sim.commit(PeerRequest(ids), sampled_ids)    # what the request leaves cached
    sim.reset()                                  # PEER-API-4

A request's *computed sequence* is its prompt followed by every sampled id but the last
(`computed_sequence`): the last sampled token is never fed back through the model. With
`trace=PeerTrace()` the simulator records why it predicts each count (reference/peer_trace.py).
"""
from __future__ import annotations

from . import peer_llama, peer_sglang, peer_trtllm, peer_vllm
from .peer_common import ImageItem, PeerProfileError, PeerRequest, common_prefix, computed_sequence
from .peer_llama import LlamaSlot, LlamaSlots, choose_slot, llama_cpp_cached, llama_cpp_slot_after
from .peer_profile import KINDS, MAX_UNIT, VERSION_PATTERN, PeerProfile, Published, Setting
from .peer_sglang import RadixCache, sglang_cached, sglang_namespace, sglang_release
from .peer_trace import PeerTrace
from .peer_trtllm import BlockKey, TrtllmBlockPool, trtllm_cached
from .peer_vllm import VllmBlockPool, leading_hits, vllm_block_keys, vllm_cached, vllm_extra_keys
from .peer_vllm_groups import GroupedPool, groups_of, grouped, swa_need

PEER_PROFILES_VERSION = "1.4.0"
PEER_PROFILES: dict[str, PeerProfile] = {p.name: p for p in (peer_llama.PROFILE, peer_vllm.PROFILE,
                                                             peer_sglang.PROFILE, peer_trtllm.PROFILE)}
"""Every peer profile, by name, in the order the docs list them."""
PROFILES = tuple(PEER_PROFILES)
SETTINGS = {name: p.defaults() for name, p in PEER_PROFILES.items()}
"""Each profile's settings and their defaults (None: unset)."""

__all__ = ["ImageItem", "PeerProfileError", "PeerRequest", "common_prefix", "computed_sequence", "LlamaSlot",
           "LlamaSlots", "choose_slot", "llama_cpp_cached", "llama_cpp_slot_after", "RadixCache", "sglang_cached",
           "sglang_namespace", "sglang_release", "VERSION_PATTERN", "VllmBlockPool", "leading_hits", "BlockKey",
           "TrtllmBlockPool", "trtllm_cached",
           "vllm_block_keys", "vllm_cached", "vllm_extra_keys", "PeerProfile", "Published", "Setting", "PeerTrace",
           "PEER_PROFILES", "PROFILES", "SETTINGS", "KINDS", "MAX_UNIT", "PEER_PROFILES_VERSION", "profile_of",
           "check_settings", "simulator", "GroupedPool", "groups_of", "grouped", "swa_need"]


def profile_of(name: str) -> PeerProfile:
    """The profile called `name`; PeerProfileError naming the profiles otherwise."""
    try:
        return PEER_PROFILES[name]
    except (KeyError, TypeError):
        raise PeerProfileError(f"unknown peer profile {name!r} (one of {', '.join(PROFILES)})") from None


def check_settings(profile: str, settings: dict | None) -> dict:
    """The profile's settings with defaults filled in; unknown keys or bad values raise."""
    return profile_of(profile).check(settings)


def simulator(profile: str, settings: dict | None = None, trace: PeerTrace | None = None):
    """A fresh cache of the profile (reset, predict, commit); with `trace`, it records its steps."""
    p = profile_of(profile)
    return p.make(p.check(settings), trace)
