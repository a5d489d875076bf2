"""What a server says about itself: its cache settings, its context length, its LoRA adapters.

The user should not have to guess a server's block size (PEER-API-5): vLLM publishes its cache
config in `/metrics` (`vllm:cache_config_info`, a label per CacheConfig field) and its models,
adapters and `max_model_len` in `/v1/models`; SGLang its server arguments in
`/get_server_info`; llama.cpp its slots and context in `/props`. What the server publishes is
used where the user gave nothing, and a `--peer-setting` that contradicts it is bad input:
judged against the wrong block size, every count of a correct server would FAIL with no hint
why. Where each profile's server publishes what is data, the profile's own (`Published` in
reference/peer_profile.py): this module reads documents, labels and fields, never a profile's name.

    facts = read_facts(client, profile, model)    # never raises for a missing endpoint
    settings, origin = merge_settings(profile, given, facts)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..judge import peer_oracle as oracle
from ..judge.peer_oracle import Published

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

    def describe(self) -> dict:
        return {"settings": self.settings, "sources": self.sources, "context": self.context,
                "adapters": None if self.adapters is None else sorted(self.adapters), "looks_like": self.runtime}


def _get(client: OpenAIClient, path: str):
    try:
        return client.get(path)
    except (NotOffered, ServerFailure):
        return None


def _int(value) -> int | None:
    if type(value) is int:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _bool(value) -> bool | None:
    if type(value) is bool:
        return value
    return {"true": True, "false": False}.get(str(value).strip().lower())


def metric_labels(text: str, metric: str) -> dict:
    """The labels of the first `metric{...}` line of a Prometheus text, or {}."""
    for match in INFO_LINE.finditer(text or ""):
        if match.group("metric") == metric:
            return dict(LABEL.findall(match.group("labels")))
    return {}


def _not(value) -> bool | None:
    flag = _bool(value)
    return None if flag is None else not flag


def _less_one(value) -> int | None:
    count = _int(value)
    return count - 1 if count and count > 1 else None


def _text(value) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _interval(value) -> int | str | None:
    """vLLM's `prefix_cache_retention_interval`: an integer, or `None` for dense retention."""
    if isinstance(value, str) and value.strip() == "None":
        return "dense"
    return _int(value)


CONVERT = {"int": _int, "bool": _bool, "not": _not, "less_one": _less_one, "text": _text, "interval": _interval}
"""How a published raw value becomes a setting's (reference/peer_profile.py `Published.convert`)."""


class _Pages:
    """What one reading GETs from the server, each path once: JSON documents and texts."""

    def __init__(self, client: OpenAIClient):
        self.client, self.docs, self.texts = client, {}, {}

    def doc(self, path: str):
        if path not in self.docs:
            self.docs[path] = _get(self.client, path)
        return self.docs[path]

    def text(self, path: str) -> str:
        if path not in self.texts:
            try:
                self.texts[path] = self.client.get_text(path)
            except (NotOffered, ServerFailure):
                self.texts[path] = ""
        return self.texts[path]

    def raw(self, where: Published):
        """The raw value a Published names (a label of a metric line, a dotted JSON field)."""
        if where.metric is not None:
            return metric_labels(self.text(where.path), where.metric).get(where.field)
        value = self.doc(where.path)
        for part in where.field.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value


def _models(doc, model: str | None) -> tuple[int | None, dict | None]:
    """(`max_model_len` of the served model, adapters) of a `/v1/models` list: vLLM lists each
    LoRA adapter with its `parent` and the `root` it was loaded from."""
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        return None, None
    entries = [d for d in data if isinstance(d, dict) and isinstance(d.get("id"), str)]
    base = [d for d in entries if d.get("parent") is None]
    served = next((d for d in base if d["id"] == model), base[0] if base else None)
    context = _int(served.get("max_model_len")) if served is not None else None
    adapters = ({d["id"]: str(d.get("root") or "") for d in entries if d.get("parent") is not None}
                if any("parent" in d for d in entries) else None)
    return context or None, adapters


def _adapters(value) -> dict | None:
    """A server's list of LoRA adapters: {name: path}, or ["name=path" or "path", ...]."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return dict(x.partition("=")[::2] for x in value)
    return None


def read_facts(client: OpenAIClient, profile: str, model: str | None = None) -> ServerFacts:
    """Everything the server publishes that the profile uses (its PeerProfile says where);
    missing endpoints give nothing."""
    p, pages, facts = oracle.profile_of(profile), _Pages(client), ServerFacts()
    for where in p.context:
        context = _models(pages.doc(MODELS), model)[0] if where.path == MODELS else _int(pages.raw(where)) or None
        if context is not None:
            facts.context = context
            break
    if p.adapters is not None:
        facts.adapters = (_models(pages.doc(MODELS), model)[1] if p.adapters.path == MODELS
                          else _adapters(pages.raw(p.adapters)))
    for name, where in p.published().items():
        value = CONVERT[where.convert](pages.raw(where))
        if value is not None:
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


def merge_settings(profile: str, given: dict, facts: ServerFacts) -> tuple[dict, dict]:
    """(settings, origin): the user's, then the server's, then the profile's defaults; a
    user's value that contradicts the server, or a size beyond the server's context, is bad
    input. `origin[key]`: "given", the server's source, or "default"."""
    for key, value in given.items():
        if key in facts.settings and facts.settings[key] != value:
            raise KvconformError(f"--peer-setting {key}={_show(value)} contradicts the server, which says "
                                 f"{key}={_show(facts.settings[key])} ({facts.sources[key]}); drop the option "
                                 "or start the server with that setting")
    try:
        settings = oracle.check_settings(profile, {**facts.settings, **given})
    except oracle.PeerProfileError as e:
        raise KvconformError(f"--peer-setting: {e} (as the server publishes it)") from None
    origin = {k: "given" if k in given else facts.sources.get(k, "default") for k in settings}
    size = oracle.profile_of(profile).unit
    if size and facts.context is not None and settings[size] > facts.context:
        raise KvconformError(f"--peer-setting {size}={settings[size]} exceeds the server's context of "
                             f"{facts.context} tokens: no prompt could fill one block")
    return settings, origin


def _show(value) -> str:
    return "true" if value is True else "false" if value is False else "none" if value is None else str(value)
