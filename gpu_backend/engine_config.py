"""An engine folder's config.json as the runtime reads it, and the device it runs on.

The sizes the runtime allocates from (page size, pool, batch, capacity, model shape) are
checked here, before anything is allocated, so a hand-written description with a missing key
or a wrong type is refused with its JSON path (exit 2) instead of failing deep inside torch;
inputs.check_engine_config checks the rest of the keys the runtime reads.
"""
import os

from .errors import BackendInputError
from .inputs import check_engine_config, read_json_file

_CONFIG_KEYS = {"format": str, "model": str, "layer_kinds": list, "tokens_per_page": int,
                "max_input_len": int, "max_kv_cache_capacity": int, "max_batch_size": int, "kv_pool_pages": int,
                "kv_cache_dtype": str, "num_kv_heads": int, "head_dim": int, "hidden_size": int,
                "num_attention_heads": int, "intermediate_size": int, "tie_embeddings": bool}


def resolve_device(device: str) -> "torch.device":
    import torch                        # here, not at the top: a refused input never loads torch
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise BackendInputError("--device", "cuda was requested but no CUDA device is available")
    if device not in ("cpu", "cuda"):
        raise BackendInputError("--device", f"expected auto, cpu or cuda, got {device!r}")
    return torch.device(device)


def load_engine_config(engine_dir) -> dict:
    """config.json of `engine_dir`, checked, with the defaults of its optional keys filled in."""
    path = os.path.join(engine_dir, "config.json")
    if not os.path.lexists(path):
        raise BackendInputError("$", "no engine here (config.json is missing)", file=path)
    cfg = read_json_file(path, "a JSON engine config")
    if not isinstance(cfg, dict):
        raise BackendInputError("$", "expected a JSON object", file=path)
    for key, typ in _CONFIG_KEYS.items():
        if type(cfg.get(key)) is not typ:
            raise BackendInputError(f"$.{key}", f"missing or not a {typ.__name__}", file=path)
    if type(cfg.get("tokenizer")) not in (str, dict):
        raise BackendInputError("$.tokenizer", "missing or not a str", file=path)
    hf = isinstance(cfg["tokenizer"], dict) and cfg["tokenizer"].get("profile") == "hf"
    if cfg["format"] != "kvconform-engine-v1" or (cfg["tokenizer"] != "bytes-v1" and not hf):
        raise BackendInputError("$.format", "not a kvconform-engine-v1 engine with the bytes-v1 tokenizer"
                                            " or an hf tokenizer profile", file=path)
    if not cfg["layer_kinds"] or any(k not in ("attention", "recurrent") for k in cfg["layer_kinds"]):
        raise BackendInputError("$.layer_kinds", "expected a non-empty list of attention / recurrent", file=path)
    if "recurrent" in cfg["layer_kinds"] and not isinstance(cfg.get("recurrent"), dict):
        raise BackendInputError("$.recurrent", "recurrent layers need the recurrent block", file=path)
    for key in ("tokens_per_page", "max_input_len", "max_kv_cache_capacity", "max_batch_size", "num_kv_heads",
                "head_dim", "hidden_size", "num_attention_heads", "intermediate_size"):
        if cfg[key] < 1:
            raise BackendInputError(f"$.{key}", f"must be at least 1, got {cfg[key]}", file=path)
    if cfg["kv_pool_pages"] < 0:
        raise BackendInputError("$.kv_pool_pages", "must be at least 0", file=path)
    if cfg["kv_cache_dtype"] not in ("fp16", "fp8"):
        raise BackendInputError("$.kv_cache_dtype", "expected fp16 or fp8", file=path)
    check_engine_config(cfg, path, hf=hf)
    cfg.setdefault("rope_theta", 10000.0)
    cfg.setdefault("deployment", {})
    cfg.setdefault("lora_adapters", {})
    return cfg


def deployment_kind(cfg) -> str:
    """vanilla (attention only), recurrent (no attention) or hybrid: what the cache plans for."""
    kinds = set(cfg["layer_kinds"])
    return "vanilla" if kinds == {"attention"} else "recurrent" if kinds == {"recurrent"} else "hybrid"
