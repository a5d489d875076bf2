"""sglang-radix's own cases: eviction layouts, the release's rules, empty keys (PEER-SGL-2, 4, 5, 7, 8).

Each eviction case first lays its prompts out, then sizes the request that evicts against the
pool the profile's own simulator predicts after the requests before it (the answers steered
to one digit token by logit_bias, so the sampled ids are known): the cases judge every pool and
page size the server publishes, each exactly at the state that decides its rule. Whether the
layout came out as intended never decides a verdict (every count is the oracle's on the ids
sent); it decides only whether a faulty server would be caught."""
from __future__ import annotations

from ..judge.peer_oracle import PeerRequest, common_prefix, simulator
from .layout import (MAX_EVICTION_TOKENS, QUESTIONS, SYSTEM, PeerCase, Step, Unsupported, _rules, at_least, chat,
                     filler, long_prompt)


RADIX_HEADS = ("Reply in one word.", "Think step by step.", "You are terse.", "Answer in French.", "Be polite.")


def _radix_pool(case_id: str, rules: list, settings: dict, paged: bool = False, pages: int = 16):
    """(K, P) for a radix eviction case, or an Unsupported saying why the case cannot judge."""
    pool, P = settings["pool_tokens"], settings["page_size"]
    if pool is None:
        return Unsupported(case_id, "eviction", rules, "the server's KV pool size is not known: pass "
                           "--peer-setting pool_tokens=N (its --max-total-tokens) to judge eviction")
    K = P * (pool // P)
    if paged and P == 1:
        return Unsupported(case_id, "eviction", rules, "the rule this case judges is about pages (page_size > 1): "
                           "with pages of one token a request asks for exactly what it takes")
    if settings.get("eagle"):
        return Unsupported(case_id, "eviction", rules, "with EAGLE a decode step's slots are not defined by the "
                           "profile (PEER-SGL-9): eviction cases are laid out without it")
    if settings.get("sliding_window") is not None or settings.get("mamba"):
        return Unsupported(case_id, "eviction", rules, "eviction on a sliding-window or Mamba model is not defined "
                           "by the profile (PEER-SGL-10..13): eviction cases are laid out without one")
    if K < pages * P:
        return Unsupported(case_id, "eviction", rules, f"a pool of {pool} tokens is too small for pages of {P}: "
                           f"the layout needs at least {pages} pages")
    if K > MAX_EVICTION_TOKENS:
        return Unsupported(case_id, "eviction", rules, f"a pool of {pool} tokens needs prompts of about its size to "
                           f"evict; this case writes at most {MAX_EVICTION_TOKENS}")
    return K, P


def _sized(head: str, seed: int, question: str, ids, low: int, high: int | None = None, modulo=None):
    """Chat messages whose prompt has between `low` and `high` ids (`high` None: exactly `low`),
    and where `modulo` = (P, residues) is given, a length whose residue mod P is one of them;
    the shortest such, or None."""
    high = low if high is None else high

    def make(m):
        return chat(head + " " + filler(m, seed), question)
    start = at_least(make, ids, max(1, low - 4))
    for m in range(max(0, start - 3), start + 3 * (high - low) + 24):
        n = len(ids(make(m)))
        if low <= n <= high and (modulo is None or n % modulo[0] in modulo[1]):
            return make(m)
    return None


def _digit_bias(ids, messages: list, digit: str) -> tuple[dict, int]:
    """A logit bias that steers the answer to `messages` to one digit token, and that token."""
    n = len(ids(messages))
    token = ids(messages + [{"role": "assistant", "content": digit * 4}, {"role": "user", "content": "x"}])[n]
    return {str(token): 100}, token


def _after(settings: dict, requests: list):
    """The profile's simulator after `requests` [(messages ids, sampled ids, keys)]."""
    sim = simulator("sglang-radix", settings)
    for prompt, sampled, keys in requests:
        sim.commit(PeerRequest(list(prompt), **keys), list(sampled))
    return sim


def _radix_unlaid(case_id: str, rules: list, what: str) -> Unsupported:
    return Unsupported(case_id, "eviction", rules, f"the server's tokenizer gives no prompt of {what}: the "
                       "layout this case needs could not be made")


def _radix_cascade(count, ids, settings, U):
    """PEER-SGL-5: A and B share a long system prompt S; C, unrelated, asks for more than the two
    leaves hold, so S (childless once they are gone) must go in the same round; then a third
    question under S reports 0. A server that evicts a parent only in a later round keeps S."""
    case_id, rules = "eviction/radix-cascade", _rules(count, "PEER-SGL-5")
    laid = _radix_pool(case_id, rules, settings)
    if isinstance(laid, Unsupported):
        return laid
    K, P = laid
    system = SYSTEM + " " + filler(max(8, int(0.3 * K) - 20), 67)
    a, b, d = chat(system, QUESTIONS[0]), chat(system, QUESTIONS[1]), chat(system, QUESTIONS[2])
    sim = _after(settings, [(ids(a), [0], {}), (ids(b), [0], {})])
    shared = common_prefix(ids(a), ids(b))
    leaves = sim.tree_tokens - P * (shared // P)
    low = sim.free_slots() - (P if P > 1 else 0) + leaves + 1           # short of more than the two leaves
    c = _sized(RADIX_HEADS[0], 71, QUESTIONS[3], ids, low, K - P)
    if c is None:
        return _radix_unlaid(case_id, rules, f"{low}..{K - P} ids")
    return PeerCase(case_id, "eviction", f"A and B under one system prompt S (about 0.3 of a pool of {K} tokens), "
                    "then C asking for more than their two leaves hold, then a third question under S: S, left "
                    "without children, is evicted in the same round", rules,
                    [Step(a), Step(b, reuse=True), Step(c), Step(d, reuse=True)],
                    {"pool_tokens": K, "shared_tokens": shared, "prompt_tokens": [len(ids(x)) for x in (a, b, c, d)]})


def _radix_new_leaves(count, ids, settings, U):
    """PEER-SGL-4, PEER-SGL-5: A, A again (its nodes touched), B (a leaf made after that touch),
    then C short of a little: the least recently touched leaf is A's, not B's. A server that
    gives a new leaf no time (or the time 0) evicts B instead."""
    case_id, rules = "eviction/radix-new-leaves", _rules(count, "PEER-SGL-4", "PEER-SGL-5")
    laid = _radix_pool(case_id, rules, settings)
    if isinstance(laid, Unsupported):
        return laid
    K, P = laid
    a = _sized(RADIX_HEADS[1], 73, QUESTIONS[0], ids, int(0.45 * K), int(0.45 * K) + 3 * P)
    b = _sized(RADIX_HEADS[2], 79, QUESTIONS[1], ids, int(0.25 * K), int(0.25 * K) + 3 * P)
    if a is None or b is None:
        return _radix_unlaid(case_id, rules, "about 0.45 and 0.25 of the pool")
    sim = _after(settings, [(ids(a), [0], {}), (ids(a), [0], {}), (ids(b), [0], {})])
    low = sim.free_slots() - (P if P > 1 else 0) + 1                  # short of at least one slot
    c = _sized(RADIX_HEADS[3], 83, QUESTIONS[2], ids, low, low + P - 1)
    if c is None:
        return _radix_unlaid(case_id, rules, f"{low}..{low + P - 1} ids")
    return PeerCase(case_id, "eviction", f"A (about 0.45 of a pool of {K} tokens), A again, B (0.25), then C a "
                    "little short of free slots, then B and A again: A, touched before B was made, is evicted",
                    rules, [Step(a), Step(a, reuse=True), Step(b), Step(c), Step(b, reuse=True), Step(a, reuse=True)],
                    {"pool_tokens": K, "prompt_tokens": [len(ids(x)) for x in (a, b, c)]})


def _radix_paged_decode(count, ids, settings, U):
    """PEER-SGL-7: A and B fill the pool but for C's prompt and one page; C (whole pages) asks for
    its prompt and the slack page and gets them without evicting; its decode step starts a page,
    asks for one and takes the last. Nothing is evicted, A still reports. A server asking P + 1
    slots per decode step evicts A."""
    case_id, rules = "eviction/radix-paged-decode", _rules(count, "PEER-SGL-7", "PEER-SGL-5")
    laid = _radix_pool(case_id, rules, settings, paged=True)
    if isinstance(laid, Unsupported):
        return laid
    K, P = laid
    a = _sized(RADIX_HEADS[1], 101, QUESTIONS[0], ids, int(0.35 * K), int(0.35 * K) + 2 * P)
    b = _sized(RADIX_HEADS[2], 103, QUESTIONS[1], ids, int(0.35 * K), int(0.35 * K) + 2 * P)
    if a is None or b is None:
        return _radix_unlaid(case_id, rules, "about 0.35 of the pool")
    sim = _after(settings, [(ids(a), [0], {}), (ids(b), [0], {})])
    target = sim.free_slots() - P                                      # its prompt and the slack page fit exactly
    c = _sized(RADIX_HEADS[3], 107, QUESTIONS[2], ids, target)
    if c is None:
        return _radix_unlaid(case_id, rules, f"exactly {target} ids")
    bias, _ = _digit_bias(ids, c, "1")
    return PeerCase(case_id, "eviction", f"A, B (about 0.35 each of a pool of {K} tokens), then C of exactly the "
                    "free pages less one, answered with two tokens, then A again: C's decode step takes the last "
                    "free page and evicts nothing", rules,
                    [Step(a), Step(b), Step(c, 2, logit_bias=bias), Step(a, reuse=True)],
                    {"pool_tokens": K, "prompt_tokens": [len(ids(x)) for x in (a, b, c)]})


DECODE_ANSWER_PAGES = 2
"""A long answer's length in pages, beyond two tokens: 2P + 2 tokens feed 2P + 1 decode steps back,
which start three pages when the prompt is page-aligned (one slot each at P = 1)."""


def _radix_decode_pages(fits: bool):
    """PEER-SGL-7 over a long answer: A and B (about 0.3 of the pool each), then C answered with
    2P + 2 tokens, then A and B again. Every decode step asks for a whole free page and takes one
    when its token starts a page (P = 1: one slot each). `fits`: C is the longest prompt after
    which the simulator keeps A (the last step takes the last free slots); else the shortest
    longer one, after which the last step is short and evicts A, the least recently used leaf.
    A server that takes or asks a page too many evicts A in the first; one that takes or asks too
    few keeps it in the second."""
    case_id = f"eviction/radix-decode-{'fits' if fits else 'short'}"

    def build(count, ids, settings, U):
        rules = _rules(count, "PEER-SGL-7", "PEER-SGL-5")
        laid = _radix_pool(case_id, rules, settings)
        if isinstance(laid, Unsupported):
            return laid
        K, P = laid
        a = _sized(RADIX_HEADS[0], 109, QUESTIONS[0], ids, int(0.3 * K), int(0.3 * K) + 2 * P)
        b = _sized(RADIX_HEADS[4], 113, QUESTIONS[1], ids, int(0.3 * K), int(0.3 * K) + 2 * P)
        if a is None or b is None:
            return _radix_unlaid(case_id, rules, "about 0.3 of the pool")
        answer = DECODE_ANSWER_PAGES * P + 2
        before = [(ids(a), [0], {}), (ids(b), [0], {})]
        held = _after(settings, before)
        free, whole = held.free_slots(), held.predict(PeerRequest(ids(a)))      # A's count before C

        def make(k):
            return chat(RADIX_HEADS[3] + " " + filler(k, 127), QUESTIONS[2])
        start = at_least(make, ids, max(1, free - (DECODE_ANSWER_PAGES + 2) * P))
        bias, digit = _digit_bias(ids, make(start), "1")
        kept = {}
        for k in range(start, start + 4 * P + 12):
            c = make(k)
            sim = _after(settings, before + [(ids(c), [digit] * answer, {})])
            kept.setdefault(len(ids(c)), (c, sim.predict(PeerRequest(ids(a))) == whole))
        longest_kept = max((n for n, (_, a_kept) in kept.items() if a_kept), default=None)
        if fits:
            chosen = kept.get(longest_kept, (None,))[0]
        else:
            chosen = next((kept[n][0] for n in sorted(kept) if longest_kept is not None and n > longest_kept
                           and not kept[n][1]), None)
        if chosen is None:
            return _radix_unlaid(case_id, rules, "a prompt at the edge of the pool's last free page")
        return PeerCase(case_id, "eviction", f"A, B (about 0.3 each of a pool of {K} tokens), then C answered with "
                        f"{answer} tokens, {'the longest prompt whose decode steps still find a free page' if fits else 'one past the longest prompt whose decode steps find a free page'}, "
                        f"then A and B again: A {'is kept' if fits else 'is evicted by the last decode step'}", rules,
                        [Step(a), Step(b), Step(chosen, answer, logit_bias=bias), Step(a, reuse=True),
                         Step(b, reuse=True)],
                        {"pool_tokens": K, "answer_tokens": answer,
                         "prompt_tokens": [len(ids(x)) for x in (a, b, chosen)]})
    return build


def _radix_paged_slack(count, ids, settings, U):
    """PEER-SGL-7: C (whole pages) is exactly as long as the free slots: with the page of slack
    it asks for, it is a page short and evicts the oldest leaf, A. A server asking no slack
    evicts nothing, and A, asked next, still reports. C, asked last, reports on every server
    (the count above 0 that makes the case judge)."""
    case_id, rules = "eviction/radix-paged-slack", _rules(count, "PEER-SGL-7", "PEER-SGL-5")
    laid = _radix_pool(case_id, rules, settings, paged=True)
    if isinstance(laid, Unsupported):
        return laid
    K, P = laid
    a = _sized(RADIX_HEADS[1], 109, QUESTIONS[0], ids, int(0.3 * K), int(0.3 * K) + 2 * P)
    b = _sized(RADIX_HEADS[2], 113, QUESTIONS[1], ids, int(0.3 * K), int(0.3 * K) + 2 * P)
    if a is None or b is None:
        return _radix_unlaid(case_id, rules, "about 0.3 of the pool")
    sim = _after(settings, [(ids(a), [0], {}), (ids(b), [0], {})])
    c = _sized(RADIX_HEADS[3], 127, QUESTIONS[2], ids, sim.free_slots())
    if c is None:
        return _radix_unlaid(case_id, rules, f"exactly {sim.free_slots()} ids")
    return PeerCase(case_id, "eviction", f"A, B (about 0.3 each of a pool of {K} tokens), then C of exactly the free "
                    "slots, then A and C again: C's page of slack makes it short, and A is evicted (A is asked "
                    "right after C: on a server without C's slack, B's own would evict it); A's return evicts B, "
                    "and C still reports", rules,
                    [Step(a), Step(b), Step(c), Step(a, reuse=True), Step(c, reuse=True)],
                    {"pool_tokens": K, "prompt_tokens": [len(ids(x)) for x in (a, b, c)]})


def _radix_locked_path(count, ids, settings, U):
    """PEER-SGL-5: A = S + a; R = S + r fills the pool to its last page (not a whole number of
    pages), evicting a's leaf and locking S; R's decode step asks for a page with none free and
    nothing it may evict: S stays, and R leaves S with its own leaf below. E then evicts that
    leaf only, and a question under S still reports S. A server evicting the locked S for R's
    decode step re-inserts it inside R's leaf, which E then takes whole."""
    case_id, rules = "eviction/radix-locked-path", _rules(count, "PEER-SGL-5", "PEER-SGL-7")
    laid = _radix_pool(case_id, rules, settings, paged=True)
    if isinstance(laid, Unsupported):
        return laid
    K, P = laid
    system = SYSTEM + " " + filler(max(8, int(0.3 * K) - 20), 131)
    a = chat(system, QUESTIONS[0])

    def make(m):
        return chat(system, QUESTIONS[1] + " " + filler(m, 137))
    r, start = None, at_least(make, ids, K - P + 1)
    for m in range(max(0, start - 3), start + 3 * P + 8):
        n = len(ids(make(m)))
        if K - P < n < K:                                          # the last page, partly: no decode page needed
            r = make(m)
            break
    if r is None:
        return _radix_unlaid(case_id, rules, f"{K - P + 1}..{K - 1} ids under the system prompt")
    bias, digit = _digit_bias(ids, r, "1")
    sim = _after(settings, [(ids(a), [0], {}), (ids(r), [digit, digit], {})])
    leaf = sim.tree_tokens - P * (common_prefix(ids(a), ids(r)) // P)
    low = sim.free_slots() - P + 1
    e = _sized(RADIX_HEADS[3], 139, QUESTIONS[2], ids, low, low + max(0, leaf - 2 * P))
    if e is None:
        return _radix_unlaid(case_id, rules, f"{low}.. ids")
    d = chat(system, QUESTIONS[3])
    return PeerCase(case_id, "eviction", f"A = S + a, then R = S + r filling a pool of {K} tokens to its last page "
                    "and answered with two tokens (its decode step finds no free page and only S, locked), then E "
                    "short of less than R's leaf, then a question under S: S survives", rules,
                    [Step(a), Step(r, 2, reuse=True, logit_bias=bias), Step(e), Step(d, reuse=True)],
                    {"pool_tokens": K, "prompt_tokens": [len(ids(x)) for x in (a, r, e, d)]})


def _radix_prompt_split(count, ids, settings, U):
    """PEER-SGL-8 (a): A (whole pages) answered with P + 2 digits, then B, then C short of at most
    a page: from SGLang 0.5.20 A's answer is a leaf of its own, split off at the prompt, and goes
    alone; before, A is one leaf and goes whole. A again then reports its prompt, or 0."""
    case_id, rules = "eviction/radix-prompt-split", _rules(count, "PEER-SGL-8", "PEER-SGL-5")
    laid = _radix_pool(case_id, rules, settings)
    if isinstance(laid, Unsupported):
        return laid
    K, P = laid
    a = _sized(RADIX_HEADS[4], 149, QUESTIONS[0], ids, int(0.3 * K), int(0.3 * K) + 4 * P, (P, {0}))
    b = _sized(RADIX_HEADS[1], 151, QUESTIONS[1], ids, int(0.3 * K), int(0.3 * K) + 2 * P)
    if a is None or b is None:
        return _radix_unlaid(case_id, rules, "whole pages near 0.3 of the pool")
    bias, digit = _digit_bias(ids, a, "1")
    sim = _after(settings, [(ids(a), [digit] * (P + 2), {}), (ids(b), [0], {})])
    low = sim.free_slots() - (P if P > 1 else 0) + 1
    c = _sized(RADIX_HEADS[2], 157, QUESTIONS[2], ids, low, low + P - 1)
    if c is None:
        return _radix_unlaid(case_id, rules, f"{low}..{low + P - 1} ids")
    return PeerCase(case_id, "eviction", f"A (whole pages, about 0.3 of a pool of {K} tokens) answered with {P + 2} "
                    "tokens, B, then C short of at most a page, then A and C again: only A's answer is evicted "
                    "(SGLang >= 0.5.20), or all of A", rules,
                    [Step(a, P + 2, logit_bias=bias), Step(b), Step(c), Step(a, reuse=True), Step(c, reuse=True)],
                    {"pool_tokens": K, "prompt_tokens": [len(ids(x)) for x in (a, b, c)]})


def _radix_shortfall(count, ids, settings, U):
    """PEER-SGL-8 (b): A and B (about 0.3 of the pool each), then C short of a few slots but asking
    for more than A holds: from SGLang 0.5.17 only A goes (the shortfall), before B too (all it
    asks for). B again then reports, or 0; C again reports either way."""
    case_id, rules = "eviction/radix-shortfall", _rules(count, "PEER-SGL-8", "PEER-SGL-5")
    laid = _radix_pool(case_id, rules, settings)
    if isinstance(laid, Unsupported):
        return laid
    K, P = laid
    a = _sized(RADIX_HEADS[2], 163, QUESTIONS[0], ids, int(0.3 * K), int(0.3 * K) + 2 * P)
    b = _sized(RADIX_HEADS[3], 167, QUESTIONS[1], ids, int(0.3 * K), int(0.3 * K) + 2 * P)
    if a is None or b is None:
        return _radix_unlaid(case_id, rules, "about 0.3 of the pool")
    sim = _after(settings, [(ids(a), [0], {}), (ids(b), [0], {})])
    low = sim.free_slots() - (P if P > 1 else 0) + 1
    c = _sized(RADIX_HEADS[4], 173, QUESTIONS[2], ids, low, low + P - 1)
    if c is None:
        return _radix_unlaid(case_id, rules, f"{low}..{low + P - 1} ids")
    return PeerCase(case_id, "eviction", f"A, B (about 0.3 each of a pool of {K} tokens), then C a few slots short, "
                    "then B and C again: only A is evicted (SGLang >= 0.5.17), or B too", rules,
                    [Step(a), Step(b), Step(c), Step(b, reuse=True), Step(c, reuse=True)],
                    {"pool_tokens": K, "prompt_tokens": [len(ids(x)) for x in (a, b, c)]})


def _empty_keys(count, ids, settings, U):
    """PEER-SGL-2: `cache_salt: ""` and `extra_key: ""` are none (the API turns them into None):
    a prompt sent with the empty salt, then without; another with the empty extra key, then
    without. A server that keys "" apart from none reports 0 for the repeats."""
    rules = _rules(count, "PEER-SGL-2")
    x = long_prompt(SYSTEM, QUESTIONS[0], 179, ids, U)
    y = long_prompt(SYSTEM, QUESTIONS[1], 181, ids, U)
    return PeerCase("isolation/empty-keys", "isolation", "one prompt (at least 2B + 1 tokens) with cache_salt \"\", "
                    "then without; another with extra_key \"\", then without: an empty key is no key", rules,
                    [Step(x, salt=""), Step(x, reuse=True), Step(y, extra_key=""), Step(y, reuse=True)])


RADIX_CASES = {"eviction/radix-cascade": _radix_cascade, "eviction/radix-new-leaves": _radix_new_leaves,
               "eviction/radix-paged-decode": _radix_paged_decode,
               "eviction/radix-decode-fits": _radix_decode_pages(True),
               "eviction/radix-decode-short": _radix_decode_pages(False),
               "eviction/radix-paged-slack": _radix_paged_slack, "eviction/radix-locked-path": _radix_locked_path,
               "eviction/radix-prompt-split": _radix_prompt_split, "eviction/radix-shortfall": _radix_shortfall,
               "isolation/empty-keys": _empty_keys}
