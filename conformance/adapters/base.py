"""The adapter protocol: how the runner drives any backend (spec/RUNNING.md section 1).

An adapter provides a capability manifest, an engine for a case's build arguments, and
runtime *sessions*: one session is one runtime instance (one process, or one runtime object)
whose cache starts empty. `Session.run` sends one request file and returns what the backend
wrote. Adapters with `sessions = True` accept several request files on one instance, which the
generated tests use to check the backend after every batch.

NOT_SUPPORTED is decided here, from the manifest and the case, before anything runs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property


from .. import KvconformError
from ..cases.schemas import schema_errors
from ..judge.oracle import EngineConfig, engine_from_config
from ..judge.oracle import resolve_engine_paths as resolve_paths


@dataclass
class Engine:
    """An engine provided for a case: its description (what the oracle reads) and its folder.
    A tokenizer folder the description names relative to the engine folder (TOK-HF-1) is made
    absolute here, so whoever reads `config` finds the files. `description` is the typed
    EngineConfig the oracle reads from `config`, parsed once for everyone who judges on it."""
    key: str
    config: dict
    directory: str | None = None
    fixed: bool = False

    def __post_init__(self):
        if self.directory:
            self.config = resolve_paths(self.config, self.directory)

    @cached_property
    def description(self) -> EngineConfig:
        """The oracle's reading of `config` (raises InputError when it cannot read it)."""
        return engine_from_config(self.config)


def backend_runtime(runtime: dict, manifest: dict | None) -> dict:
    """The case's runtime flags as a backend takes them: `semanticsProfile` goes only to a
    backend that implements several profiles (a list in its manifest); one that implements a
    single profile is that profile and has no such flag (spec/RUNNING.md section 2)."""
    if "semanticsProfile" in runtime and not isinstance((manifest or {}).get("semantics_profile"), list):
        return {k: v for k, v in runtime.items() if k != "semanticsProfile"}
    return runtime


class BuildRefused(Exception):
    """The backend's build tool refused the build arguments (spec/engine.md section 1)."""


class AdapterError(Exception):
    """The kit could not drive the backend: an ERROR verdict, never a FAIL."""

    def __init__(self, message: str, stderr_tail: str = ""):
        super().__init__(message)
        self.stderr_tail = stderr_tail


@dataclass
class RunResult:
    """What one request file run produced.

    outcome: "ok" (the run happened; batches may have failed, see `failed_batches`),
    "rejected" (deployment refused, CR-SUP: no responses), "input_error" (refused as bad input,
    exit code 2), "crash" (no usable result), "timeout".
    """
    outcome: str
    responses: list | None = None
    profile: dict | None = None
    failed_batches: int | None = None
    exit_code: int | None = None
    message: str = ""
    error_path: str | None = None
    stderr_tail: str = ""
    wrote_output: bool = False
    request: dict | None = None
    """The request file as the backend received it (media and LoRA paths absolute)."""
    files: dict = field(default_factory=dict)
    """Files of the invocation on disk, by role ("request", "output", "profile", "stderr"), and
    its command line under "command": the evidence kept beside a failing case's reproducer."""


class Session:
    """One runtime instance. Subclasses implement `run`; `close` frees it."""

    def run(self, request: dict, base_dir: str) -> RunResult:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Adapter:
    """Base of every adapter. Subclasses set `name` and implement the three methods."""
    name = "adapter"
    sessions = False
    """True when one Session accepts several request files (its cache persists between them)."""

    def capabilities(self) -> dict:
        raise NotImplementedError

    def engine(self, build_args: dict) -> Engine:
        """The engine for these build arguments; BuildRefused when the build tool refuses."""
        raise NotImplementedError

    def engine_for(self, build_args: dict) -> Engine:
        """`engine`, remembered per argument set for the life of the adapter (refusals too)."""
        memo = self.__dict__.setdefault("_engines", {})
        key = json.dumps(build_args, sort_keys=True)
        if key not in memo:
            try:
                memo[key] = self.engine(build_args)
            except BuildRefused as e:
                memo[key] = e
        if isinstance(memo[key], BuildRefused):
            raise memo[key]
        return memo[key]

    def start(self, engine: Engine, runtime: dict) -> Session:
        """A fresh runtime instance on `engine` with the case's `runtime` flags (camelCase)."""
        raise NotImplementedError

    def fixed_engine(self) -> Engine | None:
        """The one engine every case runs on (a real deployment), or None when engines are built
        per case. With a fixed engine each case is materialized for it (conformance/materialize)."""
        return None

    def describe(self) -> dict:
        """Adapter settings recorded in the report (paths, timeouts, device)."""
        return {}

    def close(self) -> None:
        pass


def check_manifest(manifest: dict, origin: str) -> dict:
    errors = schema_errors(manifest, "capabilities")
    if errors:
        path, message = errors[0]
        raise KvconformError(message, origin, path)
    return manifest


# --- requirements -----------------------------------------------------------------------------

def is_greedy(doc: dict) -> bool:
    """Greedy decoding: temperature 0 or top_k 1 (Edge-LLM defaults: temperature 1, top_k 50)."""
    return doc.get("temperature", 1.0) == 0 or doc.get("top_k", 50) == 1


def _items(doc: dict):
    for request in doc.get("requests", []) if isinstance(doc.get("requests"), list) else []:
        if not isinstance(request, dict):
            continue
        for message in request.get("messages", []) if isinstance(request.get("messages"), list) else []:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                yield from (i for i in content if isinstance(i, dict))


def requirements(doc: dict, engine_args: dict, runtime: dict) -> list[str]:
    """The capabilities a case needs: its `requires` plus what its engine, flags and requests imply."""
    meta = doc.get("_conformance", {})
    need = set(meta.get("requires", []))
    need.add(f"model:{engine_args.get('model', 'attention')}")
    need.add(f"tokens_per_page:{engine_args.get('tokensPerPage', 128)}")
    kinds = {i.get("type") for i in _items(doc)}
    if engine_args.get("vision") or "image" in kinds:
        need.add("media:image")
    if engine_args.get("audio") or "audio" in kinds:
        need.add("media:audio")
    requests = doc.get("requests") if isinstance(doc.get("requests"), list) else []
    if engine_args.get("loraAdapters") or any(isinstance(r, dict) and "lora_name" in r for r in requests):
        need.add("feature:lora")
    if any(isinstance(r, dict) and r.get("stop") for r in requests):
        need.add("feature:stop_strings")
    reuse = runtime.get("enableContextReuse", False)
    flag_features = {"warmup": "warmup", "outputHiddenStates": "hidden_state_output",
                     "poisonFreshPages": "poison_fresh_pages"}
    for flag, feature in flag_features.items():
        if runtime.get(flag):
            need.add(f"feature:{feature}")
    if (runtime.get("batchSize") or doc.get("batch_size", 1)) > 1:
        need.add("feature:batching")
    if runtime.get("tpSize", 1) > 1 and not reuse:
        need.add("feature:tp")
    if engine_args.get("kvCacheDtype") == "fp8" and not reuse:
        need.add("feature:kv_dtype_fp8")
    if engine_args.get("specDecode") == "eagle" and engine_args.get("model", "attention") == "attention":
        need.add("feature:spec_decode_eagle")
    if not is_greedy(doc) and not meta.get("negative"):
        need.add("feature:sampling")
    if engine_args.get("tokenizer"):
        need.add("tokenizer:hf")
    return sorted(need)


def missing_capabilities(need: list[str], manifest: dict) -> list[str]:
    """The requirements the manifest does not declare (spec/RUNNING.md section 1)."""
    declared = set()
    declared.update(f"model:{k}" for k in manifest.get("model_kinds", []))
    declared.update(f"media:{k}" for k in manifest.get("media", []))
    declared.update(f"feature:{k}" for k in manifest.get("features", []))
    declared.update(f"observable:{k}" for k, v in manifest.get("observables", {}).items() if v)
    pages = manifest.get("tokens_per_page", "any")
    tokenizers = manifest.get("tokenizer", "bytes-v1")
    declared.update(f"tokenizer:{t}" for t in ([tokenizers] if isinstance(tokenizers, str) else tokenizers))
    out = []
    for r in need:
        if r.startswith("tokens_per_page:"):
            if pages != "any" and int(r.split(":")[1]) not in pages:
                out.append(r)
        elif r not in declared:
            out.append(r)
    return out
