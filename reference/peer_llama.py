"""`llama.cpp-server`: llama-server's slots (spec/peer-profiles.md section 2). Stdlib only."""
from __future__ import annotations

from .peer_common import PeerRequest, common_prefix, computed_sequence


def llama_cpp_cached(slot, prompt) -> int:
    """PEER-LCPP-1: `min(LCP(slot, prompt), N - 1)` (and 0 for an empty prompt)."""
    return max(0, min(common_prefix(slot, prompt), len(prompt) - 1))


def llama_cpp_slot_after(prompt, sampled) -> list:
    """PEER-LCPP-2 / PEER-LCPP-4: the slot holds the request's computed sequence."""
    return computed_sequence(prompt, sampled)


class LlamaSlot:
    """PEER-LCPP-1..4: one slot."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.tokens: list = []

    def predict(self, request: PeerRequest) -> int:
        return llama_cpp_cached(self.tokens, request.ids)

    def commit(self, request: PeerRequest, sampled) -> None:
        self.tokens = llama_cpp_slot_after(request.ids, sampled)
