"""The reference weight layout (spec/engine.md section 5): what a numerical reference reads.

An engine folder in this layout holds `config.json` (the engine description, with the model
shape keys of section 5), the weights named by its `weights` key (default `model.safetensors`),
and one safetensors file per LoRA adapter (`lora_adapters[name].path`). Tensor names and shapes
are a function of the description alone (`tensor_shapes`), so a folder is checked before any
number is trusted. Everything is read as float64.

This module never imports the bundled backend: the layout is written down in the spec, and a
reference that shared the backend's loader would share its bugs.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field

import numpy as np

PATCH_FEATURES = 3 * 16 * 16     # one 16x16 RGB patch per image placeholder (spec/tokenizer.md)
FRAME_SAMPLES = 320              # audio samples per audio placeholder
LAYOUT = "kvconform-weights-v1"


class LayoutError(Exception):
    """An engine folder that is not in the reference layout (a missing or misshapen tensor)."""


def tensor_shapes(cfg: dict) -> dict:
    """name -> shape of every tensor of `model.safetensors` (spec/engine.md section 5)."""
    d, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, G, D = cfg["num_attention_heads"], cfg["num_kv_heads"], cfg["head_dim"]
    shapes = {"embed": (vocab, d), "final_norm": (d,)}
    if not cfg.get("tie_embeddings", True):
        shapes["lm_head"] = (vocab, d)
    for i, kind in enumerate(cfg["layer_kinds"]):
        p = f"layers.{i}"
        shapes.update({f"{p}.norm1": (d,), f"{p}.norm2": (d,), f"{p}.mlp.gate": (inter, d),
                       f"{p}.mlp.up": (inter, d), f"{p}.mlp.down": (d, inter)})
        if kind == "attention":
            shapes.update({f"{p}.attn.wq": (H * D, d), f"{p}.attn.wk": (G * D, d), f"{p}.attn.wv": (G * D, d),
                           f"{p}.attn.wo": (d, H * D)})
        else:
            r = cfg["recurrent"]
            C, N, K, rH = r["conv_dim"], r["state_size"], r["conv_kernel"], r["num_heads"]
            shapes.update({f"{p}.rec.in_proj": (2 * C + 2 * N + rH, d), f"{p}.rec.conv_w": (C, K),
                           f"{p}.rec.conv_b": (C,), f"{p}.rec.dt_bias": (rH,), f"{p}.rec.A_log": (rH,),
                           f"{p}.rec.D": (rH,), f"{p}.rec.out_proj": (d, C)})
    if cfg.get("vision"):
        shapes.update({"vision.proj": (d, PATCH_FEATURES), "vision.bias": (d,)})
    if cfg.get("audio"):
        shapes.update({"audio.proj": (d, FRAME_SAMPLES), "audio.bias": (d,)})
    return shapes


def adapter_targets(cfg: dict) -> dict:
    """name -> (out, in) of every projection a LoRA adapter may carry `lora_A` / `lora_B` for."""
    out = {}
    shapes = tensor_shapes(cfg)
    for i, kind in enumerate(cfg["layer_kinds"]):
        names = ("wq", "wk", "wv", "wo") if kind == "attention" else ("in_proj", "out_proj")
        prefix = f"layers.{i}.{'attn' if kind == 'attention' else 'rec'}"
        for n in names:
            out[f"{prefix}.{n}"] = shapes[f"{prefix}.{n}"]
    return out


# --- the files' headers, read without the tensors (the kit's pre-flight check of an engine folder) ----------

MAX_HEADER_BYTES = 100_000_000
"""The safetensors library's own cap on a header (MAX_HEADER_SIZE, huggingface/safetensors
safetensors/src/tensor.rs): a longer one is refused before it is read."""

ITEM_BYTES = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}
"""The float dtypes a weights file of this layout may hold, and their sizes."""


def read_header(path: str) -> dict:
    """name -> (dtype, shape) of every tensor of the safetensors file `path`, from its header
    alone (LayoutError for anything a loader would refuse): a header length beyond the file or
    MAX_HEADER_BYTES, a header that is not a JSON object, a dtype outside ITEM_BYTES, a shape
    that does not fit its byte range, byte ranges that leave gaps, overlap or run past the end
    of the file (a truncated file). Reads at most 8 + MAX_HEADER_BYTES bytes."""
    try:
        size = os.stat(path).st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise LayoutError(f"{path}: {size} bytes, too short for a safetensors file (empty or truncated)")
            n = int.from_bytes(head, "little")
            if n > MAX_HEADER_BYTES or n > size - 8:
                raise LayoutError(f"{path}: its header claims {n} bytes, more than "
                                  + (f"the {MAX_HEADER_BYTES} a safetensors header may have" if n > MAX_HEADER_BYTES
                                     else f"the {size - 8} the file holds after the length (truncated?)"))
            text = f.read(n)
    except OSError as e:
        raise LayoutError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise LayoutError(f"{path}: its header is not JSON: not a safetensors file") from None
    if not isinstance(header, dict):
        raise LayoutError(f"{path}: its header is not a JSON object: not a safetensors file")
    data = size - 8 - n
    out, spans = {}, []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        shape = entry.get("shape") if isinstance(entry, dict) else None
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if dtype not in ITEM_BYTES:
            raise LayoutError(f"{path}: tensor {name} has dtype {dtype!r}; this layout holds "
                              f"{', '.join(ITEM_BYTES)} tensors (spec/engine.md section 5)")
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
                and isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
            raise LayoutError(f"{path}: tensor {name}: malformed shape or data_offsets in the header")
        begin, end = offsets
        if not 0 <= begin <= end or end > data:
            raise LayoutError(f"{path}: tensor {name} lies at bytes {begin}..{end} of a data section of {data} "
                              "bytes (data offsets past the end: truncated?)")
        if end - begin != math.prod(shape) * ITEM_BYTES[dtype]:
            raise LayoutError(f"{path}: tensor {name} of shape {shape} in {dtype} needs "
                              f"{math.prod(shape) * ITEM_BYTES[dtype]} bytes, its data offsets hold {end - begin}")
        out[name] = (dtype, tuple(shape))
        spans.append((begin, end, name))
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            raise LayoutError(f"{path}: tensor {name} starts at byte {begin} of the data, expected {at} "
                              "(the tensors must tile the data section)")
        at = end
    if at != data:
        raise LayoutError(f"{path}: the tensors end at byte {at} of a data section of {data} bytes")
    return out


def check_headers(cfg: dict, weights_path: str, adapters: dict | None = None) -> None:
    """The weights file (and each LoRA adapter file, `adapters` name -> path) against the
    description `cfg`, from the files' headers alone: every tensor section 5 names, in the shape
    the description's sizes give, and nothing else. LayoutError names the file and the tensor."""
    header = read_header(weights_path)
    if all(k in cfg for k in REQUIRED_KEYS):
        try:
            want = tensor_shapes(cfg)
        except (KeyError, TypeError):
            return                   # the description's own checks say what is wrong with it
        for name, shape in want.items():
            if name not in header:
                raise LayoutError(f"{weights_path}: no tensor {name}, which the description's sizes call for "
                                  f"with shape {list(shape)} (spec/engine.md section 5)")
            if header[name][1] != shape:
                raise LayoutError(f"{weights_path}: tensor {name} has shape {list(header[name][1])}, the "
                                  f"description's sizes give {list(shape)} (config.json does not match the weights)")
        extra = sorted(set(header) - set(want))
        if extra:
            raise LayoutError(f"{weights_path}: tensor {extra[0]} is not in the layout of this description "
                              "(spec/engine.md section 5)")
    for name, path in sorted((adapters or {}).items()):
        targets = adapter_targets(cfg) if all(k in cfg for k in REQUIRED_KEYS) else None
        for key, (_, shape) in read_header(path).items():
            base, _, part = key.rpartition(".")
            if targets is None:
                continue
            if base not in targets or part not in ("lora_A", "lora_B") or len(shape) != 2:
                raise LayoutError(f"{path}: tensor {key} of adapter {name} is not a lora_A / lora_B of a mixer "
                                  "projection (spec/engine.md section 5)")
            o, i = targets[base]
            if (part == "lora_A" and shape[1] != i) or (part == "lora_B" and shape[0] != o):
                raise LayoutError(f"{path}: tensor {key} of adapter {name} has shape {list(shape)}; "
                                  f"{base} needs lora_A [r, {i}] and lora_B [{o}, r]")


REQUIRED_KEYS = ("layer_kinds", "hidden_size", "intermediate_size", "vocab_size", "num_attention_heads",
                 "num_kv_heads", "head_dim", "kv_cache_dtype")


@dataclass
class Weights:
    """An engine in the reference layout, loaded: its description, float64 tensors and a digest
    of every byte that decides a logit (description and weights), for the result cache."""
    folder: str
    cfg: dict
    tensors: dict
    digest: str
    adapters: dict = field(default_factory=dict)     # adapter file path -> (digest, {proj: (A, B)})

    def adapter(self, path: str) -> tuple[str, dict]:
        """The LoRA adapter in `path`: (digest of the file, {projection: (A [r, in], B [out, r])})."""
        key = os.path.realpath(path)
        if key not in self.adapters:
            self.adapters[key] = _load_adapter(key, self.cfg)
        return self.adapters[key]


_LOADED: dict = {}


def load_weights(folder: str) -> Weights:
    """The engine of `folder` in the reference layout (LayoutError if it is not), memoized per
    process by the files' identity (path, size, modification time)."""
    cfg_path = os.path.join(folder, "config.json")
    try:
        with open(cfg_path, "rb") as f:
            raw_cfg = f.read()
        cfg = json.loads(raw_cfg)
    except (OSError, ValueError) as e:
        raise LayoutError(f"{cfg_path}: cannot read the engine description ({e})") from None
    missing = [k for k in REQUIRED_KEYS if k not in cfg]
    if missing:
        raise LayoutError(f"{cfg_path}: the reference layout needs {', '.join(missing)} (spec/engine.md section 5)")
    weights_path = os.path.join(folder, cfg.get("weights") or "model.safetensors")
    try:
        st = os.stat(weights_path)
    except OSError:
        raise LayoutError(f"{weights_path}: no weights file (spec/engine.md section 5)") from None
    stamp = (os.path.realpath(weights_path), st.st_size, st.st_mtime_ns, raw_cfg)
    cached = _LOADED.get(folder)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    from safetensors import SafetensorError
    from safetensors.numpy import load
    try:
        with open(weights_path, "rb") as f:
            data = f.read()
        tensors = load(data)                       # one read: the same bytes are digested below
    except (OSError, SafetensorError, ValueError) as e:
        raise LayoutError(f"{weights_path}: not a safetensors file ({e})") from None
    for name, shape in tensor_shapes(cfg).items():
        if name not in tensors or tuple(tensors[name].shape) != shape:
            got = None if name not in tensors else tuple(tensors[name].shape)
            raise LayoutError(f"{weights_path}: tensor {name} must have shape {shape}, found {got}")
    digest = hashlib.sha256(b"kvconform-reference-engine\0" + raw_cfg + b"\0" + data).hexdigest()
    w = Weights(folder, cfg, {k: v.astype(np.float64) for k, v in tensors.items()}, digest)
    _LOADED[folder] = (stamp, w)
    return w


def _load_adapter(path: str, cfg: dict) -> tuple[str, dict]:
    from safetensors import SafetensorError
    from safetensors.numpy import load
    try:
        with open(path, "rb") as f:
            data = f.read()
        tensors = load(data)
    except (OSError, SafetensorError, ValueError) as e:
        raise LayoutError(f"{path}: not a LoRA safetensors file ({e})") from None
    targets = adapter_targets(cfg)
    out = {}
    for key in tensors:
        base, _, part = key.rpartition(".")
        if base not in targets or part not in ("lora_A", "lora_B"):
            raise LayoutError(f"{path}: unexpected tensor {key} (spec/engine.md section 5)")
    for proj, (o, i) in targets.items():
        a, b = tensors.get(f"{proj}.lora_A"), tensors.get(f"{proj}.lora_B")
        if a is None and b is None:
            continue
        if a is None or b is None or a.ndim != 2 or b.ndim != 2 or a.shape[1] != i or b.shape != (o, a.shape[0]):
            raise LayoutError(f"{path}: {proj} needs lora_A [r, {i}] and lora_B [{o}, r]")
        out[proj] = (a.astype(np.float64), b.astype(np.float64))
    return hashlib.sha256(data).hexdigest(), out
