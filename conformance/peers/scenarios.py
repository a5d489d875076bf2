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

This module holds the cases every profile shares and `cases()`; the parts cases are made of
(PeerCase, Step, the filler and the layouts) are in layout.py, each profile's own cases in its
module (cases_vllm_groups.py, cases_llama.py, cases_trtllm.py, cases_sglang.py,
cases_sglang_hybrid.py), merged here into
OWN_CASES.
"""


from __future__ import annotations

from ..judge.peer_oracle import common_prefix

from . import PEER_PROFILES
from .cases_llama import LLAMA_CASES
from .cases_sglang import RADIX_CASES
from .cases_sglang_hybrid import HYBRID_CASES
from .cases_trtllm import TRT_CASES
from .cases_vllm_groups import GROUP_CASES
from .images import image_part
from .layout import (FEEDBACK_DIGIT, MAX_EVICTION_TOKENS, QUESTIONS, SYSTEM, Answer, PeerCase, Step, Unsupported,
                     _boundary_at_least, _replay_length, _rules, at_least, chat, filler, fit, long_prompt)


ADAPTER_NAMES = ("alpha", "beta")
"""The LoRA adapters a case uses when the server does not list its own."""


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


OWN_CASES = {"eviction/slots": _slots, "reuse/read-bypass": _read_bypass, "eviction/lru-blocks": _lru_blocks,
             "eviction/radix-lru": _radix_lru, **TRT_CASES, **LLAMA_CASES, "isolation/empty-salt": _empty_salt,
             **GROUP_CASES, **RADIX_CASES, **HYBRID_CASES}
"""The cases only some profiles have, by the id a PeerProfile's `cases` names them with; each is
built as builder(count rule, ids, settings, unit), which returns None where the case does not
apply to the deployment the settings describe (a slot choice on one slot, a context shift that is
off, a context the server does not publish, a model without KV-cache groups)."""
