"""Reading the JSON files a user hands the backend (request files, config.json) strictly.

- `read_json_file`: RFC 8259 JSON only. Python's json module also accepts NaN, Infinity and
  numbers that overflow a double to infinity; a NaN passes every range check (all comparisons
  with it are false) and an infinite temperature turns sampling into NaN, so they are refused
  here, where the file is read. A key repeated in one object is refused too (Python keeps
  the last value silently, another reader may keep the first), naming the object's JSON path.
  A FIFO or a device is refused before it is opened (a FIFO blocks the open, /dev/zero never
  ends), and nesting too deep for the parser is an input error, not a crash.
- `check_engine_config`: the keys of config.json the runtime reads beyond the sizes that
  `engine_config.load_engine_config` checks (rope_theta, weights, the recurrent block, encoders,
  adapters, deployment switches, snapshot slot sizes), so a hand-written description with a
  wrong type is refused with its JSON path instead of failing deep inside the model.
"""
import json
import math
import os

from .errors import BackendInputError

MAX_FILE_BYTES = 32 << 20
"""The largest request file or config.json the backend reads (spec/RUNNING.md section 8), from
its size, before reading: parsing can cost some 25 times a file's size in memory."""


def _not_json(name):
    raise ValueError(f"{name} is not a JSON number")


def _finite(text):
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is out of range for a 64-bit float")
    return value


def read_json_file(path: str, what: str, missing_flag: str | None = None):
    """Parse `path` as JSON, or raise BackendInputError naming it. `missing_flag`: report a
    missing file against that flag (e.g. --inputFile) instead of the file's `$`."""
    if not os.path.isfile(path):
        if os.path.isdir(path):
            message = f"{path} is a directory, expected {what}"
        elif os.path.exists(path):
            message = f"{path} is not a regular file, expected {what}"
        else:
            message = f"no such file: {path}"
        if missing_flag:
            raise BackendInputError(missing_flag, message)
        raise BackendInputError("$", message, file=path)
    duplicated: list = []
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise BackendInputError("$", f"{size} bytes, above the {MAX_FILE_BYTES}-byte limit of an input file; "
                                         "not read", file=path)
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise BackendInputError("$", f"above the {MAX_FILE_BYTES}-byte limit of an input file", file=path)
        doc = json.loads(data.decode("utf-8"), parse_constant=_not_json, parse_float=_finite,
                         object_pairs_hook=lambda pairs: _object(pairs, duplicated))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise BackendInputError("$", f"not {what}: {e}", file=path) from None
    except RecursionError:
        raise BackendInputError("$", f"not {what}: nested too deeply", file=path) from None
    if duplicated:
        _refuse_duplicates(doc, path)
    return doc


class _Duplicated(dict):
    """An object that repeated a key: kept only until the reader finds where it is."""
    key = ""


def _object(pairs, duplicated: list):
    """json's object hook: a dict, tagged (and counted) when a key repeats; the hook cannot know
    where the object is, so `_refuse_duplicates` finds its path afterwards."""
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    dup = _Duplicated(obj)
    dup.key = _first_repeat(pairs)
    duplicated.append(dup)
    return dup


def _first_repeat(pairs):
    seen = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)


def _refuse_duplicates(doc, file: str) -> None:
    """Raise BackendInputError at the first object, in document order, that repeated a key."""
    stack = [(doc, "$")]
    while stack:                                 # iterative: documents may nest deeply
        value, where = stack.pop()
        if isinstance(value, _Duplicated):
            raise BackendInputError(where, f"duplicate key {value.key!r}", file=file)
        if isinstance(value, dict):
            stack.extend((v, f"{where}.{k}") for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(value))))


# Sizes are positions, token counts and tensor dimensions: the backend indexes them with int32
# and allocates (pages + 1) * tokens_per_page slots, so it refuses what it cannot hold.
MAX_SIZE = 2 ** 31 - 1
MAX_POOL = 2 ** 30 - 1
SIZES = ("tokens_per_page", "max_input_len", "max_kv_cache_capacity", "max_batch_size", "num_kv_heads", "head_dim",
         "hidden_size", "num_attention_heads", "intermediate_size")


def _is_int(v, lo=1):
    return type(v) is int and lo <= v <= MAX_SIZE


def check_engine_config(cfg: dict, path: str, hf: bool = False) -> None:
    """The keys the runtime and the model read, beyond those load_engine_config checks. `hf`:
    the engine names an hf tokenizer profile, whose vocabulary hf_prompt.HFText checks."""
    def fail(key, message):
        raise BackendInputError(key, message, file=path)

    for key in SIZES:
        if type(cfg.get(key)) is int and cfg[key] > MAX_SIZE:
            fail(f"$.{key}", f"{cfg[key]} is above the backend's limit {MAX_SIZE}")
    if type(cfg.get("kv_pool_pages")) is int and cfg["kv_pool_pages"] > MAX_POOL:
        fail("$.kv_pool_pages", f"{cfg['kv_pool_pages']} is above {MAX_POOL} (CR-CAP-1)")
    theta = cfg.get("rope_theta", 10000.0)
    if type(theta) not in (int, float) or not math.isfinite(theta) or theta <= 0:
        fail("$.rope_theta", f"expected a finite number > 0, got {theta!r}")
    if hf:
        if type(cfg.get("vocab_size")) is not int or not 1 <= cfg["vocab_size"] <= MAX_SIZE:
            fail("$.vocab_size", f"expected the tokenizer's id count, got {cfg.get('vocab_size')!r}")
    elif "vocab_size" in cfg and cfg["vocab_size"] != 320:
        fail("$.vocab_size", f"the bytes-v1 tokenizer has 320 tokens, got {cfg['vocab_size']!r}")
    elif "eos_token_id" in cfg and cfg["eos_token_id"] != 257:       # <|eos|>: the sampler stops on it
        fail("$.eos_token_id", f"the bytes-v1 tokenizer's <|eos|> is 257, got {cfg['eos_token_id']!r}")
    weights = cfg.get("weights", "model.safetensors")
    if not isinstance(weights, str) or not weights or "\0" in weights:
        fail("$.weights", f"expected a file name, got {weights!r}")
    rec = cfg.get("recurrent")
    if rec is not None:
        if not isinstance(rec, dict):
            fail("$.recurrent", f"expected an object or null, got {rec!r}")
        for key in ("num_heads", "head_dim", "state_size", "conv_kernel", "conv_dim"):
            if not _is_int(rec.get(key)):
                fail(f"$.recurrent.{key}", f"expected an integer >= 1, got {rec.get(key)!r}")
        if rec.get("state_dtype") not in ("fp32", "fp16"):
            fail("$.recurrent.state_dtype", f"expected fp32 or fp16, got {rec.get('state_dtype')!r}")
    for key in ("vision", "audio"):
        if cfg.get(key) is not None and not isinstance(cfg[key], dict):
            fail(f"$.{key}", f"expected an object or null, got {cfg[key]!r}")
    adapters = cfg.get("lora_adapters", {})
    if not isinstance(adapters, dict):
        fail("$.lora_adapters", f"expected an object, got {adapters!r}")
    for name, spec in adapters.items():
        where = f"$.lora_adapters[{name!r}]"
        if not isinstance(spec, dict):
            fail(where, f"expected an object, got {spec!r}")
        if "path" in spec and (not isinstance(spec["path"], str) or not spec["path"] or "\0" in spec["path"]):
            fail(f"{where}.path", f"expected a file path, got {spec['path']!r}")
    dep = cfg.get("deployment", {})
    if not isinstance(dep, dict):
        fail("$.deployment", f"expected an object, got {dep!r}")
    if dep.get("spec_decode") not in (None, "eagle", "mtp", "dflash", "dspark", "gemma4-mtp"):
        fail("$.deployment.spec_decode", f"unknown speculative method {dep.get('spec_decode')!r}")
    for key in ("action_runner", "block_diffusion", "vision_bidirectional"):
        if type(dep.get(key, False)) is not bool:
            fail(f"$.deployment.{key}", f"expected a boolean, got {dep.get(key)!r}")
    slots = cfg.get("snapshot_slot_bytes")
    if slots is not None:
        if not isinstance(slots, dict):
            fail("$.snapshot_slot_bytes", f"expected an object or null, got {slots!r}")
        for key, value in slots.items():
            if key not in ("recurrent", "partial_kv") or not _is_int(value):
                fail(f"$.snapshot_slot_bytes.{key}", f"expected recurrent / partial_kv: an integer >= 1, got {value!r}")
    if "seed" in cfg and type(cfg["seed"]) is not int:
        fail("$.seed", f"expected an integer, got {cfg['seed']!r}")
