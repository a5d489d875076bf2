"""The parts every peer case is made of: its steps and the case itself, the filler text prompts
are laid out with, and the layouts both the shared cases (scenarios.py) and the profiles' own
cases (cases_*.py) use. What a case and a step mean: scenarios.py's docstring."""
from __future__ import annotations

from dataclasses import dataclass, field


WORDS = ("the of and to in is for on with as at by from that this it be are was or an not but all can "
         "one two three four five six seven eight nine ten").split()
SYSTEM = "You are a careful assistant. Answer briefly and precisely."
QUESTIONS = ("Which is larger, seven or nine?", "Name a prime number below ten.", "What colour is the sky?",
             "How many legs does a spider have?")
MAX_EVICTION_TOKENS = 3000
"""An eviction case fills the cache with prompts of about half its size: no longer than this."""


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
    """A request the case exists to judge reuse on (see scenarios.py's docstring)."""
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


def _rules(count: str, *more: str) -> list:
    return ["PEER-API-1", "PEER-API-2", count] + list(more)


def long_prompt(head: str, question: str, seed: int, ids, U: int) -> list:
    """A chat prompt of at least 2U + 1 tokens: a replay of it can reuse two whole units."""
    def make(m):
        return chat(head + " " + filler(m, seed), question)
    return make(at_least(make, ids, 2 * U + 1))


FEEDBACK_DIGIT = "1"
"""The answer a conversation case steers to when the server's own first answer cannot be fed back
as its ids: digits are split one by one by the common tokenizers, so "11111111" tokenizes back
as the eight tokens sampled."""


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
