"""Media items of another size for a re-laid-out case (bytes-v1, spec/tokenizer.md section 2).

When the re-layout resizes an item by whole pages, it needs an item with that many placeholders
that is the same item wherever the source was the same item, and a different one wherever the
source items differed. So the new pixels (or samples) are derived from the source item's
identity (modality, geometry, decoded bytes) and the new count: equal sources give equal items,
different sources (other pixels, or equal bytes under other geometry) give different ones.

Images are written as PNG (what every vision runtime reads), audio as 16 kHz mono 16-bit WAV.
"""
from __future__ import annotations

import hashlib
import io
import struct
from pathlib import Path

from PIL import Image

from ..judge.oracle import load_audio, load_image

PATCH = 16           # pixels per placeholder side (spec/tokenizer.md: ceil(H/16) * ceil(W/16))
FRAME = 320          # audio samples per placeholder (ceil(S/320))
MAX_SIDE_PATCHES = 1024


def placeholders(item: dict, base_dir: str) -> int:
    """The placeholders of an image or audio item of a request file."""
    path = _path(item, base_dir)
    return (load_image(path) if item["type"] == "image" else load_audio(path)).placeholders


def resized(item: dict, base_dir: str, count: int, folder: Path) -> str:
    """The path of an item like `item` but with `count` placeholders (written once, in `folder`)."""
    source = (load_image if item["type"] == "image" else load_audio)(_path(item, base_dir))
    name = hashlib.sha256(source.digest + struct.pack("<Q", count)).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    if item["type"] == "image":
        target = folder / f"resized-{name}.png"
        data = lambda: _png(source.digest, count)
    else:
        target = folder / f"resized-{name}.wav"
        data = lambda: _wav(source.digest, count)
    if not target.exists():
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(data())
        tmp.replace(target)
    return str(target)


def _path(item: dict, base_dir: str) -> str:
    value = item[item["type"]]
    return value if Path(value).is_absolute() else str(Path(base_dir) / value)


def _stream(seed: bytes, size: int) -> bytes:
    return hashlib.shake_256(b"kvconform-resized-media" + seed).digest(size)


def _png(seed: bytes, count: int) -> bytes:
    rows = -(-count // MAX_SIDE_PATCHES)
    while count % rows:                  # an exact grid: rows * columns == count
        rows += 1
    height, width = PATCH * rows, PATCH * (count // rows)
    image = Image.frombytes("RGB", (width, height), _stream(seed, height * width * 3))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def _wav(seed: bytes, count: int) -> bytes:
    samples = _stream(seed, FRAME * count * 2)
    header = (b"RIFF" + struct.pack("<I", 36 + len(samples)) + b"WAVEfmt "
              + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16) + b"data" + struct.pack("<I", len(samples)))
    return header + samples


def counted(item: dict, base_dir: str, count: int, counter: str, settings: dict, folder: Path) -> str:
    """The path of an image like `item` whose token count under the runtime's media counter
    (spec/media-tokens.md) is exactly `count`: sizes a whole number of patches on each side are
    tried, the factorizations of `count` over the common patch factors; ValueError if none fits."""
    from ..judge.oracle import image_tokens
    source = load_image(_path(item, base_dir))
    for factor in (28, 32, 14, 16, 56, 64, 336, 448):
        for rows in _divisors(count):
            h, w = rows * factor, count // rows * factor
            if max(h, w) > 4096 or max(h, w) // min(h, w) > 100:
                continue
            try:
                if image_tokens(counter, h, w, settings) == count:
                    return _write_png(folder, source.digest, count, h, w, counter)
            except ValueError:
                continue
    raise ValueError(f"no size of up to 4096 pixels a side found")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _write_png(folder: Path, seed: bytes, count: int, h: int, w: int, counter: str) -> str:
    name = hashlib.sha256(seed + struct.pack("<QQQ", count, h, w) + counter.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"counted-{name}.png"
    if not target.exists():
        image = Image.frombytes("RGB", (w, h), _stream(seed + struct.pack("<Q", count), h * w * 3))
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(buf.getvalue())
        tmp.replace(target)
    return str(target)

