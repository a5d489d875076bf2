"""Validation and parsing of an Edge-LLM request file (spec/schemas/request.schema.json).

The whole file is checked (JSON types, media decoding, LoRA files, batch rules) before
anything runs, so a bad file produces one `BackendInputError` naming the JSON path and no
output (exit 2). Unknown keys are ignored, as Edge-LLM ignores them, so case files may carry
kit metadata; each one is listed in `RequestFile.warnings` (a mistyped `max_generate_lenght`
would otherwise silently run with the default), except keys beginning with `_` (the kit's
`_conformance` blocks). The known keys are this parser's own list, not the kit's schema.
Length limits are not input errors: they fail their batch at run time (CR-BATCH-5).

An engine with an `hf` tokenizer passes its `hf_prompt.HFText` as `text`: images are then
counted by the engine's media counter and the prompt laid out by spec/hf-tokenizer.md; the
bytes-v1 layout (spec/tokenizer.md) is used otherwise.
"""
import difflib
import math
import os
import re
from dataclasses import dataclass, field

import numpy as np

from .errors import BackendInputError
from .limits import INPUT_TEXT_BYTES
from .media import MediaError, decode_audio, decode_image
from .tokenizer import VOCAB, encode_prompt, render

DEFAULTS = {"batch_size": 1, "temperature": 1.0, "top_p": 0.8, "top_k": 50, "max_generate_length": 256,
            "apply_chat_template": True, "add_generation_prompt": True, "num_logprobs": 0}
LOOKUP_POLICIES = ("use_cache", "bypass")
COMMIT_POLICIES = ("including_generated_tokens", "prefill_state_only")

# The keys this parser reads, per object (Edge-LLM's request format); anything else is ignored.
TOP_KEYS = ("batch_size", "temperature", "top_p", "top_k", "max_generate_length", "apply_chat_template",
            "add_generation_prompt", "enable_thinking", "num_logprobs", "logit_bias", "available_lora_weights",
            "context_cache_lookup_policy", "context_cache_commit_policy", "requests")
REQUEST_KEYS = ("messages", "lora_name", "save_system_prompt_kv_cache", "disable_spec_decode", "num_logprobs",
                "logit_bias", "stop")
MESSAGE_KEYS = ("role", "content")
ITEM_KEYS = {"text": ("type", "text"), "image": ("type", "image", "do_resize"), "audio": ("type", "audio")}


@dataclass
class Request:
    idx: int
    batch_idx: int
    ids: np.ndarray                 # int32 [n]
    spans: list                     # [MediaSpan] in prompt order
    messages: list                  # echo for the output file
    lora_name: str | None
    save_system_prompt: bool
    temperature: float
    top_k: int
    top_p: float
    max_generate_length: int
    num_logprobs: int
    logit_bias: dict = field(default_factory=dict)
    stop: list = field(default_factory=list)
    text: str | None = None         # hf engines: the encoded prompt text (before image expansion)
    disable_spec_decode: bool = False  # EAGLE: its batch decodes as vanilla (CR-SPEC-7)

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def formatted(self) -> str:
        return render(self.ids) if self.text is None else self.text

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1


@dataclass
class RequestFile:
    requests: list
    batches: list                   # [[Request]] in file order (CR-BATCH-1)
    lookup_policy: str
    commit_policy: str
    lora_paths: dict                # adapter name -> resolved file
    warnings: list = field(default_factory=list)    # [(JSON path, message)] of ignored keys


def _is_int(v):
    return type(v) is int


_SURROGATE = re.compile("[\ud800-\udfff]")


def _is_num(v):
    """A finite JSON number (a NaN passes every range check, an infinite temperature gives NaN)."""
    return type(v) is int or (type(v) is float and math.isfinite(v))


class _Checker:
    def __init__(self, engine, base_dir, lora_check, text=None):
        self.engine, self.base_dir, self.lora_check = engine, base_dir, lora_check
        self.hf = text
        self.vocab = VOCAB if text is None else text.vocab_size
        self.media_cache = {}

    def fail(self, path, message):
        raise BackendInputError(path, message)

    def int_field(self, obj, key, path, lo=None, hi=None, default=None):
        if key not in obj:
            return default
        v = obj[key]
        if not _is_int(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
            rng = f" in [{lo}, {hi}]" if hi is not None else (f" >= {lo}" if lo is not None else "")
            self.fail(f"{path}.{key}", f"expected an integer{rng}, got {v!r}")
        return v

    def bool_field(self, obj, key, path, default):
        if key not in obj:
            return default
        if type(obj[key]) is not bool:
            self.fail(f"{path}.{key}", f"expected a boolean, got {obj[key]!r}")
        return obj[key]

    def enum_field(self, obj, key, path, values, default):
        if key not in obj:
            return default
        if obj[key] not in values:
            self.fail(f"{path}.{key}", f"expected one of {', '.join(values)}, got {obj[key]!r}")
        return obj[key]

    def logit_bias(self, obj, path):
        if "logit_bias" not in obj:
            return None
        lb = obj["logit_bias"]
        if not isinstance(lb, dict) or len(lb) > 1024:
            self.fail(f"{path}.logit_bias", "expected an object of at most 1024 token-id: bias entries")
        out = {}
        for k, v in lb.items():
            if not (isinstance(k, str) and k.isdigit() and k.isascii()) or int(k) >= self.vocab:
                self.fail(f"{path}.logit_bias", f"key {k!r} is not a token id below {self.vocab}")
            if not _is_num(v) or not -100 <= v <= 100:
                self.fail(f"{path}.logit_bias[{k!r}]", f"expected a number in [-100, 100], got {v!r}")
            out[int(k)] = float(v)
        return out

    def media(self, kind, ref, path):
        if not isinstance(ref, str) or not ref:
            self.fail(path, f"expected a non-empty {kind} path")
        if self.hf is not None and kind == "audio":
            self.fail(path, "audio input is not defined with an hf tokenizer (spec/hf-tokenizer.md)")
        if self.engine.get("vision" if kind == "image" else "audio") is None:
            self.fail(path, f"the engine has no {'vision' if kind == 'image' else 'audio'} encoder"
                            f" (build with --{'vision' if kind == 'image' else 'audio'})")
        full = ref if os.path.isabs(ref) else os.path.join(self.base_dir, ref)
        try:
            key = (kind, os.path.realpath(full))
        except ValueError:                       # a NUL byte or a lone surrogate: no such file can exist
            self.fail(path, f"not a usable file path: {ref[:200]!r}")
        if key not in self.media_cache:
            try:
                if self.hf is not None:
                    self.media_cache[key] = decode_image(full, self.engine["max_input_len"], self.hf.image_count)
                else:
                    decode = decode_image if kind == "image" else decode_audio
                    self.media_cache[key] = decode(full, self.engine["max_input_len"])
            except MediaError as e:
                self.fail(path, str(e))
        return self.media_cache[key]

    def text(self, value, path):
        """Text is tokenized as UTF-8 bytes: a lone surrogate (a JSON \\ud800 escape) has none."""
        bad = _SURROGATE.search(value)
        if bad is not None:
            self.fail(path, f"not valid Unicode: lone surrogate U+{ord(bad.group()):04X} at offset {bad.start()}")
        return value

    def content(self, content, path):
        if isinstance(content, str):
            return [("text", self.text(content, path))]
        if not isinstance(content, list):
            self.fail(path, "expected a string or a list of content items")
        items = []
        for j, item in enumerate(content):
            p = f"{path}[{j}]"
            if not isinstance(item, dict):
                self.fail(p, "expected a content item object")
            kind = item.get("type")
            if kind == "text":
                if not isinstance(item.get("text"), str):
                    self.fail(f"{p}.text", "expected a string")
                items.append(("text", self.text(item["text"], f"{p}.text")))
            elif kind in ("image", "audio"):
                if kind == "image" and "do_resize" in item and type(item["do_resize"]) is not bool:
                    self.fail(f"{p}.do_resize", "expected a boolean")
                items.append((kind, self.media(kind, item.get(kind), f"{p}.{kind}")))
            else:
                self.fail(f"{p}.type", f"unsupported content item type {kind!r} (text, image, audio)")
        return items


def parse_request_file(doc, *, engine: dict, base_dir: str, lora_check,
                       batch_size: int | None = None, max_generate_length: int | None = None,
                       text=None) -> RequestFile:
    """Validate `doc` (the parsed JSON) completely and return the runnable requests.

    `lora_check(name, path)` loads an adapter file and raises ValueError if it does not fit the
    engine. `batch_size` / `max_generate_length` are the CLI overrides. `text`: the engine's
    `HFText` for an hf tokenizer, None for bytes-v1.
    """
    c = _Checker(engine, base_dir, lora_check, text)
    if not isinstance(doc, dict):
        c.fail("$", "expected a JSON object")
    top = {}
    if "batch_size" in doc:
        top["batch_size"] = c.int_field(doc, "batch_size", "$", lo=1)
    if "temperature" in doc and (not _is_num(doc["temperature"]) or doc["temperature"] < 0):
        c.fail("$.temperature", f"expected a number >= 0, got {doc['temperature']!r}")
    if "top_p" in doc and (not _is_num(doc["top_p"]) or not 0 < doc["top_p"] <= 1):
        c.fail("$.top_p", f"expected a number in (0, 1], got {doc['top_p']!r}")
    top_k = c.int_field(doc, "top_k", "$", lo=0, default=DEFAULTS["top_k"])
    max_gen = c.int_field(doc, "max_generate_length", "$", lo=1, default=DEFAULTS["max_generate_length"])
    chat = c.bool_field(doc, "apply_chat_template", "$", True)
    gen_prompt = c.bool_field(doc, "add_generation_prompt", "$", True)
    # An hf engine's chat template gets enable_thinking when the file sets it, over the engine's
    # own chat_template_kwargs (spec/hf-tokenizer.md TOK-HF-4); bytes-v1 has no template keywords.
    thinking = c.bool_field(doc, "enable_thinking", "$", False)
    keywords = {"enable_thinking": thinking} if "enable_thinking" in doc else {}
    if text is not None and chat and text.template is None:
        c.fail("$.apply_chat_template", "the engine's tokenizer has no chat template (set apply_chat_template"
                                        " to false)")
    num_lp = c.int_field(doc, "num_logprobs", "$", lo=0, hi=50, default=0)
    top_bias = c.logit_bias(doc, "$") or {}
    lookup = c.enum_field(doc, "context_cache_lookup_policy", "$", LOOKUP_POLICIES, "use_cache")
    commit = c.enum_field(doc, "context_cache_commit_policy", "$", COMMIT_POLICIES, "including_generated_tokens")
    available = doc.get("available_lora_weights", {})
    if not isinstance(available, dict) or not all(isinstance(v, str) and v for v in available.values()):
        c.fail("$.available_lora_weights", "expected an object of adapter name: file path")
    reqs = doc.get("requests")
    if not isinstance(reqs, list) or not reqs:
        c.fail("$.requests", "expected a non-empty list of requests")

    bs = batch_size if batch_size is not None else top.get("batch_size", DEFAULTS["batch_size"])
    if bs > engine["max_batch_size"]:
        where = "--batchSize" if batch_size is not None else "$.batch_size"
        c.fail(where, f"batch size {bs} exceeds the engine's max_batch_size {engine['max_batch_size']} (CR-BATCH-1)")
    if max_generate_length is not None:
        max_gen = max_generate_length
    temperature = float(doc.get("temperature", DEFAULTS["temperature"]))
    top_p = float(doc.get("top_p", DEFAULTS["top_p"]))

    lora_paths: dict = {}
    requests = []
    for i, r in enumerate(reqs):
        p = f"$.requests[{i}]"
        if not isinstance(r, dict):
            c.fail(p, "expected a request object")
        msgs = r.get("messages")
        if not isinstance(msgs, list) or not msgs:
            c.fail(f"{p}.messages", "expected a non-empty list of messages")
        parsed, echo = [], []
        for j, m in enumerate(msgs):
            mp = f"{p}.messages[{j}]"
            if not isinstance(m, dict):
                c.fail(mp, "expected a message object")
            if m.get("role") not in ("system", "user", "assistant"):
                c.fail(f"{mp}.role", f"expected one of system, user, assistant, got {m.get('role')!r}")
            if "content" not in m:
                c.fail(f"{mp}.content", "missing")
            parsed.append((m["role"], c.content(m["content"], f"{mp}.content")))
            content = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
            echo.append({"role": m["role"], "content": content})
        size = sum(len(v.encode("utf-8")) for _, items in parsed for kind, v in items if kind == "text")
        if size > INPUT_TEXT_BYTES:
            c.fail(f"{p}.messages", f"the text of this request is {size} bytes, above the {INPUT_TEXT_BYTES} "
                                    "a request may hold before tokenization")
        lora = r.get("lora_name")
        if lora is not None:
            if not isinstance(lora, str) or not lora:
                c.fail(f"{p}.lora_name", "expected a non-empty string")
            if lora not in lora_paths:
                lora_paths[lora] = _resolve_lora(c, lora, available, base_dir, f"{p}.lora_name")
        save_sys = c.bool_field(r, "save_system_prompt_kv_cache", p, False)
        no_spec = c.bool_field(r, "disable_spec_decode", p, False)
        stop = r.get("stop", [])
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
            c.fail(f"{p}.stop", "expected a non-empty string or a list of non-empty strings")
        bias = dict(top_bias)
        bias.update(c.logit_bias(r, p) or {})
        formatted = None
        if text is None:
            ids, spans = encode_prompt(parsed, chat, gen_prompt)
        else:
            try:
                ids, spans, formatted = text.layout(parsed, chat, gen_prompt, keywords)
            except ValueError as e:
                c.fail(f"{p}.messages", str(e))
        if len(ids) == 0:
            c.fail(f"{p}.messages", "the input has 0 tokens (CR-BATCH-5)")
        requests.append(Request(
            idx=i, batch_idx=i // bs, ids=ids, spans=spans, messages=echo, lora_name=lora,
            save_system_prompt=save_sys, temperature=temperature, top_k=top_k, top_p=top_p,
            max_generate_length=max_gen, num_logprobs=c.int_field(r, "num_logprobs", p, lo=0, hi=50, default=num_lp),
            logit_bias=bias, stop=list(stop), text=formatted, disable_spec_decode=no_spec))

    batches = [requests[k:k + bs] for k in range(0, len(requests), bs)]
    for batch in batches:
        names = {r.lora_name for r in batch}
        if len(names) > 1:
            odd = next(r for r in batch if r.lora_name != batch[0].lora_name)
            c.fail(f"$.requests[{odd.idx}].lora_name",
                   f"a batch mixes LoRA adapters {sorted(map(str, names))} (CR-BATCH-4)")
    return RequestFile(requests, batches, lookup, commit, lora_paths, unknown_keys(doc))


SHOWN_UNKNOWN_KEYS = 10   # warned one by one; the rest are counted in one more line


def unknown_keys(doc: dict, limit: int = SHOWN_UNKNOWN_KEYS) -> list:
    """[(JSON path, "unknown key ignored (did you mean K?)")] for the first `limit` keys of the top
    level, a request, a message or a content item that this parser does not read (`_` keys
    excepted), then ("$", "... and N more unknown keys ignored") when there are more."""
    levels = {"the top level": TOP_KEYS, "a request": REQUEST_KEYS, "a message": MESSAGE_KEYS,
              "a content item": sorted({k for keys in ITEM_KEYS.values() for k in keys})}

    def found():
        yield from _unknown_in(doc, "$", TOP_KEYS)
        for i, r in enumerate(doc.get("requests") or []):
            yield from _unknown_in(r, f"$.requests[{i}]", REQUEST_KEYS)
            for j, m in enumerate(r.get("messages") or []):
                path = f"$.requests[{i}].messages[{j}]"
                yield from _unknown_in(m, path, MESSAGE_KEYS)
                for k, item in enumerate(m["content"] if isinstance(m["content"], list) else []):
                    yield from _unknown_in(item, f"{path}.content[{k}]", ITEM_KEYS[item["type"]])
    out, keys = [], found()
    for path, key, known in keys:
        if len(out) == limit:
            return out + [("$", f"... and {1 + sum(1 for _ in keys):,} more unknown keys ignored")]
        out.append((f"{path}.{key}", f"unknown key ignored{_hint(key, known, levels)}"))
    return out


def _unknown_in(obj: dict, path: str, known):
    return ((path, key, known) for key in obj if key not in known and not key.startswith("_"))


def _hint(key: str, known, levels: dict) -> str:
    """A close known key of the same object, else where a close (or equal) key belongs."""
    near = difflib.get_close_matches(key, known, n=1)
    if near:
        return f" (did you mean {near[0]}?)"
    for where, keys in levels.items():
        near = difflib.get_close_matches(key, keys, n=1)
        if near:
            return f" ({near[0]} is a key of {where})" if near[0] == key else \
                f" (did you mean {near[0]}? a key of {where})"
    return ""


def _resolve_lora(c, name, available, base_dir, path):
    """The adapter file `available_lora_weights` names (CR-BATCH-4); a relative path is
    resolved against the request file's directory, like media paths."""
    if name not in available:
        c.fail(path, f"LoRA adapter {name!r} is not in available_lora_weights (CR-BATCH-4)")
    ref = available[name]
    file = ref if os.path.isabs(ref) else os.path.join(base_dir, ref)
    where = f"$.available_lora_weights.{name}"
    if not os.path.isfile(file):
        c.fail(where, f"no LoRA weight file at {ref[:200]} (missing or not a regular file)")
    try:
        c.lora_check(name, file)
    except ValueError as e:
        c.fail(where, f"bad LoRA file for {name!r}: {e}")
    return file
