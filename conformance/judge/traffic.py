"""The oracle on recorded traffic (`kvconform simulate --trace`, spec/trace-replay.md): a read
trace turned into the oracle's traffic requests (tokenized where it holds text), the profiles and
pools checked, and the sweep replayed (reference/traffic.py, reference/replay.py). The command,
the trace readers and the outputs are conformance/traffic/; this is their one door to the oracle.
"""
from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import reference
from reference.replay import TrafficProfile, TrafficProfileError, replay
from reference.traffic import BlockChains

from .. import KvconformError

MAX_TOKENS = 1 << 24
"""The largest input_length or output_length a trace line may give (16,777,216 tokens): far
above any model's context, and a bound on the memory one line can ask of the replay; also the
length limit of the engine that tokenizes chat logs and request files."""
DEFAULT_LOADER = "transformers-auto"
"""How `--tokenizer` reads a tokenizer folder by default: through transformers, as vLLM and
SGLang do (spec/hf-tokenizer.md TOK-HF-2)."""


def hash_id_traffic(entries, block_size: int, ignore_outputs: bool = False, limit: int | None = None) -> list:
    """A hash-id trace's requests in replay order (SIM-ORDER-1: by timestamp, ties and traces
    without timestamps in file order), the first `limit` of them, each sampling its
    `output_length` (1 with `ignore_outputs`, SIM-GEN-1). `entries`: the checked lines
    (conformance/traffic/formats.py `Entry`: source, timestamp, output, n, hash_ids)."""
    chains = BlockChains(block_size)
    return [chains.request(i, e.source, e.n, _sampled(e.output, ignore_outputs), e.hash_ids, e.timestamp)
            for i, e in enumerate(_in_order(entries, limit))]


def chat_traffic(file: str, entries, tokenizer: str | None = None, loader: str | None = None,
                 ignore_outputs: bool = False, limit: int | None = None) -> list:
    """A chat log's requests in replay order, each line's messages rendered and tokenized as a
    one-request file would be (the chat template on, with the generation prompt)."""
    chains, engine = BlockChains(1), _engine(tokenizer, loader)
    out = []
    for i, e in enumerate(_in_order(entries, limit)):
        tokens, spans = _chat_tokens(file, e, engine)
        out.append(chains.token_request(i, e.source, tokens, _sampled(e.output, ignore_outputs), e.timestamp, spans))
    return out


def request_file_traffic(file: str, document: dict, tokenizer: str | None = None, loader: str | None = None,
                         ignore_outputs: bool = False, limit: int | None = None) -> list:
    """A request file's requests in file order, each sampling its max_generate_length."""
    engine = _engine(tokenizer, loader)
    try:
        parsed = reference.parse_request_file(document, os.path.dirname(os.path.realpath(file)), engine)
    except reference.InputError as e:
        raise KvconformError(e.message, file, e.path) from None
    chains, g = BlockChains(1), 1 if ignore_outputs else parsed.max_generate_length
    requests = parsed.requests[:limit] if limit is not None else parsed.requests
    return [chains.token_request(r.index, f"$.requests[{r.index}]", r.tokens, g, None, r.spans, r.lora_name)
            for r in requests]


def _in_order(entries, limit: int | None) -> list:
    ordered = sorted(entries, key=lambda e: e.timestamp if e.timestamp is not None else 0)
    return ordered[:limit] if limit is not None else ordered


def _sampled(output: int | None, ignore_outputs: bool) -> int:
    return 1 if ignore_outputs or output is None else output


def _engine(tokenizer: str | None, loader: str | None):
    """An engine description that tokenizes with `--tokenizer DIR` (TOK-HF-1), or None: bytes-v1."""
    if tokenizer is None:
        return None
    args = {"maxInputLen": MAX_TOKENS, "maxKVCacheCapacity": MAX_TOKENS + 1, "maxKVPoolPages": 0,
            "tokenizer": tokenizer, "tokenizerLoader": loader or DEFAULT_LOADER}
    try:
        return reference.engine_from_build_args(args, "--tokenizer")
    except reference.InputError as e:
        raise KvconformError(e.message, tokenizer) from None
    except (OSError, ValueError) as e:
        raise KvconformError(str(e), tokenizer) from None


def _chat_tokens(file: str, entry, engine):
    """A chat-log line's messages rendered and tokenized as a one-request file would be (the
    chat template on, with the generation prompt)."""
    doc = {"requests": [{"messages": entry.messages}], "max_generate_length": 1}
    try:
        parsed = reference.parse_request_file(doc, os.path.dirname(os.path.realpath(file)), engine)
    except reference.InputError as e:
        raise KvconformError(e.message, file, f"{entry.source}: {e.path.replace('$.requests[0]', '$', 1)}") from None
    request = parsed.requests[0]
    return request.tokens, request.spans


def _without_cyclic_gc(function, *args, **kwargs):
    """Run with Python's cyclic garbage collector paused (speed only, as `kvconform simulate`
    pauses it): a replay makes millions of small containers and keeps the ones its cache holds,
    and every collection would walk them all again. What a run leaves is collected after it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return function(*args, **kwargs)
    finally:
        if was_enabled:
            gc.enable()


@dataclass
class Run:
    """One replay of the sweep: a profile at a capacity (None: unbounded) and its pool in the
    profile's units."""
    profile: TrafficProfile
    capacity: int | None
    units: int | None
    capacity_tokens: int | None = None


def plan(specs: list, capacities: list, unit: str) -> list[Run]:
    """Every (profile, capacity) of the sweep, checked before anything is replayed: an unknown
    profile or setting, a bad value, or a capacity a profile cannot take is a usage error."""
    runs = []
    for name, settings, label in specs:
        try:
            profile = TrafficProfile.make(name, settings, label)
            for capacity in capacities:
                tokens = capacity * profile.page if unit == "pages" and capacity is not None else capacity
                runs.append(Run(profile, capacity, profile.pool_units(capacity, unit), tokens))
        except TrafficProfileError as e:
            raise KvconformError(f"--profile {label}: {e}") from None
    return runs


def unit_name(run: Run) -> str:
    """The pool's unit in words (SIM-CAP-1)."""
    p = run.profile
    if p.name == "llama.cpp-server":
        return f"{p.settings['slots']} slot(s)"
    if p.name == "sglang-radix":
        return "tokens"
    what = "pages" if p.edge_llm else "blocks"
    return f"{what} of {p.unit} tokens"


def replay_all(requests: list, runs: list[Run], per_request: bool = False, progress=None) -> list[dict]:
    """Replay every run on a fresh cache; one result per run (its summary, SIM-SUM-1, and with
    `per_request` each request's count)."""
    results = []
    for run in runs:
        replayer = run.profile.replayer(run.units, requests)
        summary, counts = _without_cyclic_gc(replay, requests, replayer, counts=per_request)
        del replayer
        gc.collect()            # the radix tree of sglang-radix links parents and children both ways
        result = {"profile": run.profile.name, "label": run.profile.label, "settings": run.profile.settings,
                  "capacity": run.capacity, "capacity_tokens": run.capacity_tokens, "pool": {"units": run.units, "unit": unit_name(run)},
                  **summary.as_dict()}
        if per_request:
            result["counts"] = counts
        results.append(result)
        if progress is not None:
            progress(result)
    return results
