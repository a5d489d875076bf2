"""How many tokens a runtime gives one image: counters per runtime, not per model (spec/media-tokens.md).

The same model and image cost different token counts in different runtimes, because each
runtime ports the model's preprocessing with its own rounding and tiling details
(TOK-MEDIA-1). A counter here is one runtime's port, transcribed from its source:

    hf/qwen-vl, vllm/qwen-vl   transformers smart_resize (vLLM imports it)        TOK-MEDIA-2
    edge-llm/qwen-vl           TensorRT Edge-LLM 0.10 qwenSmartResize              TOK-MEDIA-3
    hf/internvl                transformers GotOcr2 tiling + InternVL processor   TOK-MEDIA-4
    edge-llm/internvl          Edge-LLM 0.10 computeBestBlockGridForResize + thumbnail TOK-MEDIA-5
    hf/phi-3-vision            Phi-3-vision processor's HD transform              TOK-MEDIA-6

`image_tokens(counter, h, w, settings)` dispatches by name; `settings` holds the counter's
keyword arguments (for the Qwen-VL HF counters `vision_settings(path)` reads them from an
onnxruntime-extensions vision_processor.json such as spec/tokenizers/qwen2.5vl/). Stdlib only.
Every function raises ValueError for an image its runtime refuses.
"""

import json
import math

TILE_TOKENS = 256


def qwen_vl_hf_resize(h: int, w: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers `smart_resize` (models/qwen2_vl/image_processing_qwen2_vl.py), verbatim in
    effect: float aspect check, Python's round (half to even), max(factor, ...) only in the
    max-pixels branch."""
    if max(h, w) / min(h, w) > 200:
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {max(h, w) / min(h, w)}")
    h_bar, w_bar = round(h / factor) * factor, round(w / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        h_bar = max(factor, math.floor(h / beta / factor) * factor)
        w_bar = max(factor, math.floor(w / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        h_bar = math.ceil(h * beta / factor) * factor
        w_bar = math.ceil(w * beta / factor) * factor
    return h_bar, w_bar


def qwen_vl_hf(h: int, w: int, patch: int = 14, merge: int = 2, min_pixels: int = 56 * 56,
               max_pixels: int = 28 * 28 * 1280) -> int:
    """`<|image_pad|>` tokens for one image in transformers and vLLM (TOK-MEDIA-2):
    (h_bar/patch)*(w_bar/patch) patches (grid_t = 1), merged merge*merge to one token
    (processing_qwen2_vl.py: image_grid_thw.prod() // merge_size**2; vLLM qwen2_vl.py the same).
    Defaults are transformers' Qwen2-VL ones; Qwen3-VL uses patch 16."""
    h_bar, w_bar = qwen_vl_hf_resize(h, w, patch * merge, min_pixels, max_pixels)
    return (h_bar // patch) * (w_bar // patch) // (merge * merge)


def qwen_vl_edge_llm_resize(h: int, w: int, factor: int, min_pixels: int, max_pixels: int,
                            max_ratio: int = 200) -> tuple[int, int]:
    """Edge-LLM 0.10 `qwenSmartResize` (cpp/multimodal/imageUtils.cpp, called by
    QwenViTRunner::getResizedImageSize), a C++ port of smart_resize that differs in one place
    (TOK-MEDIA-3): the first step clamps each side to at least one factor. Halves round to even
    in integers (roundByFactor); the max-pixels branch truncates h / beta before flooring, which
    changes nothing."""
    if max(h, w) / min(h, w) > max_ratio:
        raise ValueError(f"absolute aspect ratio must be smaller than {max_ratio}, got {max(h, w) / min(h, w)}")
    h_bar = max(factor, _round_half_even_by(h, factor))
    w_bar = max(factor, _round_half_even_by(w, factor))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        h_bar = max(factor, math.floor(int(h / beta) / factor) * factor)
        w_bar = max(factor, math.floor(int(w / beta) / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        h_bar = math.ceil(h * beta / factor) * factor
        w_bar = math.ceil(w * beta / factor) * factor
    return h_bar, w_bar


def qwen_vl_edge_llm(h: int, w: int, patch: int = 14, merge: int = 2, *, min_image_tokens: int,
                     max_image_tokens: int) -> int:
    """Image tokens in Edge-LLM 0.10 (TOK-MEDIA-3). Its bounds are token counts from the engine's
    builder config (min_image_tokens, max_image_tokens_per_image), turned into pixels as
    tokens*factor^2 (imageUtils.cpp); tokens = (h_bar/patch)*(w_bar/patch)/merge/merge."""
    factor = patch * merge
    h_bar, w_bar = qwen_vl_edge_llm_resize(h, w, factor, min_image_tokens * factor * factor,
                                           max_image_tokens * factor * factor)
    return (h_bar // patch) * (w_bar // patch) // merge // merge


def _round_half_even_by(value: int, factor: int) -> int:
    """The multiple of `factor` nearest to `value`, halves to the even quotient (Edge-LLM's
    integer roundByFactor; Python's round(value / factor) * factor gives the same)."""
    q, r = divmod(value, factor)
    if 2 * r > factor or (2 * r == factor and q % 2 == 1):
        q += 1
    return q * factor


def tile_grid(h: int, w: int, min_tiles: int, max_tiles: int, tile: int = 448) -> tuple[int, int]:
    """(columns, rows) of the InternVL-style tile grid whose aspect ratio is closest to w/h, shared by
    transformers (got_ocr2 `get_optimal_tiled_canvas`) and Edge-LLM (`computeBestBlockGridForResize`).

    Candidates: every (c, r) with min_tiles <= c*r <= max_tiles, enumerated c-major then sorted
    stably by c*r. A later candidate with an equal ratio difference wins when the image area
    exceeds half the candidate's pixel area. (Edge-LLM sorts with std::sort, which may order
    equal-area grids differently; the stable order is the rule, see TOK-MEDIA-4.)"""
    candidates = sorted(((c, r) for c in range(1, max_tiles + 1) for r in range(1, max_tiles + 1)
                         if min_tiles <= c * r <= max_tiles), key=lambda g: g[0] * g[1])
    aspect, area = w / h, w * h
    best, best_diff = (1, 1), float("inf")
    for c, r in candidates:
        diff = abs(aspect - c / r)
        if diff < best_diff:
            best, best_diff = (c, r), diff
        elif diff == best_diff and area > 0.5 * tile * tile * c * r:
            best = (c, r)
    return best


def internvl_hf(h: int, w: int, min_patches: int = 1, max_patches: int = 12, tile: int = 448,
                tokens_per_tile: int = TILE_TOKENS) -> int:
    """Tokens one image becomes in transformers' InternVL processor (TOK-MEDIA-4), counting the
    `<img>` and `</img>` it wraps around the `<IMG_CONTEXT>` tokens:
    2 + tokens_per_tile * num_patches (processing_internvl.py `_get_num_multimodal_tokens`), where
    num_patches = c*r + 1 (tiles plus a thumbnail) for a grid of more than one tile, else 1
    (image_processing_got_ocr2.py `get_number_of_image_patches`, with crop_to_patches on)."""
    num_patches = 1
    if max_patches > 1:
        c, r = tile_grid(h, w, min_patches, max_patches, tile)
        if c * r > 1:
            num_patches += c * r
    return 2 + tokens_per_tile * num_patches


def internvl_edge_llm(h: int, w: int, *, min_image_tokens: int, max_image_tokens: int, tile: int = 448,
                      tokens_per_tile: int = TILE_TOKENS) -> int:
    """Tokens one image becomes in Edge-LLM 0.10's InternViTRunner (TOK-MEDIA-5), counted like
    `internvl_hf`: 2 + tokens_per_tile * blocks. The tile bounds come from the token bounds,
    max(1, tokens/256 - 1) in integer division, one block reserved for the thumbnail
    (imageUtils.cpp computeBestBlockGridForResize); the thumbnail is added to a grid of more
    than one tile, or to every image when the vision engine's minimum profile
    (min_image_tokens / 256 blocks, visualBuilder.cpp) is more than one block
    (internViTRunner.cpp imagePreprocess)."""
    min_tiles = max(1, min_image_tokens // tokens_per_tile - 1)
    max_tiles = max(1, max_image_tokens // tokens_per_tile - 1)
    c, r = tile_grid(h, w, min_tiles, max_tiles, tile)
    thumbnail = c * r > 1 or min_image_tokens // tokens_per_tile > 1
    return 2 + tokens_per_tile * (c * r + thumbnail)


def phi3_vision_hf_size(h: int, w: int, num_crops: int = 16) -> tuple[int, int]:
    """(height, width) after the Phi-3-vision HD transform (`calc_hd_transform_size` of the model's
    image_processing_phi3_v.py): with the long side as width, the largest scale s with
    s*ceil(s/ratio) <= num_crops sets the width to 336*s, the height to int(width/ratio), padded up
    to a multiple of 336."""
    transposed = w < h
    if transposed:
        h, w = w, h
    ratio = w / h
    scale = 1
    while scale * math.ceil(scale / ratio) <= num_crops:
        scale += 1
    scale -= 1
    new_w = scale * 336
    new_h = int(new_w / ratio)
    new_h = math.ceil(new_h / 336) * 336
    return (new_w, new_h) if transposed else (new_h, new_w)


def phi3_vision_hf(h: int, w: int, num_crops: int = 16) -> int:
    """Image tokens of Phi-3-vision's HF processor (TOK-MEDIA-6):
    (hc*wc + 1)*144 + 1 + (hc + 1)*12 for hc x wc crops of 336 (`calc_num_image_tokens_from_image_size`):
    144 per crop and for the global image, 12 row separators per crop row and for the global
    image, 1 separator between them. num_crops is 16 for Phi-3-vision-128k-instruct."""
    height, width = phi3_vision_hf_size(h, w, num_crops)
    hc, wc = height // 336, width // 336
    return (hc * wc + 1) * 144 + 1 + (hc + 1) * 12


COUNTERS = {
    "hf/qwen-vl": qwen_vl_hf,
    "vllm/qwen-vl": qwen_vl_hf,
    "edge-llm/qwen-vl": qwen_vl_edge_llm,
    "hf/internvl": internvl_hf,
    "edge-llm/internvl": internvl_edge_llm,
    "hf/phi-3-vision": phi3_vision_hf,
}
COUNTER_RULES = {"hf/qwen-vl": "TOK-MEDIA-2", "vllm/qwen-vl": "TOK-MEDIA-2", "edge-llm/qwen-vl": "TOK-MEDIA-3",
                 "hf/internvl": "TOK-MEDIA-4", "edge-llm/internvl": "TOK-MEDIA-5", "hf/phi-3-vision": "TOK-MEDIA-6"}
"""The rule each counter transcribes (the table above); an unknown counter is TOK-MEDIA-1's."""


# What a build writes when it is not told (spec/media-tokens.md TOK-MEDIA-7; spec/engine.md):
# small but real settings, so that small engines take images of a few to a few hundred tokens.
BUILD_SETTINGS = {
    "hf/qwen-vl": {"patch": 14, "merge": 2, "min_pixels": 4 * 28 * 28, "max_pixels": 256 * 28 * 28},
    "vllm/qwen-vl": {"patch": 14, "merge": 2, "min_pixels": 4 * 28 * 28, "max_pixels": 256 * 28 * 28},
    "edge-llm/qwen-vl": {"patch": 14, "merge": 2, "min_image_tokens": 4, "max_image_tokens": 256},
    "hf/internvl": {"min_patches": 1, "max_patches": 4, "tile": 448},
    "edge-llm/internvl": {"min_image_tokens": 256, "max_image_tokens": 1280, "tile": 448},
    "hf/phi-3-vision": {"num_crops": 4},
}
DEFAULT_COUNTER = {"<|image_pad|>": "edge-llm/qwen-vl", "<|image|>": "hf/phi-3-vision"}


def image_tokens(counter: str, h: int, w: int, settings: dict | None = None) -> int:
    """Tokens of one h x w image under the named counter; `settings` are its keyword arguments
    (e.g. vision_settings(...) for hf/qwen-vl, {"min_image_tokens": .., "max_image_tokens": ..}
    for the Edge-LLM counters)."""
    if counter not in COUNTERS:
        raise ValueError(f"unknown media token counter {counter!r}; known: {sorted(COUNTERS)}")
    if h < 1 or w < 1:
        raise ValueError(f"image size {h}x{w}: both sides must be at least 1")
    try:
        return COUNTERS[counter](h, w, **(settings or {}))
    except TypeError as e:  # a missing or unknown setting (TOK-MEDIA-7)
        raise ValueError(f"{counter}: settings {sorted(settings or {})} do not fit: {e}") from None


def vision_settings(path: str) -> dict:
    """hf/qwen-vl settings from an onnxruntime-extensions vision_processor.json: the "Resize"
    step's patch_size, merge_size, min_pixels and max_pixels."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    for step in doc["processor"]["transforms"]:
        op = step["operation"]
        if op.get("type") == "Resize" and op["attrs"].get("smart_resize"):
            attrs = op["attrs"]
            return {"patch": attrs["patch_size"], "merge": attrs["merge_size"],
                    "min_pixels": attrs["min_pixels"], "max_pixels": attrs["max_pixels"]}
    raise ValueError(f"{path}: no smart_resize Resize step")
