"""`llama.cpp-server`: llama-server's slots (spec/peer-profiles.md section 2). Stdlib only.

Each slot keeps the ids it computed; a request goes to the idle slot whose contents share the
largest fraction of its prompt, above `slot_prompt_similarity`, else to the least recently used
slot (llama.cpp tools/server/server-context.cpp `get_available_slot`). Requests are sequential,
so every slot is idle when one arrives. The host prompt cache (`--cache-ram` > 0) is not
modelled: its capacity is in MiB of serialized KV state (section 2, PEER-LCPP-6).
"""
from __future__ import annotations

from .peer_common import PeerProfileError, PeerRequest, common_prefix, computed_sequence


def llama_cpp_cached(slot, prompt) -> int:
    """PEER-LCPP-1: `min(LCP(slot, prompt), N - 1)` (and 0 for an empty prompt)."""
    return max(0, min(common_prefix(slot, prompt), len(prompt) - 1))


def llama_cpp_slot_after(prompt, sampled) -> list:
    """PEER-LCPP-2 / PEER-LCPP-4: the slot holds the request's computed sequence."""
    return computed_sequence(prompt, sampled)


def choose_slot(slots: list, used: list, prompt, similarity: float) -> int:
    """PEER-LCPP-5: the slot with the largest LCP / N above `similarity` (the first on a tie,
    empty slots skipped); else the least recently used (the last of equals)."""
    best, best_sim = None, 0.0
    if similarity != 0.0:
        for i, tokens in enumerate(slots):
            if not tokens:
                continue
            sim = common_prefix(tokens, prompt) / len(prompt)
            if sim > best_sim and sim > similarity:
                best, best_sim = i, sim
    if best is not None:
        return best
    chosen = 0
    for i in range(1, len(slots)):
        if used[i] <= used[chosen]:
            chosen = i
    return chosen


class LlamaSlots:
    """PEER-LCPP-1..5: `slots` slots, chosen by prompt similarity, else least recently used."""

    def __init__(self, slots: int = 1, slot_prompt_similarity: float = 0.1, cache_ram_mib: int = 0):
        if cache_ram_mib != 0:
            raise PeerProfileError("llama.cpp-server: the host prompt cache (cache_ram_mib > 0) is not modelled: "
                                   "its capacity is in MiB of serialized KV state, which the server does not "
                                   "publish (spec/peer-profiles.md PEER-LCPP-6); run the server with --cache-ram 0")
        self.n, self.similarity = slots, slot_prompt_similarity
        self.reset()

    def reset(self) -> None:
        """Every slot erased (`/slots/{id}?action=erase`): empty, and older than any request of the
        case to come (which of the empty slots the server then picks changes no count)."""
        self.slots = [[] for _ in range(self.n)]
        self.used = [-1] * self.n
        self.clock = 0

    @property
    def tokens(self) -> list:
        """The first slot's ids (the one slot of a one-slot server)."""
        return self.slots[0]

    def slot_for(self, request: PeerRequest) -> int:
        return choose_slot(self.slots, self.used, request.ids, self.similarity)

    def predict(self, request: PeerRequest) -> int:
        return llama_cpp_cached(self.slots[self.slot_for(request)], request.ids)

    def commit(self, request: PeerRequest, sampled) -> None:
        i = self.slot_for(request)
        self.slots[i] = llama_cpp_slot_after(request.ids, sampled)
        self.clock += 1
        self.used[i] = self.clock


LlamaSlot = LlamaSlots
"""The one-slot server of earlier versions of this module."""
