"""What a server says about itself: its cache settings, its context length, its LoRA adapters.

The user should not have to guess a server's block size (PEER-API-5): vLLM publishes its cache
config in `/metrics` (`vllm:cache_config_info`, a label per CacheConfig field) and its models,
adapters and `max_model_len` in `/v1/models`; SGLang its server arguments in
`/get_server_info`; llama.cpp its slots and context in `/props`. What the server publishes is
used where the user gave nothing, and a `--peer-setting` that contradicts it is bad input:
judged against the wrong block size, every count of a correct server would FAIL with no hint
why.

    facts = read_facts(client, profile, model)    # never raises for a missing endpoint
    settings, origin = merge_settings(profile, given, facts)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..judge import peer_oracle as oracle

from ..adapters.openai import NotOffered, OpenAIClient, ServerFailure
from .. import KvconformError

INFO_LINE = re.compile(r"^vllm:cache_config_info\{(?P<labels>.*)\}\s", re.MULTILINE)
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
SIZES = {"vllm-apc": "block_size", "sglang-radix": "page_size", "trtllm-kv-reuse": "tokens_per_block"}


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


def vllm_cache_config(text: str) -> dict:
    """The labels of the first `vllm:cache_config_info` line of a Prometheus text, or {}."""
    match = INFO_LINE.search(text or "")
    return dict(LABEL.findall(match.group("labels"))) if match else {}


def _models(client: OpenAIClient, facts: ServerFacts, model: str | None, adapters: bool = False) -> None:
    """`max_model_len` of the served model; with `adapters` (vLLM, which lists each LoRA adapter
    with its `parent` and the `root` it was loaded from) the adapters too."""
    doc = _get(client, "/v1/models")
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        return
    entries = [d for d in data if isinstance(d, dict) and isinstance(d.get("id"), str)]
    base = [d for d in entries if d.get("parent") is None]
    served = next((d for d in base if d["id"] == model), base[0] if base else None)
    if served is not None and _int(served.get("max_model_len")):
        facts.context = _int(served["max_model_len"])
    if adapters and any("parent" in d for d in entries):
        facts.adapters = {d["id"]: str(d.get("root") or "") for d in entries if d.get("parent") is not None}


def _publish(facts: ServerFacts, key: str, value, source: str) -> None:
    if value is not None:
        facts.settings[key], facts.sources[key] = value, source


def _vllm(client: OpenAIClient, facts: ServerFacts, model: str | None) -> None:
    _models(client, facts, model, adapters=True)
    try:
        labels = vllm_cache_config(client.get_text("/metrics"))
    except (NotOffered, ServerFailure):
        labels = {}
    where = "GET /metrics vllm:cache_config_info"
    _publish(facts, "block_size", _int(labels.get("block_size")), f"{where} block_size")
    blocks = _int(labels.get("num_gpu_blocks"))
    _publish(facts, "cache_blocks", blocks - 1 if blocks and blocks > 1 else None,
             f"{where} num_gpu_blocks - 1 (block 0 is the null block)")
    _publish(facts, "enable_prefix_caching", _bool(labels.get("enable_prefix_caching")),
             f"{where} enable_prefix_caching")


def _sglang(client: OpenAIClient, facts: ServerFacts, model: str | None) -> None:
    _models(client, facts, model)
    info = _get(client, "/get_server_info")
    if not isinstance(info, dict):
        return
    where = "GET /get_server_info"
    _publish(facts, "page_size", _int(info.get("page_size")), f"{where} page_size")
    disabled = _bool(info.get("disable_radix_cache"))
    _publish(facts, "radix_cache", None if disabled is None else not disabled, f"{where} disable_radix_cache")
    _publish(facts, "pool_tokens", _int(info.get("max_total_num_tokens")), f"{where} max_total_num_tokens")
    if facts.context is None and _int(info.get("context_length")):
        facts.context = _int(info["context_length"])
    loras = info.get("lora_paths")
    if isinstance(loras, dict):
        facts.adapters = {str(k): str(v) for k, v in loras.items()}
    elif isinstance(loras, list) and all(isinstance(x, str) for x in loras):
        facts.adapters = dict(x.partition("=")[::2] for x in loras)       # "name=path" or "path"


def _llama(client: OpenAIClient, facts: ServerFacts, model: str | None) -> None:
    props = _get(client, "/props")
    if not isinstance(props, dict):
        return
    _publish(facts, "slots", _int(props.get("total_slots")), "GET /props total_slots")
    settings = props.get("default_generation_settings")
    if isinstance(settings, dict) and _int(settings.get("n_ctx")):
        facts.context = _int(settings["n_ctx"])


READERS = {"vllm-apc": _vllm, "sglang-radix": _sglang, "llama.cpp-server": _llama}


def read_facts(client: OpenAIClient, profile: str, model: str | None = None) -> ServerFacts:
    """Everything the server publishes that the profile uses; missing endpoints give nothing."""
    facts = ServerFacts()
    reader = READERS.get(profile)
    if reader is not None:
        reader(client, facts, model)
    facts.settings = {k: v for k, v in facts.settings.items() if k in oracle.SETTINGS[profile]}
    facts.runtime = looks_like(client)
    return facts


def looks_like(client: OpenAIClient) -> str | None:
    """Which runtime's own endpoints the server answers (a run under the wrong profile says so)."""
    props = _get(client, "/props")
    if isinstance(props, dict) and ("total_slots" in props or "default_generation_settings" in props):
        return "llama.cpp-server"
    info = _get(client, "/get_server_info")
    if isinstance(info, dict) and ("page_size" in info or "disable_radix_cache" in info):
        return "sglang-radix"
    try:
        metrics = client.get_text("/metrics", limit=1 << 16)
    except (NotOffered, ServerFailure):
        metrics = ""
    return "vllm-apc" if "vllm:" in metrics else None


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
    size = SIZES.get(profile)
    if size and facts.context is not None and settings[size] > facts.context:
        raise KvconformError(f"--peer-setting {size}={settings[size]} exceeds the server's context of "
                             f"{facts.context} tokens: no prompt could fill one block")
    return settings, origin


def _show(value) -> str:
    return "true" if value is True else "false" if value is False else "none" if value is None else str(value)
