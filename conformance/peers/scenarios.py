"""The peer suite's cases: sequences of chat requests laid out on the server's own tokens.

A case is a list of steps, each one chat request; a step's messages may feed back the answer
of an earlier step (`Answer(k)`), so a conversation continues with whatever the server said.
Every case is laid out for the run's tokenizer and unit (the block or page size), as engine
cases are materialized for an engine: prompts that should reuse are at least `2U + 1` tokens
long, boundaries sit at `k*U - 1`, `k*U`, `k*U + 1` with `k >= 2`, and the builder searches the
number of filler words that puts a length or a divergence exactly there, recording what it
achieved. Steps marked `reuse` are those the case exists to judge reuse on: when the oracle
predicts 0 for all of them, the case judged nothing (run_case.py makes it NOT_SUPPORTED).
Whether the layout came out as intended never decides a verdict: every count is predicted by
the oracle on the ids actually sent. llama.cpp's context cases lay prompts out against the slot's
context instead (`n_ctx`, `n_ctx - 1`, `n_ctx - 4` ids) and send them although prompt and
max_tokens pass it (`Step.beyond_context`): what the server does there is the profile's rule.

    cases(profile, settings, ids, facts, images=None)   ids(messages) -> prompt ids (the run's token
      -> [PeerCase | Unsupported]                      source); images: why image prompts cannot run

Profiles whose runtime keys cached blocks by the images they hold (`images` in the PeerProfile's
features) also get the image cases (`images/...`): the same image again, another image of the
same size (the same token ids: only the key tells them apart), the image at another position,
and an image across a block boundary.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

from ..judge import peer_oracle as oracle
from ..judge.peer_oracle import PeerRequest, common_prefix, simulator

from . import PEER_PROFILES
from .images import image_part

WORDS = ("the of and to in is for on with as at by from that this it be are was or an not but all can "
         "one two three four five six seven eight nine ten").split()
SYSTEM = "You are a careful assistant. Answer briefly and precisely."
QUESTIONS = ("Which is larger, seven or nine?", "Name a prime number below ten.", "What colour is the sky?",
             "How many legs does a spider have?")
MAX_EVICTION_TOKENS = 3000
"""An eviction case fills the cache with prompts of about half its size: no longer than this."""
ADAPTER_NAMES = ("alpha", "beta")
"""The LoRA adapters a case uses when the server does not list its own."""


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
    reuse: bool = False
    """A request the case exists to judge reuse on (see the module docstring)."""
    skip_read: bool = False
    """vLLM's per-request read bypass: the request asks for prompt log-probabilities (PEER-VLLM-7)."""
    logit_bias: dict | None = None
    """OpenAI `logit_bias` (token id -> bias): steers a conversation's answer to tokens that can
    be fed back as themselves."""
    beyond_context: bool = False
    """The case sends the request although prompt and max_tokens exceed the server's context:
    the profile says what the server does there (a refusal, a stop, a context shift)."""
    retention: dict | None = None
    """TensorRT-LLM's `kv_cache_retention_config` (PEER-TRT-8): token-range priorities and durations."""


@dataclass
class PeerCase:
    id: str
    section: str
    description: str
    rules: list
    steps: list
    layout: dict = field(default_factory=dict)
    """What the builder aimed for and achieved (divergence position, prompt length)."""
    generated: bool = False
    """The case exists to judge caching of generated tokens: it judged nothing when no count
    depends on it (run_case.py compares with a prompt-only prediction)."""
    variants: list = field(default_factory=list)
    """Other step lists to try, in order, when the answer to the first step cannot be fed back
    as the ids the server sampled (a greedy model's first token decides it: run_case.py)."""


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


def at_least(make, ids, target: int, limit: int = 1 << 14) -> int:
    """The smallest filler count m with len(ids(make(m))) >= target (lengths grow with m):
    doubling, then bisection, so a server tokenizer is asked O(log target) times."""
    if len(ids(make(0))) >= target:
        return 0
    high = 1
    while len(ids(make(high))) < target:
        high *= 2
        if high > limit:
            return limit
    low = high // 2
    while low + 1 < high:
        mid = (low + high) // 2
        if len(ids(make(mid))) >= target:
            high = mid
        else:
            low = mid
    return high


def unit(profile: str, settings: dict) -> int:
    """The boundary the layout cases aim at: the profile's block or page size (its `unit`
    setting) when above 1; 16 otherwise, where nothing is aligned and the cases check that
    nothing is."""
    name = PEER_PROFILES[profile].unit
    return settings[name] if name is not None and settings[name] > 1 else 16


def cases(profile: str, settings: dict, ids, facts=None, images: str | None = None) -> list:
    """Every case of the profile, in run order: the shared ones, those its cache keys allow, then
    its own (`PeerProfile.cases`, built by OWN_CASES). `images`: why image prompts cannot be laid
    out (the image cases are then NOT_SUPPORTED with it), None when they can."""
    p = PEER_PROFILES[profile]
    count, after = p.count_rule, p.after_rule
    if profile == "sglang-radix" and settings.get("eagle"):
        count = "PEER-SGL-9"                         # bigram keys decide every count (the oracle's step says so)
    U = unit(profile, settings)
    out = [_replay(count, ids, U), _shared_system(count, ids, U), _feedback(count, after, ids, U)]
    for off in (-1, 0, 1):
        out.append(_near_miss(count, after, ids, U, off))
    judged = (lambda n: p.full_match(settings, n) > 0)       # k >= 2, and a replay that reuses something
    for off, name in ((-1, "kB-1"), (0, "kB"), (1, "kB+1"), (U // 2, "kB+half")):
        out.append(_replay_length(count, ids, U, off, name, judged))
    adapters = getattr(facts, "adapters", None)
    if "salt" in p.features:
        out.append(_salted(p.key_rule, count, ids, U))
    if "lora" in p.features:
        out.append(_adapters(p.key_rule, count, ids, U, adapters))
    if "salt" in p.features and "lora" in p.features:
        out.append(_combined_keys(p.key_rule, "extra_key" in p.features, count, ids, U, adapters))
    if "extra_key" in p.features:
        out.append(_extra_keys(p.key_rule, count, ids, U))
    if "images" in p.features:
        out += image_cases(p.key_rule, count, ids, U, images)
    built = (OWN_CASES[case_id](count, ids, settings, U) for case_id in p.cases)
    out += [case for case in built if case is not None]          # None: not for these settings
    for case in out:
        for rule in (p.case_rules(case.id, settings) if p.case_rules else ()):
            if rule not in case.rules:              # a rule of the profile the case depends on too
                case.rules.append(rule)
    return out


def _rules(count: str, *more: str) -> list:
    return ["PEER-API-1", "PEER-API-2", count] + list(more)


def long_prompt(head: str, question: str, seed: int, ids, U: int) -> list:
    """A chat prompt of at least 2U + 1 tokens: a replay of it can reuse two whole units."""
    def make(m):
        return chat(head + " " + filler(m, seed), question)
    return make(at_least(make, ids, 2 * U + 1))


def _replay(count, ids, U):
    prompt = long_prompt(SYSTEM, QUESTIONS[0], 5, ids, U)
    return PeerCase("reuse/replay", "reuse", "the same prompt (at least 2B + 1 tokens) twice: the second reuses "
                    "all but what the cap and the block size leave out", _rules(count),
                    [Step(prompt), Step(prompt, reuse=True)])


def _shared_system(count, ids, U):
    def pair(m):
        system = SYSTEM + " " + filler(40 + m)
        return chat(system, QUESTIONS[0]), chat(system, QUESTIONS[1])

    def shared(m):
        return [0] * common_prefix(*(ids(x) for x in pair(m)))
    a, b = pair(at_least(shared, lambda x: x, 2 * U + 1))
    return PeerCase("reuse/shared-system-prompt", "reuse",
                    "two questions under one long system prompt (at least 2B + 1 tokens shared), the second "
                    "repeated, then the first again", _rules(count),
                    [Step(a), Step(b, reuse=True), Step(b, reuse=True), Step(a, reuse=True)])


FEEDBACK_DIGIT = "1"
"""The answer a conversation case steers to when the server's own first answer cannot be fed back
as its ids: digits are split one by one by the common tokenizers, so "11111111" tokenizes back
as the eight tokens sampled."""


def _feedback(count, after, ids, U):
    """The first prompt ends one token before a block boundary (3B - 1 tokens or the next such
    length), so that one sampled token fed back completes a block: then whether the server
    caches generated tokens decides the next count, whatever the block size. Each answer is fed
    back as the text that gives the sampled ids back (feedback.py). When no text does for the
    first answer (a tokenizer that marks word starts cannot give back a word-start token right
    after the assistant tag), the case runs again with a logit bias that steers the answers to
    the digit token that follows the tag, which feeds back as itself."""
    def prompt(m):
        return chat(SYSTEM + " " + filler(m, 9), QUESTIONS[2])

    def length(m):
        return len(ids(prompt(m)))
    base = length(0)
    target = _boundary_at_least(max(base, 2 * U + 1), U, -1)
    m = fit(length, target, target - base, 3 * U)
    first = prompt(m if m is not None else at_least(prompt, ids, target))
    second = first + [Answer(0), {"role": "user", "content": QUESTIONS[3]}]
    third = second + [Answer(1), {"role": "user", "content": "Thank you. " + QUESTIONS[0]}]
    n = len(ids(first))
    digit = ids(first + [{"role": "assistant", "content": FEEDBACK_DIGIT * 4}, {"role": "user", "content": "x"}])[n]
    bias = {str(digit): 100}
    plain = [Step(first, 8), Step(second, 8, reuse=True), Step(third, 1, reuse=True)]
    steered = [Step(first, 8, logit_bias=bias), Step(second, 8, reuse=True, logit_bias=bias),
               Step(third, 1, reuse=True)]
    return PeerCase("turns/feedback", "turns",
                    "a conversation of three turns that feeds each answer back: the sampled tokens the "
                    "server computed are part of what it caches", _rules(count, after, "PEER-TOK-2"),
                    plain, {"unit": U, "first_prompt_tokens_intended": target, "first_prompt_tokens": n,
                            "steered_to_token": digit}, generated=True, variants=[steered])


def _near_miss(count, after, ids, U, off):
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
                    f"two prompts that share exactly k*B{off:+d} tokens (B = {U}, k >= 2), then the first again",
                    _rules(count, after), [Step(a), Step(b, reuse=True), Step(a, reuse=True)],
                    {"unit": U, "shared_tokens_intended": target, "shared_tokens": achieved})


def _boundary_at_least(base: int, U: int, off: int) -> int:
    """The smallest k*U + off (k >= 2) that is at least `base`: a length the filler can reach,
    and one block beyond the first, so that a count of 0 is never the whole story."""
    target = U * max(2, -(-(base - off) // U)) + off
    while target < base:
        target += U
    return target


def _replay_length(count, ids, U, off, name, judged=lambda n: True, case_id=None, rules=(), what="B"):
    """A prompt of k*U + off tokens sent twice, k >= 2 and large enough that the replay reuses
    something under the settings (`judged`: EAGLE's dropped block leaves nothing at k = 2 for
    off <= 0, so those are laid out at k = 3)."""
    def prompt(m):
        return chat(SYSTEM + " " + filler(m, 7), QUESTIONS[1])

    def length(m):
        return len(ids(prompt(m)))
    base = length(0)
    target = _boundary_at_least(base, U, off)
    for _ in range(8):
        if judged(target):
            break
        target += U
    m = fit(length, target, target - base, 3 * U)
    chosen = prompt(m if m is not None else target - base)
    section = (case_id or "boundaries/").split("/")[0]
    return PeerCase(case_id or f"boundaries/replay-at-{name}", section,
                    f"a prompt of k*{what}{'+' if off >= 0 else ''}{off} tokens ({what} = {U}, k >= 2) sent twice",
                    _rules(count, *rules), [Step(chosen), Step(chosen, reuse=True)],
                    {"unit": U, "prompt_tokens_intended": target, "prompt_tokens": len(ids(chosen))})


def _salted(key_rule, count, ids, U):
    prompt = long_prompt(SYSTEM, QUESTIONS[2], 11, ids, U)
    return PeerCase("isolation/cache-salt", "isolation",
                    "one prompt (at least 2B + 1 tokens) under salt s1, salt s2, no salt, then s1 again: only "
                    "the last may reuse", _rules(count, key_rule),
                    [Step(prompt, salt="s1"), Step(prompt, salt="s2"), Step(prompt),
                     Step(prompt, salt="s1", reuse=True)])


def _adapters(key_rule, count, ids, U, listed):
    case_id, rules = "isolation/lora", _rules(count, key_rule)
    names = adapter_names(listed)
    if isinstance(names, str):
        return Unsupported(case_id, "isolation", rules, names)
    alpha, beta = names
    prompt = long_prompt(SYSTEM, QUESTIONS[3], 13, ids, U)
    return PeerCase(case_id, "isolation",
                    f"one prompt (at least 2B + 1 tokens) on the base model, adapter {alpha}, adapter {beta}, "
                    f"then {alpha} again", rules,
                    [Step(prompt), Step(prompt, lora=alpha), Step(prompt, lora=beta),
                     Step(prompt, lora=alpha, reuse=True)], {"adapters": [alpha, beta]})


def adapter_names(listed: dict | None):
    """The two adapters a LoRA case uses: `alpha` and `beta` where the server lists them (or
    lists none), else the first two it lists; a string saying why when it lists fewer."""
    if listed is None or all(n in listed for n in ADAPTER_NAMES):
        return ADAPTER_NAMES
    if len(listed) >= 2:
        return tuple(sorted(listed)[:2])
    have = ", ".join(sorted(listed)) or "none"
    return (f"the case needs two LoRA adapters and the server lists {len(listed)} in /v1/models ({have}): "
            "start it with --enable-lora --lora-modules alpha=DIR beta=DIR")


def _combined_keys(key_rule, extra_keys: bool, count, ids, U, listed):
    """Salted requests on an adapter against salted base-model requests, another salt, no salt
    (and where requests carry extra keys, SGLang's, another extra key): every key of a block
    counts, together (vLLM's block 0 carries the salt and the adapter, SGLang's namespace is
    extra key + adapter and salt)."""
    case_id, rules = "isolation/salt-and-lora", _rules(count, key_rule)
    names = adapter_names(listed)
    if isinstance(names, str):
        return Unsupported(case_id, "isolation", rules, names)
    alpha = names[0]
    prompt = long_prompt(SYSTEM, QUESTIONS[1], 41, ids, U)
    if extra_keys:
        steps = [Step(prompt, salt="s1", extra_key="k1"), Step(prompt, salt="s1", extra_key="k1", lora=alpha),
                 Step(prompt, salt="s1", extra_key="k2", lora=alpha), Step(prompt, salt="s2", extra_key="k1", lora=alpha),
                 Step(prompt, salt="s1", extra_key="k1", lora=alpha, reuse=True),
                 Step(prompt, salt="s1", extra_key="k1", reuse=True)]
        what = f"salt s1 + extra key k1 on the base model, then on {alpha}, then k2 and s2 on {alpha}"
    else:
        steps = [Step(prompt, salt="s1"), Step(prompt, salt="s1", lora=alpha), Step(prompt, salt="s2", lora=alpha),
                 Step(prompt, lora=alpha), Step(prompt, salt="s1", lora=alpha, reuse=True),
                 Step(prompt, salt="s1", reuse=True)]
        what = f"salt s1 on the base model, then on {alpha}, then s2 and no salt on {alpha}"
    return PeerCase(case_id, "isolation", f"one prompt (at least 2B + 1 tokens): {what}; only the repeats of "
                    "an exact combination may reuse", rules, steps, {"adapter": alpha})


def _read_bypass(count, ids, settings, U):
    prompt = long_prompt(SYSTEM, QUESTIONS[0], 43, ids, U)
    return PeerCase("reuse/read-bypass", "reuse", "a prompt, the same prompt asking for prompt log-probabilities "
                    "(vLLM reads no cache for it), then the prompt again", _rules(count, "PEER-VLLM-7"),
                    [Step(prompt), Step(prompt, skip_read=True), Step(prompt, reuse=True)])


def _radix_lru(count, ids, settings, U):
    """A, B, A again, then C: with the pool about 1.2 prompts short, C evicts the least recently
    touched leaf, B's (B is two pages longer, so its leaf alone covers what C needs), not A's,
    which a server evicting by insertion order would take (PEER-SGL-5)."""
    case_id, rules = "eviction/radix-lru", _rules(count, "PEER-SGL-5")
    pool, P = settings["pool_tokens"], settings["page_size"]
    if pool is None:
        return Unsupported(case_id, "eviction", rules, "the server's KV pool size is not known: pass "
                           "--peer-setting pool_tokens=N (its --max-total-tokens) to judge eviction")
    size = int(0.4 * pool)
    if pool < 16 * P:
        return Unsupported(case_id, "eviction", rules, f"a pool of {pool} tokens is too small for pages of {P}: "
                           "the layout needs at least 16 pages so that two prompts fit and a third evicts one")
    if size > MAX_EVICTION_TOKENS:
        return Unsupported(case_id, "eviction", rules, f"a pool of {pool} tokens needs prompts of about {size} "
                           f"tokens to evict; this case writes at most {MAX_EVICTION_TOKENS}")
    heads = ((SYSTEM, 53, size), ("Reply in one word.", 59, size + 2 * P), ("Think step by step.", 61, size))
    steps = []
    for k, (head, seed, target) in enumerate(heads):
        def make(n, head=head, seed=seed, k=k):
            return [{"role": "system", "content": head + " " + filler(n, seed)},
                    {"role": "user", "content": QUESTIONS[k]}]
        steps.append(Step(make(at_least(make, ids, target))))
    a, b, c = steps
    return PeerCase(case_id, "eviction", f"prompts A, B, A again, then C, each about 0.4 of a pool of {pool} tokens, "
                    "then A and B again: the least recently touched leaf is evicted first", rules,
                    [a, b, Step(a.messages), c, Step(a.messages, reuse=True), Step(b.messages, reuse=True)],
                    {"pool_tokens": pool, "prompt_tokens": [len(ids(x.messages)) for x in steps]})


def _extra_keys(key_rule, count, ids, U):
    prompt = long_prompt(SYSTEM, QUESTIONS[0], 17, ids, U)
    return PeerCase("isolation/extra-key", "isolation", "one prompt (at least 2B + 1 tokens) under extra_key k1, "
                    "k2, then k1 again", _rules(count, key_rule),
                    [Step(prompt, extra_key="k1"), Step(prompt, extra_key="k2"),
                     Step(prompt, extra_key="k1", reuse=True)])


# --- images: the same image, another image, another position, across a block boundary -------------

IMAGE_CASES = ("images/same-image", "images/another-image", "images/another-position", "images/across-boundary")


def image_chat(m: int, image: str, lead: str = "Look at this picture:", tail: int = 0) -> list:
    """A system prompt of `m` filler words, then a user message: `lead`, the image, a question
    and `tail` filler words."""
    return [{"role": "system", "content": SYSTEM + " " + filler(m, 47)},
            {"role": "user", "content": [{"type": "text", "text": lead + " "}, image_part(image),
                                         {"type": "text", "text": " " + QUESTIONS[2] + " " + filler(tail, 53)}]}]


def image_cases(key_rule, count, ids, U, images) -> list:
    """The image cases, laid out with `images` (an images.ImagePlan: the image token, or why
    image prompts cannot run, each case then NOT_SUPPORTED with it)."""
    rules = _rules(count, key_rule)
    if images is None or images.problem is not None:
        why = images.problem if images is not None else "the run cannot lay image prompts out"
        return [Unsupported(case_id, "images", list(rules), why) for case_id in IMAGE_CASES]
    token = images.token
    return [_same_image(rules, ids, U, token), _another_image(rules, ids, U, token),
            _another_position(rules, ids, U, token), _across_boundary(rules, ids, U, token)]


def image_start(ids, messages, token: int) -> int:
    """Where the (first) image's tokens start in the prompt."""
    return ids(messages).index(token)


def _image_layout(ids, U: int, start: int, token: int) -> tuple:
    """(m, tail): filler counts that put the image's first token at `start` (or as near above as
    the tokenizer allows) and make the prompt at least two units longer than the image's end."""
    def at(m):
        return image_start(ids, image_chat(m, "a"), token)
    base = at(0)
    m = fit(at, start, max(0, start - base), 3 * U)
    if m is None:
        m = at_least(lambda k: [0] * at(k), lambda x: x, start)
    end = at(m) + U

    def make(t):
        return image_chat(m, "a", tail=t)
    tail = at_least(make, ids, end + 2 * U + 1)
    return m, tail


def _same_image(rules, ids, U, token):
    m, tail = _image_layout(ids, U, U + U // 2, token)
    a = image_chat(m, "a", tail=tail)
    return PeerCase("images/same-image", "images", "a prompt with an image (at least 2B + 1 tokens) sent twice: the "
                    "image's blocks are reused like any other", list(rules), [Step(a), Step(a, reuse=True)],
                    {"unit": U, "image_start": image_start(ids, a, token), "prompt_tokens": len(ids(a))})


def _another_image(rules, ids, U, token):
    """Image A in the middle of block 1 (or later), then image B of the same size there (the same
    token ids), then A again: B shares only the blocks before the image."""
    m, tail = _image_layout(ids, U, U + U // 2, token)
    a, b = image_chat(m, "a", tail=tail), image_chat(m, "b", tail=tail)
    return PeerCase("images/another-image", "images", "image A, then another image B of the same size at the same "
                    "place (the same token ids), then A again: B may reuse only the blocks before the image",
                    list(rules), [Step(a), Step(b, reuse=True), Step(a, reuse=True)],
                    {"unit": U, "image_start": image_start(ids, a, token), "prompt_tokens": len(ids(a))})


def _another_position(rules, ids, U, token):
    """The same image one or more tokens later (a longer lead before it): reuse stops where the
    prompts part, before the image."""
    m, tail = _image_layout(ids, U, 2 * U + U // 2, token)
    a = image_chat(m, "a", tail=tail)
    b = image_chat(m, "a", "Look closely at this picture:", tail=tail)
    return PeerCase("images/another-position", "images", "an image, then the same image later in an otherwise equal "
                    "prompt, sent twice, then the first again", list(rules),
                    [Step(a), Step(b, reuse=True), Step(b, reuse=True), Step(a, reuse=True)],
                    {"unit": U, "image_starts": [image_start(ids, a, token), image_start(ids, b, token)],
                     "prompt_tokens": [len(ids(a)), len(ids(b))]})


def _across_boundary(rules, ids, U, token):
    """Image A straddling the boundary k*U (k >= 2), then image B there, then A: B reuses the
    blocks before the one the image starts in, not that one."""
    a0 = image_chat(0, "a")
    length = ids(a0).count(token)
    target = _boundary_at_least(image_start(ids, a0, token), U, -max(1, length // 2))
    m, tail = _image_layout(ids, U, target, token)
    a, b = image_chat(m, "a", tail=tail), image_chat(m, "b", tail=tail)
    start = image_start(ids, a, token)
    return PeerCase("images/across-boundary", "images", f"image A across a block boundary (B = {U}), then image B "
                    "there, then A again: B may reuse only the blocks before the one the image starts in",
                    list(rules), [Step(a), Step(b, reuse=True), Step(a, reuse=True)],
                    {"unit": U, "image_start_intended": target, "image_start": start, "image_tokens": length,
                     "prompt_tokens": len(ids(a))})


def _slots(count, ids, settings, U):
    """One slot: A, B, A (PEER-LCPP-4); several: the least recently used slot (PEER-LCPP-5)."""
    return _one_slot(count) if settings["slots"] == 1 else _slots_lru(count, settings["slots"])


def _one_slot(count):
    a = chat(SYSTEM + " " + filler(30, 19), QUESTIONS[0])
    b = chat("Reply in one word. " + filler(20, 23), QUESTIONS[1])
    return PeerCase("eviction/one-slot", "eviction",
                    "prompt A, an unrelated prompt B, then A again: one slot keeps only B",
                    _rules(count, "PEER-LCPP-4"), [Step(a), Step(b), Step(a, reuse=True)])


def _slots_lru(count, slots: int):
    """One more unrelated prompt than there are slots, then the second and the first again:
    each unrelated prompt takes the least recently used slot, so the first prompt's slot was
    taken by the last one, the second's survived (PEER-LCPP-5)."""
    heads = ["Reply in one word.", "Think step by step.", "You are terse.", "Answer in French.", "Be polite."]
    prompts = [chat(heads[k % len(heads)] + " " + str(k) + " " + filler(20, 71 + 7 * k), QUESTIONS[k % 4])
               for k in range(slots + 1)]
    steps = [Step(p) for p in prompts] + [Step(prompts[1], reuse=True), Step(prompts[0], reuse=True)]
    return PeerCase("eviction/slots-lru", "eviction", f"{slots + 1} unrelated prompts on {slots} slots, then the "
                    "second and the first again: the least recently used slot is taken", _rules(count, "PEER-LCPP-5"),
                    steps, {"slots": slots})


def _lru_blocks(count, ids, settings, U):
    """Three unrelated prompts of m full blocks and a partial one, 2(m + 1) <= K, then the
    first and the last again. Which blocks of A survive B and C depends on where each request's
    partial block goes when it is freed (PEER-VLLM-5): the head of the free queue, not the tail."""
    case_id, rules = "eviction/lru-blocks", _rules(count, "PEER-VLLM-5")
    K, B = settings["cache_blocks"], settings["block_size"]
    if K is None:
        return Unsupported(case_id, "eviction", rules, "the server's cache size is not known: pass "
                           "--peer-setting cache_blocks=K (its usable KV blocks) to judge eviction")
    m = K // 2 - 1
    size = m * B + B // 2
    if m < 1 or B < 2:
        return Unsupported(case_id, "eviction", rules, f"cache_blocks={K} of {B} tokens is too small to lay three "
                           "prompts of a full block and a partial one out")
    if size > MAX_EVICTION_TOKENS:
        return Unsupported(case_id, "eviction", rules, f"cache_blocks={K} of {B} tokens needs prompts of about "
                           f"{size} tokens to evict; this case writes at most {MAX_EVICTION_TOKENS}")
    heads = ((SYSTEM, 29), ("Reply in one word.", 31), ("Think step by step.", 37))
    steps = []
    for k, (head, seed) in enumerate(heads):
        def make(n, head=head, seed=seed, k=k):
            return [{"role": "system", "content": head + " " + filler(n, seed)},
                    {"role": "user", "content": QUESTIONS[k]}]
        messages = make(at_least(make, ids, size))
        steps.append(Step(messages))
    a, b, c = steps
    lengths = [len(ids(x.messages)) for x in steps]
    return PeerCase(case_id, "eviction",
                    f"prompts A, B, C of {m} full blocks and a partial one ({K} blocks of {B}), then A and C again: "
                    "the partial blocks freed to the head of the free queue are taken first", rules,
                    [a, b, c, Step(a.messages, reuse=True), Step(c.messages, reuse=True)],
                    {"cache_blocks": K, "block_size": B, "prompt_tokens_intended": size, "prompt_tokens": lengths})


def _empty_salt(count, ids, settings, U):
    """A prompt, the same prompt with `cache_salt: ""` (vLLM's server refuses it, PEER-VLLM-17),
    then the prompt again: it reuses what the first left, nothing of the refused one."""
    prompt = long_prompt(SYSTEM, QUESTIONS[2], 47, ids, U)
    return PeerCase("isolation/empty-salt", "isolation", "a prompt, the same prompt with an empty cache_salt (the "
                    "server refuses it), then the prompt again", _rules(count, "PEER-VLLM-17"),
                    [Step(prompt), Step(prompt, salt=""), Step(prompt, reuse=True)])


# --- vLLM's KV-cache groups (PEER-VLLM-11..16): laid out on the groups the settings name -----------

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


# --- llama.cpp-server's own cases: chunk reuse, slot similarity at its threshold, the slot's context --

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


# --- trtllm-kv-reuse: eviction from a pool the case first fills, retention, attention windows -------

def fill_to(make, ids, low: int, high: int, target: int) -> list | None:
    """Messages make(m) whose prompt is `target` tokens long, else any length in [low, high], else None."""
    def length(m):
        return len(ids(make(m)))
    base = length(0)
    m = fit(length, target, target - base, 40)
    if m is None:
        m = at_least(make, ids, low)
    return make(m) if low <= length(m) <= high else None


def _trt_pool(case_id: str, rule: str, count, ids, settings, U, needs_retention: bool):
    """What every TensorRT-LLM eviction case needs: a known pool (`max_blocks` K), a server that
    takes retention configs where the case sends them, and a flush: one request of K blocks
    (K*T - 1 tokens, one sampled), which takes every block of the pool whatever earlier cases left
    and frees them in a known order, so the case starts from a pool the oracle knows (PEER-TRT-6).
    -> (flush messages, K, context note) or an Unsupported."""
    rules = _rules(count, "PEER-TRT-6", *([rule] if rule != "PEER-TRT-6" else []))
    K, T = settings["max_blocks"], U
    if K is None:
        return Unsupported(case_id, "eviction", rules, "the server's pool size is not known: pass --peer-setting "
                           "max_blocks=K (the primary pool's blocks per window) to judge eviction; trtllm-serve "
                           "publishes no cache setting")
    if needs_retention and not settings["retention_config"]:
        return Unsupported(case_id, "eviction", rules, "the server is not known to take kv_cache_retention_config "
                           "in the request body (trtllm-serve's OpenAI routes forward none): pass --peer-setting "
                           "retention_config=true to a server that does")
    if K < 9:
        return Unsupported(case_id, "eviction", rules, f"max_blocks={K} is too small: the layout needs 9 blocks (a "
                           "pool-filling request, two prompts of 3 blocks, one that evicts)")
    if K * T > MAX_EVICTION_TOKENS + 4 * T:
        return Unsupported(case_id, "eviction", rules, f"max_blocks={K} of {T} tokens needs a {K * T}-token request "
                           f"to fill the pool; this case writes at most {MAX_EVICTION_TOKENS + 4 * T}")

    def make(m):
        return chat("Fill the pool. " + filler(m, 83), QUESTIONS[3])
    flush = fill_to(make, ids, (K - 1) * T + 1, K * T - 1, K * T - 1)
    if flush is None:
        return Unsupported(case_id, "eviction", rules, f"no filler gives a prompt of {(K - 1) * T + 1}..{K * T - 1} "
                           f"tokens (K = {K} blocks of {T}) with this tokenizer")
    return flush, rules


def _trt_prompt(head: str, seed: int, question: str, ids, T: int, blocks: int):
    """A prompt of `blocks` blocks ending mid-block (at least 2T + 1 tokens when blocks >= 3)."""
    def make(m):
        return chat(head + " " + filler(m, seed), question)
    target = (blocks - 1) * T + T // 2 + 1
    return fill_to(make, ids, (blocks - 1) * T + 1, blocks * T - 1, target)


def _trt_eviction(case_id, rule, what, a_retention, count, ids, settings, U):
    """Flush, A (3 blocks, `a_retention`), B (3 blocks), C (evicts the flush's blocks and one more),
    then A and B again: which of A and B lost a block is what `rule` decides. Each prompt has a
    salt of its own, so no block of one matches another's in part (the chat template they share
    would otherwise be copied, with the priority of the block it copies, PEER-TRT-8)."""
    pool = _trt_pool(case_id, rule, count, ids, settings, U, a_retention is not None)
    if isinstance(pool, Unsupported):
        return pool
    flush, rules = pool
    K, T = settings["max_blocks"], U
    a = _trt_prompt(SYSTEM, 89, QUESTIONS[0], ids, T, 3)
    b = _trt_prompt("Reply in one word.", 97, QUESTIONS[1], ids, T, 3)
    c = _trt_prompt("Think step by step.", 101, QUESTIONS[2], ids, T, K - 5)
    if None in (a, b, c):
        return Unsupported(case_id, "eviction", rules, f"no filler gives prompts of exactly 3 and {K - 5} blocks of "
                           f"{T} with this tokenizer")
    steps = [Step(flush, salt="fill"), Step(a, salt="a", retention=a_retention), Step(b, salt="b"), Step(c, salt="c"),
             Step(a, salt="a", reuse=True, retention=a_retention), Step(b, salt="b", reuse=True)]
    return PeerCase(case_id, "eviction", f"a request of all {K} blocks, prompts A and B of 3 blocks, C of {K - 5}, then "
                    f"A and B again: {what}", rules, steps,
                    {"max_blocks": K, "block_size": T, "prompt_tokens": [len(ids(x.messages)) for x in steps[:4]]})


def _trt_blocks(count, ids, settings, U):
    return _trt_eviction("eviction/trt-blocks", "PEER-TRT-6", "C takes the free blocks in queue order, head first: "
                         "the flush's, then A's last block", None, count, ids, settings, U)


def _trt_priority(count, ids, settings, U):
    return _trt_eviction("eviction/trt-priority", "PEER-TRT-8", "A's blocks have retention priority 90, so C evicts "
                         "B's last block, not A's", {"token_range_retention_configs": [
                             {"token_start": 0, "token_end": None, "priority": 90}]}, count, ids, settings, U)


def _trt_duration(count, ids, settings, U):
    """Flush, A (3 blocks at priority 10 for 0 ms), B (3 blocks), A again: A's duration has run out
    when B arrives, so its blocks wait at the default priority behind the flush's and B takes
    the flush's; were A still at 10, B would take A's (PEER-TRT-9). A duration of 0 ms runs out
    before the next request whatever the server's clock says, so the case is deterministic."""
    case_id, rule = "eviction/trt-duration", "PEER-TRT-9"
    pool = _trt_pool(case_id, rule, count, ids, settings, U, True)
    if isinstance(pool, Unsupported):
        return pool
    flush, rules = pool
    T = U
    a = _trt_prompt(SYSTEM, 103, QUESTIONS[3], ids, T, 3)
    b = _trt_prompt("Reply in one word.", 107, QUESTIONS[0], ids, T, 3)
    if None in (a, b):
        return Unsupported(case_id, "eviction", rules, f"no filler gives prompts of exactly 3 blocks of {T}")
    low = {"token_range_retention_configs": [{"token_start": 0, "token_end": None, "priority": 10, "duration_ms": 0}]}
    steps = [Step(flush, salt="fill"), Step(a, salt="a", retention=low), Step(b, salt="b"),
             Step(a, salt="a", reuse=True, retention=low)]
    return PeerCase(case_id, "eviction", "a request of all blocks, A at retention priority 10 for 0 ms, B, then A "
                    "again: A's priority has run out, so B takes the pool-filling request's blocks, not A's", rules,
                    steps, {"max_blocks": settings["max_blocks"], "block_size": T,
                            "prompt_tokens": [len(ids(x.messages)) for x in steps[:3]]})


def _trt_window(off: int, name: str):
    """A prompt of W - 1, W or W + 1 tokens (W the smallest attention window) sent twice; the W - 1
    prompt samples 3 tokens, so its sequence outgrows the window while it decodes. A sliding
    window stores the whole computed sequence all the same (PEER-TRT-7)."""
    case_id = f"boundaries/trt-window-{name}"

    def build(count, ids, settings, U):
        rules = _rules(count, "PEER-TRT-7")
        windows = settings["max_attention_window"]
        if not windows:
            return Unsupported(case_id, "boundaries", rules, "no attention window is set: pass --peer-setting "
                               "max_attention_window=W[,W...] (kv_cache_config.max_attention_window) to judge windows")
        W = min(windows)
        target = W + off
        if target < 2 * U + 1:
            return Unsupported(case_id, "boundaries", rules, f"the smallest window ({W}) is shorter than 2B + 2 tokens "
                               f"(B = {U}): a prompt at its edge cannot reuse a whole block beyond the first")

        def make(m):
            return chat(SYSTEM + " " + filler(m, 109), QUESTIONS[1])
        prompt = fill_to(make, ids, target, target, target)
        if prompt is None:
            return Unsupported(case_id, "boundaries", rules, f"no filler gives a prompt of exactly {target} tokens")
        first = Step(prompt, 3 if off < 0 else 1)
        return PeerCase(case_id, "boundaries", f"a prompt of W{off:+d} tokens (W = {W}, the smallest window; B = {U}) "
                        "sent twice" + (", the first sampling 3 tokens past the window" if off < 0 else ""), rules,
                        [first, Step(prompt, reuse=True)], {"window": W, "prompt_tokens": target})
    return case_id, build


TRT_CASES = {"eviction/trt-blocks": _trt_blocks, "eviction/trt-priority": _trt_priority,
             "eviction/trt-duration": _trt_duration, **dict(_trt_window(o, n) for o, n in ((-1, "W-1"), (0, "W"),
                                                                                               (1, "W+1")))}

LLAMA_CASES = {"reuse/chunk-at-n-1": lambda c, i, s, U: _chunk(c, i, s, U, -1),
               "reuse/chunk-at-n": lambda c, i, s, U: _chunk(c, i, s, U, 0),
               "reuse/chunk-at-n+1": lambda c, i, s, U: _chunk(c, i, s, U, 1),
               "boundaries/slot-similarity": _slot_similarity, "context/too-long": _too_long,
               "context/end": _context_end, "context/shift-discard": _shift_discard}

OWN_CASES = {"eviction/slots": _slots, "reuse/read-bypass": _read_bypass, "eviction/lru-blocks": _lru_blocks,
             "eviction/radix-lru": _radix_lru, **TRT_CASES, **LLAMA_CASES, "isolation/empty-salt": _empty_salt,
             "groups/junction": _junction, "window/edge-inside": _window_edge(True),
             "window/edge-outside": _window_edge(False),
             **{f"groups/replay-at-k{size}{off:+d}".replace("+0", ""): _group_replay(size, off)
                for size in ("A", "Bs") for off in (-1, 0, 1)}}
"""The cases only some profiles have, by the id a PeerProfile's `cases` names them with; each is
built as builder(count rule, ids, settings, unit), which returns None where the case does not
apply to the deployment the settings describe (a slot choice on one slot, a context shift that is
off, a context the server does not publish, a model without KV-cache groups)."""


# --- sglang-radix: eviction layouts, the release's rules, empty keys (PEER-SGL-2, 4, 5, 7, 8) -------
#
# Each eviction case first lays its prompts out, then sizes the request that evicts against the
# pool the profile's own simulator predicts after the requests before it (the answers steered
# to one digit token by logit_bias, so the sampled ids are known): the cases judge every pool and
# page size the server publishes, each exactly at the state that decides its rule. Whether the
# layout came out as intended never decides a verdict (every count is the oracle's on the ids
# sent); it decides only whether a faulty server would be caught.

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
               "eviction/radix-paged-slack": _radix_paged_slack, "eviction/radix-locked-path": _radix_locked_path,
               "eviction/radix-prompt-split": _radix_prompt_split, "eviction/radix-shortfall": _radix_shortfall,
               "isolation/empty-keys": _empty_keys}
OWN_CASES.update(RADIX_CASES)
