"""Seeded request streams for the cross-check (docs/crosscheck.md).

A stream is a parity peer scenario (docs/parity.md section 2) with an id: the profile's settings
and a list of steps, each a request (`prompt`, `sampled`, `lora` + `lora_path`, `salt`,
`extra_key`, `skip_prefix_cache`, `hold: NAME`), a `{"release": NAME}` or a `{"reset": true}`.
So a shrunk disagreement is already a parity entry's scenario, and the drivers in
tools/crosscheck/ read the same steps.

The draws aim at what the rules turn on: prompts that share a prefix ending at `k*B - 1`, `k*B`
or `k*B + 1` (B the block or page size), requests that continue an earlier computed sequence
(prompt + sampled[:-1], the decode tokens), held requests (vLLM only: SGLang's profile runs one
request at a time), LoRA adapters (a name re-pointed at another path included), salts (the empty
salt included), SGLang's extra keys, pools barely larger than one request, and resets.
"""
from __future__ import annotations

import math
import random

RUNTIMES = ("vllm", "sglang")
PROFILE = {"vllm": "vllm-apc", "sglang": "sglang-radix"}
ADAPTERS = (("alpha", "/adapters/alpha"), ("beta", "/adapters/beta"), ("alpha", "/adapters/alpha-v2"))
SALTS = ("s1", "s2")
EXTRA_KEYS = ("k1", "k2")
EMPTY = 0.1                       # how often a salt or extra key drawn is the empty string
VOCAB = 50                        # small, so that unrelated prompts share short prefixes by chance


GROUPED = 0.4
"""How often a vLLM stream's model has KV-cache groups (sliding window, Mamba; PEER-VLLM-11)."""
HYBRID = 0.3
"""How often an SGLang stream's model has a sliding window or Mamba layers (PEER-SGL-10..13)."""


def stream(runtime: str, seed: int, max_requests: int = 20) -> dict:
    """One seeded stream for `runtime` (vllm | sglang): the same seed gives the same stream."""
    rng = random.Random(f"{runtime}:{seed}")
    if runtime == "vllm":
        groups = random.Random(f"vllm-groups:{seed}")
        if groups.random() < GROUPED:
            return _vllm_groups(groups, f"{runtime}-{seed}", max_requests)
    else:
        hybrid = random.Random(f"sglang-hybrid:{seed}")
        if hybrid.random() < HYBRID:
            return _sglang_hybrid(hybrid, f"{runtime}-{seed}", max_requests)
    return (_vllm if runtime == "vllm" else _sglang)(rng, f"{runtime}-{seed}", max_requests)


def streams(runtime: str, seeds, max_requests: int = 20):
    for seed in seeds:
        yield stream(runtime, seed, max_requests)


def requests_in(s: dict) -> int:
    return sum(1 for step in s["steps"] if "prompt" in step)


# --- the draws ------------------------------------------------------------------------------------

def _unit_and_lengths(rng, units) -> tuple[int, list]:
    unit = rng.choice(units)
    k = rng.randint(1, 4)
    boundary = [k * unit - 1, k * unit, k * unit + 1, k * unit + unit // 2]
    return unit, [n for n in boundary if n >= 1]


def _prompts(rng, unit: int, lengths: list, earlier: list) -> list:
    """A prompt: an earlier prompt or computed sequence cut near a boundary and continued, or a
    fresh one; at least two tokens."""
    if earlier and rng.random() < 0.75:
        base = rng.choice(earlier)
        cut = min(len(base), rng.choice(lengths + [len(base), len(base) - 1]))
        prompt = list(base[:max(0, cut)])
    else:
        prompt = []
    extra = rng.choice([0, 1, 2, unit - 1, unit, unit + 1, rng.randint(1, 3 * unit)])
    prompt += [rng.randrange(VOCAB) for _ in range(max(0, extra))]
    while len(prompt) < 2:
        prompt.append(rng.randrange(VOCAB))
    return prompt


def _request(rng, unit: int, lengths: list, earlier: list, keys: dict) -> dict:
    prompt = _prompts(rng, unit, lengths, earlier)
    sampled = [rng.randrange(VOCAB) for _ in range(rng.choice([1, 1, 2, 3, unit, unit + 1]))]
    step = {"prompt": prompt, "sampled": sampled}
    step.update({k: v for k, v in keys.items() if v is not None})
    earlier.append(prompt)
    earlier.append(prompt + sampled[:-1])
    return step


def _keys(rng, sglang: bool) -> dict:
    """What keys a request's cache entries beyond its ids: mostly nothing, so that requests share."""
    keys = {}
    if rng.random() < 0.2:
        name, path = rng.choice(ADAPTERS)
        keys["lora"] = name
        if not sglang:
            keys["lora_path"] = path
    if rng.random() < 0.2:
        keys["salt"] = "" if rng.random() < EMPTY else rng.choice(SALTS)
    if sglang and rng.random() < 0.15:
        keys["extra_key"] = "" if rng.random() < EMPTY else rng.choice(EXTRA_KEYS)
    return keys


def _vllm(rng, name: str, max_requests: int) -> dict:
    unit, lengths = _unit_and_lengths(rng, (1, 2, 4, 4, 16, 16, 32))
    settings = {"block_size": unit, "eagle": rng.random() < 0.1}
    if settings["eagle"] and rng.random() < 0.3:       # 0.33.0 back on 0.32.0's block drop (PEER-VLLM-10)
        settings["disable_lookahead_block_hashes"] = True
    bounded = rng.random() < 0.7
    steps, earlier, held, count = [], [], [], rng.randint(2, max_requests)
    while sum("prompt" in s for s in steps) < count:
        roll = rng.random()
        if held and roll < 0.25:
            steps.append({"release": held.pop(rng.randrange(len(held)))})
            continue
        if steps and rng.random() < 0.06:        # while a request is held, refused
            steps.append({"reset": True})
            continue
        step = _request(rng, unit, lengths, earlier, _keys(rng, sglang=False))
        if rng.random() < 0.05:
            step["skip_prefix_cache"] = True
        if rng.random() < 0.3 and len(held) < 3:
            step["hold"] = f"r{len(steps)}"
            held.append(step["hold"])
        steps.append(step)
    steps += [{"release": h} for h in held]
    if bounded:
        longest = max(-(-(len(s["prompt"]) + len(s["sampled"])) // unit) for s in steps if "prompt" in s)
        settings["cache_blocks"] = longest + rng.choice([0, 1, 2, longest, 2 * longest])
    return {"id": name, "runtime": "vllm", "settings": settings, "steps": steps}


def _group_settings(rng) -> dict:
    """A model's KV-cache groups: full attention, a sliding window, Mamba ("align"), alone or
    together, block sizes that differ, windows around block boundaries, a retention interval."""
    B = rng.choice((2, 4, 4, 8, 16))
    kind = rng.choice(("full+swa", "full+swa", "swa", "full+mamba", "mamba", "full+swa+mamba"))
    settings = {"block_size": B, "eagle": rng.random() < 0.1}
    if settings["eagle"] and rng.random() < 0.3:
        settings["disable_lookahead_block_hashes"] = True
    if "swa" in kind and "mamba" in kind:      # the profile does not define EAGLE there with a bounded pool
        settings["eagle"] = False
        settings.pop("disable_lookahead_block_hashes", None)
    if "full" not in kind:
        settings["full_attention"] = False
    if "swa" in kind:
        swa = rng.choice((B, B, 2 * B) if "mamba" in kind else (max(1, B // 2), B, B, 2 * B))
        settings["swa_block_size"] = swa
        settings["sliding_window"] = max(1, swa * rng.randint(1, 4) + rng.choice((-1, 0, 1, 2)))
    if "mamba" in kind:
        settings["mamba_block_size"] = B
    roll = rng.random()
    if roll < 0.25:
        settings["retention_interval"] = "dense"
    elif roll < 0.5:
        sizes = [B] + [settings[k] for k in ("swa_block_size",) if k in settings]
        settings["retention_interval"] = math.lcm(*sizes) * rng.randint(1, 3)
    return settings


def _vllm_groups(rng, name: str, max_requests: int) -> dict:
    """A stream on a model with KV-cache groups: prompts cut at multiples of the groups' block
    sizes and of their least common multiple (where hits land), held requests, resets."""
    settings = _group_settings(rng)
    sizes = [settings["block_size"]] + [settings[k] for k in ("swa_block_size",) if k in settings]
    unit = math.lcm(*sizes)
    k = rng.randint(1, 4)
    lengths = sorted({n for size in set(sizes + [unit]) for n in (k * size - 1, k * size, k * size + 1) if n >= 1})
    steps, earlier, held, count = [], [], [], rng.randint(2, max_requests)
    while sum("prompt" in s for s in steps) < count:
        if held and rng.random() < 0.25:
            steps.append({"release": held.pop(rng.randrange(len(held)))})
            continue
        if steps and rng.random() < 0.06:
            steps.append({"reset": True})
            continue
        step = _request(rng, unit, lengths, earlier, _keys(rng, sglang=False))
        if rng.random() < 0.3 and len(held) < 3:
            step["hold"] = f"r{len(steps)}"
            held.append(step["hold"])
        steps.append(step)
    steps += [{"release": h} for h in held]
    if rng.random() < 0.6:
        B = min(sizes)
        groups = 1 + ("sliding_window" in settings) + ("mamba_block_size" in settings) - \
            (settings.get("full_attention") is False)
        longest = max(-(-(len(s["prompt"]) + len(s["sampled"])) // B) for s in steps if "prompt" in s)
        settings["cache_blocks"] = groups * longest + rng.choice([0, 2, longest, 2 * longest, 4 * longest])
    return {"id": name, "runtime": "vllm", "settings": settings, "steps": steps}


def _sglang(rng, name: str, max_requests: int) -> dict:
    unit, lengths = _unit_and_lengths(rng, (1, 1, 2, 4, 16))
    settings = {"page_size": unit}
    steps, earlier, count = [], [], rng.randint(2, max_requests)
    while sum("prompt" in s for s in steps) < count:
        if steps and rng.random() < 0.05:
            steps.append({"reset": True})
            continue
        steps.append(_request(rng, unit, lengths, earlier, _keys(rng, sglang=True)))
    if rng.random() < 0.7:                       # a pool of whole pages, as SGLang sizes its own
        longest = max(len(s["prompt"]) + len(s["sampled"]) for s in steps if "prompt" in s)
        tokens = longest + 2 * unit + rng.choice([0, unit, longest, 2 * longest])
        settings["pool_tokens"] = -(-tokens // unit) * unit
    return {"id": name, "runtime": "sglang", "settings": settings, "steps": steps}


def _sglang_hybrid(rng, name: str, max_requests: int) -> dict:
    """A sliding-window model (a window W of a few pages, a small eviction interval I so that short
    decodes free the window: PEER-SGL-10) or a Mamba one (pages of one id: PEER-SGL-13); no pool
    (the profile defines neither with one), no EAGLE. Some requests decode past W + I."""
    if rng.random() < 0.6:
        unit, lengths = _unit_and_lengths(rng, (1, 1, 2, 4, 16))
        W = max(1, unit * rng.randint(1, 3) + rng.choice((-1, 0, 1)))
        settings = {"page_size": unit, "sliding_window": W, "swa_eviction_interval": rng.choice((1, 2, 4, 8, 16))}
        lengths += [n for n in (W - 1, W, W + 1, 2 * W) if n >= 1]
        decode = W + settings["swa_eviction_interval"]
    else:
        unit, lengths = _unit_and_lengths(rng, (1,))
        settings, decode = {"page_size": 1, "mamba": True}, 0
    steps, earlier, count = [], [], rng.randint(2, max_requests)
    while sum("prompt" in s for s in steps) < count:
        if steps and rng.random() < 0.05:
            steps.append({"reset": True})
            continue
        step = _request(rng, unit, lengths, earlier, _keys(rng, sglang=True))
        if decode and rng.random() < 0.3:             # a decode long enough to free the window's tail
            step["sampled"] += [rng.randrange(VOCAB) for _ in range(rng.randint(1, decode + 2))]
            earlier[-1] = step["prompt"] + step["sampled"][:-1]
        steps.append(step)
    return {"id": name, "runtime": "sglang", "settings": settings, "steps": steps}


# --- the speed stream -----------------------------------------------------------------------------

def speed_stream(runtime: str, requests: int = 10_000, prompt: int = 1_000, shared: int = 512,
                 sampled: int = 16, unit: int = 16, blocks: int = 4_000, prefixes: int = 8,
                 seed: int = 0) -> dict:
    """The benchmark's stream: `requests` prompts of about `prompt` tokens, each opening with one
    of `prefixes` shared prefixes of `shared` tokens and going on with tokens of its own, each
    sampling `sampled` tokens; block (page) size `unit`, a pool of `blocks` blocks (SGLang:
    `blocks * unit` tokens), one request at a time."""
    rng = random.Random(f"speed:{seed}")
    heads = [[rng.randrange(32_000) for _ in range(shared)] for _ in range(prefixes)]
    steps = []
    for _ in range(requests):
        n = prompt + rng.randint(-unit, unit)
        ids = rng.choice(heads) + [rng.randrange(32_000) for _ in range(n - shared)]
        steps.append({"prompt": ids, "sampled": [rng.randrange(32_000) for _ in range(sampled)]})
    settings = ({"block_size": unit, "cache_blocks": blocks} if runtime == "vllm"
                else {"page_size": unit, "pool_tokens": blocks * unit})
    return {"id": f"speed-{runtime}", "runtime": runtime, "settings": settings, "steps": steps}
