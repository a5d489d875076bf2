"""Judging one chat completion against the peer oracle (spec/peer-profiles.md).

    reported, failures = read_count(completion, n, request_index)     PEER-API-1, PEER-API-2
    failures += judge_count(...), judge_timings(...)                  the profile's rules

A count that is missing is ERROR (nothing was reported, so nothing can be judged); a count that
cannot be true (negative, not an integer, above the prompt) is FAIL; a prompt count that
disagrees with the kit's is ERROR, because then the kit and the server did not look at the
same prompt.

A wrong count is explained as an Edge-LLM mismatch is (conformance/judge/explain.py): by the peer
oracle's own step that decided the count and the chain of its causes (the lookup, the request
that left what matched, the eviction that took the rest), recorded where the oracle decided
them (reference/peer_trace.py); nothing here works a profile's rule out again.
"""
from __future__ import annotations

from ..judge.explain import MAX_CHAIN, step_json
from ..judge.peer_oracle import profile_of
from ..judge.verdicts import Failure, Verdict

USAGE = "usage.prompt_tokens_details.cached_tokens"
NO_COUNT = "the server reported no count"
"""What a response without a count says (PEER-API-1): a run in which no response carried one judged
nothing, and its headline names the server option that turns the count on (summary.py)."""


def read_count(completion, n: int, request: int, profile: str) -> tuple[int | None, list]:
    """The reported count when it can be judged, else None, with the failures that say why."""
    usage = completion.usage
    if not isinstance(usage, dict):
        return None, [Failure("PEER-API-1", "usage", "an object", usage,
                              f"the response has no usage object: {NO_COUNT}", request, Verdict.ERROR)]
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, dict) or "cached_tokens" not in details:
        return None, [Failure("PEER-API-1", USAGE, "an integer", details,
                              f"the response reports no cached_tokens: {NO_COUNT}{_hint(profile)}", request,
                              Verdict.ERROR)]
    cached, prompt = details["cached_tokens"], usage.get("prompt_tokens")
    if type(cached) is not int:
        return None, [Failure("PEER-API-1", USAGE, "an integer", cached,
                              f"cached_tokens is a {type(cached).__name__}, not an integer count", request)]
    if cached < 0:
        return None, [Failure("PEER-API-1", USAGE, ">= 0", cached, "a negative number of cached tokens", request)]
    if type(prompt) is not int:
        return None, [Failure("PEER-API-2", "usage.prompt_tokens", n, prompt,
                              "the response reports no integer prompt_tokens", request, Verdict.ERROR)]
    if cached > prompt:
        return None, [Failure("PEER-API-1", USAGE, f"<= prompt_tokens {prompt}", cached,
                              "more tokens cached than the prompt holds", request)]
    if prompt != n:
        return None, [Failure("PEER-API-2", "usage.prompt_tokens", n, prompt,
                              "the server counted a different prompt than the kit tokenized, so its count "
                              "cannot be judged", request, Verdict.ERROR)]
    return cached, []


def count_missing(failures: list) -> bool:
    """True when `read_count`'s failures say the response carried no count at all."""
    return any(f.rule == "PEER-API-1" and NO_COUNT in f.why for f in failures)


def _hint(profile: str) -> str:
    hint = profile_of(profile).report_hint
    return f" ({hint})" if hint else ""


def judge_count(profile: str, predicted: int, reported: int, explained: tuple, request: int) -> list:
    """The count's rule, FAIL when the server reported another count. `explained`: (the step
    that decided the prediction, its chain) from the oracle's trace (PeerTrace.explained)."""
    if reported == predicted:
        return []
    head, steps = explained
    if head is None:
        return [Failure(profile_of(profile).count_rule, USAGE, predicted, reported,
                        "the oracle's trace has no step for this count", request)]
    return [Failure(head.rule, USAGE, predicted, reported, head.why, request,
                    chain=[step_json(s) for s in steps][-MAX_CHAIN:])]


def judge_timings(completion, reported: int, n: int, request: int) -> list:
    """PEER-LCPP-3: llama.cpp's native timings agree with the OpenAI count."""
    timings = completion.timings
    if not isinstance(timings, dict):
        return []
    out = []
    for key, expected in (("cache_n", reported), ("prompt_n", n - reported)):
        if key in timings and timings[key] != expected:
            out.append(Failure("PEER-LCPP-3", f"timings.{key}", expected, timings[key],
                               f"the native timings disagree with cached_tokens {reported} of {n}", request))
    return out
