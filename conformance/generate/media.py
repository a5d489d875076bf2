"""Images for generated request sets, written on demand and named by what they are.

An image is (content seed, height, width, encoding). The pixel bytes depend only on the seed
and the pixel count, so (s, 16, 32) and (s, 32, 16) hold equal bytes under transposed
geometry: different media items by CR-ID-4. The encodings decode to the same pixels
(spec/tokenizer.md section 3), so (s, h, w, "png") and (s, h, w, "ppm") are the same item.
"""
from __future__ import annotations

import io
import random
from pathlib import Path
from typing import NamedTuple

from PIL import Image

ENCODINGS = ("png", "ppm", "palette.png")
SIZES = ((16, 64), (32, 32), (20, 40), (16, 32), (32, 16), (16, 16))  # multi-placeholder first


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
