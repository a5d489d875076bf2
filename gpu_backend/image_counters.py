"""Image token counts per runtime (spec/media-tokens.md, TOK-MEDIA-1 .. TOK-MEDIA-7).

An `hf` engine names one counter and its settings in config.json (`vision.counter`,
`vision.settings`); the k-th image of a prompt then costs `count(h, w)` copies of the image
token (TOK-HF-7). Each counter transcribes one runtime's resize or tiling arithmetic, with
that runtime's rounding; an image the runtime refuses raises `CounterRefusal`.

    COUNTERS: name -> (function, default settings, required settings)
    check_settings(name, settings) -> complete settings (defaults filled in), or ValueError
    count_image(name, settings, h, w) -> int
"""
import math


class CounterRefusal(ValueError):
    """The runtime whose counter this is refuses an image of this size (TOK-MEDIA-1)."""


def _half_even(x: float) -> int:
    return round(x)                     # Python rounds halves to even, as transformers does


def _qwen_tokens(h2: int, w2: int, patch: int, merge: int) -> int:
    return (h2 // patch) * (w2 // patch) // (merge * merge)


def qwen_vl_hf(h, w, *, patch, merge, min_pixels, max_pixels):
    """TOK-MEDIA-2: transformers `smart_resize` (vLLM imports the same function)."""
    f = patch * merge
    if max(h, w) / min(h, w) > 200:
        raise CounterRefusal(f"aspect ratio {max(h, w) / min(h, w):g} of a {h}x{w} image is above 200")
    h2, w2 = _half_even(h / f) * f, _half_even(w / f) * f
    if h2 * w2 > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        h2, w2 = (max(f, math.floor(s / beta / f) * f) for s in (h, w))
    elif h2 * w2 < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        h2, w2 = (math.ceil(s * beta / f) * f for s in (h, w))
    return _qwen_tokens(h2, w2, patch, merge)


def qwen_vl_edge_llm(h, w, *, patch, merge, min_image_tokens, max_image_tokens):
    """TOK-MEDIA-3: Edge-LLM 0.10's port (imageUtils.cpp qwenSmartResize): smart_resize with each
    side clamped to at least one factor in the first step."""
    f = patch * merge
    if max(h, w) / min(h, w) > 200:
        raise CounterRefusal(f"aspect ratio {max(h, w) / min(h, w):g} of a {h}x{w} image is above 200")
    min_pixels, max_pixels = min_image_tokens * f * f, max_image_tokens * f * f
    h2, w2 = (max(f, _half_even(s / f) * f) for s in (h, w))
    if h2 * w2 > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        h2, w2 = (max(f, math.floor(int(s / beta) / f) * f) for s in (h, w))
    elif h2 * w2 < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        h2, w2 = (math.ceil(s * beta / f) * f for s in (h, w))
    return _qwen_tokens(h2, w2, patch, merge)


def _grid(h, w, lo, hi, tile):
    """TOK-MEDIA-4's tile grid (columns, rows): the closest aspect ratio among lo <= c*r <= hi,
    candidates enumerated by c then r and stably sorted by area; an equally close later grid
    wins when the image covers more than half of its area."""
    grids = sorted(((c, r) for c in range(1, hi + 1) for r in range(1, hi // c + 1) if c * r >= lo),
                   key=lambda g: g[0] * g[1])
    aspect, best, best_diff = w / h, (1, 1), float("inf")
    for c, r in grids:
        diff = abs(aspect - c / r)
        if diff < best_diff:
            best, best_diff = (c, r), diff
        elif diff == best_diff and h * w > 0.5 * tile * tile * c * r:
            best = (c, r)
    return best


def internvl_hf(h, w, *, min_patches, max_patches, tile):
    """TOK-MEDIA-4: a thumbnail only when there is more than one tile; 256 tokens per patch plus
    `<img>` and `</img>`."""
    c, r = _grid(h, w, min_patches, max_patches, tile)
    patches = c * r + 1 if c * r > 1 else 1
    return 2 + 256 * patches


def internvl_edge_llm(h, w, *, min_image_tokens, max_image_tokens, tile):
    """TOK-MEDIA-5: tile bounds from token bounds (one tile reserved for the thumbnail); the
    thumbnail follows a grid of several tiles, or every image when the vision engine's minimum
    profile (min_image_tokens / 256 blocks) is above one block (Edge-LLM 0.10)."""
    lo, hi = max(1, min_image_tokens // 256 - 1), max(1, max_image_tokens // 256 - 1)
    c, r = _grid(h, w, lo, hi, tile)
    thumbnail = 1 if c * r > 1 or min_image_tokens // 256 > 1 else 0
    return 2 + 256 * (c * r + thumbnail)


def phi3_vision_hf(h, w, *, num_crops):
    """TOK-MEDIA-6: the HD transform of Phi-3-vision's processor, 336-pixel crops."""
    long, short = max(h, w), min(h, w)
    ratio = long / short
    s = 1
    while (s + 1) * math.ceil((s + 1) / ratio) <= num_crops:
        s += 1
    across = 336 * s                                     # the long side
    down = math.ceil(int(336 * s / ratio) / 336) * 336   # the short side, padded to whole crops
    crops_long, crops_short = across // 336, down // 336
    rows, cols = (crops_long, crops_short) if h > w else (crops_short, crops_long)
    return (rows * cols + 1) * 144 + 1 + (rows + 1) * 12


# name -> (counter, defaults, required): the defaults are transformers' class defaults for the
# HF counters; Edge-LLM's token bounds are chosen when its engine is built and have none
# (TOK-MEDIA-7). A build writes every setting explicitly (hf_build.py chooses small ones).
COUNTERS = {
    "hf/qwen-vl": (qwen_vl_hf, {"patch": 14, "merge": 2, "min_pixels": 3136, "max_pixels": 1003520}, ()),
    "vllm/qwen-vl": (qwen_vl_hf, {"patch": 14, "merge": 2, "min_pixels": 3136, "max_pixels": 1003520}, ()),
    "edge-llm/qwen-vl": (qwen_vl_edge_llm, {"patch": 14, "merge": 2}, ("min_image_tokens", "max_image_tokens")),
    "hf/internvl": (internvl_hf, {"min_patches": 1, "max_patches": 12, "tile": 448}, ()),
    "edge-llm/internvl": (internvl_edge_llm, {"tile": 448}, ("min_image_tokens", "max_image_tokens")),
    "hf/phi-3-vision": (phi3_vision_hf, {"num_crops": 16}, ()),
}
_ORDERED = {"min_pixels": "max_pixels", "min_image_tokens": "max_image_tokens", "min_patches": "max_patches"}
MAX_SETTING = 2 ** 31 - 1
# Tiling counters search every grid (or scale) up to their bound: bounded so a settings typo
# cannot stall a request (4096 tiles or crops is far above any shipped model's 12 or 16).
MAX_TILES = 4096
_LIMITS = {"hf/internvl": {"min_patches": MAX_TILES, "max_patches": MAX_TILES},
           "edge-llm/internvl": {"min_image_tokens": 256 * (MAX_TILES + 1), "max_image_tokens": 256 * (MAX_TILES + 1)},
           "hf/phi-3-vision": {"num_crops": MAX_TILES}}


def check_settings(name: str, settings) -> dict:
    """The counter's complete settings: `settings` over its defaults. Every setting is a
    positive integer and each minimum is at most its maximum; unknown and missing required
    names are refused (ValueError)."""
    if name not in COUNTERS:
        raise ValueError(f"unknown image counter {name!r} (known: {', '.join(COUNTERS)})")
    if not isinstance(settings, dict):
        raise ValueError(f"settings must be a JSON object, got {settings!r}")
    _, defaults, required = COUNTERS[name]
    known = list(defaults) + list(required)
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise ValueError(f"{name} has no setting {unknown[0]!r} (settings: {', '.join(known)})")
    missing = [k for k in required if k not in settings]
    if missing:
        raise ValueError(f"{name} needs the setting {missing[0]} (the runtime's builder bound, TOK-MEDIA-7)")
    out = {**defaults, **settings}
    for key, value in out.items():
        top = _LIMITS.get(name, {}).get(key, MAX_SETTING)
        if type(value) is not int or not 1 <= value <= top:
            raise ValueError(f"{name} setting {key} must be an integer in [1, {top}], got {value!r}")
    for lo, hi in _ORDERED.items():
        if lo in out and out[lo] > out[hi]:
            raise ValueError(f"{name} setting {lo} ({out[lo]}) is above {hi} ({out[hi]})")
    return out


def count_image(name: str, settings: dict, h: int, w: int) -> int:
    """Tokens of one h x w image (h, w >= 1) under a counter with complete settings."""
    return COUNTERS[name][0](h, w, **settings)
