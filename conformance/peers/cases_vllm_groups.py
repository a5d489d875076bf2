"""vLLM's KV-cache groups (PEER-VLLM-11..16): laid out on the groups the settings name.

The own cases of `vllm-apc` on a model with KV-cache groups (a sliding window, Mamba layers):
replays at the hit alignment and at the window group's block size, the junction a shared prefix
is kept at, the window's edge. Each builder returns None on one full-attention group."""
from __future__ import annotations

import math

from ..judge import peer_oracle as oracle
from ..judge.peer_oracle import common_prefix
from . import PEER_PROFILES
from .layout import (MAX_EVICTION_TOKENS, QUESTIONS, SYSTEM, PeerCase, Step, Unsupported, _replay_length, _rules,
                     at_least, chat, filler, fit)


def _groups(settings: dict):
    """(groups, the hit alignment A, the sliding-window group or None) of a vllm-apc model with
    KV-cache groups, or None for one full-attention group."""
    if not oracle.grouped(settings):
        return None
    groups = oracle.groups_of(settings)
    return groups, math.lcm(*(g.B for g in groups)), next((g for g in groups if g.kind == "swa"), None)


def _group_replay(size: str, off: int):
    """A replay of k*X + off tokens for X the hit alignment A (PEER-VLLM-11) or the sliding-window
    group's block size (PEER-VLLM-13): None where X is the block size (the shared boundary cases)
    or repeats another layout."""
    name = f"k{size}{off:+d}".replace("+0", "")

    def build(count, ids, settings, U):
        found = _groups(settings)
        if found is None:
            return None
        groups, A, swa = found
        X = A if size == "A" else (swa.B if swa is not None else None)
        if X is None or X == settings["block_size"] or (size == "Bs" and X == A):
            return None
        p = PEER_PROFILES["vllm-apc"]
        rules = ("PEER-VLLM-11",) + (("PEER-VLLM-13",) if size == "Bs" else ())
        return _replay_length(count, ids, X, off, name, lambda n: p.full_match(settings, n) > 0,
                              case_id=f"groups/replay-at-{name}", rules=rules, what=size)
    return build


def _shared_prompts(ids, shared: int, seeds, question: int = 0, ending: int = 0):
    """Prompts under one system text that share at least their first `shared` tokens and end
    apart (a note of `ending` words or more, and a question each)."""
    def prompts(m):
        system = SYSTEM + " " + filler(m, 5)
        return [chat(system + f" Note {s}. " + filler(ending, 11 * s), QUESTIONS[(question + i) % 4])
                for i, s in enumerate(seeds)]

    def common(m):
        first, *rest = [ids(x) for x in prompts(m)]
        return [0] * min(common_prefix(first, x) for x in rest)
    return prompts(at_least(common, lambda x: x, shared))


def _junction(count, ids, settings, U):
    """Three prompts that share a long prefix and end apart, then the second again: a group that
    keeps only its replay boundary's tail (a window, a Mamba state) cannot serve the shared prefix
    to the second; the second keeps it at its junction, so the third reuses it (PEER-VLLM-16)."""
    found = _groups(settings)
    if found is None:
        return None
    groups, A, swa = found
    reach = 0 if swa is None else oracle.swa_need(swa, False) * swa.B
    if 2 * A + 1 + reach + 2 * A > MAX_EVICTION_TOKENS:
        return Unsupported("groups/junction", "groups", _rules(count, "PEER-VLLM-16"), f"a window of "
                           f"{settings['sliding_window']} tokens needs prompts longer than the {MAX_EVICTION_TOKENS} "
                           "tokens this case writes")
    a, b, c = _shared_prompts(ids, 2 * A + 1, (1, 2, 3), ending=reach + 2 * A)
    return PeerCase("groups/junction", "groups", f"three prompts sharing at least 2A + 1 tokens (A = {A}, the "
                    "lcm of the groups' block sizes), each going on past the window with its own text, then the "
                    "second again",
                    _rules(count, "PEER-VLLM-11", "PEER-VLLM-15", "PEER-VLLM-16"),
                    [Step(a), Step(b, reuse=True), Step(c, reuse=True), Step(b, reuse=True)],
                    {"alignment": A, "prompt_tokens": [len(ids(x)) for x in (a, b, c)]})


def _window_edge(inside: bool):
    """PEER-VLLM-13 at the window's edge: a prompt whose replay boundary E (N - 1 floored to A)
    ends the window's tail of ceil((W - 1) / Bs) blocks, then two prompts sharing at least E - A
    (but fewer than E) of its tokens. Inside (E the largest multiple of A within the tail's
    blocks) the tail reaches the first block, and the second reuses E - A; outside (E one A
    further) it does not: the second reuses nothing and keeps its junction, the third reuses
    E - A (a server keeping more of the window than it needs reuses at the second already)."""
    case_id = f"window/edge-{'inside' if inside else 'outside'}"

    def build(count, ids, settings, U):
        found = _groups(settings)
        if found is None or found[2] is None:
            return None
        groups, A, swa = found
        rules = _rules(count, "PEER-VLLM-11", "PEER-VLLM-13", "PEER-VLLM-15")
        need = oracle.swa_need(swa, False)
        E = need * swa.B // A * A + (0 if inside else A)
        if E < 2 * A or (not inside and E // swa.B <= need):
            return Unsupported(case_id, "window", rules, f"a window of {settings['sliding_window']} tokens "
                               f"({need} blocks of {swa.B}) spans fewer than two aligned units of {A}: no shorter "
                               "aligned prefix to judge at its edge")
        if E + 1 > MAX_EVICTION_TOKENS:
            return Unsupported(case_id, "window", rules, f"the window's edge is at {E} tokens; this case writes at "
                               f"most {MAX_EVICTION_TOKENS}")

        def prompt(m, word):              # the text that varies comes last, so prompts share all before it
            return chat(SYSTEM, filler(m, 5) + " " + word)

        guess = at_least(lambda m: prompt(m, "nine"), ids, E + 1)
        m = fit(lambda k: len(ids(prompt(k, "nine"))), E + 1, guess, 3 * A)
        a = prompt(m if m is not None else guess, "nine")
        a_ids = ids(a)

        def shared(k):
            return [0] * common_prefix(a_ids, ids(prompt(k, "seven")))
        k = at_least(shared, lambda x: x, E - A)
        b, c = prompt(k, "seven"), prompt(k, "eight")
        lcp = common_prefix(a_ids, ids(b))
        if not E - A <= lcp < E:
            return Unsupported(case_id, "window", rules, f"no filler length makes the second prompt share between "
                               f"{E - A} and {E - 1} tokens with the first (it shares {lcp})")
        return PeerCase(case_id, "window", f"a prompt of E + 1 tokens (E = {E}: the window's {need} blocks of "
                        f"{swa.B} {'reach' if inside else 'do not reach'} the first block), then two prompts "
                        f"sharing {lcp} of its tokens", rules, [Step(a), Step(b, reuse=True), Step(c, reuse=True)],
                        {"alignment": A, "window_blocks": need, "edge_tokens": E, "shared_tokens": lcp,
                         "prompt_tokens": [len(x) for x in (a_ids, ids(b), ids(c))]})
    return build


GROUP_CASES = {"groups/junction": _junction, "window/edge-inside": _window_edge(True),
               "window/edge-outside": _window_edge(False),
               **{f"groups/replay-at-k{size}{off:+d}".replace("+0", ""): _group_replay(size, off)
                  for size in ("A", "Bs") for off in (-1, 0, 1)}}
