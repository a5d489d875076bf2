"""Engine descriptions, build arguments and runtime flags (spec/engine.md).

`engine_from_build_args` turns a case's `engine` block into the description that
`python -m gpu_backend build` would write, applying the documented defaults and build errors;
`load_engine` reads a config.json (or an engine directory holding one). The oracle reads only
the keys of spec/engine.md section 2.
"""

import json
import math
import os
from dataclasses import dataclass, field, fields

from .errors import InputError
from .tokenizer import EOS, IMAGE, VOCAB_SIZE

MAX_POOL_PAGES = 2 ** 30 - 1
MAX_LAYERS = 65536      # an implementation limit of the description (layer_kinds is a list)
MAX_SIZE = 2 ** 31 - 1  # spec/RUNNING.md section 8: sizes of a description fit in a signed 32-bit integer
MAX_PARAMETERS = 2 ** 31 - 1    # spec/engine.md section 1: the weights of a built engine
MAX_WARMUP = 1000       # spec/engine.md section 3: the largest --warmup
MAX_DESCRIPTION_BYTES = 32 << 20    # spec/RUNNING.md section 8: the largest input file, checked before reading
SPEC_METHODS = ("eagle", "mtp", "dflash", "dspark", "gemma4-mtp")

BUILD_DEFAULTS = {
    "maxBatchSize": 1, "tokensPerPage": 128, "model": "attention", "numLayers": 2,
    "hiddenSize": 64, "numHeads": 4, "numKVHeads": 2, "headDim": 16, "intermediateSize": 128,
    "untiedEmbeddings": False, "stateSize": 16, "convKernel": 4, "vision": False, "audio": False,
    "loraAdapters": [], "loraRank": 4, "kvCacheDtype": "fp16", "seed": 0, "specDecode": None,
    "actionRunner": False, "blockDiffusion": False, "visionBidirectional": False,
    "tokenizer": None, "tokenizerLoader": None, "chatTemplateKwargs": None, "imageCounter": None,
    "imageCounterSettings": None, "maxDraftKVPoolPages": 0,
}
BUILD_REQUIRED = ("maxInputLen", "maxKVCacheCapacity", "maxKVPoolPages")


@dataclass
class EngineConfig:
    """What the oracle reads from an engine description (spec/engine.md section 2)."""
    tokens_per_page: int
    max_input_len: int
    max_kv_cache_capacity: int
    max_batch_size: int
    kv_pool_pages: int
    kv_cache_dtype: str
    layer_kinds: list
    num_kv_heads: int
    head_dim: int
    model: str = "attention"
    recurrent: dict | None = None
    vision: dict | None = None
    audio: dict | None = None
    lora_adapters: dict = field(default_factory=dict)
    deployment: dict = field(default_factory=dict)
    snapshot_slot_bytes: dict | None = None
    draft_kv_pool_pages: int = 0          # CR-SPEC-5: the draft KV pool of an EAGLE engine
    tokenizer: str | dict = "bytes-v1"
    vocab_size: int = VOCAB_SIZE
    eos_token_id: int = EOS
    image_token_id: int | None = IMAGE
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def hf(self) -> bool:
        """Whether the engine tokenizes with a real Hugging Face tokenizer (spec/hf-tokenizer.md)."""
        return isinstance(self.tokenizer, dict)

    def hf_tokenizer(self):
        """The engine's `hf` tokenizer (TOK-HF-1), loaded once per process (the only third-party
        code the oracle runs: it is imported here, never at import time)."""
        from .hf_tokenizer import load_hf_tokenizer
        return load_hf_tokenizer(self.tokenizer["files"], self.tokenizer["loader"])

    @property
    def attention_layers(self) -> int:
        return self.layer_kinds.count("attention")

    @property
    def recurrent_layers(self) -> int:
        return self.layer_kinds.count("recurrent")

    @property
    def kind(self) -> str:
        """"vanilla" (attention only), "recurrent" (pure recurrent) or "hybrid" (CR-HYB)."""
        if self.recurrent_layers == 0:
            return "vanilla"
        return "recurrent" if self.attention_layers == 0 else "hybrid"

    def min_pool_pages(self) -> int:
        """CR-CAP-1: every sequence of a full batch can hold its largest KV at once."""
        if self.attention_layers == 0:
            return 0
        return self.max_batch_size * math.ceil(self.max_kv_cache_capacity / self.tokens_per_page)

    def to_config(self) -> dict:
        return dict(self.raw)


@dataclass
class RuntimeFlags:
    """The runtime flags of `infer` / `kvconform simulate` (spec/engine.md section 3)."""
    enable_context_reuse: bool = False
    max_records: int = 1024
    recurrent_snapshot_bytes: int = 0
    partial_kv_snapshot_bytes: int = 0
    warmup: int = 0
    batch_size: int | None = None
    max_generate_length: int | None = None
    tp_size: int = 1
    output_hidden_states: bool = False
    dump_profile: bool = False
    semantics_profile: str = "kvconform-1"     # spec/profiles.md

    _CASE_NAMES = {
        "enableContextReuse": "enable_context_reuse", "contextCacheMaxRecords": "max_records",
        "contextCacheRecurrentSnapshotPoolBytes": "recurrent_snapshot_bytes",
        "contextCachePartialKVSnapshotPoolBytes": "partial_kv_snapshot_bytes",
        "warmup": "warmup", "batchSize": "batch_size", "maxGenerateLength": "max_generate_length",
        "tpSize": "tp_size", "outputHiddenStates": "output_hidden_states",
        "dumpProfile": "dump_profile", "poisonFreshPages": None, "semanticsProfile": "semantics_profile",
    }

    @property
    def semantics(self):
        """The semantics profile these flags select (reference/semantics.py)."""
        from .semantics import load_profile
        return load_profile(self.semantics_profile)

    @classmethod
    def from_case_runtime(cls, runtime: dict | None) -> "RuntimeFlags":
        """Map a case's `runtime` block (flag names without dashes) to flags."""
        values = {}
        for key, value in (runtime or {}).items():
            if key not in cls._CASE_NAMES:
                raise InputError(f"$._conformance.runtime.{key}", "unknown runtime flag")
            name = cls._CASE_NAMES[key]
            if name is None:
                continue            # bundled-backend only, no effect on counts
            if name == "semantics_profile":
                from .semantics import load_profile
                if not isinstance(value, str):
                    raise InputError(f"$._conformance.runtime.{key}", "must be a profile name")
                load_profile(value)                                   # InputError for an unknown name
                values[name] = value
                continue
            expected = bool if name in ("enable_context_reuse", "output_hidden_states",
                                        "dump_profile") else int
            minimum = 1 if name in ("batch_size", "max_generate_length", "tp_size") else 0
            if type(value) is not expected or (expected is int and value < minimum):
                raise InputError(f"$._conformance.runtime.{key}",
                                 f"must be {'a boolean' if expected is bool else f'an integer >= {minimum}'}")
            if name == "warmup" and value > MAX_WARMUP:
                raise InputError(f"$._conformance.runtime.{key}", f"{value} is above the maximum {MAX_WARMUP}")
            values[name] = value
        return cls(**values)


def _int(args: dict, key: str, minimum: int, where: str) -> int:
    value = args[key]
    if type(value) is not int or value < minimum:
        raise InputError(f"{where}.{key}", f"must be an integer >= {minimum}, got {value!r}")
    if value > MAX_SIZE:
        raise InputError(f"{where}.{key}", f"{value} is above {MAX_SIZE}: sizes fit in a signed 32-bit integer")
    return value


def engine_from_build_args(args: dict, where: str = "$._conformance.engine") -> EngineConfig:
    """The engine description `build` writes for these arguments (spec/engine.md section 1).

    Raises InputError on the build errors: a missing required argument, an unknown one, a pool
    below the minimum or above 2^30 - 1, a non-zero pool for a recurrent model,
    max_input_len >= max_kv_cache_capacity, inconsistent head counts, a hybrid with one layer.
    """
    if not isinstance(args, dict):
        raise InputError(where, "build arguments must be an object")
    for key in args:
        if key not in BUILD_DEFAULTS and key not in BUILD_REQUIRED:
            raise InputError(f"{where}.{key}", "unknown build argument")
    for key in BUILD_REQUIRED:
        if key not in args:
            raise InputError(where, f"missing required build argument {key}")
    a = {**BUILD_DEFAULTS, **args}
    max_input = _int(a, "maxInputLen", 1, where)
    capacity = _int(a, "maxKVCacheCapacity", 1, where)
    pool = _int(a, "maxKVPoolPages", 0, where)
    draft_pool = _int(a, "maxDraftKVPoolPages", 0, where)
    for key in ("maxBatchSize", "tokensPerPage", "numLayers", "hiddenSize", "numHeads",
                "numKVHeads", "headDim", "intermediateSize", "stateSize", "convKernel", "loraRank"):
        _int(a, key, 1, where)
    if a["model"] not in ("attention", "recurrent", "hybrid"):
        raise InputError(f"{where}.model", f"unknown model kind {a['model']!r}")
    if a["kvCacheDtype"] not in ("fp16", "fp8"):
        raise InputError(f"{where}.kvCacheDtype", f"unknown KV dtype {a['kvCacheDtype']!r}")
    if a["specDecode"] not in (None, *SPEC_METHODS):
        raise InputError(f"{where}.specDecode", f"unknown speculative method {a['specDecode']!r}")
    for key in ("untiedEmbeddings", "vision", "audio", "actionRunner", "blockDiffusion",
                "visionBidirectional"):
        if type(a[key]) is not bool:
            raise InputError(f"{where}.{key}", "must be a boolean")
    adapters = a["loraAdapters"]
    if not isinstance(adapters, list) or not all(isinstance(x, str) and x for x in adapters):
        raise InputError(f"{where}.loraAdapters", "must be a list of adapter names")
    if max_input >= capacity:
        raise InputError(f"{where}.maxInputLen",
                         f"maxInputLen {max_input} must be less than maxKVCacheCapacity {capacity}")
    if a["numHeads"] % a["numKVHeads"]:
        raise InputError(f"{where}.numKVHeads",
                         f"numKVHeads {a['numKVHeads']} does not divide numHeads {a['numHeads']}")
    model, layers = a["model"], a["numLayers"]
    if layers > MAX_LAYERS:
        raise InputError(f"{where}.numLayers", f"numLayers {layers} is above the {MAX_LAYERS} layers an engine "
                                               "description can list")
    if model == "hybrid" and layers < 2:
        raise InputError(f"{where}.numLayers", "a hybrid model needs at least 2 layers")
    if model == "attention":
        kinds = ["attention"] * layers
    elif model == "recurrent":
        kinds = ["recurrent"] * layers
    else:
        kinds = ["attention" if i % 2 else "recurrent" for i in range(layers)]
    recurrent = None
    if model != "attention":
        recurrent = {"num_heads": a["numHeads"], "head_dim": a["headDim"],
                     "state_size": a["stateSize"], "conv_kernel": a["convKernel"],
                     "conv_dim": a["numHeads"] * a["headDim"], "state_dtype": "fp32"}
    P = a["tokensPerPage"]
    if model == "recurrent":
        if pool != 0:
            raise InputError(f"{where}.maxKVPoolPages", "a recurrent model has no KV pages: must be 0")
    else:
        minimum = a["maxBatchSize"] * math.ceil(capacity / P)
        pool = pool or minimum
        if not minimum <= pool <= MAX_POOL_PAGES:
            raise InputError(f"{where}.maxKVPoolPages",
                             f"pool of {pool} pages outside [{minimum}, {MAX_POOL_PAGES}] (CR-CAP-1)")
    eagle = a["specDecode"] == "eagle" and model == "attention"
    if draft_pool and not eagle:
        raise InputError(f"{where}.maxDraftKVPoolPages", "a draft KV pool needs an attention-only "
                                                         "--specDecode eagle engine (CR-SPEC-5)")
    if draft_pool > MAX_POOL_PAGES:
        raise InputError(f"{where}.maxDraftKVPoolPages", f"{draft_pool} is above {MAX_POOL_PAGES} (CR-SPEC-5)")
    config = {
        "format": "kvconform-engine-v1", "tokenizer": "bytes-v1", "vocab_size": 320,
        "model": model, "layer_kinds": kinds, "hidden_size": a["hiddenSize"],
        "num_attention_heads": a["numHeads"], "num_kv_heads": a["numKVHeads"],
        "head_dim": a["headDim"], "intermediate_size": a["intermediateSize"],
        "rope_theta": 10000.0, "tie_embeddings": not a["untiedEmbeddings"],
        "recurrent": recurrent,
        "vision": {"patch_size": 16} if a["vision"] else None,
        "audio": {"frame_samples": 320, "sample_rate": 16000} if a["audio"] else None,
        "image_token_id": 262, "audio_token_id": 263, "eos_token_id": 257,
        "tokens_per_page": P, "max_input_len": max_input, "max_kv_cache_capacity": capacity,
        "max_batch_size": a["maxBatchSize"], "kv_pool_pages": pool,
        "kv_cache_dtype": a["kvCacheDtype"],
        "lora_adapters": {name: {"rank": a["loraRank"], "path": f"lora/{name}.safetensors"}
                          for name in adapters},
        "deployment": {"spec_decode": a["specDecode"], "action_runner": a["actionRunner"],
                       "block_diffusion": a["blockDiffusion"],
                       "vision_bidirectional": a["visionBidirectional"]},
        "seed": a["seed"],
    }
    if eagle:
        config["draft_kv_pool_pages"] = draft_pool or pool          # CR-SPEC-5: 0 = the base pool's size
    if a["tokenizer"] is not None:
        from .hf_tokenizer import describe_build
        config.update(describe_build(a, where))
    count = parameter_count(config)
    if count > MAX_PARAMETERS:
        raise InputError(where, f"the engine would have {count} parameters, above the limit {MAX_PARAMETERS}")
    return engine_from_config(config)


def parameter_count(config: dict) -> int:
    """The number of weights a built engine holds (spec/engine.md section 1), from its description.

    Per engine: the embedding (and an untied output head), the final norm, the encoders; per
    layer: two norms, the SwiGLU MLP and the mixer; per LoRA adapter: rank-r A and B factors of
    the mixer projections (q, k, v, o; or the recurrence's in and out projections).
    """
    d, inter = config["hidden_size"], config["intermediate_size"]
    H, G, D = config["num_attention_heads"], config["num_kv_heads"], config["head_dim"]
    kinds = config["layer_kinds"]
    attention, recurrent = kinds.count("attention"), kinds.count("recurrent")
    embeddings = config.get("vocab_size", VOCAB_SIZE) * d * (1 if config["tie_embeddings"] else 2) + d
    layers = len(kinds) * (2 * d + 3 * inter * d) + attention * 2 * (H + G) * D * d
    adapter = attention * (4 * d + 2 * (H + G) * D)
    if recurrent:
        r = config["recurrent"]
        C, N, K, heads = r["conv_dim"], r["state_size"], r["conv_kernel"], r["num_heads"]
        layers += recurrent * ((2 * C + 2 * N + heads) * d + C * K + C + 3 * heads + d * C)
        adapter += recurrent * (2 * d + 3 * C + 2 * N + heads)
    encoders = (769 * d if config["vision"] else 0) + (321 * d if config["audio"] else 0)
    ranks = sum(spec["rank"] for spec in config["lora_adapters"].values())
    return embeddings + layers + encoders + ranks * adapter


def load_engine(path: str) -> EngineConfig:
    """Read an engine description: a config.json file, or an engine directory holding one, with
    its token ids checked against its tokenizer (`check_token_ids`)."""
    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise InputError("$", f"no engine description at {file}")
    if os.path.getsize(file) > MAX_DESCRIPTION_BYTES:
        raise InputError("$", f"{file} has {os.path.getsize(file)} bytes, more than the {MAX_DESCRIPTION_BYTES} "
                              "an input file may have (spec/RUNNING.md section 8)")
    try:
        with open(file, "rb") as f:
            config = json.loads(f.read(MAX_DESCRIPTION_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise InputError("$", f"cannot read engine description {file}: {e}") from None
    engine = engine_from_config(resolve_paths(config, os.path.dirname(os.path.realpath(file))))
    check_token_ids(engine)
    return engine


def resolve_paths(config: dict, folder: str) -> dict:
    """The description with its `hf` tokenizer folder made absolute: a relative `files` names a
    folder beside the description (an engine folder carries its tokenizer, TOK-HF-1)."""
    tok = config.get("tokenizer") if isinstance(config, dict) else None
    if isinstance(tok, dict) and isinstance(tok.get("files"), str) and not os.path.isabs(tok["files"]):
        config = dict(config, tokenizer=dict(tok, files=os.path.realpath(os.path.join(folder, tok["files"]))))
    return config


_REQUIRED_INTS = ("tokens_per_page", "max_input_len", "max_kv_cache_capacity", "max_batch_size",
                  "num_kv_heads", "head_dim")


_SIZE_KEYS = _REQUIRED_INTS + ("hidden_size", "num_attention_heads", "intermediate_size")


def _check_sizes(config: dict) -> None:
    """spec/RUNNING.md section 8: every size of a description fits in a signed 32-bit integer
    (a runtime indexes positions, pages and tensor dimensions with them; page keys encode P in
    32 bits, CR-ID-6). One limit for build, validate, simulate and infer."""
    for key in _SIZE_KEYS:
        if type(config.get(key)) is int and config[key] > MAX_SIZE:
            raise InputError(f"$.{key}", f"{config[key]} is above {MAX_SIZE}: sizes fit in a signed 32-bit integer")
    if type(config.get("kv_pool_pages")) is int and config["kv_pool_pages"] > MAX_POOL_PAGES:
        raise InputError("$.kv_pool_pages", f"{config['kv_pool_pages']} is above {MAX_POOL_PAGES} (CR-CAP-1)")
    sources = {"recurrent": config.get("recurrent"), "snapshot_slot_bytes": config.get("snapshot_slot_bytes")}
    for block, values in sources.items():
        for key, value in (values.items() if isinstance(values, dict) else ()):
            if type(value) is int and value > MAX_SIZE:
                raise InputError(f"$.{block}.{key}", f"{value} is above {MAX_SIZE}: sizes fit in a signed "
                                                     "32-bit integer")


def engine_from_config(config: dict) -> EngineConfig:
    """Check the keys the oracle reads (types and consistency) and build an EngineConfig."""
    if not isinstance(config, dict):
        raise InputError("$", "an engine description must be a JSON object")
    for key in _REQUIRED_INTS + ("kv_pool_pages", "kv_cache_dtype", "layer_kinds"):
        if key not in config:
            raise InputError("$", f"missing required key {key!r}")
    for key in _REQUIRED_INTS:
        if type(config[key]) is not int or config[key] < 1:
            raise InputError(f"$.{key}", "must be an integer >= 1")
    _check_sizes(config)
    if type(config["kv_pool_pages"]) is not int or config["kv_pool_pages"] < 0:
        raise InputError("$.kv_pool_pages", "must be an integer >= 0")
    draft = config.get("draft_kv_pool_pages", 0)
    if type(draft) is not int or not 0 <= draft <= MAX_POOL_PAGES:
        raise InputError("$.draft_kv_pool_pages", f"must be an integer in [0, {MAX_POOL_PAGES}] (CR-SPEC-5)")
    if config["kv_cache_dtype"] not in ("fp16", "fp8"):
        raise InputError("$.kv_cache_dtype", "must be fp16 or fp8")
    kinds = config["layer_kinds"]
    if not isinstance(kinds, list) or not kinds or any(k not in ("attention", "recurrent") for k in kinds):
        raise InputError("$.layer_kinds", "must be a non-empty list of 'attention' / 'recurrent'")
    recurrent = config.get("recurrent")
    slot_bytes = config.get("snapshot_slot_bytes")
    if slot_bytes is not None and not (isinstance(slot_bytes, dict) and all(
            k in ("recurrent", "partial_kv") and type(v) is int and v >= 1 for k, v in slot_bytes.items())):
        raise InputError("$.snapshot_slot_bytes", "must map 'recurrent'/'partial_kv' to integers >= 1")
    if recurrent is not None:
        for key in ("num_heads", "head_dim", "state_size", "conv_kernel", "conv_dim"):
            if not isinstance(recurrent, dict) or type(recurrent.get(key)) is not int or recurrent[key] < 1:
                raise InputError(f"$.recurrent.{key}", "must be an integer >= 1")
        if recurrent.get("state_dtype") not in ("fp32", "fp16"):
            raise InputError("$.recurrent.state_dtype", "must be fp32 or fp16")
    if "recurrent" in kinds and recurrent is None and "recurrent" not in (slot_bytes or {}):
        raise InputError("$.recurrent", "recurrent layers need a 'recurrent' block (or snapshot_slot_bytes)")
    for key in ("vision", "audio"):
        if config.get(key) is not None and not isinstance(config[key], dict):
            raise InputError(f"$.{key}", "must be an object or null")
    adapters = config.get("lora_adapters") or {}
    if not isinstance(adapters, dict):
        raise InputError("$.lora_adapters", "must be an object")
    deployment = config.get("deployment") or {}
    if not isinstance(deployment, dict):
        raise InputError("$.deployment", "must be an object")
    if deployment.get("spec_decode") not in (None, *SPEC_METHODS):
        raise InputError("$.deployment.spec_decode", "unknown speculative method")
    for key in ("action_runner", "block_diffusion", "vision_bidirectional"):
        if type(deployment.get(key, False)) is not bool:
            raise InputError(f"$.deployment.{key}", "must be a boolean")
    _check_tokenizer(config)
    if deployment.get("spec_decode") == "eagle" and "draft_kv_pool_pages" not in config:
        config = dict(config, draft_kv_pool_pages=config["kv_pool_pages"])   # CR-SPEC-5: absent = the base pool
    known = {f.name for f in fields(EngineConfig)}
    values = {k: config[k] for k in known if k in config and k != "raw"}
    values.update(recurrent=recurrent, vision=config.get("vision"), audio=config.get("audio"),
                  lora_adapters=adapters, deployment=deployment, snapshot_slot_bytes=slot_bytes,
                  model=config.get("model", "attention"), raw=config)
    return EngineConfig(**values)


def check_token_ids(engine: EngineConfig) -> None:
    """spec/engine.md section 2, "Token ids": the ids a description states must be its tokenizer's,
    or a runtime refuses it. bytes-v1's are fixed (checked by `engine_from_config`); an `hf`
    engine's are checked here, against its tokenizer (loaded: the one check that reads files).
    `vocab_size` is the tokenizer's id count (TOK-HF-9), `eos_token_id` an id below it, and
    with vision `image_token_id` the tokenizer's image token (TOK-HF-7). InputError at the key."""
    if not engine.hf:
        return
    try:
        tok = engine.hf_tokenizer()
    except (OSError, ValueError) as e:
        raise InputError("$.tokenizer.files", str(e)) from None
    count = tok.vocab_size
    if engine.vocab_size != count:
        raise InputError("$.vocab_size", f"the tokenizer has {count} ids (base vocabulary plus added tokens, "
                                         f"TOK-HF-9), the description says {engine.vocab_size!r}")
    if not 0 <= engine.eos_token_id < count:
        raise InputError("$.eos_token_id", f"must be a token id below the tokenizer's {count}, "
                                           f"the description says {engine.eos_token_id!r}")
    if engine.vision is not None and tok.image_token_id is None:
        raise InputError("$.vision", "the tokenizer has no image token (<|image_pad|> or <|image|>)")
    if engine.vision is not None and engine.image_token_id != tok.image_token_id:
        raise InputError("$.image_token_id", f"the tokenizer's image token is {tok.image_token_id!r} (TOK-HF-7), "
                                             f"the description says {engine.image_token_id!r}")


def _check_tokenizer(config: dict) -> None:
    """`tokenizer` is "bytes-v1" (spec/tokenizer.md, the default) or an `hf` profile: a folder of
    tokenizer files, a loader and optional chat-template arguments (TOK-HF-1, TOK-HF-2). An `hf`
    engine states its vocabulary size and its end-of-sequence and image token ids."""
    tok = config.get("tokenizer", "bytes-v1")
    if tok == "bytes-v1":
        for key, fixed in (("vocab_size", VOCAB_SIZE), ("eos_token_id", EOS)):     # spec/engine.md section 2
            if key in config and config[key] != fixed:
                raise InputError(f"$.{key}", f"the bytes-v1 tokenizer's is {fixed}, the description says "
                                             f"{config[key]!r}")
        return
    from .hf_tokenizer import LOADERS                     # a tuple: no third-party import
    if not isinstance(tok, dict) or tok.get("profile") != "hf":
        raise InputError("$.tokenizer", "must be \"bytes-v1\" or an object with profile \"hf\"")
    if not isinstance(tok.get("files"), str) or not tok["files"]:
        raise InputError("$.tokenizer.files", "must name the folder of tokenizer.json and tokenizer_config.json")
    if tok.get("loader") not in LOADERS:
        raise InputError("$.tokenizer.loader", f"must be one of {', '.join(LOADERS)}")
    if not isinstance(tok.get("chat_template_kwargs", {}), dict):
        raise InputError("$.tokenizer.chat_template_kwargs", "must be an object")
    for key in ("vocab_size", "eos_token_id"):
        if type(config.get(key)) is not int or config[key] < (1 if key == "vocab_size" else 0):
            raise InputError(f"$.{key}", "an hf engine states it as an integer")
    if config.get("vision") is not None:
        if type(config.get("image_token_id")) is not int:
            raise InputError("$.image_token_id", "an hf engine with vision states its image token id")
        from .media_tokens import COUNTERS
        if config["vision"].get("counter") not in COUNTERS:
            raise InputError("$.vision.counter", f"must be one of {', '.join(sorted(COUNTERS))} (spec/media-tokens.md)")
    if config.get("audio") is not None:
        raise InputError("$.audio", "audio input is defined for the bytes-v1 tokenizer only")

