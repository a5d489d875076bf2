"""What a server says about itself: its cache settings, its context length, its LoRA adapters.

The user should not have to guess a server's block size (PEER-API-5): vLLM publishes its cache
config in `/metrics` (`vllm:cache_config_info`, a label per CacheConfig field) and its models,
adapters and `max_model_len` in `/v1/models`; SGLang its server arguments in
`/get_server_info`; llama.cpp its slots and context in `/props`. What the server publishes is
used where the user gave nothing, and a `--peer-setting` that contradicts it is bad input:
judged against the wrong block size, every count of a correct server would FAIL with no hint
why. Where each profile's server publishes what is data, the profile's own (`Published` in
reference/peer_profile.py): this module reads documents, labels and fields, never a profile's name.

A published value that cannot be right (`block_size="-16"`, `num_gpu_blocks="1"`, a
`max_model_len` of 0) is bad input naming the value and where it came from: the default in its
place would judge the server against a setting it does not have. A page that cannot be read is
not fatal (many deployments hide `/metrics`), but it is said: each setting's origin is one of
`--peer-setting`, the server's source, or `default`, and `fallbacks[key]` says why a setting the
server publishes took its default. `--model` naming a LoRA adapter is bad input too: the kit's
cases contrast the base model with the adapters, so they need the base model's name.

    facts = read_facts(client, profile, model)    # a missing endpoint gives nothing; a bad value raises
    settings, origin = merge_settings(profile, given, facts)
    print(describe_settings(settings, origin, facts))
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..judge import peer_oracle as oracle
from ..judge.peer_oracle import Published, VERSION_PATTERN

from ..adapters.openai import NotOffered, OpenAIClient, ServerFailure
from .. import KvconformError

INFO_LINE = re.compile(r"^(?P<metric>[\w:]+)\{(?P<labels>.*)\}\s", re.MULTILINE)
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
MODELS = "/v1/models"


@dataclass
class ServerFacts:
    settings: dict = field(default_factory=dict)
    """Profile settings the server published, with `sources[key]` saying where."""
    sources: dict = field(default_factory=dict)
    context: int | None = None
    """The most tokens (prompt and output) one request may hold, where the server says."""
    adapters: dict | None = None
    """LoRA adapters the server lists, name -> the path it loaded them from; None: not listed."""
    runtime: str | None = None
    """The profile whose API the server's shape fits (llama.cpp `/props`, SGLang
    `/get_server_info`, vLLM's `vllm:` metrics), or None when none does."""
    context_source: str | None = None
    """Where the context length came from."""
    fallbacks: dict = field(default_factory=dict)
    """Setting -> why the server's value could not be read (its page failed, or it lacks the
    value), for the settings the profile reads from the server that it did not publish."""

    def describe(self) -> dict:
        return {"settings": self.settings, "sources": self.sources, "context": self.context,
                "context_source": self.context_source, "fallbacks": self.fallbacks,
                "adapters": None if self.adapters is None else sorted(self.adapters), "looks_like": self.runtime}


class Impossible(ValueError):
    """A published value no server could have: a negative or non-numeric size, a pool with no
    usable block. The message says what a value must be."""


NOT_SET = ("", "none", "null")
"""Raw values that say "not set" (vLLM's `num_gpu_blocks="None"` before the pool is sized): the
setting is then not published, which is not an error."""


def _int(value) -> int:
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 12:
        return int(value)
    raise Impossible("expected a non-negative integer")


def _bool(value) -> bool:
    if type(value) is bool:
        return value
    flag = {"true": True, "false": False}.get(str(value).strip().lower())
    if flag is None:
        raise Impossible("expected true or false")
    return flag


def metric_labels(text: str, metric: str) -> dict:
    """The labels of the first `metric{...}` line of a Prometheus text, or {}."""
    for match in INFO_LINE.finditer(text or ""):
        if match.group("metric") == metric:
            return dict(LABEL.findall(match.group("labels")))
    return {}


def _not(value) -> bool:
    return not _bool(value)


def _less_one(value) -> int:
    count = _int(value)
    if count < 2:
        raise Impossible(f"{count} leaves no usable block (one of them is the null block)")
    return count - 1


def _version(value) -> str | None:
    """A runtime's release as it reports it ("0.5.23", "0.5.24.dev3+g1234"), or None."""
    return value.strip() if isinstance(value, str) and VERSION_PATTERN.match(value.strip()) else None


EAGLE = ("EAGLE", "EAGLE3", "FROZEN_KV_MTP")
"""SGLang's speculative algorithms that key its radix tree by bigrams (spec_info.py `is_eagle`)."""


def _eagle(value) -> bool | None:
    """SGLang's `speculative_algorithm`: whether its tree is keyed by bigrams (None: no algorithm)."""
    if value is None:
        return None
    return str(value).strip().upper() in EAGLE


def _text(value) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _interval(value) -> int | str | None:
    """vLLM's `prefix_cache_retention_interval`: an integer, or `None` for dense retention."""
    if isinstance(value, str) and value.strip() == "None":
        return "dense"
    return _int(value)


CONVERT = {"int": _int, "bool": _bool, "not": _not, "less_one": _less_one, "text": _text, "interval": _interval,
           "version": _version, "eagle": _eagle}
"""How a published raw value becomes a setting's (reference/peer_profile.py `Published.convert`)."""


class _Pages:
    """What one reading GETs from the server, each path once: JSON documents and texts.
    `failed[path]` says why a page could not be read (not offered, an HTTP error, a timeout, a
    body that is not JSON)."""

    def __init__(self, client: OpenAIClient):
        self.client, self.docs, self.texts, self.failed = client, {}, {}, {}

    def doc(self, path: str):
        if path not in self.docs:
            try:
                self.docs[path] = self.client.get(path)
            except NotOffered as e:
                self.docs[path], self.failed[path] = None, f"the server does not offer it ({e})"
            except ServerFailure as e:
                self.docs[path], self.failed[path] = None, e.message
        return self.docs[path]

    def text(self, path: str) -> str:
        if path not in self.texts:
            try:
                self.texts[path] = self.client.get_text(path)
            except NotOffered as e:
                self.texts[path], self.failed[path] = "", f"the server does not offer it ({e})"
            except ServerFailure as e:
                self.texts[path], self.failed[path] = "", e.message
        return self.texts[path]

    def missing(self, where: Published) -> str:
        """Why `where` gave no value: its page failed, the page lacks the value, or says "not set"."""
        if where.path in self.failed:
            return f"GET {where.path} could not be read: {self.failed[where.path]}"
        what = f"{where.metric} {where.field}" if where.metric else where.field
        raw = self.raw(where)
        return f"GET {where.path} has no {what}" if raw is None else f"GET {where.path} {what} is {_raw(raw)}: not set"

    def raw(self, where: Published):
        """The raw value a Published names (a label of a metric line, a dotted JSON field)."""
        if where.metric is not None:
            return metric_labels(self.text(where.path), where.metric).get(where.field)
        value = self.doc(where.path)
        for part in where.field.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value


def _entries(doc) -> list:
    data = doc.get("data") if isinstance(doc, dict) else None
    return [d for d in data if isinstance(d, dict) and isinstance(d.get("id"), str)] if isinstance(data, list) else []


def _models(doc, model: str | None) -> tuple:
    """(`max_model_len` of the served model as published, adapters) of a `/v1/models` list: vLLM
    lists each LoRA adapter with its `parent` and the `root` it was loaded from."""
    entries = _entries(doc)
    if not entries:
        return None, None
    base = [d for d in entries if d.get("parent") is None]
    served = next((d for d in base if d["id"] == model), base[0] if base else None)
    context = served.get("max_model_len") if served is not None else None
    adapters = ({d["id"]: str(d.get("root") or "") for d in entries if d.get("parent") is not None}
                if any("parent" in d for d in entries) else None)
    return context, adapters


def adapter_parent(doc, model: str | None) -> str | None:
    """The base model of `model` where `/v1/models` lists `model` as a LoRA adapter (vLLM: an
    entry whose `parent` names the base model), else None."""
    entry = next((d for d in _entries(doc) if d["id"] == model), None) if model is not None else None
    parent = entry.get("parent") if entry is not None else None
    return parent if isinstance(parent, str) and parent and parent != model else None


def _adapters(value) -> dict | None:
    """A server's list of LoRA adapters: {name: path}, or ["name=path" or "path", ...]."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return dict(x.partition("=")[::2] for x in value)
    return None


MODEL_CONTEXT = Published(MODELS, "max_model_len")
"""Where an OpenAI-compatible server lists its context: every profile falls back on it, so a block
size beyond the context is refused wherever the server says its context."""


def _published(raw, where: Published, convert: str = "int"):
    """The value `raw` converts to, None when it says "not set"; bad input when it cannot be
    right, naming the value and where it came from."""
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in NOT_SET):
        return None
    try:
        return CONVERT[convert](raw)
    except Impossible as e:
        raise impossible(raw, where, str(e)) from None


def impossible(raw, where: Published, why: str) -> KvconformError:
    return KvconformError(f"the server publishes {where.field}={_raw(raw)} ({where.describe()}): {why}; a server "
                          "that publishes a setting that cannot be right cannot be judged (check the server or what "
                          "sits in front of it)")


def _raw(value) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_facts(client: OpenAIClient, profile: str, model: str | None = None) -> ServerFacts:
    """Everything the server publishes that the profile uses (its PeerProfile says where);
    a missing endpoint gives nothing (and `fallbacks` says so), a value that cannot be right and
    `--model` naming a LoRA adapter are bad input."""
    p, pages, facts = oracle.profile_of(profile), _Pages(client), ServerFacts()
    parent = adapter_parent(pages.doc(MODELS), model)
    if parent is not None:
        raise KvconformError(f"--model {model} is a LoRA adapter of {parent} (GET {MODELS} lists it with parent "
                             f"{parent!r}): pass --model {parent}; the kit's cases send the base model and each "
                             "adapter themselves, and contrast them (isolation/lora, isolation/salt-and-lora)")
    for where in p.context + ((MODEL_CONTEXT,) if MODEL_CONTEXT not in p.context else ()):
        raw = _models(pages.doc(MODELS), model)[0] if where.path == MODELS else pages.raw(where)
        context = _published(raw, where)
        if context == 0:
            raise impossible(raw, where, "a context of 0 tokens holds no prompt")
        if context is not None:
            facts.context, facts.context_source = context, where.describe()
            break
    if p.adapters is not None:
        facts.adapters = (_models(pages.doc(MODELS), model)[1] if p.adapters.path == MODELS
                          else _adapters(pages.raw(p.adapters)))
    for name, where in p.published().items():
        raw = pages.raw(where)
        value = _published(raw, where, where.convert)
        if value is None:
            facts.fallbacks[name] = pages.missing(where)
            continue
        try:
            p.setting(name).check(value)
        except oracle.PeerProfileError as e:
            raise impossible(raw, where, str(e)) from None
        facts.settings[name], facts.sources[name] = value, where.describe()
    facts.runtime = looks_like(client)
    return facts


def looks_like(client: OpenAIClient) -> str | None:
    """Which runtime's own endpoints the server answers (a run under the wrong profile says so):
    the first profile whose `signature` fits."""
    pages = _Pages(client)
    for p in oracle.PEER_PROFILES.values():
        sig = p.signature
        if sig is None:
            continue
        if sig.text is not None:
            try:
                found = sig.text in client.get_text(sig.path, limit=1 << 16)
            except (NotOffered, ServerFailure):
                found = False
        else:
            doc = pages.doc(sig.path)
            found = isinstance(doc, dict) and any(k in doc for k in sig.keys)
        if found:
            return p.name
    return None


GIVEN = "--peer-setting"
DEFAULT = "default"


def merge_settings(profile: str, given: dict, facts: ServerFacts) -> tuple[dict, dict]:
    """(settings, origin): the user's, then the server's, then the profile's defaults; a
    user's value that contradicts the server, or a size beyond the server's context, is bad
    input. `origin[key]`: GIVEN, the server's source, or DEFAULT."""
    for key, value in given.items():
        if key in facts.settings and facts.settings[key] != value:
            raise KvconformError(f"--peer-setting {key}={_show(value)} contradicts the server, which says "
                                 f"{key}={_show(facts.settings[key])} ({facts.sources[key]}); drop the option "
                                 "or start the server with that setting")
    try:
        settings = oracle.check_settings(profile, {**facts.settings, **given})
        oracle.simulator(profile, settings)             # a combination the profile does not define raises
    except oracle.PeerProfileError as e:
        raise KvconformError(f"--peer-setting: {e} (as the server publishes it)") from None
    origin = {k: GIVEN if k in given else facts.sources.get(k, DEFAULT) for k in settings}
    size = oracle.profile_of(profile).unit
    if size and facts.context is not None and settings[size] is not None and settings[size] > facts.context:
        where = f"--peer-setting {size}" if origin[size] == GIVEN else f"{size} ({origin[size]})"
        raise KvconformError(f"{where}={settings[size]} exceeds the server's context of {facts.context} tokens "
                             f"({facts.context_source}): no prompt could fill one {oracle.profile_of(profile).unit_name}")
    return settings, origin


def describe_settings(settings: dict, origin: dict, facts: ServerFacts) -> list:
    """One line per setting: its value and where it came from (the server's source, the user's
    --peer-setting, or the profile's default, with why the server's value was not used)."""
    out = []
    for key, value in settings.items():
        where = origin.get(key, DEFAULT)
        if where == GIVEN:
            said = "--peer-setting"
        elif where == DEFAULT:
            said = "the profile's default" + (f" ({facts.fallbacks[key]})" if key in facts.fallbacks else
                                              " (the server does not publish it)")
        else:
            said = f"published by the server ({where})"
        out.append(f"{key}={_show(value)}: {said}")
    return out


def unread_pages(facts: ServerFacts, given: dict) -> list:
    """A warning per page the profile reads settings from that could not be read, naming the
    settings that therefore took their defaults (none when the user gave them all)."""
    by_page: dict = {}
    for key, why in facts.fallbacks.items():
        if key not in given and " could not be read: " in why:
            by_page.setdefault(why, []).append(key)
    return [f"{why}: {', '.join(keys)} take the profile's default (give them with --peer-setting)"
            for why, keys in by_page.items()]


def _show(value) -> str:
    return "true" if value is True else "false" if value is False else "none" if value is None else str(value)
