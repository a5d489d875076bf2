"""`python -m gpu_backend build`: engine description (spec/engine.md) and deterministic weights.

Every tensor is drawn from its own NumPy generator seeded by (seed, tensor name), so the
weights are a pure function of the seed and the build arguments, and adding an adapter or an
encoder never changes the other tensors.

Init for a *confident* model (greedy choices far from ties, varied text): token embeddings
are random directions; the last layer's SwiGLU holds one "key" neuron per text token that
fires on that token's embedding and writes the unembedding direction of a successor token
chosen by a seeded map over printable ASCII (a few successors are <|eos|>). The other
mixers (attention, recurrence) and MLPs are random and add a context-dependent push of
comparable size, so the next token depends on the context, not only on the current token.

With a Hugging Face tokenizer (`--tokenizer DIR`, hf_build.py) the same structure is laid
over a vocabulary of tens of thousands of ids: the walk runs over a seeded sample of word-like
normal tokens (the ones the sampler may emit), and the added tokens and the pieces of a newline
and a space (what prompts end with) are keyed into the walk, so generation is confident from
its first token on; the output rows of all other tokens are scaled down (OTHER_ROW_GAIN) so
that tens of thousands of random logits do not outvote the walk and the context.
"""
import json
import math
import os
import re
import shutil
import zlib

import numpy as np
from safetensors.numpy import save_file

from . import draft_head, hf_build
from .errors import BackendInputError
from .inputs import MAX_SIZE

MAX_POOL = 2 ** 30 - 1
MAX_LAYERS = 65536              # spec/engine.md section 1: a description lists every layer
# spec/engine.md section 1: the weights of a bundled engine (parameter_count) fit a signed 32-bit
# count, 8 GiB of float32. A larger build is refused before anything is allocated or written.
MAX_PARAMETERS = 2 ** 31 - 1
SPEC_METHODS = ("eagle", "mtp", "dflash", "dspark", "gemma4-mtp")
VOCAB, EOS = 320, 257
TEXT_TOKENS = [10] + list(range(32, 127))        # what the successor map walks over
KEYED_SPECIALS = list(range(256, 264))

# name: (type, default); None default = required
BUILD_ARGS = {
    "maxInputLen": (int, None), "maxKVCacheCapacity": (int, None), "maxKVPoolPages": (int, None),
    "maxBatchSize": (int, 1), "tokensPerPage": (int, 128), "model": (str, "attention"),
    "numLayers": (int, 2), "hiddenSize": (int, 64), "numHeads": (int, 4), "numKVHeads": (int, 2),
    "headDim": (int, 16), "intermediateSize": (int, 128), "untiedEmbeddings": (bool, False),
    "stateSize": (int, 16), "convKernel": (int, 4), "vision": (bool, False), "audio": (bool, False),
    "loraAdapters": (list, []), "loraRank": (int, 4), "kvCacheDtype": (str, "fp16"), "seed": (int, 0),
    "specDecode": (str, None), "actionRunner": (bool, False), "blockDiffusion": (bool, False),
    "visionBidirectional": (bool, False), "maxDraftKVPoolPages": (int, 0),
    **hf_build.BUILD_ARGS,
}
OPTIONAL = {"specDecode"} | set(hf_build.BUILD_ARGS)
WALK = 96                             # successor walk length (bytes-v1: its 96 text tokens)

# scales of the confident init (see module docstring); measured in tests/gpu_backend/test_model.py
KEY_GAIN = 1.0        # gate/up gain of a key neuron
SUCC_GAIN = 4.0       # how hard a key neuron writes its successor
FIRST_MIXER_GAIN = 0.5  # layer 0's mixer: small, so layer 0's key neurons see their token
MIXER_GAIN = 8.0      # later attention mixers: the context's push
REC_MIXER_GAIN = 20.0  # later recurrent mixers (their raw output is smaller)
ATTN_SHARPNESS = 3.0  # query/key gain: > 1 makes attention pick few positions
LOGIT_GAIN = 1.5     # final norm weight: sets the logit scale
LORA_GAIN = 0.5       # adapter delta relative to the base projection
OTHER_ROW_GAIN = 0.5  # hf vocabularies: output rows of the tokens outside the walk


def _fail(flag, message):
    raise BackendInputError(f"--{flag}", message)


def make_config(args: dict) -> dict:
    """Build arguments (case `engine` block names) -> engine description, or BackendInputError."""
    a = {}
    for k in args:
        if k not in BUILD_ARGS:
            _fail(k, "unknown build argument")
    for k, (typ, default) in BUILD_ARGS.items():
        v = args.get(k, default)
        if v is None and default is None and k not in OPTIONAL:
            _fail(k, "is required")
        if v is not None and not (type(v) is typ or (typ is list and isinstance(v, (list, tuple)))
                                  or (typ is dict and isinstance(v, dict))):
            _fail(k, f"expected {typ.__name__}, got {v!r}")
        a[k] = v
    for k in ("maxInputLen", "maxKVCacheCapacity", "maxBatchSize", "tokensPerPage", "numLayers", "hiddenSize",
              "numHeads", "numKVHeads", "headDim", "intermediateSize", "stateSize", "convKernel", "loraRank"):
        if a[k] < 1:
            _fail(k, f"must be at least 1, got {a[k]}")
    for k in ("maxKVPoolPages", "maxDraftKVPoolPages"):
        if a[k] < 0:
            _fail(k, f"must be at least 0, got {a[k]}")
    if a["tokenizer"] is None:
        for k in hf_build.BUILD_ARGS:
            if a[k] is not None:
                _fail(k, "needs --tokenizer")
    for k, (typ, _) in BUILD_ARGS.items():
        if typ is int and k != "seed" and a[k] > MAX_SIZE:
            _fail(k, f"{a[k]} is above {MAX_SIZE}: sizes fit in a signed 32-bit integer")
    if a["numLayers"] > MAX_LAYERS:
        _fail("numLayers", f"{a['numLayers']} is above the {MAX_LAYERS} layers an engine description can list")
    if a["model"] not in ("attention", "recurrent", "hybrid"):
        _fail("model", f"expected attention, recurrent or hybrid, got {a['model']!r}")
    if a["kvCacheDtype"] not in ("fp16", "fp8"):
        _fail("kvCacheDtype", f"expected fp16 or fp8, got {a['kvCacheDtype']!r}")
    if a["specDecode"] is not None and a["specDecode"] not in SPEC_METHODS:
        _fail("specDecode", f"expected one of {', '.join(SPEC_METHODS)}, got {a['specDecode']!r}")
    if a["maxInputLen"] >= a["maxKVCacheCapacity"]:
        _fail("maxInputLen", f"must be below maxKVCacheCapacity ({a['maxInputLen']} >= {a['maxKVCacheCapacity']})")
    if a["numHeads"] % a["numKVHeads"]:
        _fail("numKVHeads", f"{a['numKVHeads']} does not divide numHeads {a['numHeads']}")
    L, model = a["numLayers"], a["model"]
    if model == "hybrid" and L < 2:
        _fail("numLayers", "a hybrid model needs at least 2 layers")
    kinds = {"attention": ["attention"] * L, "recurrent": ["recurrent"] * L,
             "hybrid": ["attention" if i % 2 else "recurrent" for i in range(L)]}[model]
    names = list(dict.fromkeys(a["loraAdapters"]))          # a repeated name is one adapter
    for n in names:
        if not isinstance(n, str) or not n or not all(ch.isascii() and (ch.isalnum() or ch in "_-") for ch in n):
            _fail("loraAdapters", f"adapter name {n!r} must match [A-Za-z0-9_-]+")
    P = a["tokensPerPage"]
    minimum = a["maxBatchSize"] * math.ceil(a["maxKVCacheCapacity"] / P)
    pool = a["maxKVPoolPages"]
    if model == "recurrent":
        if pool != 0:
            _fail("maxKVPoolPages", f"a recurrent model has no KV pages: must be 0, got {pool}")
    else:
        pool = pool or minimum
        if pool < minimum:
            _fail("maxKVPoolPages", f"{pool} is below the minimum {minimum} = maxBatchSize * ceil(capacity / P) (CR-CAP-1)")
        if pool > MAX_POOL:
            _fail("maxKVPoolPages", f"{pool} exceeds {MAX_POOL} (CR-CAP-1)")
    eagle = a["specDecode"] == "eagle" and model == "attention"
    if a["maxDraftKVPoolPages"] and not eagle:
        _fail("maxDraftKVPoolPages", "a draft KV pool needs an attention-only --specDecode eagle engine (CR-SPEC-5)")
    if a["maxDraftKVPoolPages"] > MAX_POOL:
        _fail("maxDraftKVPoolPages", f"{a['maxDraftKVPoolPages']} exceeds {MAX_POOL} (CR-SPEC-5)")
    H, D = a["numHeads"], a["headDim"]
    cfg = {
        "format": "kvconform-engine-v1", "tokenizer": "bytes-v1", "vocab_size": VOCAB, "model": model,
        "layer_kinds": kinds, "hidden_size": a["hiddenSize"], "num_attention_heads": H,
        "num_kv_heads": a["numKVHeads"], "head_dim": D, "intermediate_size": a["intermediateSize"],
        "rope_theta": 10000.0, "tie_embeddings": not a["untiedEmbeddings"],
        "recurrent": None if model == "attention" else {
            "num_heads": H, "head_dim": D, "state_size": a["stateSize"], "conv_kernel": a["convKernel"],
            "conv_dim": H * D, "state_dtype": "fp32"},
        "vision": {"patch_size": 16} if a["vision"] else None,
        "audio": {"frame_samples": 320, "sample_rate": 16000} if a["audio"] else None,
        "image_token_id": 262, "audio_token_id": 263, "eos_token_id": EOS,
        "tokens_per_page": P, "max_input_len": a["maxInputLen"], "max_kv_cache_capacity": a["maxKVCacheCapacity"],
        "max_batch_size": a["maxBatchSize"], "kv_pool_pages": pool, "kv_cache_dtype": a["kvCacheDtype"],
        "lora_adapters": {n: {"rank": a["loraRank"], "path": f"lora/{n}.safetensors"} for n in names},
        "deployment": {"spec_decode": a["specDecode"], "action_runner": a["actionRunner"],
                       "block_diffusion": a["blockDiffusion"], "vision_bidirectional": a["visionBidirectional"]},
        "seed": a["seed"], "weights": "model.safetensors",
    }
    if eagle:                        # CR-SPEC-5: the draft KV pool, 0 = as large as the base pool
        cfg["draft_kv_pool_pages"] = a["maxDraftKVPoolPages"] or pool
    if a["tokenizer"] is not None:
        cfg.update(hf_build.describe(a, _fail))
    count = parameter_count(cfg)
    if count > MAX_PARAMETERS:
        flag = max(("hiddenSize", "intermediateSize", "numLayers", "numHeads", "headDim", "stateSize", "loraRank"),
                   key=lambda k: a[k] / BUILD_ARGS[k][1])      # the argument furthest above its default
        _fail(flag, f"the engine would have {count} parameters, above the limit {MAX_PARAMETERS} of a bundled engine")
    return cfg


def parameter_count(cfg: dict) -> int:
    """How many weights `init_weights` and `lora_weights` write for `cfg` (spec/engine.md section 1),
    computed from the description alone, so a build can refuse a size before allocating it."""
    d, inter = cfg["hidden_size"], cfg["intermediate_size"]
    H, G, D = cfg["num_attention_heads"], cfg["num_kv_heads"], cfg["head_dim"]
    n_att = cfg["layer_kinds"].count("attention")
    n_rec = len(cfg["layer_kinds"]) - n_att
    count = cfg.get("vocab_size", VOCAB) * d * (1 if cfg["tie_embeddings"] else 2) + d
    count += len(cfg["layer_kinds"]) * (2 * d + 3 * inter * d) + n_att * 2 * (H + G) * D * d
    lora = n_att * (4 * d + 2 * (H + G) * D)
    if n_rec:
        r = cfg["recurrent"]
        C, N, K, rH = r["conv_dim"], r["state_size"], r["conv_kernel"], r["num_heads"]
        count += n_rec * ((2 * C + 2 * N + rH) * d + C * K + C + 3 * rH + d * C)
        lora += n_rec * (2 * d + 3 * C + 2 * N + rH)
    count += (768 * d + d if cfg["vision"] else 0) + (320 * d + d if cfg["audio"] else 0)
    return count + sum(spec["rank"] for spec in cfg["lora_adapters"].values()) * lora


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, zlib.crc32(name.encode())])


def _normal(seed, name, shape, std):
    return (_rng(seed, name).standard_normal(shape) * std).astype(np.float32)


def successor_map(seed: int) -> dict:
    """token -> the token the model's key neurons push towards (a seeded walk over text)."""
    rng = _rng(seed, "successor")
    order = list(rng.permutation(TEXT_TOKENS))
    succ = {int(t): int(order[(i + 1) % len(order)]) for i, t in enumerate(order)}
    for t in rng.choice(TEXT_TOKENS, size=4, replace=False):
        succ[int(t)] = EOS
    for t in KEYED_SPECIALS:
        succ[t] = int(rng.choice(TEXT_TOKENS))
    return succ


def hf_successor_plan(seed: int, tok, eos: int, neurons: int) -> tuple[list, dict, list]:
    """(keyed tokens, successor map, spoken tokens) over an hf vocabulary: every added token and
    the pieces of a newline and a space (what prompts end with) lead into a seeded cycle through
    up to WALK word-like normal tokens, four of which exit to the EOS; the cycle takes the key
    neurons the entry tokens leave. Successors are always normal tokens or the EOS, the only
    ids the sampler emits (hf_prompt.normal_tokens); the spoken tokens keep full output rows."""
    from .hf_prompt import normal_tokens
    entry = sorted(set(tok.get_added_tokens_decoder()) | set(tok.encode("\n", add_special_tokens=False).ids)
                   | set(tok.encode(" ", add_special_tokens=False).ids))
    entry_set = set(entry)
    normal = [int(t) for t in np.flatnonzero(normal_tokens(tok)) if int(t) not in entry_set]
    words = [t for t in normal if _WORDLIKE.fullmatch(tok.id_to_token(t) or "")]
    pool = words if len(words) >= WALK else normal
    if not pool:                                 # nothing but specials to say: stop at once
        return entry, {t: eos for t in entry}, [eos]
    size = min(WALK, len(pool), max(neurons - len(entry), neurons // 2, 1))
    rng = _rng(seed, "successor")
    walk = [int(t) for t in rng.choice(pool, size=size, replace=False)]
    succ = {t: walk[(i + 1) % len(walk)] for i, t in enumerate(walk)}
    for t in rng.choice(walk, size=min(4, len(walk)), replace=False):
        succ[int(t)] = eos
    for t in entry:
        succ[t] = int(rng.choice(walk))
    return walk + entry, succ, walk + [eos]


_WORDLIKE = re.compile("[\u2581\u0120]?[A-Za-z]{2,12}")     # a Metaspace or ByteLevel word piece


def init_weights(cfg: dict, plan=None) -> dict:
    """`plan`: (keyed tokens, successor map, spoken tokens) for an hf vocabulary
    (hf_successor_plan); None: the bytes-v1 walk over printable ASCII."""
    seed, d, I, V = cfg["seed"], cfg["hidden_size"], cfg["intermediate_size"], cfg.get("vocab_size", VOCAB)
    H, G, D = cfg["num_attention_heads"], cfg["num_kv_heads"], cfg["head_dim"]
    # final norm with mixed signs: the residual's own token embedding adds ~0 to its own logit
    # (no "repeat the current token" bias under tied embeddings), while key neurons write
    # sign-matched directions that reach their successor's logit at full strength
    signs = np.where(_rng(seed, "final_norm").permutation(d) % 2 == 0, 1.0, -1.0).astype(np.float32)
    w = {"embed": _normal(seed, "embed", (V, d), 1.0), "final_norm": LOGIT_GAIN * signs}
    if not cfg["tie_embeddings"]:
        w["lm_head"] = _normal(seed, "lm_head", (V, d), 1.0)
    out_rows = w.get("lm_head", w["embed"])
    if plan is not None:
        # A large vocabulary: the model mostly speaks the walk (as bytes-v1 speaks printable
        # ASCII); the other output rows are shrunk so tens of thousands of random logits do not
        # drown the successor and the context pushes.
        quiet = np.ones(V, bool)
        quiet[[t for t in plan[2] if t < V]] = False
        out_rows[quiet] *= OTHER_ROW_GAIN
    unit = lambda v: v / np.linalg.norm(v)
    for i, kind in enumerate(cfg["layer_kinds"]):
        p = f"layers.{i}"
        mix = FIRST_MIXER_GAIN if i == 0 else MIXER_GAIN
        w[f"{p}.norm1"] = np.ones(d, np.float32)
        w[f"{p}.norm2"] = np.ones(d, np.float32)
        if kind == "attention":
            w[f"{p}.attn.wq"] = _normal(seed, f"{p}.attn.wq", (H * D, d), ATTN_SHARPNESS / math.sqrt(d))
            w[f"{p}.attn.wk"] = _normal(seed, f"{p}.attn.wk", (G * D, d), ATTN_SHARPNESS / math.sqrt(d))
            w[f"{p}.attn.wv"] = _normal(seed, f"{p}.attn.wv", (G * D, d), 1 / math.sqrt(d))
            w[f"{p}.attn.wo"] = _normal(seed, f"{p}.attn.wo", (d, H * D), mix / math.sqrt(H * D))
        else:
            r = cfg["recurrent"]
            C, N, K, rH = r["conv_dim"], r["state_size"], r["conv_kernel"], r["num_heads"]
            w[f"{p}.rec.in_proj"] = _normal(seed, f"{p}.rec.in_proj", (2 * C + 2 * N + rH, d), 1 / math.sqrt(d))
            w[f"{p}.rec.conv_w"] = _normal(seed, f"{p}.rec.conv_w", (C, K), 1 / math.sqrt(K))
            w[f"{p}.rec.conv_b"] = np.zeros(C, np.float32)
            dt = np.exp(_rng(seed, f"{p}.rec.dt").uniform(math.log(0.05), math.log(0.5), rH))
            w[f"{p}.rec.dt_bias"] = (dt + np.log(-np.expm1(-dt))).astype(np.float32)   # softplus^-1(dt)
            w[f"{p}.rec.A_log"] = np.log(_rng(seed, f"{p}.rec.A").uniform(1, 8, rH)).astype(np.float32)
            w[f"{p}.rec.D"] = np.ones(rH, np.float32)
            rmix = FIRST_MIXER_GAIN if i == 0 else REC_MIXER_GAIN
            w[f"{p}.rec.out_proj"] = _normal(seed, f"{p}.rec.out_proj", (d, C), rmix / math.sqrt(C))
        gate = _normal(seed, f"{p}.mlp.gate", (I, d), 1 / math.sqrt(d))
        up = _normal(seed, f"{p}.mlp.up", (I, d), 1 / math.sqrt(d))
        down = _normal(seed, f"{p}.mlp.down", (d, I), 0.5 / math.sqrt(I))
        if i == 0:
            if plan is None:
                succ = successor_map(seed)
                keyed = (TEXT_TOKENS + KEYED_SPECIALS)[:I]
            else:
                keyed, succ = plan[0][:I], plan[1]
            for j, t in enumerate(keyed):
                e = unit(w["embed"][t])
                gate[j] = KEY_GAIN * e
                up[j] = KEY_GAIN * e
                push = signs * unit(out_rows[succ[t]])
                down[:, j] = SUCC_GAIN * push * math.sqrt(d) / (KEY_GAIN ** 2 * d)
        w[f"{p}.mlp.gate"], w[f"{p}.mlp.up"], w[f"{p}.mlp.down"] = gate, up, down
    if cfg["vision"]:
        w["vision.proj"] = _normal(seed, "vision.proj", (d, 768), math.sqrt(12 / 768))
        w["vision.bias"] = np.zeros(d, np.float32)
    if cfg["audio"]:
        w["audio.proj"] = _normal(seed, "audio.proj", (d, 320), math.sqrt(3 / 320))
        w["audio.bias"] = np.zeros(d, np.float32)
    return w


def draft_weights(cfg: dict) -> dict:
    """The draft head's weights (draft_head.py), seeded like the base model's."""
    seed = cfg["seed"]
    out = {}
    for name, shape in draft_head.draft_shapes(cfg).items():
        if name == "draft.norm":
            out[name] = np.full(shape, LOGIT_GAIN, np.float32)
        else:
            out[name] = _normal(seed, name, shape, 1 / math.sqrt(shape[1]))
    return out


def lora_weights(cfg: dict, name: str, base: dict) -> dict:
    """Low-rank deltas B @ A on the mixer projections, about LORA_GAIN of each base matrix."""
    seed, r = cfg["seed"], cfg["lora_adapters"][name]["rank"]
    out = {}
    for i, kind in enumerate(cfg["layer_kinds"]):
        projs = ("wq", "wk", "wv", "wo") if kind == "attention" else ("in_proj", "out_proj")
        for proj in projs:
            key = f"layers.{i}.{'attn' if kind == 'attention' else 'rec'}.{proj}"
            o, n_in = base[key].shape
            scale = LORA_GAIN * float(np.sqrt((base[key] ** 2).mean()))
            out[f"{key}.lora_A"] = _normal(seed, f"lora.{name}.{key}.A", (r, n_in), 1 / math.sqrt(n_in))
            out[f"{key}.lora_B"] = _normal(seed, f"lora.{name}.{key}.B", (o, r), scale * math.sqrt(n_in / r))
    return out


def _atomic_write(path, write):
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def check_engine_dir(engine_dir, cfg: dict, tokenizer_src=None) -> None:
    """Refuse to build into a folder that holds something else (spec/engine.md section 1): only
    a missing or empty folder, or an engine built with exactly these arguments (a rebuild
    rewrites the same files; with `--tokenizer`, from the same tokenizer files), is built into
    without --force."""
    if not os.path.lexists(engine_dir):
        return
    if not os.path.isdir(engine_dir):
        _fail("engineDir", f"{engine_dir} exists and is not a directory")
    try:
        entries = os.listdir(engine_dir)
    except OSError as e:
        _fail("engineDir", f"cannot read {engine_dir}: {e.strerror or e}")
    if not entries:
        return
    existing = _existing_config(os.path.join(engine_dir, "config.json"))
    if existing == cfg and (tokenizer_src is None or hf_build.same_tokenizer(tokenizer_src, engine_dir)):
        return
    if existing == cfg:
        _fail("engineDir", f"{engine_dir} holds an engine built from other tokenizer files;"
                           " pass --force to replace it")
    if isinstance(existing, dict) and existing.get("format") == cfg["format"]:
        keys = list(cfg) + [k for k in existing if k not in cfg]
        key = next(k for k in keys if existing.get(k, _MISSING) != cfg.get(k, _MISSING))
        _fail("engineDir", f"{engine_dir} holds an engine built with other arguments ({key}: {existing.get(key)!r},"
                           f" these give {cfg.get(key)!r}); pass --force to replace it")
    _fail("engineDir", f"{engine_dir} is not empty and holds no engine (no readable config.json);"
                       " pass --force to build into it anyway")


_MISSING = object()


def _existing_config(path):
    """The config.json a folder holds, or None when there is none that parses."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError, RecursionError):
        return None


def build_engine(engine_dir, build_args: dict, *, force: bool = True) -> dict:
    """Write config.json, model.safetensors and lora/NAME.safetensors; return the config.

    Every argument is checked before anything is written. `force=False` (the command line
    without --force) refuses a folder that holds something other than this very engine; the
    Python API's callers own their folders (fixtures, caches) and replace by default. A build
    that fails part-way removes the folder it created, so no half engine is left behind.
    """
    cfg = make_config(build_args)
    source = build_args.get("tokenizer")
    if not force:
        check_engine_dir(engine_dir, cfg, source)
    created = not os.path.lexists(engine_dir)
    try:
        os.makedirs(os.path.join(engine_dir, "lora"), exist_ok=True)
    except OSError as e:
        raise BackendInputError("--engineDir", f"cannot create {engine_dir}: {e.strerror or e}") from None
    try:
        _write_engine(engine_dir, cfg, source)
    except BaseException as e:
        if created:
            shutil.rmtree(engine_dir, ignore_errors=True)
        if isinstance(e, MemoryError):
            raise BackendInputError("--engineDir", f"out of memory while writing {parameter_count(cfg)}"
                                                   " parameters") from None
        raise
    return cfg


def _write_engine(engine_dir, cfg: dict, tokenizer_src=None) -> None:
    plan = None
    if tokenizer_src is not None:
        from .hf_loader import load_tokenizer
        hf_build.copy_tokenizer(tokenizer_src, engine_dir)
        tok = load_tokenizer(os.path.join(engine_dir, hf_build.FOLDER), cfg["tokenizer"]["loader"])
        plan = hf_successor_plan(cfg["seed"], tok, cfg["eos_token_id"], cfg["intermediate_size"])
    weights = init_weights(cfg, plan)
    _atomic_write(os.path.join(engine_dir, "model.safetensors"), lambda f: save_file(weights, f))
    for name in cfg["lora_adapters"]:
        lw = lora_weights(cfg, name, weights)
        _atomic_write(os.path.join(engine_dir, "lora", f"{name}.safetensors"), lambda f: save_file(lw, f))
    if "draft_kv_pool_pages" in cfg:                      # an EAGLE engine's draft head
        dw = draft_weights(cfg)
        _atomic_write(os.path.join(engine_dir, draft_head.WEIGHTS), lambda f: save_file(dw, f))
        _atomic_write(os.path.join(engine_dir, draft_head.CONFIG),
                      lambda f: _write_json(f, draft_head.draft_config(cfg)))

    _atomic_write(os.path.join(engine_dir, "config.json"), lambda f: _write_json(f, cfg))


def _write_json(path, value) -> None:
    with open(path, "w") as fh:
        json.dump(value, fh, indent=2)
        fh.write("\n")
