"""Media decoding (spec/tokenizer.md section 3) with zlib, struct and wave only.

Images: non-interlaced PNG (grey/RGB/grey+alpha/RGBA at bit depth 8, palette at 1/2/4/8),
binary PPM (P6, maxval 255) and baseline or progressive 8-bit JPEG (reference/jpeg.py, the one
format decoded by a library: Pillow), decoded to H x W RGB bytes. Audio: 16-bit mono 16 kHz PCM WAV,
decoded to float32 samples x / 32768. Each item yields its placeholder count and its identity
digest over (modality, geometry, decoded bytes) (CR-ID-4). Decoded items are cached by file
identity, so a benchmark that repeats an image decodes it once.
"""

import hashlib
import math
import os
import struct
import sys
import wave
import zlib
from array import array
from typing import NamedTuple

from . import jpeg
from .identity import media_content_digest, media_item_digest

MAX_SIDE = 16384
MAX_PIXELS = 2 ** 21
"""spec/tokenizer.md section 3: the pixel budget of one image (2,097,152 pixels: 1920 x 1080 fits,
2048 x 2048 does not), refused from the header before anything is decompressed. It bounds the
work of decoding any accepted image: this module unfilters PNG rows in pure Python."""
PATCH = 16
FRAME_SAMPLES = 320
SAMPLE_RATE = 16000
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class DecodeError(Exception):
    """A media file that spec/tokenizer.md section 3 refuses."""


class MediaItem(NamedTuple):
    modality: str          # "image" | "audio"
    geometry: tuple        # (H, W, 3) or (S,)
    placeholders: int
    digest: bytes          # CR-ID-4: modality, geometry and samples
    content: bytes = b""   # the samples alone (spec/profiles.md, raw-bytes)


def image_placeholders(height: int, width: int) -> int:
    return math.ceil(height / PATCH) * math.ceil(width / PATCH)


def load_image(path: str, max_placeholders: int | None = None) -> MediaItem:
    """Decode an image; refuse a placeholder count above `max_placeholders` (the engine's
    max_input_len) from the header, before decoding the pixels."""
    data = _read(path)
    if data.startswith(_PNG_SIGNATURE):
        height, width, decode = _png(data)
    elif data.startswith(b"P6"):
        height, width, decode = _ppm(data)
    elif data.startswith(jpeg.SOI):
        height, width, decode = _jpeg(data)
    else:
        raise DecodeError("not a PNG, binary PPM (P6) or JPEG image")
    if not (1 <= height <= MAX_SIDE and 1 <= width <= MAX_SIDE):
        raise DecodeError(f"image size {height}x{width} outside 1..{MAX_SIDE}")
    if height * width > MAX_PIXELS:
        raise DecodeError(f"image of {height}x{width} has {height * width} pixels, more than the pixel budget "
                          f"of {MAX_PIXELS} (spec/tokenizer.md section 3)")
    count = image_placeholders(height, width)
    if max_placeholders is not None and count > max_placeholders:
        raise DecodeError(f"image {height}x{width} needs {count} placeholders, more than "
                          f"max_input_len {max_placeholders}")
    stamp = hashlib.sha256(data).digest()           # by content: copies of one image decode once
    item = _IMAGES.get(stamp)
    if item is None:
        rgb = decode()
        item = MediaItem("image", (height, width, 3), count,
                         media_item_digest("image", (height, width, 3), rgb), media_content_digest(rgb))
        _remember(_IMAGES, stamp, item)
    return item


def load_audio(path: str) -> MediaItem:
    """Decode a WAV file: PCM format 1, 16-bit, mono, 16000 Hz, at least one sample."""
    _read(path, probe=True)
    stamp = _stamp(path)
    item = _AUDIO.get(stamp)
    if item is None:
        item = _decode_wav(path)
        _remember(_AUDIO, stamp, item)
    return item


_IMAGES: dict = {}
_AUDIO: dict = {}


def _remember(cache: dict, stamp, item) -> None:
    if len(cache) >= 256:
        cache.pop(next(iter(cache)))
    cache[stamp] = item


MAX_MEDIA_BYTES = 32 << 20
"""spec/tokenizer.md section 3: the largest media file read (33,554,432 bytes), from its size
before a byte is read. An image within the pixel budget needs at most 8.4 MB (RGBA, stored
uncompressed); 32 MiB of 16 kHz WAV is 17 minutes of audio."""


def _read(path: str, probe: bool = False) -> bytes:
    if not os.path.exists(path):
        raise DecodeError(f"file not found: {path}")
    if os.path.isdir(path):
        raise DecodeError(f"is a directory: {path}")
    if not os.path.isfile(path):
        raise DecodeError(f"not a regular file: {path}")
    size = os.path.getsize(path)
    if size > MAX_MEDIA_BYTES:
        raise DecodeError(f"{path} has {size} bytes, more than the {MAX_MEDIA_BYTES} a media file may have "
                          "(spec/tokenizer.md section 3); not read")
    try:
        with open(path, "rb") as f:
            data = f.read(16) if probe else f.read(MAX_MEDIA_BYTES + 1)
            if len(data) > MAX_MEDIA_BYTES:
                raise DecodeError(f"{path} has more than the {MAX_MEDIA_BYTES} bytes a media file may have")
            return data
    except OSError as e:
        raise DecodeError(f"cannot read {path}: {e.strerror}") from None


def _stamp(path: str) -> tuple:
    """File identity for the decode cache: a changed file is decoded again."""
    st = os.stat(path)
    return os.path.realpath(path), st.st_size, st.st_mtime_ns


def _decode_wav(path: str) -> MediaItem:
    try:
        with wave.open(path, "rb") as w:
            channels, width, rate, frames = (w.getnchannels(), w.getsampwidth(),
                                             w.getframerate(), w.getnframes())
            if channels != 1 or width != 2 or rate != SAMPLE_RATE:
                raise DecodeError(f"WAV must be 16-bit mono {SAMPLE_RATE} Hz PCM, got {width * 8}-bit "
                                  f"{channels}-channel {rate} Hz")
            raw = w.readframes(frames)
    except (wave.Error, EOFError, struct.error) as e:
        raise DecodeError(f"not a 16-bit PCM WAV file: {e}") from None
    if frames == 0:
        raise DecodeError("WAV file has 0 samples")
    if len(raw) != 2 * frames:        # the data chunk declares more samples than the file holds
        raise DecodeError(f"WAV data is truncated: {len(raw) // 2} of {frames} declared samples present")
    pcm = array("h")
    pcm.frombytes(raw)
    if sys.byteorder == "big":
        pcm.byteswap()
    samples = array("f", [x / 32768.0 for x in pcm])
    if sys.byteorder == "big":
        samples.byteswap()          # identity material is float32 little-endian
    data = samples.tobytes()
    return MediaItem("audio", (len(pcm),), math.ceil(len(pcm) / FRAME_SAMPLES),
                     media_item_digest("audio", (len(pcm),), data), media_content_digest(data))


# -- PNG ---------------------------------------------------------------------------------------

_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def _png(data: bytes):
    """Parse and check the chunks; return (H, W, a thunk that decodes to RGB bytes)."""
    pos, chunks = 8, []
    while pos < len(data):
        if pos + 12 > len(data):
            raise DecodeError("truncated PNG chunk")
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        crc_at = pos + 8 + length
        if len(body) != length or crc_at + 4 > len(data):
            raise DecodeError("truncated PNG chunk")
        if zlib.crc32(ctype + body) != struct.unpack(">I", data[crc_at:crc_at + 4])[0]:
            raise DecodeError(f"PNG chunk {ctype!r} has a bad CRC")
        chunks.append((ctype, body))
        pos = crc_at + 4
        if ctype == b"IEND":
            break
    if not chunks or chunks[0][0] != b"IHDR" or len(chunks[0][1]) != 13:
        raise DecodeError("PNG does not start with an IHDR chunk")
    width, height, depth, colour, comp, filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if colour not in _CHANNELS:
        raise DecodeError(f"PNG colour type {colour} is not supported")
    if (colour == 3 and depth not in (1, 2, 4, 8)) or (colour != 3 and depth != 8):
        raise DecodeError(f"PNG bit depth {depth} is not supported for colour type {colour}")
    if comp != 0 or filt != 0:
        raise DecodeError("PNG compression or filter method is not 0")
    if interlace != 0:
        raise DecodeError("interlaced PNG is not supported")
    palette = b"".join(body for ctype, body in chunks if ctype == b"PLTE")
    idat = b"".join(body for ctype, body in chunks if ctype == b"IDAT")
    if colour == 3 and (not palette or len(palette) % 3):
        raise DecodeError("palette PNG without a valid PLTE chunk")
    if not idat:
        raise DecodeError("PNG has no IDAT chunk")

    def decode() -> bytes:
        return _png_pixels(idat, width, height, depth, colour, palette)

    return height, width, decode


def _png_pixels(idat, width, height, depth, colour, palette) -> bytes:
    channels = _CHANNELS[colour]
    stride = (width * channels * depth + 7) // 8
    expected = height * (stride + 1)
    try:
        z = zlib.decompressobj()
        raw = z.decompress(idat, expected + 1)
    except zlib.error as e:
        raise DecodeError(f"PNG image data is corrupt: {e}") from None
    if len(raw) != expected:
        raise DecodeError(f"PNG image data has {len(raw)} bytes, expected {expected}")
    rows = _unfilter(raw, stride, height, max(1, channels * depth // 8))
    if colour == 3:
        return _expand_palette(rows, width, depth, palette)
    if colour == 2:
        return rows
    if colour == 0:
        return bytes(v for v in rows for _ in range(3))
    if colour == 4:
        grey = rows[0::2]
        return bytes(v for v in grey for _ in range(3))
    out = bytearray(width * height * 3)      # colour 6: drop alpha, do not composite
    for c in range(3):
        out[c::3] = rows[c::4]
    return bytes(out)


def _unfilter(raw: bytes, stride: int, height: int, bpp: int) -> bytes:
    out = bytearray(stride * height)
    prior = bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if ftype == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif ftype == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prior))
        elif ftype == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prior[i]) >> 1)) & 0xFF
        elif ftype == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prior[i], (prior[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        elif ftype != 0:
            raise DecodeError(f"PNG row {y} has unknown filter type {ftype}")
        out[y * stride:(y + 1) * stride] = line
        prior = line
    return bytes(out)


def _expand_palette(rows: bytes, width: int, depth: int, palette: bytes) -> bytes:
    stride = (width * depth + 7) // 8
    per_byte, mask = 8 // depth, (1 << depth) - 1
    entries = len(palette) // 3
    out = bytearray()
    for y in range(len(rows) // stride):
        row = rows[y * stride:(y + 1) * stride]
        for x in range(width):
            byte = row[x // per_byte]
            index = (byte >> (8 - depth * (x % per_byte + 1))) & mask
            if index >= entries:
                raise DecodeError(f"PNG palette index {index} outside a {entries}-entry palette")
            out += palette[index * 3:index * 3 + 3]
    return bytes(out)


# -- JPEG --------------------------------------------------------------------------------------

def _jpeg(data: bytes):
    """(H, W, a thunk that decodes to RGB bytes): the frame header checked first (reference/jpeg.py)."""
    try:
        height, width = jpeg.frame_header(data)
    except jpeg.JpegError as e:
        raise DecodeError(str(e)) from None

    def decode() -> bytes:
        try:
            return jpeg.decode_rgb(data, height, width)
        except jpeg.JpegError as e:
            raise DecodeError(str(e)) from None

    return height, width, decode


# -- PPM ---------------------------------------------------------------------------------------

def _ppm(data: bytes):
    fields, pos = [], 2
    while len(fields) < 3:
        while pos < len(data) and data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            while pos < len(data) and data[pos:pos + 1] not in (b"\n", b"\r"):
                pos += 1
            continue
        start = pos
        while pos < len(data) and data[pos:pos + 1].isdigit():
            pos += 1
        if start == pos or pos - start > 9:    # 10 digits exceed every limit; int() refuses 4301
            raise DecodeError("malformed PPM header")
        fields.append(int(data[start:pos]))
    if pos >= len(data) or not data[pos:pos + 1].isspace():
        raise DecodeError("malformed PPM header")
    width, height, maxval = fields
    if maxval != 255:
        raise DecodeError(f"PPM maxval {maxval} is not supported (255 only)")
    pixels = data[pos + 1:pos + 1 + width * height * 3]

    def decode() -> bytes:
        if len(pixels) != width * height * 3:
            raise DecodeError("PPM pixel data is truncated")
        return pixels

    return height, width, decode
