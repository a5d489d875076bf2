"""Shrinking a disagreeing stream to a minimal one that still disagrees the same way.

`still(stream) -> bool` says whether a candidate still shows the disagreement (the caller runs
the runtime and the oracle and compares the class). Greedy passes, repeated until none helps:
drop runs of steps (halving the run length down to one step), drop request keys (LoRA, salt,
extra key, the read bypass, `hold`), cut sampled ids to one, cut prompts from the end and drop
runs of prompt tokens, make the pool smaller (whole blocks or pages), and drop `eagle`. Every candidate is a valid stream: a release whose
request is gone releases nothing on either side. Bounded by `budget` calls of `still`.
"""
from __future__ import annotations

import copy

KEYS = ("lora", "lora_path", "salt", "extra_key", "skip_prefix_cache", "hold")


def shrink(stream: dict, still, budget: int = 2000) -> dict:
    best = copy.deepcopy(stream)
    calls = [0]

    def attempt(candidate: dict) -> bool:
        if calls[0] >= budget:
            return False
        calls[0] += 1
        return bool(still(candidate))

    improved = True
    while improved and calls[0] < budget:
        improved = False
        for shrink_pass in (_drop_steps, _drop_keys, _cut_sampled, _cut_prompts, _shrink_pool, _drop_eagle):
            candidate = shrink_pass(best, attempt)
            if candidate is not None:
                best, improved = candidate, True
    best["shrink_calls"] = calls[0]
    return best


def _with_steps(stream: dict, steps: list) -> dict:
    out = dict(stream)
    out["steps"] = steps
    return out


def _drop_steps(stream: dict, attempt):
    steps, changed = stream["steps"], False
    run = max(1, len(steps) // 2)
    while run >= 1:
        k = 0
        while k < len(steps):
            candidate = steps[:k] + steps[k + run:]
            if any("prompt" in s for s in candidate) and attempt(_with_steps(stream, candidate)):
                steps, changed = candidate, True
            else:
                k += run
        run //= 2
    return _with_steps(stream, steps) if changed else None


def _drop_keys(stream: dict, attempt):
    steps, changed = list(stream["steps"]), False
    for k, step in enumerate(steps):
        for key in KEYS:
            if key in step:
                smaller = {f: v for f, v in step.items() if f != key and not (key == "lora" and f == "lora_path")}
                candidate = steps[:k] + [smaller] + steps[k + 1:]
                if attempt(_with_steps(stream, candidate)):
                    steps[k], step, changed = smaller, smaller, True
    return _with_steps(stream, steps) if changed else None


def _cut_sampled(stream: dict, attempt):
    steps, changed = list(stream["steps"]), False
    for k, step in enumerate(steps):
        sampled = step.get("sampled")
        while sampled and len(sampled) > 1:
            for shorter in (sampled[:1], sampled[:len(sampled) // 2], sampled[:-1]):
                candidate = steps[:k] + [dict(step, sampled=shorter)] + steps[k + 1:]
                if len(shorter) < len(sampled) and attempt(_with_steps(stream, candidate)):
                    steps[k] = step = candidate[k]
                    sampled, changed = shorter, True
                    break
            else:
                break
    return _with_steps(stream, steps) if changed else None


def _cut_prompts(stream: dict, attempt):
    steps, changed = list(stream["steps"]), False
    for k, step in enumerate(steps):
        prompt = step.get("prompt")
        if not prompt:
            continue
        run = max(1, len(prompt) // 2)
        while run >= 1:
            at = 0
            while at < len(prompt) and len(prompt) > 2:
                shorter = prompt[:at] + prompt[at + run:]
                if len(shorter) >= 2 and attempt(_with_steps(stream, steps[:k] + [dict(step, prompt=shorter)] + steps[k + 1:])):
                    prompt, changed = shorter, True
                    steps[k] = step = dict(step, prompt=prompt)
                else:
                    at += run
            run //= 2
    return _with_steps(stream, steps) if changed else None


def _shrink_pool(stream: dict, attempt):
    """A smaller bounded pool: fewer requests fill it."""
    settings = stream.get("settings") or {}
    for key, unit in (("cache_blocks", 1), ("pool_tokens", settings.get("page_size", 1))):
        size = settings.get(key)
        if not size:
            continue
        best, step = size, max(unit, (size // 2) // unit * unit)
        while step >= unit:
            candidate = best - step
            if candidate >= unit and attempt(dict(stream, settings=dict(settings, **{key: candidate}))):
                best = candidate
            else:
                step = step // 2 // unit * unit if step > unit else 0
        if best != size:
            return dict(stream, settings=dict(settings, **{key: best}))
    return None


def _drop_eagle(stream: dict, attempt):
    settings = stream.get("settings") or {}
    if settings.get("eagle"):
        candidate = dict(stream, settings={k: v for k, v in settings.items() if k != "eagle"})
        if attempt(candidate):
            return candidate
    return None
