"""The peer suite's cases: sequences of chat requests laid out on the server's own tokens.

A case is a list of steps, each one chat request; a step's messages may feed back the answer
of an earlier step (`Answer(k)`), so a conversation continues with whatever the server said.
Cases that depend on where prompts diverge or how long they are (block boundaries) are laid
out for the run's tokenizer and block size: the builder searches the number of filler words
that puts the divergence or the length exactly there, and records what it achieved. Whether the
layout came out as intended never decides a verdict: every count is predicted by the oracle on
the ids actually sent.

    cases(profile, settings, ids)   ids(messages) -> prompt ids (the run's token source)
      -> [PeerCase | Unsupported]
"""
from __future__ import annotations

from dataclasses import dataclass, field

from reference.peers import common_prefix

from . import PEER_PROFILES

WORDS = ("the of and to in is for on with as at by from that this it be are was or an not but all can "
         "one two three four five six seven eight nine ten").split()
SYSTEM = "You are a careful assistant. Answer briefly and precisely."
QUESTIONS = ("Which is larger, seven or nine?", "Name a prime number below ten.", "What colour is the sky?",
             "How many legs does a spider have?")
MAX_EVICTION_TOKENS = 3000
"""An eviction case fills the cache with prompts of about 0.6 of its size: no longer than this."""


@dataclass(frozen=True)
class Answer:
    """An assistant message whose content is the answer of step `step` of the same case."""
    step: int


@dataclass
class Step:
    messages: list
    max_tokens: int = 1
    salt: str | None = None
    lora: str | None = None
    extra_key: str | None = None


@dataclass
class PeerCase:
    id: str
    section: str
    description: str
    rules: list
    steps: list
    layout: dict = field(default_factory=dict)
    """What the builder aimed for and achieved (divergence position, prompt length)."""


@dataclass
class Unsupported:
    id: str
    section: str
    rules: list
    reason: str


def filler(m: int, seed: int = 0) -> str:
    return " ".join(WORDS[(seed + i) % len(WORDS)] for i in range(m))


def chat(system: str, question: str) -> list:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def fit(measure, target: int, guess: int, span: int) -> int | None:
    """The filler count m >= 0 nearest `guess` with measure(m) == target, or None."""
    tried = set()
    for delta in range(0, span + 1):
        for m in (guess + delta, guess - delta):
            if m < 0 or m in tried:
                continue
            tried.add(m)
            if measure(m) == target:
                return m
    return None


def unit(profile: str, settings: dict) -> int:
    """The boundary the layout cases aim at: the block (vLLM) or page size (SGLang, when above
    1); 16 otherwise, where nothing is aligned and the cases check that nothing is."""
    if profile == "vllm-apc":
        return settings["block_size"]
    if profile == "sglang-radix" and settings["page_size"] > 1:
        return settings["page_size"]
    return 16


def cases(profile: str, settings: dict, ids) -> list:
    """Every case of the profile, in run order."""
    p = PEER_PROFILES[profile]
    count, after = p["count_rule"], p["after_rule"]
    out = [_replay(count), _shared_system(profile, count), _feedback(count, after)]
    U = unit(profile, settings)
    for off in (-1, 0, 1):
        out.append(_near_miss(count, ids, U, off))
    for off, name in ((-1, "kB-1"), (0, "kB"), (1, "kB+1"), (U // 2, "kB+half")):
        out.append(_replay_length(count, ids, U, off, name))
    features = p["features"]
    if "salt" in features:
        out.append(_salted(profile, count))
    if "lora" in features:
        out.append(_adapters(profile, count))
    if "extra_key" in features:
        out.append(_extra_keys(count))
    if profile == "llama.cpp-server":
        out.append(_one_slot(count))
    if profile == "vllm-apc":
        out.append(_lru_blocks(count, ids, settings))
    return out


def _rules(count: str, *more: str) -> list:
    return ["PEER-API-1", "PEER-API-2", count] + list(more)


def _replay(count):
    prompt = chat(SYSTEM, QUESTIONS[0])
    return PeerCase("reuse/replay", "reuse", "the same prompt twice: the second reuses all but what the cap "
                    "and the block size leave out", _rules(count), [Step(prompt), Step(prompt)])


def _shared_system(profile, count):
    system = SYSTEM + " " + filler(40)
    a, b = chat(system, QUESTIONS[0]), chat(system, QUESTIONS[1])
    extra = ["PEER-LCPP-4"] if profile == "llama.cpp-server" else []
    return PeerCase("reuse/shared-system-prompt", "reuse",
                    "two questions under one long system prompt, the second repeated, then the first again",
                    _rules(count, *extra), [Step(a), Step(b), Step(b), Step(a)])


def _feedback(count, after):
    first = chat(SYSTEM, QUESTIONS[2])
    second = first + [Answer(0), {"role": "user", "content": QUESTIONS[3]}]
    third = second + [Answer(1), {"role": "user", "content": "Thank you. " + QUESTIONS[0]}]
    return PeerCase("turns/feedback", "turns",
                    "a conversation of three turns that feeds each answer back: the sampled tokens the "
                    "server computed are part of what it caches", _rules(count, after, "PEER-TOK-2"),
                    [Step(first, 6), Step(second, 6), Step(third, 1)])


def _near_miss(count, ids, U, off):
    name = {-1: "kB-1", 0: "kB", 1: "kB+1"}[off]
    case_id = f"boundaries/near-miss-at-{name}"

    def pair(m):
        system = SYSTEM + " " + filler(m, 3)
        return chat(system, QUESTIONS[0]), chat(system, QUESTIONS[1])

    def lcp(m):
        a, b = pair(m)
        return common_prefix(ids(a), ids(b))
    base = lcp(0)
    target = _boundary_at_least(base, U, off)
    m = fit(lcp, target, target - base, 3 * U)
    achieved = lcp(m if m is not None else target - base)
    a, b = pair(m if m is not None else target - base)
    return PeerCase(case_id, "boundaries",
                    f"two prompts that share exactly k*B{off:+d} tokens (B = {U}), then the first again",
                    _rules(count), [Step(a), Step(b), Step(a)],
                    {"unit": U, "shared_tokens_intended": target, "shared_tokens": achieved})


def _boundary_at_least(base: int, U: int, off: int) -> int:
    """The smallest k*U + off (k >= 1) that is at least `base`: a length the filler can reach."""
    target = U * max(1, -(-(base - off) // U)) + off
    while target < base:
        target += U
    return target


def _replay_length(count, ids, U, off, name):
    def prompt(m):
        return chat(SYSTEM + " " + filler(m, 7), QUESTIONS[1])

    def length(m):
        return len(ids(prompt(m)))
    base = length(0)
    target = _boundary_at_least(base, U, off)
    m = fit(length, target, target - base, 3 * U)
    chosen = prompt(m if m is not None else target - base)
    return PeerCase(f"boundaries/replay-at-{name}", "boundaries",
                    f"a prompt of k*B{'+' if off >= 0 else ''}{off} tokens (B = {U}) sent twice",
                    _rules(count), [Step(chosen), Step(chosen)],
                    {"unit": U, "prompt_tokens_intended": target, "prompt_tokens": len(ids(chosen))})


def _salted(profile, count):
    rule = "PEER-VLLM-2" if profile == "vllm-apc" else "PEER-SGL-2"
    prompt = chat(SYSTEM + " " + filler(30, 11), QUESTIONS[2])
    return PeerCase("isolation/cache-salt", "isolation",
                    "one prompt under salt s1, salt s2, no salt, then s1 again: only the last may reuse",
                    _rules(count, rule), [Step(prompt, salt="s1"), Step(prompt, salt="s2"), Step(prompt),
                                          Step(prompt, salt="s1")])


def _adapters(profile, count):
    rule = "PEER-VLLM-2" if profile == "vllm-apc" else "PEER-SGL-2"
    prompt = chat(SYSTEM + " " + filler(30, 13), QUESTIONS[3])
    return PeerCase("isolation/lora", "isolation",
                    "one prompt on the base model, adapter alpha, adapter beta, then alpha again",
                    _rules(count, rule), [Step(prompt), Step(prompt, lora="alpha"), Step(prompt, lora="beta"),
                                          Step(prompt, lora="alpha")])


def _extra_keys(count):
    prompt = chat(SYSTEM + " " + filler(30, 17), QUESTIONS[0])
    return PeerCase("isolation/extra-key", "isolation", "one prompt under extra_key k1, k2, then k1 again",
                    _rules(count, "PEER-SGL-2"), [Step(prompt, extra_key="k1"), Step(prompt, extra_key="k2"),
                                                  Step(prompt, extra_key="k1")])


def _one_slot(count):
    a = chat(SYSTEM + " " + filler(30, 19), QUESTIONS[0])
    b = chat("Reply in one word. " + filler(20, 23), QUESTIONS[1])
    return PeerCase("eviction/one-slot", "eviction",
                    "prompt A, an unrelated prompt B, then A again: one slot keeps only B",
                    _rules(count, "PEER-LCPP-4"), [Step(a), Step(b), Step(a)])


def _lru_blocks(count, ids, settings):
    case_id, rules = "eviction/lru-blocks", _rules(count, "PEER-VLLM-5")
    K, B = settings["cache_blocks"], settings["block_size"]
    if K is None:
        return Unsupported(case_id, "eviction", rules, "the server's cache size is not known: pass "
                           "--peer-setting cache_blocks=K (its usable KV blocks) to judge eviction")
    size = int(0.6 * K * B)
    if size > MAX_EVICTION_TOKENS:
        return Unsupported(case_id, "eviction", rules, f"cache_blocks={K} of {B} tokens needs prompts of about "
                           f"{size} tokens to evict; this case writes at most {MAX_EVICTION_TOKENS}")
    prompts = [chat(head + " " + filler(0, seed), QUESTIONS[seed % 4])
               for head, seed in ((SYSTEM, 29), ("Reply in one word.", 31), ("Think step by step.", 37))]

    def sized(k, m):
        head = prompts[k][0]["content"]
        return [{"role": "system", "content": head + " " + filler(m, 29 + 2 * k)}, prompts[k][1]]
    steps = []
    for k in range(3):
        m = max(0, size - len(ids(sized(k, 0))))
        steps.append(Step(sized(k, m)))
    a, b, c = steps
    return PeerCase(case_id, "eviction",
                    f"prompts A, B, C of about 0.6 of the cache ({K} blocks of {B}), then A and B again: the "
                    "least recently freed blocks go first", rules, [a, b, Step(a.messages), c, Step(b.messages)],
                    {"cache_blocks": K, "block_size": B, "prompt_tokens_intended": size})
