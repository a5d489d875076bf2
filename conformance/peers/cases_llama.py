"""llama.cpp-server's own cases: chunk reuse, slot similarity at its threshold, the slot's context."""
from __future__ import annotations

import struct

from ..judge.peer_oracle import common_prefix
from .layout import (FEEDBACK_DIGIT, MAX_EVICTION_TOKENS, QUESTIONS, SYSTEM, WORDS, PeerCase, Step, Unsupported,
                     _rules, at_least, chat, fit)


MAX_CONTEXT_TOKENS = 8192
"""A context case writes prompts as long as the server's context: no longer than this."""
DIVERGE = "Meanwhile"
"""A word no filler holds: where a prompt leaves what the slot holds."""


def scrambled(m: int, seed: int) -> str:
    """`m` filler words in a seeded pseudo-random order: unlike `filler`, whose words recur with
    a period, no run of several of them recurs, so chunk reuse (PEER-LCPP-7) finds only the runs
    a case puts there."""
    x, out = seed * 7919 + 1, []
    for _ in range(m):
        x = (1103515245 * x + 12345) % (1 << 31)
        out.append(WORDS[(x >> 16) % len(WORDS)])
    return " ".join(out)


def run_after(a: list, b: list, start: int) -> int:
    """The longest run of b[start:] that a holds at or after `start` (what the chunk layouts aim
    at; the oracle decides the count)."""
    best = 0
    for c in range(start, len(a)):
        n = 0
        while c + n < len(a) and start + n < len(b) and a[c + n] == b[start + n]:
            n += 1
        best = max(best, n)
    return best


def _chunk(count, ids, settings, U, off):
    """Prompt X = S + M + T, then Y = S + the first ids of T + a new word: Y drops M, so after the
    common prefix S the slot holds a run of T that Y continues with, laid out at n - 1, n and
    n + 1 ids for `cache_reuse` n (16 when it is 0: then only S is reused, PEER-LCPP-1). A run of
    at least n is moved down and counted (PEER-LCPP-7); Y again then reuses all but its last id."""
    n = settings["cache_reuse"]
    name = {-1: "n-1", 0: "n", 1: "n+1"}[off]
    nominal = n if n > 0 else 16
    target = max(0, nominal + off)
    head = SYSTEM + " " + scrambled(8, 101)
    tail = scrambled(nominal + 40, 107).split()
    first = chat(head + " " + scrambled(24, 103) + " " + " ".join(tail), QUESTIONS[0])
    a = ids(first)

    def second(k):
        return chat(head + " " + " ".join(tail[:k] + [DIVERGE]), QUESTIONS[1])

    def run(k):
        b = ids(second(k))
        return run_after(a, b, common_prefix(a, b))
    k = fit(run, target, target, 8)
    k = target if k is None else k
    b = ids(second(k))
    return PeerCase(f"reuse/chunk-at-{name}", "reuse",
                    f"a prompt S + M + T, then S + the first {target} ids of T (n = {nominal}{', reuse off' if n == 0 else ''})"
                    ": a chunk of at least n ids after the common prefix is moved down and counted, a shorter one "
                    "is not", _rules(count, "PEER-LCPP-7"),
                    [Step(first), Step(second(k), reuse=True), Step(second(k), reuse=True)],
                    {"cache_reuse": n, "chunk_tokens_intended": target, "chunk_tokens": run(k),
                     "shared_prefix": common_prefix(a, b)})


def _slot_similarity(count, ids, settings, U):
    """Prompts A and B fill two slots; C shares with B's slot exactly `slot_prompt_similarity` of
    its ids, which is not above it, so C takes the least recently used slot (A's); B finds its
    slot again; D (C less its last word) shares with B's slot just above the threshold and with
    C's nearly all: of two slots above the threshold the most similar is taken (PEER-LCPP-5)."""
    case_id, rules = "boundaries/slot-similarity", _rules(count, "PEER-LCPP-5")
    share, slots = settings["slot_prompt_similarity"], settings["slots"]
    if slots < 2 or share <= 0:
        return None                       # one slot, or no similarity: eviction/slots judges the choice
    words = ("Reply in one word. " + scrambled(MAX_EVICTION_TOKENS, 137)).split()

    def b_of(k):                          # B: the words C keeps and 12 more
        return chat(" ".join(words[:k + 12]), QUESTIONS[1])

    def c_of(k, m):
        return chat(" ".join(words[:k]), QUESTIONS[2] + " " + scrambled(m, 139))
    found = None
    limit = min(MAX_EVICTION_TOKENS, settings.get("n_ctx") or MAX_EVICTION_TOKENS) - 2
    for k in range(6, len(words) - 12):
        base = len(ids(c_of(k, 0)))
        shared = common_prefix(ids(b_of(k)), ids(c_of(k, 0)))
        n = round(shared / share)
        if n > limit or base >= limit:
            break
        if n < base + 1 or _f32(shared / n) != _f32(share):
            continue
        m = fit(lambda m: len(ids(c_of(k, m))), n, n - base, 16)
        if m is not None and m >= 1:
            found = (k, m, shared, n)
            break
    if found is None:
        return Unsupported(case_id, "boundaries", rules, f"no prompt of at most {limit} ids shares exactly "
                           f"{share:g} of its ids with another (the layout needs a share equal to "
                           "slot_prompt_similarity in single precision)")
    k, m, shared, n = found
    a = Step(chat("Think step by step. " + scrambled(60, 131), QUESTIONS[0]))
    b, c, d = b_of(k), c_of(k, m), c_of(k, m - 1)
    return PeerCase(case_id, "boundaries", f"{slots} slots, threshold {share:g}: A and B fill two slots; C shares "
                    f"{shared} of its {n} ids with B ({share:g}, not above the threshold: C takes the least recently "
                    "used slot); B again; D shares just above the threshold with B and more with C: the most "
                    "similar slot is taken", rules,
                    [a, Step(b), Step(c), Step(b, reuse=True), Step(d, reuse=True), Step(b, reuse=True)],
                    {"slot_prompt_similarity": share, "shared_with_b": shared, "prompt_tokens": len(ids(c)),
                     "prompt_tokens_intended": n, "next_prompt_tokens": len(ids(d))})


def _f32(x: float) -> float:
    """x in single precision, as llama-server compares similarities (the layout aims at equality)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def _context_unknown(case_id, rules, settings):
    """Why a context case cannot be laid out: False where the slot's context is not known (the
    case does not apply: llama-server publishes it in GET /props default_generation_settings.n_ctx,
    a server that does not is judged without it), an Unsupported where it is too long to write,
    else None."""
    n_ctx = settings["n_ctx"]
    if n_ctx is None:
        return False
    if n_ctx > MAX_CONTEXT_TOKENS:
        return Unsupported(case_id, "context", rules, f"a slot context of {n_ctx} ids needs prompts that long; this "
                           f"case writes at most {MAX_CONTEXT_TOKENS} (start the server with a smaller -c)")
    return None


def _of_length(make, ids, target: int) -> list:
    """make(m) for the filler count m that gives `target` ids (the nearest reachable)."""
    m = at_least(make, ids, target)
    exact = fit(lambda x: len(ids(make(x))), target, m, 16)
    return make(exact if exact is not None else m)


def _steering(ids, messages) -> dict:
    """A logit bias that makes every sampled id the digit token after the assistant tag, so a
    long generation never ends at an end of sequence (the answer `FEEDBACK_DIGIT` repeated)."""
    n = len(ids(messages))
    digit = ids(messages + [{"role": "assistant", "content": FEEDBACK_DIGIT * 4}, {"role": "user", "content": "x"}])[n]
    return {str(digit): 100}


def _too_long(count, ids, settings, U):
    """A prompt of exactly the slot's context is refused and leaves the slot as it was; one of
    n_ctx - 1 ids is served (PEER-LCPP-8)."""
    case_id, rules = "context/too-long", _rules(count, "PEER-LCPP-8")
    unknown = _context_unknown(case_id, rules, settings)
    if unknown is not None:
        return unknown or None
    n_ctx = settings["n_ctx"]
    system = SYSTEM + " " + scrambled(max(8, n_ctx // 2 - 40), 151)
    a = _of_length(lambda m: chat(system + " " + scrambled(m, 149), QUESTIONS[0]), ids, max(2 * U + 1, n_ctx // 2))

    def longer(m):
        return chat(system + " " + scrambled(m, 157), QUESTIONS[1])
    full, fits = _of_length(longer, ids, n_ctx), _of_length(longer, ids, n_ctx - 1)
    return PeerCase(case_id, "context", f"a prompt of n_ctx = {n_ctx} ids between two of a shorter one: refused (HTTP 400), "
                    "the slot untouched; then one of n_ctx - 1 ids, served", rules,
                    [Step(a), Step(full, beyond_context=True), Step(a, reuse=True), Step(fits, beyond_context=True),
                     Step(fits, reuse=True, beyond_context=True)],
                    {"n_ctx": n_ctx, "prompt_tokens": [len(ids(x)) for x in (a, full, fits)]})


CONTEXT_MARGIN = 4
"""A context case's long prompt ends this many ids before the slot's context, so that a few
sampled ids reach it."""


def _context_end(count, ids, settings, U):
    """A prompt of n_ctx - 4 ids generating past the context: without context shift generation
    stops and the slot holds n_ctx - 1 ids, all of the prompt (the same prompt then reuses N - 1);
    with it the slot shifts and keeps only its first n_keep ids of the prompt (PEER-LCPP-8/9)."""
    case_id = "context/end"
    rules = _rules(count, "PEER-LCPP-8", *(["PEER-LCPP-9"] if settings["context_shift"] else []))
    unknown = _context_unknown(case_id, rules, settings)
    if unknown is not None:
        return unknown or None
    n_ctx = settings["n_ctx"]
    a = _of_length(lambda m: chat(SYSTEM + " " + scrambled(m, 167), QUESTIONS[2]), ids, n_ctx - CONTEXT_MARGIN)
    bias = _steering(ids, a)
    return PeerCase(case_id, "context", f"a prompt of n_ctx - {CONTEXT_MARGIN} ids sampling {CONTEXT_MARGIN + 6} ids "
                    f"({'context shift' if settings['context_shift'] else 'no context shift'}), then the prompt twice",
                    rules, [Step(a, CONTEXT_MARGIN + 6, logit_bias=bias, beyond_context=True),
                            Step(a, reuse=True), Step(a, reuse=True)],
                    {"n_ctx": n_ctx, "prompt_tokens": len(ids(a)), "context_shift": settings["context_shift"]})


def _shift_discard(count, ids, settings, U):
    """A prompt that generates past the context shifts the slot: its first K ids stay, the next D
    go. The same prompt less the words at token positions K .. K + D - 1 is then what the slot
    holds (all but its last id reused); less one word fewer or one more it shares only K ids with
    the slot: the discard's edge, D - 1, D, D + 1 (PEER-LCPP-9)."""
    case_id, rules = "context/shift-discard", _rules(count, "PEER-LCPP-9")
    if not settings["context_shift"]:
        return None                       # the server stops at its context: context/end judges that
    unknown = _context_unknown(case_id, rules, settings)
    if unknown is not None:
        return unknown or None
    n_ctx = settings["n_ctx"]
    keep = min(settings["n_keep"], n_ctx - 4)
    discard = (n_ctx - 1 - keep) // 2
    words = scrambled(n_ctx, 163).split()

    def prompt(kept):
        return chat(SYSTEM + " " + " ".join(kept), QUESTIONS[3])
    a = _of_length(lambda m: prompt(words[:m]), ids, n_ctx - CONTEXT_MARGIN)
    full = ids(a)
    count_words = len(a[0]["content"].split()) - len(SYSTEM.split())

    def through(j):                      # how many ids of the prompt its first j filler words end
        return common_prefix(full, ids(prompt(words[:j] + [DIVERGE])))

    def word_ending(target):             # the j whose first j words end exactly `target` ids, or None
        low, high = 0, count_words
        while low < high:
            mid = (low + high) // 2
            if through(mid) < target:
                low = mid + 1
            else:
                high = mid
        return low if through(low) == target else None
    starts = {t: word_ending(t) for t in (keep, keep + discard - 1, keep + discard, keep + discard + 1)}
    if any(j is None for j in starts.values()):
        head = through(0)
        return Unsupported(case_id, "context", rules,
                           f"n_keep {keep} keeps {'fewer ids than the chat template head and system prompt' if keep < head else 'a part of the prompt that is not whole words'} "
                           f"({head} ids come before the first filler word): no chat prompt can start with what the "
                           "slot keeps; start the server with a larger --keep and give --peer-setting n_keep")
    bias = _steering(ids, a)
    steps, achieved = [], {}
    for x in (0, -1, 1):
        dropped = prompt(words[:starts[keep]] + words[starts[keep + discard + x]:count_words])
        achieved[x] = ids(dropped) == full[:keep] + full[keep + discard + x:]
        steps += [Step(a, CONTEXT_MARGIN + 6, logit_bias=bias, beyond_context=True), Step(dropped, reuse=True)]
    return PeerCase(case_id, "context", f"n_ctx {n_ctx}, n_keep {keep}: a prompt shifting the slot (D = {discard} "
                    "discarded after the first K), then the prompt less its ids K .. K + D - 1 (all reused), less one "
                    "fewer and one more (K reused), each after the long prompt again", rules, steps,
                    {"n_ctx": n_ctx, "n_keep": keep, "discard": discard, "prompt_tokens": len(full),
                     "layout_exact": {"D": achieved[0], "D-1": achieved[-1], "D+1": achieved[1]}})


LLAMA_CASES = {"reuse/chunk-at-n-1": lambda c, i, s, U: _chunk(c, i, s, U, -1),
               "reuse/chunk-at-n": lambda c, i, s, U: _chunk(c, i, s, U, 0),
               "reuse/chunk-at-n+1": lambda c, i, s, U: _chunk(c, i, s, U, 1),
               "boundaries/slot-similarity": _slot_similarity, "context/too-long": _too_long,
               "context/end": _context_end, "context/shift-discard": _shift_discard}
