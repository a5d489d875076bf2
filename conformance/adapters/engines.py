"""Building engines once and caching them (spec/RUNNING.md section 4 step 2).

Cases describe engines by build arguments; building one per case would dominate the run time,
so each distinct argument set is built once into `$KVCONFORM_CACHE/engines/<digest>/` (default
`.kvconform-cache/` at the repository root). The digest covers the arguments and a *salt* that
names the builder (for the bundled backend: a digest of its source files), so editing the
backend invalidates its engines. A build goes to a temporary folder that is renamed into place,
so concurrent shards never see a half-written engine; a process that wants an engine another
is building waits for that build (a lock per engine) instead of building it a second time.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]


def cache_root() -> Path:
    return Path(os.environ.get("KVCONFORM_CACHE") or ROOT / ".kvconform-cache")


def digest(obj, length: int = 16) -> str:
    """A stable short digest of a JSON-able value (sorted keys)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def source_digest(package_dir: Path) -> str:
    """A digest of every .py file of a package: changes whenever its code does."""
    h = hashlib.sha256()
    for f in sorted(Path(package_dir).rglob("*.py")):
        h.update(str(f.relative_to(package_dir)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_cached(build_args: dict, salt: str, build: Callable[[Path], None]) -> Path:
    """The engine folder for `build_args`, calling `build(folder)` only when it is not cached.

    `build` may raise (a refused build); nothing is cached then.
    """
    key = digest({"args": build_args, "salt": salt})
    folder = cache_root() / "engines" / key
    if (folder / ".built").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".lock-{key}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # a second process wanting the same engine waits for it
        if (folder / ".built").exists():
            return folder
        return _build_into(folder, key, build_args, build)


def _build_into(folder: Path, key: str, build_args: dict, build: Callable[[Path], None]) -> Path:
    tmp = folder.parent / f".tmp-{key}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        build(tmp)
        (tmp / ".built").write_text(json.dumps(build_args, sort_keys=True))
        try:
            os.rename(tmp, folder)
        except OSError:  # another process finished the same build first
            if not (folder / ".built").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def fixed_engine(engine_dir: str, description: str | None = None, bundled: bool = False):
    """The one engine of a deployment under test: its folder and the description the oracle reads
    (DIR/config.json, or `description` for a runtime whose folder holds something else).

    Refused as bad input before any case runs (spec/RUNNING.md section 2): a folder whose
    config.json is an Edge-LLM config with no description given (pointing to `kvconform
    describe`), a description that contradicts DIR/config.json, and a folder that lacks a file its
    description names (weights, adapters, tokenizer files; with `bundled`, the bundled backend's
    weights) - an engine that cannot load would only be judged ERROR case after case."""
    from ..judge.oracle import resolve_engine_paths as resolve_paths

    from ..judge import oracle
    from .base import Engine
    from .. import KvconformError
    from ..cases.schemas import read_json
    if not os.path.isdir(engine_dir):
        raise KvconformError("not an engine folder", engine_dir)
    own = os.path.join(engine_dir, "config.json")
    own_doc = _own_config(own)
    source = description or own
    if description is None and isinstance(own_doc, dict) and "format" not in own_doc:
        raise KvconformError("this is not a kvconform-engine-v1 description but (by its keys) an Edge-LLM engine "
                             f"config: describe the folder with `kvconform describe --engine-dir {engine_dir} "
                             "--output my-engine.json` and pass --engine-config my-engine.json", own)
    raw = read_json(source)
    try:
        engine = oracle.engine_of(resolve_paths(raw, os.path.dirname(os.path.realpath(source))))
        config = engine.to_config()
    except oracle.InputError as e:
        raise KvconformError(e.message, source, e.path) from None
    if description is not None and isinstance(own_doc, dict):
        _refuse_contradiction(config, own_doc, description, own)
    _check_files(raw, config, engine_dir, source, bundled)
    try:
        oracle.check_token_ids(engine)        # after the tokenizer's files are known to be there
    except oracle.InputError as e:
        raise KvconformError(e.message, source, e.path) from None
    return Engine("fixed-" + digest(config, 8), config, os.path.abspath(engine_dir), fixed=True)


def _own_config(path: str):
    """DIR/config.json as JSON, or None when there is none (a dangling or looping link is bad input)."""
    from .. import KvconformError
    from ..cases.schemas import read_json
    if not os.path.lexists(path):
        return None
    if not os.path.exists(path):
        raise KvconformError("a link that leads nowhere (dangling or a loop)", path)
    return read_json(path)


# The facts an Edge-LLM config.json states directly (spec/engine.md section 4), by description key.
EDGE_LLM_FACTS = {"max_input_len": "builder_config.max_input_len",
                  "max_kv_cache_capacity": "builder_config.max_kv_cache_capacity",
                  "max_batch_size": "builder_config.max_batch_size", "num_kv_heads": "num_key_value_heads",
                  "head_dim": "head_dim", "kv_cache_dtype": "kv_cache_dtype",
                  "tokens_per_page": "builder_config.tokens_per_page"}
OWN_FACTS = ("tokens_per_page", "max_input_len", "max_kv_cache_capacity", "max_batch_size", "kv_pool_pages",
             "kv_cache_dtype", "layer_kinds", "num_kv_heads", "head_dim", "recurrent", "deployment",
             "vocab_size", "eos_token_id", "image_token_id")


def _refuse_contradiction(config: dict, own: dict, description: str, own_path: str) -> None:
    """--engine-config describes the engine only where DIR/config.json is silent: the first fact
    on which the two disagree is bad input, naming both files."""
    from .. import KvconformError

    def refuse(fact: str, theirs, key: str):
        raise KvconformError(f"--engine-config {description} contradicts {own_path}: {fact} is {_json(config.get(fact))} "
                             f"in {description}, {key} is {_json(theirs)} in {own_path}")
    if own.get("format") is not None:
        from ..judge.oracle import resolve_engine_paths as resolve_paths

        from ..judge import oracle
        try:
            stated = oracle.engine_of(resolve_paths(own, os.path.dirname(os.path.realpath(own_path)))).to_config()
        except oracle.InputError as e:
            raise KvconformError(e.message, own_path, e.path) from None
        for fact in OWN_FACTS:
            if fact in own and stated.get(fact) != config.get(fact):
                refuse(fact, stated.get(fact), fact)
        return
    for fact, key in EDGE_LLM_FACTS.items():
        value = _dotted(own, key)
        if value is not None and value != config.get(fact):
            refuse(fact, value, key)
    layers = own.get("num_hidden_layers")
    if type(layers) is int and layers != len(config["layer_kinds"]):
        refuse("layer_kinds", layers, "num_hidden_layers")
    pool = _dotted(own, "builder_config.max_kv_pool_pages")
    if type(pool) is int and pool > 0 and pool != config["kv_pool_pages"]:
        refuse("kv_pool_pages", pool, "builder_config.max_kv_pool_pages")


def _json(value) -> str:
    return json.dumps(value)


def _dotted(doc: dict, key: str):
    for part in key.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc


def _check_files(raw: dict, config: dict, engine_dir: str, source: str, bundled: bool) -> None:
    """Every file the description names exists in the folder."""
    from .. import KvconformError
    weights = raw.get("weights") or ("model.safetensors" if bundled else None)
    if weights and not os.path.isfile(os.path.join(engine_dir, weights)):
        raise KvconformError(f"the engine folder lacks its weights {weights!r}"
                             + (" (the bundled backend loads them)" if bundled and "weights" not in raw
                                else f" (named by {source})"), engine_dir)
    adapters = {}
    for name, adapter in sorted((raw.get("lora_adapters") or {}).items()):
        path = adapter.get("path") if isinstance(adapter, dict) else None
        if isinstance(path, str) and not os.path.isfile(os.path.join(engine_dir, path)):
            raise KvconformError(f"the engine folder lacks the file {path!r} of LoRA adapter {name!r} "
                                 f"(named by {source})", engine_dir)
        if isinstance(path, str):
            adapters[name] = os.path.join(engine_dir, path)
    tok = config.get("tokenizer")
    if isinstance(tok, dict):
        for name in ("tokenizer.json", "tokenizer_config.json"):
            if not os.path.isfile(os.path.join(tok["files"], name)):
                raise KvconformError(f"the tokenizer folder {tok['files']} named by {source} has no {name} "
                                     "(TOK-HF-1)", engine_dir)
        _check_tokenizer(tok, source)
    if weights:                    # last: the files are there; now what their headers say
        _check_weights(raw, os.path.join(engine_dir, weights), adapters, source)


def _check_weights(raw: dict, weights: str, adapters: dict, source: str) -> None:
    """The weights (and LoRA adapter files) the description names, read from their headers
    against the description's sizes (spec/engine.md section 5): a folder whose config.json does not
    match its weights, or whose files are truncated, empty or not safetensors, cannot load, and
    running cases on it would only blame the backend for refusing it."""
    from ..judge.numerical_judge import LayoutError, check_weight_headers

    from .. import KvconformError
    try:
        check_weight_headers(raw, weights, adapters)
    except LayoutError as e:
        raise KvconformError(f"{e} (described by {source}): this engine folder cannot load") from None


def _check_tokenizer(tok: dict, source: str) -> None:
    """The tokenizer loads, and its chat template (untrusted code) compiles and renders a
    one-message conversation within its bounds (spec/hf-tokenizer.md TOK-HF-4)."""
    from ..judge.oracle import load_hf_tokenizer

    from .. import KvconformError
    try:
        loaded = load_hf_tokenizer(tok["files"], tok["loader"])
        if loaded.chat_template is not None:
            loaded.apply_chat_template([{"role": "user", "content": "hello"}], True,
                                       **(tok.get("chat_template_kwargs") or {}))
    except (OSError, ValueError) as e:
        raise KvconformError(str(e), source, "$.tokenizer") from None
