"""Judging one chat completion against the peer oracle (spec/peer-profiles.md).

    reported, failures = read_count(completion, n, request_index)     PEER-API-1, PEER-API-2
    failures += judge_count(...), judge_timings(...)                  the profile's rules

A count that is missing is ERROR (nothing was reported, so nothing can be judged); a count that
cannot be true (negative, not an integer, above the prompt) is FAIL; a prompt count that
disagrees with the kit's is ERROR, because then the kit and the server did not look at the
same prompt.
"""
from __future__ import annotations

from ..judge import peer_oracle as oracle

from ..judge.verdicts import Failure, Verdict

USAGE = "usage.prompt_tokens_details.cached_tokens"
HINTS = {"vllm-apc": " (vLLM reports it with --enable-prompt-tokens-details)",
         "sglang-radix": " (SGLang reports it with --enable-cache-report)",
         "trtllm-kv-reuse": " (trtllm-serve reports it with kv_cache_config.enable_block_reuse)"}


def read_count(completion, n: int, request: int, profile: str) -> tuple[int | None, list]:
    """The reported count when it can be judged, else None, with the failures that say why."""
    usage = completion.usage
    if not isinstance(usage, dict):
        return None, [Failure("PEER-API-1", "usage", "an object", usage,
                              "the response has no usage object: the server reported no count", request,
                              Verdict.ERROR)]
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, dict) or "cached_tokens" not in details:
        return None, [Failure("PEER-API-1", USAGE, "an integer", details,
                              f"the response reports no cached_tokens{HINTS.get(profile, '')}", request,
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


def judge_count(profile: str, predicted: int, reported: int, why: str, request: int) -> list:
    if reported == predicted:
        return []
    return [Failure(oracle.count_rule(profile), USAGE, predicted, reported, why, request)]


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


def explain(profile: str, sim, req: oracle.PeerRequest) -> str:
    """Why the oracle predicts what it does, in the profile's terms."""
    n = len(req.ids)
    keyed = ", ".join(f"{k} {v!r}" for k, v in (("cache_salt", req.salt), ("adapter", req.lora),
                                                   ("extra_key", req.extra_key)) if v is not None)
    keyed = f" (keyed with {keyed})" if keyed else ""
    if profile == "llama.cpp-server":
        i = sim.slot_for(req)
        tokens = sim.slots[i]
        lcp = oracle.common_prefix(tokens, req.ids)
        which = f"slot {i} of {sim.n} (PEER-LCPP-5) " if sim.n > 1 else "the slot "
        return (f"{which}held {len(tokens)} ids, {lcp} shared with the prompt of N = {n}: "
                f"min(LCP {lcp}, N - 1 = {n - 1}) (PEER-LCPP-1, PEER-LCPP-2)")
    if profile == "vllm-apc":
        if not sim.caching:
            return "prefix caching is off: nothing is cached (PEER-VLLM-6)"
        if req.skip_prefix_cache:
            return "the request asks for prompt log-probabilities: it reads no cache (PEER-VLLM-7)"
        keys = oracle.vllm_block_keys(req.ids, sim.B, req)
        k = oracle.leading_hits(keys, sim.cached_keys())
        eagle = "; EAGLE drops the last matched block (PEER-VLLM-8)" if sim.eagle else ""
        return (f"{k} of the prompt's {len(keys)} full blocks of {sim.B}{keyed} are cached; cap floor((N - 1) / B) = "
                f"{(n - 1) // sim.B} blocks{eagle} (PEER-VLLM-1, PEER-VLLM-3)")
    if profile == "trtllm-kv-reuse":
        return (f"{sim.predict(req)} of the {n - 1} looked-up tokens match stored blocks of {sim.T}{keyed}, the "
                f"last of them in part where partial reuse allows (PEER-TRT-1, PEER-TRT-2, PEER-TRT-3)")
    if not sim.on:
        return "the radix cache is disabled: nothing is cached (PEER-SGL-6)"
    return (f"the cache holds whole pages of {sim.P} only: its pages of the namespace{keyed} share {sim.predict(req)} "
            f"ids with the first N - 1 = {n - 1} ids of the prompt (a prefix in common that ends inside a page "
            f"counts to that page's start) (PEER-SGL-1, PEER-SGL-2)")
