"""Images for generated request sets, written on demand and named by what they are.

An image is (content seed, height, width, encoding). The pixel bytes depend only on the seed
and the pixel count, so (s, 16, 32) and (s, 32, 16) hold equal bytes under transposed
geometry: different media items by CR-ID-4. The encodings decode to the same pixels
(spec/tokenizer.md section 3), so (s, h, w, "png") and (s, h, w, "ppm") are the same item.
"""
from __future__ import annotations

import io
import math
import random
from pathlib import Path
from typing import NamedTuple

from PIL import Image

ENCODINGS = ("png", "ppm", "palette.png")
SIZES = ((16, 64), (32, 32), (20, 40), (16, 32), (32, 16), (16, 16))  # multi-placeholder first


def bound_sizes(counter: str, settings: dict) -> list[tuple[int, int]]:
    """(height, width) of images at each comparison bound of an engine's image counter and one
    step each side (spec/media-tokens.md), for the vision family on an engine that counts its
    images: a counter that compares with >= where its runtime compares with >, or that reserves
    no thumbnail tile, counts one of them differently.

    Qwen-VL: an image whose rounded area is min_pixels or max_pixels (a x b cells of factor^2,
    each side 2 pixels off a multiple of the factor so that it rounds onto it), and one column of
    cells fewer and more. InternVL: aspect ratios of c:1 at the tile bounds and one tile each
    side. Phi-3-vision: the ratio num_crops:1, where s * ceil(s / ratio) reaches num_crops, and
    one pixel each side."""
    if counter.endswith("/qwen-vl"):
        f = settings["patch"] * settings["merge"]
        if counter.startswith("edge-llm/"):
            bounds = [settings["min_image_tokens"], settings["max_image_tokens"]]
        else:
            bounds = [p // (f * f) for p in (settings["min_pixels"], settings["max_pixels"]) if p % (f * f) == 0]
        out = []
        for cells in bounds:
            rows = max(d for d in range(1, math.isqrt(cells) + 1) if cells % d == 0)
            out += [(rows * f - 2, cols * f + 2) for cols in (cells // rows - 1, cells // rows, cells // rows + 1)
                    if cols >= 1]
        return out
    if counter.endswith("/internvl"):
        if counter.startswith("edge-llm/"):
            lo = max(1, settings["min_image_tokens"] // 256 - 1)
            hi = max(1, settings["max_image_tokens"] // 256 - 1)
        else:
            lo, hi = settings["min_patches"], settings["max_patches"]
        return [(16, 16 * c) for c in sorted({lo - 1, lo, lo + 1, hi - 1, hi, hi + 1}) if c >= 1]
    if counter == "hf/phi-3-vision":
        n = settings["num_crops"]
        return [(16, 16 * n - 1), (16, 16 * n), (16, 16 * n + 1)]
    return []


class ImageSpec(NamedTuple):
    seed: int
    height: int
    width: int
    encoding: str = "png"

    @property
    def name(self) -> str:
        return f"gen-s{self.seed}-{self.height}x{self.width}.{self.encoding}"

    @property
    def placeholders(self) -> int:
        return -(-self.height // 16) * -(-self.width // 16)


def pixels(seed: int, count: int) -> bytes:
    """RGB bytes from a 32-colour seeded palette (so a palette PNG can hold them exactly)."""
    rng = random.Random(seed)
    palette = [bytes(rng.randrange(256) for _ in range(3)) for _ in range(32)]
    return b"".join(palette[rng.randrange(32)] for _ in range(count))


def encode(spec: ImageSpec) -> bytes:
    data = pixels(spec.seed, spec.height * spec.width)
    if spec.encoding == "ppm":
        return f"P6\n{spec.width} {spec.height}\n255\n".encode() + data
    image = Image.frombytes("RGB", (spec.width, spec.height), data)
    if spec.encoding == "palette.png":
        image = image.quantize(colors=256, method=Image.Quantize.MAXCOVERAGE, dither=Image.Dither.NONE)
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def materialize(spec: ImageSpec, folder: Path) -> str:
    """The absolute path of the image, writing it if needed."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / spec.name
    if not path.exists():
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(encode(spec))
        tmp.replace(path)
    return str(path)
