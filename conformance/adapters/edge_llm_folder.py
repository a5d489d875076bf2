"""The engine description (kvconform-engine-v1) of a real engine folder: the mapper behind
`kvconform describe` (conformance/commands/describe.py).

The oracle predicts counts from an engine description (spec/engine.md); a real runtime's engine
folder holds the same facts under its own names. This module reads them from the folder's
config files, so that nobody has to transcribe them by hand (and get the pool size wrong).
Two inputs are recognized: a folder whose `config.json` is already a kvconform-engine-v1
description (written by `python -m gpu_backend build`; it is checked and written unchanged),
and a TensorRT Edge-LLM engine folder written by `llm_build`, mapped as below. The output goes
to stdout, or to FILE (never replaced without --force).

Every fact the oracle needs that is not in the folder is one line on stderr naming the fact,
the files looked in and the keys tried; the exit code is then 2, unless --allow-defaults is
given and Edge-LLM documents a default for that fact: the default is written and the line
stays (as a warning). Facts taken as Edge-LLM constants or derived from other keys are
`note:` lines and are listed under `described_from.notes` in the output.

Mapping (TensorRT Edge-LLM 0.10.0, release commit 0ce6ce258b35; file:line in that tree).
`llm_build` writes `D/config.json` = the export's runtime config plus `builder_config`
(cpp/builder/llmBuilder.cpp:1583-1604, cpp/builder/llmBuilder.h:83-103); a speculative base
writes `base_config.json` instead (llmBuilder.cpp:1593). The runtime reads it in
cpp/runtime/config/llmEngineConfig.cpp (below: llmEngineConfig).

    ours                   Edge-LLM key (default when absent)               source
    tokens_per_page        none: the constant kTOKENS_PER_PAGE = 128        cpp/common/pagedKvTypes.h:27
    max_input_len          builder_config.max_input_len (llm_build: 1024)   llmEngineConfig:379; llm_build.cpp:55
    max_kv_cache_capacity  builder_config.max_kv_cache_capacity (4096)      llmEngineConfig:380; llm_build.cpp:56
    max_batch_size         builder_config.max_batch_size (4)                llmEngineConfig:378; llm_build.cpp:59
    kv_pool_pages          builder_config.max_kv_pool_pages (resolved);     llmBuilder.h:78,92; llmEngineConfig:399
                           0 or absent: batch * ceil(capacity / 128)        pagedKvTypes.h:56
    kv_cache_dtype         kv_cache_dtype (export: fp16 unless FP8 KV)      llmEngineConfig:373; checkpoint_utils.py:770
    layer_kinds            layer_types + kv_layer_configs ("attention",     llmEngineConfig:428-522
                           "mamba" -> recurrent), else num_linear_attn_layers
                           / num_attention_layers (attention first), else
                           num_hidden_layers x attention
    num_kv_heads           num_key_value_heads                              llmEngineConfig:368
    head_dim               head_dim (else hidden_size / attention heads)    llmEngineConfig:369; llmBuilder.cpp:406-413
    recurrent              recurrent_state_num_heads / _head_dim / _size,   llmEngineConfig:617-655
                           conv_dim, conv_kernel, recurrent_state_dtype
    snapshot_slot_bytes    recurrent: layers * (heads*dim*size*b(state)     hybridSnapshotStorage.cpp:68-81,
                           + conv_dim*conv_kernel*b(conv)); partial_kv:     189-210 (in cpp/runtime/state/
                           sum over attention layers heads*dim*2*128*b(kv)  contextCache/)
    vision                 V/visual/visual.engine (or V/visual.engine),     llmInferenceRuntime.cpp:495-500;
                           model type from its config.json                  visualBuilder.cpp:163-171
    audio                  V/audio/audio_encoder.engine                     llmInferenceRuntime.cpp:495
    lora_adapters          {}: adapters are named by request files; only    llmEngineConfig:645
                           builder_config.max_lora_rank is in the folder
    deployment.spec_decode spec_decode_type: eagle3->eagle, mtp, dflash,    llmEngineConfig:110-137
                           dspark, gemma4_mtp->gemma4-mtp ("none": null)
    .action_runner         V/action/action.engine                           llmInferenceRuntime.cpp:508,535
    .block_diffusion       engine_role == "dllm"                            llmEngineConfig:554
    .vision_bidirectional  use_vision_bidirectional_attention (false)       llmEngineConfig:613

    tokenizer              the folder's tokenizer.json / tokenizer_config.json  llmBuilder.cpp:1700-1735;
                           as an hf profile (tokenizers-raw), vocab_size and    tokenizer.cpp:80-168, 467-468
                           eos_token_id from them (edge_llm_tokenizer.py)
    vision.counter         edge-llm/qwen-vl or edge-llm/internvl, settings      qwenViTRunner.cpp:66-175;
                           from visual/config.json, preprocessor_config.json    internViTRunner.cpp:76-99

Audio input is defined for bytes-v1 only, so an audio encoder is noted, not described; the
encoder's own model type is kept beside the counter (`edge_llm_model_type`). spec/engine.md
section 4 has the full account.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from .. import KvconformError
from ..cases import schemas
from ..judge import oracle
from ..judge.oracle import MAX_LAYERS, MAX_POOL_PAGES
from .edge_llm_tokenizer import image_counter, tokenizer_facts

TOKENS_PER_PAGE = 128        # kTOKENS_PER_PAGE, cpp/common/pagedKvTypes.h:27
OUR_FORMAT = "kvconform-engine-v1"
SPEC_DECODE = {"none": None, "eagle3": "eagle", "mtp": "mtp", "dflash": "dflash", "dspark": "dspark",
               "gemma4_mtp": "gemma4-mtp"}          # llmEngineConfig.cpp:110-137
DTYPE_BYTES = {"fp16": 2, "fp8": 1, "int8": 1, "bf16": 2, "fp32": 4}   # llmEngineConfig.cpp:74-98
LLM_BUILD = "examples/llm/llm_build.cpp"
_ABSENT = object()


# -- findings ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Default:
    """A value Edge-LLM documents for a fact its folder does not state, and where it says so."""
    value: object
    source: str


class Findings:
    """What describing a folder turned up besides values: missing or unusable facts (errors),
    documented defaults written under --allow-defaults (warnings), and constants or derivations
    (notes). Errors are collected, not raised, so that one run names every missing fact."""

    def __init__(self, allow_defaults: bool):
        self.allow_defaults = allow_defaults
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.notes: list[str] = []

    def missing(self, fact: str, files: list[str], keys, default: Default | None = None):
        """One line for a fact no key gave; the default's value when --allow-defaults permits."""
        where = f"looked in {', '.join(files)} for {', '.join(keys)}"
        if default is not None and self.allow_defaults:
            self.warnings.append(f"missing {fact}: {where}; wrote the documented default "
                                 f"{json.dumps(default.value)} ({default.source})")
            return default.value
        hint = (f"Edge-LLM's documented default {json.dumps(default.value)} ({default.source}) is written "
                "only with --allow-defaults" if default is not None else "no documented default")
        self.errors.append(f"missing {fact}: {where}; {hint}")
        return None

    def invalid(self, fact: str, file: str, key: str, message: str):
        self.errors.append(f"{fact}: {file}: {key}: {message}")
        return None

    def note(self, text: str) -> None:
        self.notes.append(text)


class Config:
    """One JSON config file of a folder, read by dotted keys (`builder_config.max_batch_size`)."""

    def __init__(self, path: str, doc: dict):
        self.path, self.doc = path, doc

    def get(self, key: str, default=_ABSENT):
        node = self.doc
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def first(self, keys) -> tuple[str | None, object]:
        """The first of `keys` the file holds, and its value."""
        for key in keys:
            value = self.get(key)
            if value is not _ABSENT:
                return key, value
        return None, _ABSENT


def _integer(findings: Findings, cfg: Config, fact: str, keys, default: Default | None = None,
             minimum: int = 1):
    """An integer fact from the first key present; None (and a line) when absent or unusable."""
    key, value = cfg.first(keys)
    if key is None:
        return findings.missing(fact, [cfg.path], keys, default)
    if type(value) is not int or value < minimum:
        return findings.invalid(fact, cfg.path, key, f"must be an integer >= {minimum}, got {json.dumps(value)}")
    return value


# -- the folder ----------------------------------------------------------------------------------

def describe(engine_dir: str, multimodal_dir: str | None, findings: Findings) -> tuple[dict, list[str]]:
    """(description, files read). Raises KvconformError when the folder is no engine folder."""
    cfg = _engine_config(engine_dir)
    if cfg.get("format") == OUR_FORMAT:
        if multimodal_dir:
            raise KvconformError("--multimodal-engine-dir applies to Edge-LLM engine folders; this one holds a "
                                 f"{OUR_FORMAT} description, whose encoders are in it", cfg.path)
        return _ours(cfg, findings), [cfg.path]
    return describe_edge_llm(cfg, engine_dir, multimodal_dir, findings)


def _engine_config(engine_dir: str) -> Config:
    """The folder's main config: `config.json`, else a speculative base's `base_config.json`
    (the runtime reads one or the other, llmInferenceRuntime.cpp:179-180)."""
    if not os.path.isdir(engine_dir):
        raise KvconformError(f"--engine-dir {engine_dir}: not a directory")
    names = ("config.json", "base_config.json")
    path = next((os.path.join(engine_dir, n) for n in names if os.path.lexists(os.path.join(engine_dir, n))), None)
    if path is not None and not os.path.exists(path):
        raise KvconformError("a link that leads nowhere (dangling, or a loop)", path)
    if path is None:
        raise KvconformError("no engine config: looked for config.json (Edge-LLM llm_build or "
                             f"{OUR_FORMAT}) and base_config.json (Edge-LLM speculative base)", engine_dir)
    doc = schemas.read_json(path)
    if not isinstance(doc, dict):
        raise KvconformError("an engine config must be a JSON object", path, "$")
    cfg = Config(path, doc)
    if "format" in doc and doc["format"] != OUR_FORMAT:
        raise KvconformError(f"unknown description format {json.dumps(doc['format'])} (expected {OUR_FORMAT})",
                             path, "$.format")
    if "format" not in doc:
        _check_edge_llm(cfg)
    return cfg


def _check_edge_llm(cfg: Config) -> None:
    """Refuse a JSON file that is no Edge-LLM LLM engine config, with what it lacks."""
    markers = ("builder_config", "num_hidden_layers", "edgellm_version")
    if not any(k in cfg.doc for k in markers):
        raise KvconformError(f"neither a {OUR_FORMAT} description (no 'format') nor an Edge-LLM engine config "
                             f"(none of {', '.join(markers)})", cfg.path)
    encoder_keys = ("builder_config.max_image_tokens", "builder_config.max_time_steps")
    if any(cfg.get(key) is not _ABSENT for key in encoder_keys):
        raise KvconformError("this is an Edge-LLM encoder config (visual/audio builder); pass its parent "
                             "folder as --multimodal-engine-dir and the LLM engine folder as --engine-dir", cfg.path)


def _ours(cfg: Config, findings: Findings) -> dict:
    """A kvconform-engine-v1 description is taken as it is, once the schema and the oracle accept it."""
    schemas.check(cfg.doc, "engine", cfg.path)
    # A relative tokenizer folder names a folder beside the description; the copy is written
    # elsewhere (--output), so it carries the folder as an absolute path, resolved from the real file.
    doc = oracle.resolve_engine_paths(cfg.doc, os.path.dirname(os.path.realpath(cfg.path)))
    try:
        oracle.engine_from_config(doc)
    except oracle.InputError as e:
        raise KvconformError(e.message, cfg.path, e.path) from None
    if doc is cfg.doc:
        findings.note(f"{cfg.path} is already a {OUR_FORMAT} description; written unchanged")
    else:
        findings.note(f"{cfg.path} is already a {OUR_FORMAT} description; written with its relative tokenizer "
                      f"folder {cfg.doc['tokenizer']['files']!r} made absolute ({doc['tokenizer']['files']}), "
                      "so that the copy names it from anywhere")
    return doc


def describe_edge_llm(cfg: Config, engine_dir: str, multimodal_dir: str | None,
                      findings: Findings) -> tuple[dict, list[str]]:
    """The description of an Edge-LLM engine folder (module docstring: the mapping)."""
    _note_provenance(cfg, engine_dir, findings)
    page = _tokens_per_page(cfg, findings)
    limits = _limits(cfg, findings)
    kinds, kv_layers = _layers(cfg, findings)
    heads = _integer(findings, cfg, "num_kv_heads", ("num_key_value_heads",))
    _check_head_counts(cfg, findings, heads)
    head_dim = _head_dim(cfg, findings)
    attention = kinds is not None and "attention" in kinds
    dtype = _kv_cache_dtype(cfg, findings)
    pool = _pool_pages(cfg, findings, limits, page, attention)
    recurrent, recurrent_bytes = _recurrent(cfg, findings, kinds)
    vision, audio, action, encoder_files = _multimodal(multimodal_dir, findings)
    if not multimodal_dir:
        _note_media_hints(cfg, findings)
    deployment = _deployment(cfg, findings, action)
    _note_lora(cfg, findings)
    tokenizer = tokenizer_facts(engine_dir, cfg, findings)
    if tokenizer is not None and vision is not None and tokenizer["image_token_id"] is None:
        findings.errors.append(f"image_token_id: the tokenizer of {engine_dir} has no image token (<|image_pad|> "
                               "or <|image|>, spec/hf-tokenizer.md TOK-HF-7) for the visual engine's images")
    if audio is not None:
        findings.note("audio: null: the folder has an audio encoder, but the kit defines audio input for the "
                      "bytes-v1 tokenizer only (spec/hf-tokenizer.md); audio cases are NOT_SUPPORTED")
        audio = None
    if findings.errors:
        return {}, [cfg.path, *encoder_files]
    if kv_layers and heads is not None and head_dim is not None:
        _note_uneven_layers(kv_layers, heads, head_dim, findings)
    doc = {
        "format": OUR_FORMAT, **tokenizer, "model": _model_kind(kinds), "layer_kinds": kinds,
        **_optional_sizes(cfg),
        "num_kv_heads": heads, "head_dim": head_dim, "recurrent": recurrent, "vision": vision, "audio": audio,
        "tokens_per_page": page, **limits, "kv_pool_pages": pool, "kv_cache_dtype": dtype,
        "lora_adapters": {}, "deployment": deployment,
    }
    slots = _slot_bytes(kinds, kv_layers, dtype, page, recurrent_bytes)
    if slots:
        doc["snapshot_slot_bytes"] = slots
    doc["described_from"] = {"runtime": "TensorRT Edge-LLM", "edgellm_version": cfg.doc.get("edgellm_version"),
                             "files": [cfg.path, *encoder_files], "notes": findings.warnings + findings.notes}
    _check_result(doc, cfg.path)
    return doc, [cfg.path, *encoder_files]


def _note_provenance(cfg: Config, engine_dir: str, findings: Findings) -> None:
    """Which deployment the description is of, and which Edge-LLM wrote it, when that matters."""
    if cfg.path.endswith("base_config.json"):
        findings.note(f"described the speculative deployment of {cfg.path} (no config.json in {engine_dir})")
    elif os.path.exists(os.path.join(engine_dir, "base_config.json")):
        findings.note(f"described the deployment of {cfg.path}; base_config.json beside it (a speculative "
                      "base, used with drafting flags) is not described")
    version = cfg.doc.get("edgellm_version")
    if isinstance(version, str) and not version.startswith("0.10"):
        findings.note(f"written by Edge-LLM {version}; the keys are mapped as Edge-LLM 0.10.0 writes them")


def _tokens_per_page(cfg: Config, findings: Findings) -> int:
    """Edge-LLM fixes the page size at compile time and writes it nowhere; a key that states it wins."""
    keys = ("builder_config.tokens_per_page", "tokens_per_page")
    key, value = cfg.first(keys)
    if key is not None and type(value) is int and value >= 1:
        return value
    findings.note(f"tokens_per_page = {TOKENS_PER_PAGE}: taken as Edge-LLM's constant kTOKENS_PER_PAGE "
                  f"(cpp/common/pagedKvTypes.h:27), not read ({cfg.path} has none of {', '.join(keys)})")
    return TOKENS_PER_PAGE


def _limits(cfg: Config, findings: Findings) -> dict:
    """The builder's size limits; the runtime requires each (llmEngineConfig.cpp:378-380)."""
    facts = (("max_input_len", 1024, 55, "--maxInputLen"), ("max_kv_cache_capacity", 4096, 56, "--maxKVCacheCapacity"),
             ("max_batch_size", 4, 59, "--maxBatchSize"))
    return {fact: _integer(findings, cfg, fact, (f"builder_config.{fact}",),
                           Default(value, f"llm_build {flag} default, {LLM_BUILD}:{line}"))
            for fact, value, line, flag in facts}


def _layers(cfg: Config, findings: Findings) -> tuple[list | None, list]:
    """(layer kinds, [(kv heads, head dim)] of the attention layers), read as the runtime's
    populateLayerTypes does (llmEngineConfig.cpp:428-522); the per-layer shapes are empty
    when the folder states none."""
    layers = _integer(findings, cfg, "layer_kinds", ("num_hidden_layers",))
    if layers is None:
        return None, []
    if layers > MAX_LAYERS:
        return findings.invalid("layer_kinds", cfg.path, "num_hidden_layers",
                                f"{layers} layers is above the {MAX_LAYERS} a description can list"), []
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) != layers:
        return findings.invalid("layer_kinds", cfg.path, "layer_types",
                                f"{len(types)} entries for num_hidden_layers {layers}: the runtime routes each layer "
                                "by its entry (llmEngineConfig.cpp:428-522), so the two must agree"), []
    if "kv_layer_configs" in cfg.doc:
        return _layer_table(cfg, findings)
    if isinstance(types, list) and types and all(t in ("sliding_attention", "full_attention") for t in types):
        return ["attention"] * len(types), []
    return _layer_counts(cfg, findings, layers), []


def _layer_table(cfg: Config, findings: Findings) -> tuple[list | None, list]:
    """The canonical per-layer table: `layer_types` ("attention" / "mamba") with `kv_layer_configs`."""
    types, configs = cfg.get("layer_types"), cfg.doc["kv_layer_configs"]
    if not (isinstance(types, list) and isinstance(configs, list) and len(types) == len(configs) and types):
        return findings.invalid("layer_kinds", cfg.path, "layer_types",
                                "kv_layer_configs needs a non-empty layer_types list of the same length"), []
    kinds, shapes = [], []
    for i, (kind, shape) in enumerate(zip(types, configs)):
        if kind == "mamba":
            kinds.append("recurrent")
        elif kind == "attention" and isinstance(shape, dict) and _positive(shape.get("num_kv_heads")) \
                and _positive(shape.get("head_dim")):
            kinds.append("attention")
            shapes.append((shape["num_kv_heads"], shape["head_dim"]))
        else:
            return findings.invalid("layer_kinds", cfg.path, f"layer_types[{i}]",
                                    f"{json.dumps(kind)} with kv_layer_configs[{i}] = {json.dumps(shape)} is "
                                    "neither 'mamba' nor 'attention' with num_kv_heads and head_dim"), []
    return kinds, shapes


def _layer_counts(cfg: Config, findings: Findings, layers: int) -> list | None:
    """No per-layer table: counts only, attention layers first (the runtime's own fallback)."""
    linear = cfg.get("num_linear_attn_layers", 0)
    if type(linear) is not int or linear < 0:
        return findings.invalid("layer_kinds", cfg.path, "num_linear_attn_layers",
                                f"must be an integer >= 0, got {json.dumps(linear)}")
    if linear == 0:
        return ["attention"] * layers
    attention = cfg.get("num_attention_layers", layers)
    if type(attention) is not int or attention < 0 or attention + linear > MAX_LAYERS:
        return findings.invalid("layer_kinds", cfg.path, "num_attention_layers",
                                f"must be an integer >= 0, got {json.dumps(attention)}")
    findings.note(f"layer_kinds: {attention} attention then {linear} recurrent layers, from num_attention_layers "
                  f"and num_linear_attn_layers in {cfg.path} (no layer_types/kv_layer_configs table: the "
                  "order is the runtime's attention-first fallback, llmEngineConfig.cpp:499-510)")
    return ["attention"] * attention + ["recurrent"] * linear


def _check_head_counts(cfg: Config, findings: Findings, kv_heads: int | None) -> None:
    """Grouped-query attention: each KV head serves a whole group of query heads, so the KV heads
    divide the attention heads (an export of 64 KV heads for 32 query heads is no model)."""
    heads = cfg.get("num_attention_heads")
    if kv_heads is not None and _positive(heads) and heads % kv_heads:
        findings.invalid("num_kv_heads", cfg.path, "num_key_value_heads",
                         f"{kv_heads} does not divide num_attention_heads {heads} (grouped-query attention)")


def _positive(value) -> bool:
    return type(value) is int and value >= 1


def _head_dim(cfg: Config, findings: Findings) -> int | None:
    """`head_dim`, else what the builder used: hidden_size / num_attention_heads (llmBuilder.cpp:406-413)."""
    if "head_dim" in cfg.doc:
        return _integer(findings, cfg, "head_dim", ("head_dim",))
    hidden, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    if _positive(hidden) and _positive(heads) and hidden % heads == 0:
        findings.note(f"head_dim = {hidden // heads}: derived as hidden_size / num_attention_heads, as llm_build "
                      f"does without head_dim (cpp/builder/llmBuilder.cpp:406-413); {cfg.path} has no head_dim")
        return hidden // heads
    return findings.missing("head_dim", [cfg.path], ("head_dim", "hidden_size / num_attention_heads"))


def _kv_cache_dtype(cfg: Config, findings: Findings) -> str | None:
    """The export writes fp16 or fp8 (checkpoint_utils.py:770); the runtime parses more, which
    the description format cannot say."""
    key, value = cfg.first(("kv_cache_dtype",))
    if key is None:
        return findings.missing("kv_cache_dtype", [cfg.path], ("kv_cache_dtype",),
                                Default("fp16", "the export's value for an unquantized KV cache, "
                                                "tensorrt_edgellm/checkpoint/checkpoint_utils.py:770"))
    if value not in ("fp16", "fp8"):
        return findings.invalid("kv_cache_dtype", cfg.path, key,
                                f"{json.dumps(value)} has no {OUR_FORMAT} equivalent (fp16, fp8)")
    return value


def _pool_pages(cfg: Config, findings: Findings, limits: dict, page: int, attention: bool) -> int | None:
    """The resolved K-page count. The 0.10 builder writes the resolved value (llmBuilder.h:92);
    a recorded 0 is the build flag's 'minimum' and is resolved here the same way
    (llmBuilder.h:78). Without attention layers the pool holds nothing and is described as 0."""
    keys = ("builder_config.max_kv_pool_pages",)
    if not attention:
        findings.note("kv_pool_pages = 0: no attention layers, so no KV pages (spec/engine.md section 1; the "
                      "runtime checks the pool only with attention layers, contextCacheDeployment.cpp:49-60)")
        return 0
    batch, capacity = limits["max_batch_size"], limits["max_kv_cache_capacity"]
    minimum = batch * -(-capacity // page) if batch and capacity else None
    key, value = cfg.first(keys)
    if key is None:
        default = None if minimum is None else Default(
            minimum, f"llm_build --maxKVPoolPages default 0, resolved to max_batch_size * "
                     f"ceil(max_kv_cache_capacity / {page}): {LLM_BUILD}:57, cpp/builder/llmBuilder.h:78")
        return findings.missing("kv_pool_pages", [cfg.path], keys, default)
    if type(value) is not int or value < 0 or value > MAX_POOL_PAGES:
        return findings.invalid("kv_pool_pages", cfg.path, key, f"must be an integer in [0, {MAX_POOL_PAGES}], "
                                                                f"got {json.dumps(value)}")
    if minimum is None:
        return value
    if value == 0:
        findings.note(f"kv_pool_pages = {minimum}: derived as max_batch_size * ceil(max_kv_cache_capacity / {page}) "
                      f"= {batch} * ceil({capacity} / {page}), because {cfg.path} records the build flag 0 "
                      "(the minimum; cpp/builder/llmBuilder.h:78)")
        return minimum
    if value < minimum:
        return findings.invalid("kv_pool_pages", cfg.path, key,
                                f"{value} is below the minimum {minimum} = max_batch_size * ceil(capacity / {page}); "
                                "Edge-LLM's runtime refuses this folder (llmEngineConfig.cpp:399-408)")
    return value


def _recurrent(cfg: Config, findings: Findings, kinds: list | None) -> tuple[dict | None, int | None]:
    """(recurrent block, bytes of one recurrent snapshot slot) for models with recurrent layers.

    Edge-LLM reads these with default 0 and refuses context reuse when any is 0
    (contextCacheDeployment.cpp:81-85), so a missing one has no usable default."""
    count = (kinds or []).count("recurrent")
    if count == 0:
        return None, None
    sizes = {ours: _integer(findings, cfg, f"recurrent.{ours}", (key,)) for ours, key in (
        ("num_heads", "recurrent_state_num_heads"), ("head_dim", "recurrent_state_head_dim"),
        ("state_size", "recurrent_state_size"), ("conv_dim", "conv_dim"), ("conv_kernel", "conv_kernel"))}
    state = _state_dtype(cfg, findings, "recurrent_state_dtype")
    conv = _state_dtype(cfg, findings, "conv_state_dtype")
    if None in sizes.values() or state is None or conv is None:
        return None, None
    per_layer = (sizes["num_heads"] * sizes["head_dim"] * sizes["state_size"] * DTYPE_BYTES[state]
                 + sizes["conv_dim"] * sizes["conv_kernel"] * DTYPE_BYTES[conv])
    if state not in ("fp32", "fp16"):
        findings.note(f"recurrent: null: recurrent_state_dtype {state} has no {OUR_FORMAT} equivalent; "
                      "snapshot_slot_bytes.recurrent carries the slot size")
        return None, count * per_layer
    if conv != state:
        findings.note(f"recurrent.state_dtype = {state} while conv_state_dtype is {conv}; "
                      "snapshot_slot_bytes.recurrent carries the exact slot size")
    return {**sizes, "state_dtype": state}, count * per_layer


def _state_dtype(cfg: Config, findings: Findings, key: str) -> str | None:
    """A hybrid's state dtypes; required since the 0.7 export (llmEngineConfig.cpp:652-656)."""
    value = cfg.get(key)
    if value is _ABSENT:
        return findings.missing(f"recurrent.{key}", [cfg.path], (key,))
    if value not in DTYPE_BYTES:
        return findings.invalid(f"recurrent.{key}", cfg.path, key,
                                f"{json.dumps(value)} is not one of {', '.join(DTYPE_BYTES)}")
    return value


def _slot_bytes(kinds: list, kv_layers: list, dtype: str, page: int, recurrent_bytes: int | None) -> dict:
    """CR-HYB-1 slot sizes as Edge-LLM computes them (hybridSnapshotStorage.cpp:189-210), stated
    so that per-layer shapes and separate conv dtypes need no approximation."""
    if recurrent_bytes is None:
        return {}
    slots = {"recurrent": recurrent_bytes}
    if kv_layers:
        slots["partial_kv"] = sum(h * d * 2 * page * DTYPE_BYTES[dtype] for h, d in kv_layers)
    return slots


def _multimodal(folder: str | None, findings: Findings) -> tuple[dict | None, dict | None, bool, list[str]]:
    """(vision, audio, action runner, config files read) from the multimodal engine folder. An
    encoder exists when its engine file does, as the runtime decides (llmInferenceRuntime.cpp:478-503)."""
    if not folder:
        return None, None, False, []
    if not os.path.isdir(folder):
        raise KvconformError(f"--multimodal-engine-dir {folder}: not a directory")
    visual = _encoder(folder, (("visual", "visual.engine"), ("", "visual.engine")), findings, "vision")
    audio = _encoder(folder, (("audio", "audio_encoder.engine"),), findings, "audio")
    if visual is None and audio is None:
        raise KvconformError("no encoder engine: looked for visual/visual.engine, visual.engine and "
                             "audio/audio_encoder.engine (the runtime refuses such a folder, "
                             "llmInferenceRuntime.cpp:503)", folder)
    action = os.path.isfile(os.path.join(folder, "action", "action.engine"))
    if action:
        findings.note(f"deployment.action_runner = true: {os.path.join(folder, 'action', 'action.engine')} exists "
                      "(the runtime loads it, llmInferenceRuntime.cpp:505-518)")
    vision = None if visual is None or visual[2] is None else {**visual[2], **visual[0]}
    sound = None if audio is None else {"frame_samples": 320, "sample_rate": 16000, **audio[0]}
    files = [f for enc in (visual, audio) if enc is not None for f in enc[1]]
    return vision, sound, action, files


def _encoder(folder: str, places, findings: Findings, fact: str) -> tuple[dict, list[str], dict | None] | None:
    """({edge_llm_* details}, files read, the image counter for vision) of the first place holding
    the engine file, else None."""
    for sub, engine in places:
        where = os.path.join(folder, sub)
        if os.path.isfile(os.path.join(where, engine)):
            details, files = _encoder_details(os.path.join(where, "config.json"), findings, fact)
            counter = None
            if fact == "vision" and files:
                counter = image_counter(where, schemas.read_json(files[0]), findings)
            elif fact == "vision":
                findings.errors.append(f"missing vision.counter: no {os.path.join(where, 'config.json')}, from which "
                                       "Edge-LLM's vision runner reads its model type and image-token bounds")
            return details, files, counter
    return None


def _encoder_details(config_path: str, findings: Findings, fact: str) -> tuple[dict, list[str]]:
    """The encoder's model type and token budget from the config.json beside its engine
    (visualBuilder.cpp:163-171, visualBuilder.h:52-58; builderUtils.cpp:410-417 writes it)."""
    if not os.path.isfile(config_path):
        findings.note(f"{fact}: no {config_path}; the encoder's model type is not recorded")
        return {}, []
    cfg = Config(config_path, schemas.read_json(config_path))
    if not isinstance(cfg.doc, dict):
        raise KvconformError("an encoder config must be a JSON object", config_path, "$")
    details = {}
    key, model_type = cfg.first(("vision_config.model_type", "audio_config.model_type", "model_type"))
    if isinstance(model_type, str):
        details["edge_llm_model_type"] = model_type
    return details, [config_path]


def _note_media_hints(cfg: Config, findings: Findings) -> None:
    """A VLM's LLM engine runs text-only without its encoders; say so rather than guess them."""
    hints = [k for k in ("image_token_id", "audio_token_id") if type(cfg.get(k)) is int and cfg.get(k) >= 0]
    if _positive(cfg.get("num_deepstack_features")) or "vision_config" in cfg.doc:
        hints.append("vision_config/num_deepstack_features")
    if hints:
        findings.note(f"vision/audio: null: {cfg.path} names {', '.join(hints)}; pass --multimodal-engine-dir "
                      "to describe the encoders (without it the runtime runs text only)")


def _deployment(cfg: Config, findings: Findings, action: bool) -> dict:
    """The switches the support matrix reads (CR-SUP), with the runtime's own defaults when absent."""
    spec = cfg.get("spec_decode_type", "none")
    if not isinstance(spec, str) or spec not in SPEC_DECODE:
        findings.invalid("deployment.spec_decode", cfg.path, "spec_decode_type",
                         f"{json.dumps(spec)} is not one of {', '.join(SPEC_DECODE)}")
    role = cfg.get("engine_role", "llm")
    bidirectional = cfg.get("use_vision_bidirectional_attention", False)
    if type(bidirectional) is not bool:
        findings.invalid("deployment.vision_bidirectional", cfg.path, "use_vision_bidirectional_attention",
                         f"must be a boolean, got {json.dumps(bidirectional)}")
    return {"spec_decode": SPEC_DECODE.get(spec) if isinstance(spec, str) else None, "action_runner": action,
            "block_diffusion": role == "dllm", "vision_bidirectional": bidirectional is True}


def _note_lora(cfg: Config, findings: Findings) -> None:
    """Edge-LLM adapters are files named by request files, not part of the engine folder."""
    rank = cfg.get("builder_config.max_lora_rank", 0)
    if _positive(rank):
        findings.note(f"lora_adapters = {{}}: the engine accepts adapters of rank <= {rank} "
                      "(builder_config.max_lora_rank); request files name them (available_lora_weights)")


def _note_uneven_layers(kv_layers: list, heads: int, head_dim: int, findings: Findings) -> None:
    if any(shape != (heads, head_dim) for shape in kv_layers):
        findings.note(f"num_kv_heads/head_dim = {heads}/{head_dim} (the top-level values); kv_layer_configs "
                      "differ per layer, which snapshot_slot_bytes.partial_kv accounts for in a hybrid")


def _model_kind(kinds: list) -> str:
    if "recurrent" not in kinds:
        return "attention"
    return "recurrent" if "attention" not in kinds else "hybrid"


def _optional_sizes(cfg: Config) -> dict:
    """Sizes the oracle does not read, kept when they fit the schema (for the reader's benefit)."""
    return {k: cfg.doc[k] for k in ("hidden_size", "num_attention_heads", "intermediate_size")
            if _positive(cfg.doc.get(k))}


def _check_result(doc: dict, source: str) -> None:
    """The description must pass the schema and the oracle; a value that slipped through is bad input."""
    problems = schemas.schema_errors(doc, "engine")
    if problems:
        raise KvconformError(f"the description derived from it is invalid: {problems[0][0]}: {problems[0][1]}", source)
    try:
        oracle.engine_from_config(doc)
    except oracle.InputError as e:
        raise KvconformError(f"the description derived from it is invalid: {e.path}: {e.message}", source) from None
