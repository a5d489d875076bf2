"""Materialization: a case written for its own engine, laid out for the one engine under test.

A real deployment has one engine (Edge-LLM: 128 tokens per page, its own pool, batch size and
limits); the curated cases are written for small engines of their own. `materialize_for` turns a
case into the request file that tests the same thing on the engine under test:

- pages of P0 positions are laid out at the engine's P (relayout.py): inputs keep their page
  counts and their distance to page boundaries, media items keep straddling the same
  boundaries (resized where needed), shared prefixes stay shared exactly (checked: the pages
  each pair of requests shares, and which requests start with another's whole input, must be
  the same on both engines);
- requests that fail by a length limit (CR-BATCH-5) still fail, by the same limit;
- a batch larger than the engine's is cut to the engine's size, unless the case is about
  batches (CR-BATCH-2, CR-BATCH-6); LoRA adapters are renamed to the engine's; snapshot budgets
  keep their slot counts;
- hand-derived expectations (`expect`, `generated`) are dropped: they hold for the case's own
  engine only; the oracle predicts every count on this one.

What cannot be expressed on the engine raises NotExpressible with the reason (the runner's
NOT_SUPPORTED): no vision encoder for images, recurrent-layer cases on an attention-only engine,
other deployment switches or KV dtype, pages that cannot be laid out (a page of special tokens
only), a pool scenario the engine cannot hold (scenarios.CannotBuild), inputs beyond the engine's limits, a batch case on a smaller batch. The result is deterministic (same case, same engine, same
files) and records how it was made in `_conformance.materialized`, including where the case's
own intent differs on this engine (a pool too large to evict, say), found by comparing the
oracle's prediction on both engines.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..adapters.engines import digest
from ..cases import scenarios
from ..cases.case import OUTPUT_TEMPLATE, Case
from ..judge import oracle
from ..judge.oracle import DecodeError, TokenHistory, adapter_root, slot_sizes
from .hf_positions import token_labels, with_target_widths
from .layout import atoms_of
from .media import counted, placeholders, resized
from .relayout import CannotRelayout, apply_texts, filler, relayout
from .units import write_units

BATCH_RULES = {"CR-BATCH-2", "CR-BATCH-6"}


class NotExpressible(Exception):
    """The case cannot be laid out on this engine (NOT_SUPPORTED, with the reason)."""


@dataclass
class Materialized:
    doc: dict
    adaptations: list[str] = field(default_factory=list)


def engine_key(config: dict) -> str:
    """Identifies an engine description (what a materialized case was laid out for)."""
    return digest(config)


def source_engine(case: Case):
    """The engine a case is written for: its build arguments, or the description it was
    materialized for (NotExpressible for build arguments the spec refuses)."""
    done = case.meta.get("materialized")
    try:
        if done:
            return oracle.engine_of(done["engine_config"])
        return oracle.derive_engine(case.engine_args)
    except oracle.InputError as e:
        raise NotExpressible(f"its engine is a refused build ({e.path}: {e.message}); a refused build cannot "
                             "be shown to a fixed engine") from None


def materialize_for(case: Case, target_config: dict, media_dir: Path) -> Materialized:
    """The case laid out for the engine described by `target_config` (NotExpressible if it
    cannot be)."""
    done = case.meta.get("materialized")
    if done and done.get("engine") == engine_key(target_config):
        return Materialized(case.doc, list(done.get("adaptations", [])))
    src = source_engine(case)
    dst = oracle.engine_of(target_config)
    notes: list[str] = []
    _check_fit(case, src, dst)
    if not _deployment(src) and _deployment(dst) == EAGLE:
        notes.append("run on an attention-only EAGLE3 engine: paired base and draft pages, one-page replay "
                     "(spec/context-reuse.md section 12)")
    if case.meta.get("scenario"):            # written as a function of the engine: build it for this one
        try:
            doc, runtime = scenarios.build(case.meta["scenario"], dst, case.runtime)
        except scenarios.CannotBuild as e:
            raise NotExpressible(f"its scenario {case.meta['scenario']} cannot be built on this engine: {e}") from None
        notes.append(f"scenario {case.meta['scenario']} built for this engine ({len(doc['requests'])} requests)")
    else:
        doc = copy.deepcopy(case.doc)
        _absolute_media(doc, case.base_dir)
        runtime = dict(case.runtime)
        _batch(case, doc, runtime, dst, notes)
        _lora(doc, dst, notes)
        _snapshots(runtime, src, dst, notes, len(doc.get("requests") or []))
        _relayout(doc, src, dst, media_dir, notes)
        _check_structure(case, doc, src, dst)
        _length_limits(case, doc, src, dst, runtime, notes)
    meta = dict(case.meta)
    for key in ("expect", "generated"):
        meta.pop(key, None)
    meta["engine"] = build_args_of(target_config)
    meta["runtime"] = runtime
    meta["materialized"] = {"engine": engine_key(target_config), "engine_config": target_config,
                            "source_engine": (done or {}).get("source_engine", case.engine_args),
                            "adaptations": notes}
    doc["_conformance"] = meta
    _check_parse(case, doc, dst, runtime)
    if not case.meta.get("scenario"):
        notes += intent_differences(case, doc, src, dst)
    return Materialized(doc, notes)


# --- what the engine must have --------------------------------------------------------------------

EAGLE = {"spec_decode": "eagle"}
"""A plain case runs on an attention-only EAGLE3 engine: the oracle predicts its counts with the
paired pages and one-page replay of section 12 (CR-SPEC), as for a vendor whose one engine
speculates; its own hand-derived counts are dropped like every materialized case's."""


def _check_fit(case: Case, src, dst) -> None:
    if src.recurrent_layers and not dst.recurrent_layers:
        raise NotExpressible("needs recurrent layers (its rules are about recurrent or hybrid models)")
    if src.attention_layers and not dst.attention_layers and _cites(case, "CR-PLAN", "CR-MEDIA", "CR-CAP-1"):
        raise NotExpressible("needs attention layers (its rules are about KV pages)")
    if src.kv_cache_dtype != dst.kv_cache_dtype:
        raise NotExpressible(f"needs a {src.kv_cache_dtype} KV cache; this engine keeps {dst.kv_cache_dtype}")
    want, have = _deployment(src), _deployment(dst)
    if want != have and not (not want and have == EAGLE):
        raise NotExpressible(f"needs the deployment {want or 'plain'}; this engine is {have or 'plain'}")
    if src.hf and _tokenizer_of(src) != _tokenizer_of(dst):
        raise NotExpressible(f"is written for the {src.tokenizer['loader']} reading of {src.tokenizer['files']}; "
                             f"this engine tokenizes otherwise")
    kinds = _media_kinds(case.doc)
    if src.hf and "image" in kinds and (src.vision or {}) != (dst.vision or {}):
        raise NotExpressible(f"counts its images with {src.vision}; this engine with {dst.vision}")
    for kind, encoder in (("image", dst.vision), ("audio", dst.audio)):
        needs = kind in kinds or (kind == "image" and src.vision and case.negative)
        if needs and encoder is None:
            raise NotExpressible(f"needs {'a vision' if kind == 'image' else 'an audio'} encoder")


def _deployment(engine) -> dict:
    return {k: v for k, v in (engine.deployment or {}).items() if v}


def _tokenizer_of(engine) -> tuple | None:
    """What decides an engine's ids: its tokenizer files' contents, the loader, template keywords."""
    if not engine.hf:
        return None
    return (_files_digest(engine.tokenizer["files"]), engine.tokenizer["loader"],
            engine.tokenizer.get("chat_template_kwargs") or {})


@functools.lru_cache(maxsize=16)
def _files_digest(folder: str) -> str:
    h = hashlib.sha256()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        path = Path(folder) / name
        h.update(name.encode() + (path.read_bytes() if path.is_file() else b"-"))
    return h.hexdigest()


def _cites(case: Case, *prefixes: str) -> bool:
    return any(rule == p or rule.startswith(p + "-") for rule in case.rules for p in prefixes)


def _media_kinds(doc: dict) -> set[str]:
    kinds = set()
    for request in doc.get("requests", []):
        for message in request.get("messages", []) if isinstance(request, dict) else []:
            content = message.get("content") if isinstance(message, dict) else None
            for item in content if isinstance(content, list) else []:
                if isinstance(item, dict) and item.get("type") in ("image", "audio"):
                    kinds.add(item["type"])
    return kinds


def _absolute_media(doc: dict, base_dir: str) -> None:
    from ..cases.case import materialize as absolute
    doc["requests"] = absolute(doc, base_dir, None)["requests"]


# --- batch, adapters, snapshot budgets -------------------------------------------------------------------

def _batch(case: Case, doc: dict, runtime: dict, dst, notes: list[str]) -> None:
    size = runtime.get("batchSize") or doc.get("batch_size", 1)
    if case.negative and case.negative.get("path") == "$.batch_size":
        doc["batch_size"] = dst.max_batch_size + 1        # still one more than the engine takes
        return
    if size <= dst.max_batch_size:
        return
    if BATCH_RULES & set(case.rules):
        raise NotExpressible(f"needs batches of {size}; this engine takes at most {dst.max_batch_size}")
    if "batchSize" in runtime:
        runtime["batchSize"] = dst.max_batch_size
    else:
        doc["batch_size"] = dst.max_batch_size
    notes.append(f"batches of {size} cut to the engine's {dst.max_batch_size}")


def _lora(doc: dict, dst, notes: list[str]) -> None:
    """Adapter names become the engine's (in sorted order), with the engine's weight files."""
    used = sorted(set(doc.get("available_lora_weights") or {})
                  | {r.get("lora_name") for r in doc.get("requests", []) if isinstance(r, dict) and r.get("lora_name")})
    if not used:
        return
    have = sorted(dst.lora_adapters)
    if len(have) < len(used):
        raise NotExpressible(f"needs {len(used)} LoRA adapter(s) ({', '.join(used)}); this engine has {len(have)}")
    rename = dict(zip(used, have))
    paths = dst.raw.get("lora_adapters") or {}
    doc["available_lora_weights"] = {rename[name]: (paths.get(rename[name]) or {}).get("path", f"lora/{rename[name]}.safetensors")
                                     for name in used if name in (doc.get("available_lora_weights") or {})}
    for request in doc.get("requests", []):
        if isinstance(request, dict) and request.get("lora_name") in rename:
            request["lora_name"] = rename[request["lora_name"]]
    if any(a != b for a, b in rename.items()):
        notes.append("LoRA adapters " + ", ".join(f"{a} -> {b}" for a, b in rename.items() if a != b))


def _snapshots(runtime: dict, src, dst, notes: list[str], requests: int) -> None:
    """Snapshot budgets keep their slot counts (CR-HYB-1) at this engine's slot sizes. A case
    written for attention layers gets room for two checkpoints per request on a recurrent or
    hybrid engine, which refuses reuse without snapshot slots (CR-HYB-2)."""
    if not dst.recurrent_layers:
        return
    (r1, p1) = slot_sizes(dst)
    if not src.recurrent_layers:
        if runtime.get("enableContextReuse"):
            slots = 2 * requests + 2
            runtime["contextCacheRecurrentSnapshotPoolBytes"] = slots * r1
            if dst.attention_layers:
                runtime["contextCachePartialKVSnapshotPoolBytes"] = slots * p1
            notes.append(f"snapshot budgets of {slots} slots added (CR-HYB-2)")
        return
    (r0, p0) = slot_sizes(src)
    for flag, old, new in (("contextCacheRecurrentSnapshotPoolBytes", r0, r1),
                           ("contextCachePartialKVSnapshotPoolBytes", p0, p1)):
        if flag in runtime and old and new and old != new:
            runtime[flag] = runtime[flag] // old * new
            notes.append(f"{flag}: {runtime[flag] // new} slot(s) of {new} bytes")


# --- pages and lengths ------------------------------------------------------------------------------------

def _relayout(doc: dict, src, dst, media_dir: Path, notes: list[str]) -> None:
    """Pages laid out at the engine's size; on an engine with a real tokenizer, every text
    position then becomes a unit of one token (units.py) and every image an image of the same
    number of tokens under the engine's media counter."""
    p0, p1 = src.tokens_per_page, dst.tokens_per_page
    if (p0 == p1 and not dst.hf) or src.hf:     # a case written in a real tokenizer's text keeps it
        return
    template = doc.get("apply_chat_template", True)
    prompt = doc.get("add_generation_prompt", True)
    resized_items = 0
    for i, request in enumerate(doc.get("requests", [])):
        if not _well_formed(request):
            continue                                         # a negative case's broken request
        try:
            atoms = atoms_of(request, template, prompt, lambda item: placeholders(item, "/"))
            if dst.hf:
                atoms = with_target_widths(atoms, token_labels(_in_units(request, dst, template), dst, template,
                                                               prompt, _keywords(doc)))
            edits = relayout(atoms, p0, p1)
        except CannotRelayout as e:
            raise NotExpressible(f"request {i}: {e}") from None
        except DecodeError:
            continue                                         # undecodable media: a negative case
        apply_texts(request, edits.texts)
        for m, message in enumerate(request["messages"]):
            for k, item in enumerate(message["content"] if isinstance(message["content"], list) else []):
                if item["type"] == "text":
                    continue
                count = placeholders(item, "/") + edits.media.get((m, k), 0)
                if dst.hf:
                    item[item["type"]] = _counted_image(item, count, dst, media_dir, i)
                elif (m, k) in edits.media:
                    item[item["type"]] = resized(item, "/", count, media_dir)
                else:
                    continue
                resized_items += 1
        if dst.hf:
            write_units(request, dst, template)
    notes.append(f"pages laid out from {p0} to {p1} tokens"
                 + (f"; text written in one-token units of the {dst.tokenizer['loader']} tokenizer" if dst.hf else "")
                 + (f"; {resized_items} media item(s) resized" if resized_items else ""))


def _in_units(request: dict, dst, template: bool) -> dict:
    unit = copy.deepcopy(request)
    write_units(unit, dst, template)
    return unit


def _counted_image(item: dict, count: int, dst, media_dir: Path, request: int) -> str:
    try:
        return counted(item, "/", count, dst.vision["counter"], dst.vision.get("settings") or {}, media_dir)
    except ValueError as e:
        raise NotExpressible(f"request {request}: no image has {count} tokens under {dst.vision['counter']}: {e}") \
            from None


def _well_formed(request) -> bool:
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        return False
    for m in request["messages"]:
        if not isinstance(m, dict) or not isinstance(m.get("content"), (str, list)):
            return False
        for item in m["content"] if isinstance(m["content"], list) else []:
            if not isinstance(item, dict) or item.get("type") not in ("text", "image", "audio") \
                    or not isinstance(item.get(item.get("type")), str):
                return False
    return True


def _length_limits(case: Case, doc: dict, src, dst, runtime: dict, notes: list[str]) -> None:
    """CR-BATCH-5 on this engine as on the case's own: a request that fits fits, and one that
    fails by a length limit fails by the same limit. A request failing by max_input_len grows
    past it; one failing by the KV capacity only through generation grows to max_input_len,
    and max_generate_length rises just enough to cross the capacity (which every request that
    fits still leaves room for)."""
    if case.negative:
        return
    mgl0 = runtime.get("maxGenerateLength") or case.doc.get("max_generate_length", 256)
    before = _lengths(case.doc, case.base_dir, src)
    after = _lengths(doc, "/", dst)
    if before is None or after is None:
        return
    wants = [_limit(n0, mgl0, src) if n0 is not None else None for n0 in before]
    mgl = mgl0
    if "capacity" in wants and dst.max_kv_cache_capacity - mgl + 1 > dst.max_input_len:
        mgl = dst.max_kv_cache_capacity - dst.max_input_len + 1
        if "maxGenerateLength" in runtime:
            runtime["maxGenerateLength"] = mgl
        else:
            doc["max_generate_length"] = mgl
        notes.append(f"max_generate_length raised to {mgl}, so a request can exceed the KV capacity through "
                     "generation (CR-BATCH-5)")
    for i, (want, n1) in enumerate(zip(wants, after)):
        if n1 is None or before[i] is None:
            continue
        got = _limit(n1, mgl, dst)
        if want == got:
            continue
        if want is None:
            raise NotExpressible(f"request {i} needs {n1} input tokens and {mgl} generated; this engine takes "
                                 f"{dst.max_input_len} input tokens and {dst.max_kv_cache_capacity} in all")
        target = dst.max_input_len + 1 if want == "input" else dst.max_kv_cache_capacity - mgl + 1
        _grow_to(doc["requests"][i], target - n1)
        notes.append(f"request {i} lengthened to {target} tokens: it fails by "
                     + ("max_input_len" if want == "input" else "the KV capacity") + " (CR-BATCH-5)")


def _limit(n: int, mgl: int, engine) -> str | None:
    if n > engine.max_input_len:
        return "input"
    if n + mgl > engine.max_kv_cache_capacity:
        return "capacity"
    return None


def _lengths(doc: dict, base_dir: str, engine) -> list | None:
    """n of each request (None for one that does not parse alone); None when templates make
    lengths unknown before running."""
    if any(OUTPUT_TEMPLATE.search(json.dumps(r)) for r in doc.get("requests", [])):
        return None
    out = []
    for request in doc.get("requests", []):
        try:
            parsed = oracle.parse_request_file(dict(doc, requests=[request], batch_size=1), base_dir, engine)
            out.append(parsed.requests[0].n)
        except oracle.InputError:
            out.append(None)
    return out


def _grow_to(request: dict, extra: int) -> None:
    """Append `extra` filler characters to the request's last text."""
    if extra <= 0:
        return
    message = request["messages"][-1]
    if isinstance(message["content"], str):
        message["content"] += filler(len(message["content"]), extra)
        return
    texts = [item for item in message["content"] if item["type"] == "text"]
    if texts:
        texts[-1]["text"] += filler(len(texts[-1]["text"]), extra)
    else:
        message["content"].append({"type": "text", "text": filler(0, extra)})


# --- checks of the result -------------------------------------------------------------------------------

def _check_structure(case: Case, doc: dict, src, dst) -> None:
    """The pages each pair of requests shares and the inputs each request starts with must be
    the same on both engines: the layout may move page boundaries, never what is shared."""
    if case.negative:
        return
    before = structure(case.doc, case.base_dir, src)
    after = structure(doc, "/", dst)
    if before is None or after is None or before == after:
        return
    for what, a, b in zip(("full pages per request", "shared leading pages", "whole inputs a request starts with",
                           "distance of each input's end to a page boundary"), before, after):
        if a != b:
            raise NotExpressible(f"the layout changes the {what} ({_first_difference(a, b)}): the case's page "
                                 "structure cannot be kept on this engine")


def structure(doc: dict, base_dir: str, engine) -> tuple | None:
    """(full pages of each request; for each pair, the leading pages they share; for each
    pair, whether the later one starts with the earlier one's whole input; where each input
    ends relative to a page boundary, `_boundary_class`). A request is cut
    at its first `{{output:K}}`: what follows depends on an answer of unknown length on either
    engine. None when the file does not parse alone."""
    try:
        parsed = oracle.parse_request_file(dict(_dummy_templates(doc, engine), batch_size=1), base_dir, engine)
    except oracle.InputError:
        return None
    template, prompt = doc.get("apply_chat_template", True), doc.get("add_generation_prompt", True)
    P = engine.tokens_per_page
    histories = []
    for r, raw in zip(parsed.requests, doc["requests"]):
        cut = _hf_known_positions(raw, r.spans, engine, template, prompt, _keywords(doc)) if engine.hf else \
            _known_positions(raw, template, prompt, base_dir)
        histories.append(TokenHistory(r.tokens[:cut], [s for s in r.spans if cut is None or s.end <= cut],
                                      adapter_root(r.lora_name), P))
    pages = [len(h) // P for h in histories]
    ends = [_boundary_class(len(h), P) for h in histories]
    shared, starts = [], []
    for i, a in enumerate(histories):
        for j in range(i + 1, len(histories)):
            b = histories[j]
            common = 0
            while common < min(pages[i], pages[j]) and a.key(common) == b.key(common):
                common += 1
            shared.append(common)
            starts.append(len(a) <= len(b) and b.exact_digest(len(a)) == a.exact_digest(len(a)))
    return pages, shared, starts, ends


def _boundary_class(n: int, P: int) -> str | int:
    """Where an input ends relative to its last page boundary, as the layout keeps it (relayout.py):
    exactly on it, 1 past it, 1 before the next (k*P, k*P + 1, k*P - 1), or in between."""
    r = n % P
    if r <= 1:
        return r
    return -1 if r == P - 1 else "between"


def _keywords(doc: dict) -> dict:
    """The request file's own chat-template keywords (TOK-HF-4)."""
    return {"enable_thinking": doc["enable_thinking"]} if "enable_thinking" in doc else {}


def _hf_known_positions(request: dict, spans, engine, template: bool, prompt: bool, keywords: dict) -> int | None:
    """As `_known_positions`, under the engine's real tokenizer: the first `{{output:K}}` among
    the labelled tokens, moved past the expansion of the images before it."""
    if not OUTPUT_TEMPLATE.search(json.dumps(request)):
        return None
    try:
        labels = token_labels(request, engine, template, prompt, keywords)
    except CannotRelayout:
        return 0
    cut = next((i for i, label in enumerate(labels) if label[0] == "output"), len(labels))
    images = sum(1 for label in labels[:cut] if label[0] == "image")
    return cut + sum(s.end - s.start - 1 for s in spans[:images])


def _known_positions(request: dict, template: bool, prompt: bool, base_dir: str) -> int | None:
    """The positions before the request's first `{{output:K}}` (None: all of them)."""
    if not OUTPUT_TEMPLATE.search(json.dumps(request)):
        return None
    atoms = atoms_of(request, template, prompt, lambda item: placeholders(item, base_dir))
    return len(atoms) - 1                     # the last atom is the template itself


def _first_difference(a: list, b: list) -> str:
    k = next(k for k, (x, y) in enumerate(zip(a, b)) if x != y)
    return f"entry {k}: {a[k]} on its own engine, {b[k]} here"


def _check_parse(case: Case, doc: dict, dst, runtime: dict) -> None:
    """The laid-out file must parse on this engine exactly as the case parses on its own: run,
    or fail with the same input error."""
    flags = oracle.flags_of(runtime)
    resolved = _dummy_templates(doc, dst)
    try:
        oracle.parse(resolved, "/", dst, flags)
    except oracle.InputError as e:
        if case.negative and e.path == case.negative["path"]:
            return
        if case.negative:
            raise NotExpressible(f"the input error at {case.negative['path']} becomes {e.path} on this engine: "
                                 f"{e.message}") from None
        raise NotExpressible(f"on this engine the file is refused at {e.path}: {e.message}") from None
    if case.negative:
        raise NotExpressible(f"the input error at {case.negative['path']} cannot be shown on this engine")


def _dummy_templates(doc: dict, engine=None) -> dict:
    """`{{output:K}}` replaced by a fixed answer: enough to parse and predict the shape. With a
    real tokenizer the answer is its end-of-sequence token, which never merges with the text
    around it (it marks where the answer starts)."""
    text = json.dumps(doc)
    if not OUTPUT_TEMPLATE.search(text):
        return doc
    answer = engine.hf_tokenizer().decode([engine.hf_tokenizer().eos_token_id]) if engine is not None and engine.hf \
        else "ok"
    return json.loads(OUTPUT_TEMPLATE.sub(lambda m: json.dumps(answer)[1:-1], text))


def intent_differences(case: Case, doc: dict, src, dst) -> list[str]:
    """Where the case does something else on this engine than on its own: the oracle's
    per-request plans (in pages) and whether anything is evicted, skipped or failed, compared
    with one generated token per request. Reported, never a verdict."""
    if case.negative or (case.meta.get("expect") or {}).get("rejected"):
        return []
    before = _shape(case.doc, case.base_dir, src, case.runtime)
    after = _shape(doc, "/", dst, doc["_conformance"]["runtime"])
    if before is None or after is None:
        return []
    notes = []
    if src.kind != dst.kind:
        notes.append(f"a {src.kind} case on a {dst.kind} engine: reuse follows this engine's rules "
                     f"({'section 8' if dst.recurrent_layers else 'sections 2-6'})")
        return notes
    for i, (a, b) in enumerate(zip(before["requests"], after["requests"])):
        if a != b:
            notes.append(f"intent: request {i} {_describe(a)} on its own engine, {_describe(b)} here")
    for key, what in (("evicted", "records evicted"), ("skips", "snapshot captures skipped"),
                      ("failed", "batches failed")):
        if bool(before[key]) != bool(after[key]):
            notes.append(f"intent: {what}: {before[key]} on its own engine, {after[key]} here"
                         + (f" (a pool of {dst.kv_pool_pages} pages)" if key == "evicted" else ""))
    return notes


def _shape(doc: dict, base_dir: str, engine, runtime: dict) -> dict | None:
    flags = oracle.flags_of(dict(runtime, maxGenerateLength=1))
    if oracle.rejection(engine, flags) is not None:
        return None
    try:
        sim = oracle.Simulator(engine, flags)
        responses = sim.run(_dummy_templates(doc, engine), base_dir)
    except (oracle.InputError, oracle.NeedsTranscript, oracle.OutOfScope):
        return None
    P = engine.tokens_per_page
    requests = []
    for r in responses:
        cc = r.get("context_cache") or {}
        requests.append((r["status"], cc.get("plan"), (cc.get("reused_tokens") or 0) // P if engine.kind == "vanilla"
                         else bool(cc.get("reused_tokens"))))
    profile = sim.profile().get("context_cache") or {}
    return {"requests": requests, "evicted": (profile.get("records") or {}).get("evicted", 0),
            "skips": (profile.get("hybrid") or {}).get("snapshot_pressure_skips", 0),
            "failed": sum(1 for b in sim.batches if b["status"] != "ok")}


def _describe(fact: tuple) -> str:
    status, plan, reused = fact
    if status != "ok":
        return "fails"
    if plan is None:
        return "runs"
    return f"plans {plan}" + (f" reusing {reused} page(s)" if isinstance(reused, int) and not isinstance(reused, bool)
                              else " with a restore" if reused else "")


# --- a description as build arguments ---------------------------------------------------------------------

def build_args_of(config: dict) -> dict:
    """Build arguments (spec/engine.md section 1) whose description matches `config` in
    everything the oracle reads: what a materialized case names as its engine."""
    kinds = config["layer_kinds"]
    model = ("attention" if "recurrent" not in kinds else "recurrent" if "attention" not in kinds else "hybrid")
    args = {"maxInputLen": config["max_input_len"], "maxKVCacheCapacity": config["max_kv_cache_capacity"],
            "maxKVPoolPages": config["kv_pool_pages"], "maxBatchSize": config["max_batch_size"],
            "tokensPerPage": config["tokens_per_page"], "model": model, "numLayers": len(kinds),
            "numKVHeads": config["num_kv_heads"], "headDim": config["head_dim"]}
    for key, name in (("num_attention_heads", "numHeads"), ("hidden_size", "hiddenSize"),
                      ("intermediate_size", "intermediateSize")):
        if config.get(key) is not None:
            args[name] = config[key]
    if config.get("vision"):
        args["vision"] = True
    if config.get("audio"):
        args["audio"] = True
    if config.get("lora_adapters"):
        args["loraAdapters"] = sorted(config["lora_adapters"])
    if config.get("kv_cache_dtype", "fp16") != "fp16":
        args["kvCacheDtype"] = config["kv_cache_dtype"]
    deployment = config.get("deployment") or {}
    if deployment.get("spec_decode"):
        args["specDecode"] = deployment["spec_decode"]
    for key, name in (("action_runner", "actionRunner"), ("block_diffusion", "blockDiffusion"),
                      ("vision_bidirectional", "visionBidirectional")):
        if deployment.get(key):
            args[name] = True
    return args
