"""Hypothesis strategies for generated request sets: an engine, then batches whose requests
are drawn from shared pools, so that prefixes really recur.

Sharing is the point: random text almost never shares a page, so every request is built from
pools drawn once per example (system prompts and documents with lengths around page boundaries,
questions, images with deliberate relatives: the same pixels in another encoding, equal bytes
under transposed geometry, other pixels of equal size) or from an earlier request (an exact
replay, a strict prefix, a continuation that feeds the earlier generated answer back, swapped
image order).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import strategies as st


from ..judge import oracle
from ..judge.oracle import slot_sizes
from .media import ENCODINGS, SIZES, ImageSpec, bound_sizes, materialize

LETTERS = "abcdefghijklmnopqrstuvwxyz"
FAMILIES = {
    # name: (model kinds it draws from, vision encoder)
    "text": (("attention",), False),
    "vision": (("attention",), True),
    "hybrid": (("hybrid", "recurrent"), False),
}


@dataclass
class Setup:
    """Everything drawn once per example: the engine, the runtime flags, the file settings."""
    engine_args: dict
    runtime: dict
    settings: dict
    batch_size: int
    adapters: list
    segments: list[str] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    images: list[ImageSpec] = field(default_factory=list)
    max_input: int = 64
    """The longest input an example may build (the engine's limit, less the generation)."""
    hf_engine: object = None
    """The engine under test when it has a real tokenizer: texts are written in its one-token
    units (conformance/materialize/units.py) and images counted by its media counter."""
    switch_at: int | None = None
    """Policy switch: the request file of this step uses the other lookup policy (session adapters
    only: one runtime instance then sees use_cache and bypass files, CR-BATCH-3). Drawn after the
    steps (`policy_switch`), so the rest of an example is drawn as without it."""
    switch_settings: dict = field(default_factory=dict)
    """Settings the request file of step `switch_at` has instead of the example's (a case's
    `_policy_switch` may name the template keywords, `enable_thinking`: one runtime instance then
    renders prompts under two keyword sets); with them the lookup policy is not switched."""


def draw_setup(data, family: str, manifest: dict, engine: dict | None = None) -> Setup:
    """Draw an example's engine, flags and pools. With `engine` (the description of the one
    engine under test) only what that engine admits is drawn: its page size, model kind,
    encoders and adapters, batches up to its batch size, lengths up to its limits."""
    draw = data.draw
    models, vision = FAMILIES[family]
    features = set(manifest.get("features", []))
    observables = {k for k, v in manifest.get("observables", {}).items() if v}
    described = None
    if engine is None:
        args, model, P, batch, max_gen, adapters = _draw_engine(draw, family, manifest, features, models, vision)
        max_input = args["maxInputLen"]
    else:
        args, model, P, batch, max_gen, adapters = _fixed_engine(draw, family, engine, features)
        described = oracle.engine_of(engine)
        # a real tokenizer's chat template writes more than bytes-v1's one token per role: a margin
        max_input = min(engine["max_input_len"], engine["max_kv_cache_capacity"] - max_gen) - (64 if described.hf else 0)
    runtime = {"enableContextReuse": draw(st.sampled_from([True, True, True, True, False]), label="reuse")}
    records = draw(st.sampled_from([1024, 1024, 0, 1, 2, 3]), label="max_records")
    if records != 1024:
        runtime["contextCacheMaxRecords"] = records
    if "warmup" in features:
        warm = draw(st.sampled_from([0, 0, 0, 1, 2]), label="warmup")
        if warm:
            runtime["warmup"] = warm
    if "prefill_profile" in observables:
        runtime["dumpProfile"] = True
    if model != "attention":
        described = oracle.engine_of(engine) if engine is not None else oracle.derive_engine(args)
        recurrent_slot, partial_slot = slot_sizes(described)
        runtime["contextCacheRecurrentSnapshotPoolBytes"] = recurrent_slot * draw(st.integers(1, 6), label="rslots")
        if model == "hybrid":
            runtime["contextCachePartialKVSnapshotPoolBytes"] = partial_slot * draw(st.integers(1, 6), label="pslots")
    settings = {
        "batch_size": batch, "top_k": 1, "temperature": 1.0, "max_generate_length": max_gen,
        "apply_chat_template": draw(st.booleans(), label="chat_template"),
        "context_cache_lookup_policy": draw(st.sampled_from(["use_cache", "use_cache", "use_cache", "bypass"]),
                                            label="lookup_policy"),
        "context_cache_commit_policy": draw(st.sampled_from(["including_generated_tokens", "prefill_state_only"]),
                                            label="commit_policy"),
    }
    if "logprobs" in observables and draw(st.booleans(), label="logprobs"):
        settings["num_logprobs"] = 2
    if len(adapters) > 1:
        paths = (engine or {}).get("lora_adapters") or {}
        settings["available_lora_weights"] = {a: (paths.get(a) or {}).get("path", f"lora/{a}.safetensors")
                                              for a in adapters[1:]}
    setup = Setup(args, runtime, settings, batch, adapters, max_input=max_input,
                  hf_engine=described if described is not None and described.hf else None)
    # Page-aligned lengths first: Hypothesis draws (and shrinks towards) early entries most. On
    # an engine under test, three segments and a question must fit in one input.
    longest = max(2, max_input // 4) if engine is not None else 3 * P + 1
    boundary = [k * P + d for d in (0, -1, 1) for k in (1, 2, 3) if 0 < k * P + d <= longest] or [P, P - 1]
    for _ in range(draw(st.integers(1, 3), label="segments")):
        length = draw(st.sampled_from(boundary + [2, 5]), label="segment_length")
        setup.segments.append(draw(st.text(LETTERS[:6], min_size=length, max_size=length), label="segment"))
    for _ in range(draw(st.integers(1, 3), label="questions")):
        setup.questions.append(draw(st.text(LETTERS, min_size=1, max_size=min(P + 1, longest)), label="question"))
    if vision:
        setup.images = draw_images(data, image_sizes(setup))
    return setup


def image_sizes(setup: Setup) -> tuple:
    """The sizes images are drawn from: bytes-v1's, and on an engine that counts its images with a
    runtime's counter also the sizes at that counter's bounds (generate/media.py `bound_sizes`)
    whose count the runtime accepts and that fit a quarter of an input."""
    engine = setup.hf_engine
    counter = (engine.vision or {}).get("counter") if engine is not None else None
    if not counter:
        return SIZES
    from ..judge.oracle import image_tokens
    extra = []
    for h, w in bound_sizes(counter, engine.vision.get("settings") or {}):
        try:
            fits = image_tokens(counter, h, w, engine.vision.get("settings")) <= setup.max_input // 4
        except ValueError:      # the counter's runtime refuses the size
            fits = False
        if fits:
            extra.append((h, w))
    return SIZES + tuple(extra)


def _draw_engine(draw, family: str, manifest: dict, features: set, models, vision: bool):
    """A small engine of the family's kind, built for this example."""
    models = [m for m in models if m in manifest.get("model_kinds", [])]
    pages = manifest.get("tokens_per_page", "any")
    sizes = [p for p in ((4, 8, 16) if vision else (4, 8)) if pages == "any" or p in pages]
    model = draw(st.sampled_from(models), label="model")
    P = draw(st.sampled_from(sizes), label="tokens_per_page")
    batch = draw(st.integers(1, 3), label="batch_size") if "batching" in features else 1
    max_gen = draw(st.integers(1, 6), label="max_generate_length")
    max_input = 96 if vision else 64
    capacity = max_input + 8
    minimum = 0 if model == "recurrent" else batch * math.ceil(capacity / P)
    extra = draw(st.sampled_from([0, 0, 1, 4, 16]), label="extra_pool_pages")
    args = {"maxInputLen": max_input, "maxKVCacheCapacity": capacity,
            "maxKVPoolPages": 0 if model == "recurrent" or not extra else minimum + extra,
            "maxBatchSize": batch, "tokensPerPage": P, "model": model}
    if vision:
        args["vision"] = True
    adapters = [None]
    if family == "text" and "lora" in features and draw(st.booleans(), label="lora"):
        args["loraAdapters"] = ["a", "b"]
        adapters += ["a", "b"]
    return args, model, P, batch, max_gen, adapters


def _fixed_engine(draw, family: str, engine: dict, features: set):
    """The engine under test as it is; batches and adapters drawn from what it has."""
    from ..materialize import build_args_of
    args = build_args_of(engine)
    batch = draw(st.integers(1, min(3, engine["max_batch_size"])), label="batch_size") \
        if "batching" in features and engine["max_batch_size"] > 1 else 1
    max_gen = draw(st.integers(1, 6), label="max_generate_length")
    adapters = [None]
    names = sorted(engine.get("lora_adapters") or {})
    if family == "text" and names and "lora" in features and draw(st.booleans(), label="lora"):
        adapters += names[:2]
    return args, args["model"], engine["tokens_per_page"], batch, max_gen, adapters


def fixed_engine_gaps(family: str, engine: dict) -> list[str]:
    """What a family needs that the engine under test lacks (empty: the family can run on it)."""
    models, vision = FAMILIES[family]
    kinds = set(engine["layer_kinds"])
    gaps = []
    if "recurrent" in models and "recurrent" not in kinds:
        gaps.append("recurrent layers")
    if vision and not engine.get("vision"):
        gaps.append("vision encoder")
    return gaps


def policy_switch(setup: Setup, steps: int):
    """The step whose request file runs under the other lookup policy, or None (most examples):
    a bypass file after use_cache files meets records it must not look up (CR-POL-2), a
    use_cache file after bypass files an empty cache."""
    return st.sampled_from([None, None] + list(range(1, steps)))


def draw_images(data, sizes: tuple = SIZES) -> list[ImageSpec]:
    """A pool with relatives: every later image derives from an earlier one half of the time."""
    draw = data.draw
    first = ImageSpec(draw(st.integers(1, 3), label="seed"), *draw(st.sampled_from(sizes), label="size"))
    pool = [first]
    for _ in range(draw(st.integers(1, 3), label="images")):
        base = draw(st.sampled_from(pool), label="image_base")
        how = draw(st.sampled_from(["encoding", "transposed", "other_pixels", "new"]), label="relative")
        if how == "encoding":
            pool.append(base._replace(encoding=draw(st.sampled_from(ENCODINGS), label="encoding")))
        elif how == "transposed":
            pool.append(base._replace(height=base.width, width=base.height))
        elif how == "other_pixels":
            pool.append(base._replace(seed=base.seed + 10))
        else:
            pool.append(ImageSpec(draw(st.integers(1, 5), label="seed"), *draw(st.sampled_from(sizes), label="size")))
    return pool


# --- requests ------------------------------------------------------------------------------------

def estimate(messages: list, template: bool, max_gen: int, setup: Setup | None = None) -> int:
    """Input length in tokens (one per letter: bytes-v1, or units of a real tokenizer), counting
    a fed-back answer at its longest."""
    n = 2 if template else 0
    for m in messages:
        n += 2 if template else 0
        content = m["content"]
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for p in parts:
            if p["type"] == "text":
                n += max_gen if "{{output:" in p["text"] else len(p["text"])
            else:
                spec = p["_spec"] if "_spec" in p else None
                n += image_count(spec, setup) if spec else 1
    return n


def image_count(spec: ImageSpec, setup: Setup | None) -> int:
    """Tokens of a drawn image: bytes-v1 placeholders, or the counter of a real-tokenizer engine."""
    engine = setup.hf_engine if setup is not None else None
    if engine is None:
        return spec.placeholders
    from ..judge.oracle import image_tokens
    return image_tokens(engine.vision["counter"], spec.height, spec.width, engine.vision.get("settings"))


def recipes(setup: Setup, max_steps: int):
    """The batches of an example as plain data Hypothesis shrinks well: a list of steps, each an
    adapter and `batch_size` request recipes. A recipe names earlier requests and pool entries by
    integers taken modulo what exists when it is built, so deleting a step keeps the rest valid."""
    kinds = ["fresh", "replay", "prefix", "continue"] + (["swap"] if setup.images else [])
    parts = ["segment", "question"] + (["image", "image"] if setup.images else [])
    longest = 3
    if setup.images and merges_media_runs(setup):
        # a profile that keys each run of adjacent images as one item (edge-llm-0.10): pairs of
        # adjacent images, contents long enough for two of them, and requests that replace one
        # image of an earlier request in place, inside a run or alone (spec/profiles.md `media_items`)
        kinds, longest = kinds + ["replace", "replace"], 4
        parts = parts + ["image_pair", "image_pair"]
    recipe = st.fixed_dictionaries({
        "kind": st.sampled_from(kinds), "pick": st.integers(0, 63),
        "system": st.one_of(st.none(), st.integers(0, 7)),
        "parts": st.lists(st.tuples(st.sampled_from(parts), st.integers(0, 7)), min_size=1, max_size=longest),
        "question": st.integers(0, 7), "keep": st.integers(1, 3), "cut": st.integers(1, 64),
    })
    step = st.tuples(st.sampled_from(setup.adapters), st.lists(recipe, min_size=setup.batch_size,
                                                               max_size=setup.batch_size))
    return st.lists(step, min_size=1, max_size=max_steps)


def build_request(recipe: dict, setup: Setup, earlier: list[dict], media_dir: Path) -> dict:
    """One request from its recipe: fresh from the pools, or built on an earlier request."""
    template, max_gen = setup.settings["apply_chat_template"], setup.settings["max_generate_length"]
    kind = recipe["kind"]
    if kind != "fresh" and earlier:
        base = earlier[recipe["pick"] % len(earlier)]
        messages = _copy(base["messages"])
        if kind == "continue":
            messages += [{"role": "assistant", "content": f"{{{{output:{base['_index']}}}}}"},
                         {"role": "user", "content": _pick(setup.questions, recipe["question"])}]
        elif kind == "prefix":
            last = messages[-1]
            parts = last["content"] if isinstance(last["content"], list) else [{"type": "text", "text": last["content"]}]
            last["content"] = parts[:min(recipe["keep"], len(parts))]
            tail = last["content"][-1]
            if tail["type"] == "text" and len(tail["text"]) > 1 and "{{" not in tail["text"]:
                last["content"][-1] = dict(tail, text=tail["text"][:1 + recipe["cut"] % len(tail["text"])])
        elif kind == "swap" and isinstance(messages[-1]["content"], list):
            messages[-1]["content"] = list(reversed(messages[-1]["content"]))
        elif kind == "replace" and isinstance(messages[-1]["content"], list):
            messages[-1]["content"] = _replace_image(messages[-1]["content"], setup, recipe, media_dir)
        if estimate(messages, template, max_gen, setup) <= setup.max_input:
            return {"messages": messages}
    messages = []
    if recipe["system"] is not None:
        messages.append({"role": "system", "content": _pick(setup.segments, recipe["system"])})
    content = []
    for part, k in recipe["parts"]:
        if part == "segment":
            content.append({"type": "text", "text": _pick(setup.segments, k)})
        elif part == "question":
            content.append({"type": "text", "text": _pick(setup.questions, k)})
        elif part == "image_pair":                  # two adjacent images: one merged run
            for spec in (_pick(setup.images, k), _pick(setup.images, k + 1)):
                content.append({"type": "image", "image": materialize(spec, media_dir), "_spec": spec})
        else:
            spec = _pick(setup.images, k)
            content.append({"type": "image", "image": materialize(spec, media_dir), "_spec": spec})
    messages.append({"role": "user", "content": content})
    return {"messages": messages}


def merges_media_runs(setup: Setup) -> bool:
    """Whether the example's semantics profile keys a run of adjacent images as one item."""
    from ..judge.oracle import load_profile
    name = setup.runtime.get("semanticsProfile")
    return name is not None and load_profile(name).media_items == "merged-runs"


def _replace_image(content: list, setup: Setup, recipe: dict, media_dir: Path) -> list:
    """The content with one of its images replaced by another pool image, of the same size
    where the pool has one (the positions then stay where they were)."""
    at = [i for i, p in enumerate(content) if p["type"] == "image"]
    if not at:
        return content
    i = at[recipe["keep"] % len(at)]
    old = content[i]["_spec"]
    same = [s for s in setup.images if (s.height, s.width) == (old.height, old.width) and s != old]
    spec = _pick(same or setup.images, recipe["question"])
    out = list(content)
    out[i] = {"type": "image", "image": materialize(spec, media_dir), "_spec": spec}
    return out


def _pick(pool: list, k: int):
    return pool[k % len(pool)]


def _copy(messages: list) -> list:
    out = []
    for m in messages:
        c = m["content"]
        out.append({"role": m["role"], "content": [dict(p) for p in c] if isinstance(c, list) else c})
    return out


def strip_private(request: dict) -> dict:
    """The request as written to a file: without the drawing bookkeeping (`_spec`, `_index`)."""
    out = {k: v for k, v in request.items() if not k.startswith("_")}
    out["messages"] = [{"role": m["role"], "content": [{k: v for k, v in p.items() if not k.startswith("_")}
                                                       for p in m["content"]] if isinstance(m["content"], list)
                        else m["content"]} for m in request["messages"]]
    return out
