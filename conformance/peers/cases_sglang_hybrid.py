"""sglang-radix's cases for sliding-window and Mamba models (PEER-SGL-10..13), laid out on the
settings: each builder returns None on a model of full attention only.

Window cases: a first prompt of `n` ids steered to three sampled tokens (one digit token, so the
ids fed back are known), whose second decode step frees the window behind it once
`n + 1 - W >= I` (PEER-SGL-10); then a prompt sharing `k` of its ids (PEER-SGL-11), then that
prompt again, which finds only what the second cached when its match was cut short
(PEER-SGL-12). The interval cases put `n + 1 - W` at `I - 1`, `I`, `I + 1` and share `k = E + W -
1` ids (E the freed prefix when the step frees: the first `k` ids are served only when it does
not); the edge cases free, and share the first page multiple at or past `E + W`, one id less and
one more. Mamba cases: a prompt, then prompts that continue it, share part of it, or share its
cached sequence up to one id before, at and one id past its state (PEER-SGL-13).
Every count is the oracle's on the ids sent; the layout decides only whether a faulty server is
caught."""
from __future__ import annotations

from ..judge.peer_oracle import common_prefix
from .layout import MAX_EVICTION_TOKENS, QUESTIONS, SYSTEM, PeerCase, Step, Unsupported, _rules, at_least, chat, \
    filler, fit


def _text(m: int, word: str) -> list:
    """Chat messages whose user text is `m` filler words and a last word: prompts of one `word`
    share every id before the words differ."""
    return chat(SYSTEM, filler(m, 5) + " " + word)


def _digit(ids, messages: list) -> int:
    """The digit token the chat template renders right after the assistant tag: answers steered to
    it (logit_bias) feed back as themselves."""
    n = len(ids(messages))
    return ids(messages + [{"role": "assistant", "content": "4444"}, {"role": "user", "content": "x"}])[n]


def _of_length(ids, n: int):
    """Messages of exactly `n` prompt ids, or None."""
    guess = at_least(lambda m: _text(m, "nine"), ids, n)
    m = fit(lambda k: len(ids(_text(k, "nine"))), n, guess, 8)
    return None if m is None else _text(m, "nine")


def _sharing(ids, first: list, cached: list, k: int):
    """Messages sharing exactly `k` ids with `cached` (the first prompt's ids and the digits it
    sampled): another word after fewer filler words, or the first prompt's conversation with
    the digits fed back; None when no text does."""
    n = len(ids(first))
    if k < n:
        def shared(mw):
            return [0] * common_prefix(cached, ids(_text(mw, "seven")))
        mw = at_least(lambda m: m, shared, k)
        options = [_text(m, "seven") for m in (mw, mw + 1, mw - 1) if m >= 0]
    else:
        options = [first + [{"role": "assistant", "content": "4" * (k - n) if k > n else "Nine."},
                            {"role": "user", "content": QUESTIONS[3]}]]
    return next((x for x in options if common_prefix(cached, ids(x)) == k), None)


def _window(settings: dict):
    """(W, I, P, W rounded up to pages) of a sliding-window model, or None."""
    W = settings.get("sliding_window")
    if W is None:
        return None
    P, I = settings["page_size"], settings["swa_eviction_interval"]
    return W, I, P, -(-max(W, P) // P) * P


def _window_case(case_id: str, rules: list, description: str, first, sampled: int, k: int, ids, layout: dict):
    """The first prompt steered to `sampled` digit tokens, a prompt sharing `k` ids of what it
    cached, then that prompt again."""
    n = len(ids(first))
    if n + sampled > MAX_EVICTION_TOKENS:
        return Unsupported(case_id, "window", rules, f"the layout needs {n + sampled} tokens; this case writes at "
                           f"most {MAX_EVICTION_TOKENS}")
    digit = _digit(ids, first)
    second = _sharing(ids, first, ids(first) + [digit] * (sampled - 1), k) if k > 0 else None
    if second is None:
        return Unsupported(case_id, "window", rules, f"no prompt shares exactly {k} ids with the first prompt and "
                           "the digits it sampled (the tokenizer merges them)")
    steps = [Step(first, sampled, logit_bias={str(digit): 100}), Step(second, reuse=True), Step(second, reuse=True)]
    return PeerCase(case_id, "window", description, rules, steps,
                    {**layout, "first_prompt_tokens": n, "sampled": sampled, "shared_tokens": k,
                     "second_prompt_tokens": len(ids(second))})


def _interval(off: int):
    """PEER-SGL-10 at the eviction interval: a prompt of n ids decoding until its last decode step
    holds n + j ids with n + j - W = I + off: the window before E is freed only for off >= 0;
    the second prompt shares E + W - 1 ids of what it cached, all served only when nothing was
    freed (and else none: fewer than W live ids follow the tombstone)."""
    case_id = f"window/sglang-interval-I{off:+d}".replace("+0", "")

    def build(count, ids, settings, U):
        found = _window(settings)
        if found is None:
            return None
        W, I, P, Wp = found
        rules = _rules(count, "PEER-SGL-10", "PEER-SGL-11", "PEER-SGL-12")
        first = _text(2, "nine")
        n = len(ids(first))
        j0 = I + W - n                                       # the first decode step that frees
        if j0 - 1 < 1:
            return Unsupported(case_id, "window", rules, f"the shortest prompt ({n} ids) is longer than W + I - 2 "
                               f"= {W + I - 2}: its second decode step frees already")
        E = P * (max(0, n + j0 - Wp) // P)
        k = E + W - 1
        return _window_case(case_id, rules, f"a prompt of {n} ids sampling {j0 + off + 2} tokens (its last decode "
                            f"step holds W + I {off:+d} ids; W = {W}, I = {I}), then a prompt sharing {k} ids of "
                            f"what it cached, twice: the window before {E} is freed only when n + j - W >= I",
                            first, j0 + off + 2, k, ids, {"window": W, "interval": I, "freed_when_freeing": E})
    return build


def _edge(off: int):
    """PEER-SGL-11 at the window's edge: a prompt decoding until its window was freed once before
    E (and not yet again), then a prompt sharing the first page multiple at or past E + W of what
    it cached, one id less or one more."""
    case_id = f"window/sglang-edge-W{off:+d}".replace("+0", "")

    def build(count, ids, settings, U):
        found = _window(settings)
        if found is None:
            return None
        W, I, P, Wp = found
        rules = _rules(count, "PEER-SGL-10", "PEER-SGL-11", "PEER-SGL-12")
        first = _text(2, "nine")
        n = len(ids(first))
        j1 = max(1, I + W - n)                               # the first decode step that frees
        E = P * (max(0, n + j1 - Wp) // P)
        j2 = max(j1 + 1, E + I + W - n)                      # the next one: not reached
        sampled, cached = j2 + 1, P * ((n + j2) // P)
        edge = -(-(E + W) // P) * P
        if edge + 1 >= cached:
            return Unsupported(case_id, "window", rules, f"an interval of {I} leaves fewer than W = {W} live ids "
                               f"after the freed {E}: no edge to share")
        return _window_case(case_id, rules, f"a prompt of {n} ids sampling {sampled} tokens (the window before {E} "
                            f"freed; W = {W}, P = {P}), then a prompt sharing {edge + off} ids of what it cached "
                            f"(the edge: {edge}), twice", first, sampled, edge + off, ids,
                            {"window": W, "interval": I, "freed": E, "edge": edge})
    return build


def _continued(messages: list) -> list:
    """The conversation after `messages`: an answer and another question (its ids start with the
    prompt's where the chat template renders the assistant turn after its generation prompt)."""
    return messages + [{"role": "assistant", "content": "Nine."}, {"role": "user", "content": QUESTIONS[3]}]


def _mamba_state_at_end(count, ids, settings, U):
    """PEER-SGL-13: A (one sampled token: its prompt is cached, the state at its end), B continuing
    A's conversation (it reaches A's state), B again (its own state sits past its N - 1 ids: A's
    is the deepest), then B continued (B's state)."""
    if not settings.get("mamba"):
        return None
    case_id, rules = "mamba/state-at-end", _rules(count, "PEER-SGL-13")
    a = chat(SYSTEM + " " + filler(2 * U, 13), QUESTIONS[0])
    b = _continued(a)
    if common_prefix(ids(a), ids(b)) != len(ids(a)):
        return Unsupported(case_id, "mamba", rules, "the chat template does not render a continued conversation "
                           "after the prompt's own ids: no request can reach the first prompt's state")
    return PeerCase(case_id, "mamba", "a prompt, then its conversation continued, that again, then continued "
                    "once more: a hit ends only where a cached sequence ended", rules,
                    [Step(a), Step(b, reuse=True), Step(b, reuse=True), Step(_continued(b), reuse=True)],
                    {"prompt_tokens": [len(ids(x)) for x in (a, b)]})


def _mamba_shared_prefix(count, ids, settings, U):
    """PEER-SGL-13: B shares a long prefix with A but not A's end: no state there, B reports 0;
    B's own conversation continued then reaches B's state."""
    if not settings.get("mamba"):
        return None
    case_id, rules = "mamba/shared-prefix", _rules(count, "PEER-SGL-13")
    system = SYSTEM + " " + filler(2 * U, 17)
    a, b = chat(system, QUESTIONS[1]), chat(system, QUESTIONS[2])
    if common_prefix(ids(b), ids(_continued(b))) != len(ids(b)):
        return Unsupported(case_id, "mamba", rules, "the chat template does not render a continued conversation "
                           "after the prompt's own ids")
    return PeerCase(case_id, "mamba", "two prompts under one long system text, then the second's conversation "
                    "continued: the shared prefix holds no Mamba state", rules,
                    [Step(a), Step(b, reuse=True), Step(_continued(b), reuse=True)],
                    {"shared_tokens": common_prefix(ids(a), ids(b)), "prompt_tokens": [len(ids(x)) for x in (a, b)]})


def _mamba_edge(off: int):
    """PEER-SGL-13 at the state: a prompt of n ids steered to three digit tokens (its n + 2 ids
    cached, the state at L = n + 2), then a prompt sharing L + off ids of its prompt and digits
    (L - 1: no state there, 0; L and L + 1: the state at L), then that prompt's conversation
    continued (its own state)."""
    case_id = f"mamba/state-edge-L{off:+d}".replace("+0", "")

    def build(count, ids, settings, U):
        if not settings.get("mamba"):
            return None
        rules = _rules(count, "PEER-SGL-13")
        first = _text(2 * U, "nine")
        n, digit = len(ids(first)), _digit(ids, first)
        second = _sharing(ids, first, ids(first) + [digit] * 3, n + 2 + off)
        if second is None or common_prefix(ids(second), ids(_continued(second))) != len(ids(second)):
            return Unsupported(case_id, "mamba", rules, f"no prompt shares exactly {n + 2 + off} ids with the first "
                               "prompt and the digits it sampled, or continues as a conversation after its own ids")
        return PeerCase(case_id, "mamba", f"a prompt of {n} ids sampling three tokens (the state at L = {n + 2}), a "
                        f"prompt sharing L {off:+d} of those ids, then its conversation continued", rules,
                        [Step(first, 3, logit_bias={str(digit): 100}), Step(second, reuse=True),
                         Step(_continued(second), reuse=True)],
                        {"state_at": n + 2, "shared_tokens": n + 2 + off})
    return build


HYBRID_CASES = {**{f"window/sglang-interval-I{off:+d}".replace("+0", ""): _interval(off) for off in (-1, 0, 1)},
                **{f"window/sglang-edge-W{off:+d}".replace("+0", ""): _edge(off) for off in (-1, 0, 1)},
                **{f"mamba/state-edge-L{off:+d}".replace("+0", ""): _mamba_edge(off) for off in (-1, 0, 1)},
                "mamba/state-at-end": _mamba_state_at_end, "mamba/shared-prefix": _mamba_shared_prefix}
