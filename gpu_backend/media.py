"""Media decoding for bytes-v1 (spec/tokenizer.md section 3).

Engines with an `hf` tokenizer decode images by the same rules; only the token count differs:
`decode_image(..., count=f)` counts an image with `f(H, W)` (the engine's media counter,
spec/media-tokens.md) instead of one placeholder per 16x16 patch, before any pixel is decoded.

Media identity is defined on decoded samples (CR-ID-4). Accepted: non-interlaced PNG (8-bit
grey, RGB, grey+alpha, RGBA; palette at 1/2/4/8 bits), binary PPM `P6` with maxval 255, JPEG
as Edge-LLM 0.10's stb_image decodes it (baseline, extended sequential or progressive Huffman
frames of 8-bit samples, 1 or 3 components; identity on the pixels Pillow decodes), and WAV PCM
16-bit mono at 16 kHz. Geometry is read from the header and checked before anything is
decompressed (sides, the pixel budget MAX_PIXELS, the placeholder count), so a decompression
bomb is refused without being decoded.
"""
import io
import math
import os
import stat
import struct
import warnings
import wave
import zlib

import numpy as np
from PIL import Image

from .identity import content_digest, media_digest

PATCH = 16          # pixels per side of one image placeholder's patch
FRAME = 320         # audio samples per audio placeholder
SAMPLE_RATE = 16000
MAX_SIDE = 16384
MAX_PIXELS = 2 ** 21   # the pixel budget of one image (spec/tokenizer.md section 3), checked from the header
MAX_FILE_BYTES = 32 << 20   # the largest media file read, checked from its size before reading

Image.MAX_IMAGE_PIXELS = None  # our own header checks refuse bombs; Pillow's warning would not

_PNG_SIG = b"\x89PNG\r\n\x1a\n"
_PNG_OK = {0: {8}, 2: {8}, 3: {1, 2, 4, 8}, 4: {8}, 6: {8}}  # colour type -> bit depths


class MediaError(Exception):
    """A media file that is missing, unreadable, undecodable or in an unsupported encoding."""


class MediaItem:
    """A decoded media item: `data` is RGB uint8 [H, W, 3] or float32 samples [S]."""

    __slots__ = ("modality", "geometry", "data", "digest", "content", "placeholders")

    def __init__(self, modality, geometry, data, placeholders=None):
        self.modality, self.geometry, self.data = modality, geometry, data
        raw = np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<"), copy=False).tobytes()
        self.digest = media_digest(modality, geometry, raw)
        self.content = content_digest(raw)
        if placeholders is not None:
            self.placeholders = placeholders
        elif modality == "image":
            H, W, _ = geometry
            self.placeholders = math.ceil(H / PATCH) * math.ceil(W / PATCH)
        else:
            self.placeholders = math.ceil(geometry[0] / FRAME)


def _read(path) -> bytes:
    """The bytes of a regular file. Anything else is refused from its metadata before it is
    opened: opening a FIFO blocks until a writer appears, and a device such as /dev/zero never
    ends."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise MediaError(f"no such file: {path}") from None
    except (OSError, ValueError) as e:           # ValueError: a NUL byte or a lone surrogate in the path
        raise MediaError(f"cannot read {path!r}: {getattr(e, 'strerror', None) or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise MediaError(f"{path} is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise MediaError(f"{path} is not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise MediaError(f"{path} has {st.st_size} bytes, above the {MAX_FILE_BYTES}-byte limit of a media file; "
                         "not read")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise MediaError(f"{path} has more than the {MAX_FILE_BYTES} bytes a media file may have")
        return data
    except OSError as e:
        raise MediaError(f"cannot read {path}: {e.strerror or e}") from None


def _check_geometry(H: int, W: int, max_placeholders: int, count=None) -> int:
    if H == 0 or W == 0:
        raise MediaError(f"image has a zero dimension ({H}x{W})")
    if H > MAX_SIDE or W > MAX_SIDE:
        raise MediaError(f"image of {H}x{W} exceeds the {MAX_SIDE}-pixel side limit")
    if H * W > MAX_PIXELS:
        raise MediaError(f"image of {H}x{W} has {H * W} pixels, above the {MAX_PIXELS}-pixel budget of one image")
    if count is not None:
        try:
            tokens = count(H, W)
        except ValueError as e:          # the counter's runtime refuses this size (TOK-MEDIA-1)
            raise MediaError(f"image of {H}x{W}: {e}") from None
        if tokens > max_placeholders:
            raise MediaError(f"image of {H}x{W} needs {tokens} tokens, more than max_input_len {max_placeholders}")
        return tokens
    count = math.ceil(H / PATCH) * math.ceil(W / PATCH)
    if count > max_placeholders:
        raise MediaError(f"image of {H}x{W} needs {count} placeholders, more than max_input_len {max_placeholders}")
    return count


def _decode_png(data: bytes, max_placeholders: int, count=None) -> np.ndarray:
    if len(data) < 33 or data[12:16] != b"IHDR":
        raise MediaError("PNG has no IHDR header")
    W, H = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    depth, ctype, interlace = data[24], data[25], data[28]
    _check_geometry(H, W, max_placeholders, count)
    if ctype not in _PNG_OK or depth not in _PNG_OK[ctype]:
        raise MediaError(f"unsupported PNG encoding (colour type {ctype}, bit depth {depth})")
    if interlace != 0:
        raise MediaError("interlaced PNG is not supported")
    entries = _check_png_structure(data, W, H, depth, ctype)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            im = Image.open(io.BytesIO(data), formats=["PNG"])
            im.load()
            if im.size != (W, H):
                raise MediaError("PNG header and image data disagree")
            if ctype == 3:
                top = int(np.asarray(im).max())
                if top >= entries:
                    raise MediaError(f"PNG palette index {top} is outside its {entries}-entry palette")
            if im.mode in ("LA", "La"):
                im = im.getchannel(0)
            rgb = np.array(im.convert("RGB"), dtype=np.uint8)
    except MediaError:
        raise
    except (OSError, ValueError, SyntaxError, EOFError, zlib.error, MemoryError) as e:
        raise MediaError(f"cannot decode PNG: {e}") from None
    return rgb


_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def _check_png_structure(data: bytes, W: int, H: int, depth: int, ctype: int) -> int:
    """What Pillow tolerates and the contract refuses (spec/tokenizer.md: an undecodable file is
    an input error, and the pixels must be the ones every decoder yields): a chunk cut short or
    with a bad CRC, a palette image without PLTE, and image data that is not exactly H rows
    (Pillow pads short data and ignores extra data). Returns the number of palette entries."""
    pos, idat, palette, first = 8, [], None, True
    while pos < len(data):
        if pos + 12 > len(data):
            raise MediaError("PNG is truncated inside a chunk header")
        length, kind = int.from_bytes(data[pos:pos + 4], "big"), data[pos + 4:pos + 8]
        end = pos + 12 + length
        if end > len(data):
            raise MediaError(f"PNG chunk {kind!r} is truncated")
        body = data[pos + 8:end - 4]
        if zlib.crc32(kind + body) != int.from_bytes(data[end - 4:end], "big"):
            raise MediaError(f"PNG chunk {kind!r} has a bad CRC")
        if first and (kind != b"IHDR" or length != 13):
            raise MediaError("PNG does not start with a 13-byte IHDR chunk")
        if first and (body[10] != 0 or body[11] != 0):
            raise MediaError("PNG compression or filter method is not 0")
        first = False
        if kind == b"IDAT":
            idat.append(body)
        elif kind == b"PLTE" and palette is None:
            palette = body
        elif kind == b"IEND":
            break
        pos = end
    if ctype == 3 and (not palette or len(palette) % 3):
        raise MediaError("palette PNG without a valid PLTE chunk")
    if not idat:
        raise MediaError("PNG has no image data (IDAT)")
    stride = (W * _CHANNELS[ctype] * depth + 7) // 8
    expected = H * (stride + 1)
    try:
        raw = zlib.decompressobj().decompress(b"".join(idat), expected + 1)   # bounded: no bomb
    except zlib.error as e:
        raise MediaError(f"PNG image data is corrupt: {e}") from None
    if len(raw) != expected:
        raise MediaError(f"PNG image data holds {len(raw)} bytes, {H} rows need {expected}")
    filters = raw[::stride + 1]
    if max(filters) > 4:
        raise MediaError(f"PNG row {next(i for i, f in enumerate(filters) if f > 4)} has an unknown filter type")
    return len(palette) // 3 if palette else 0


def _decode_ppm(data: bytes, max_placeholders: int, count=None) -> np.ndarray:
    fields, i = [], 2
    while len(fields) < 3:
        while i < len(data) and (data[i:i + 1].isspace() or data[i:i + 1] == b"#"):
            if data[i:i + 1] == b"#":
                while i < len(data) and data[i:i + 1] not in (b"\n", b"\r"):
                    i += 1
            else:
                i += 1
        j = i
        while j < len(data) and data[j:j + 1].isdigit():
            j += 1
        if j == i or j - i > 9:             # a 10-digit size is beyond any limit (and int() of 4301 digits raises)
            raise MediaError("malformed PPM header")
        fields.append(int(data[i:j]))
        i = j
    if i >= len(data) or not data[i:i + 1].isspace():
        raise MediaError("malformed PPM header")
    W, H, maxval = fields
    _check_geometry(H, W, max_placeholders, count)
    if maxval != 255:
        raise MediaError(f"PPM maxval {maxval} is not supported (only 255)")
    body = data[i + 1:i + 1 + H * W * 3]
    if len(body) < H * W * 3:
        raise MediaError("PPM pixel data is truncated")
    return np.frombuffer(body, dtype=np.uint8).reshape(H, W, 3).copy()


_JPEG_FRAMES = {0xC0, 0xC1, 0xC2}                        # baseline, extended sequential, progressive
_JPEG_OTHER_FRAMES = {0xC3: "lossless", 0xC5: "hierarchical", 0xC6: "hierarchical", 0xC7: "hierarchical",
                      0xC9: "arithmetic-coded", 0xCA: "arithmetic-coded", 0xCB: "arithmetic-coded",
                      0xCD: "arithmetic-coded", 0xCE: "arithmetic-coded", 0xCF: "arithmetic-coded"}


def _jpeg_geometry(data: bytes) -> tuple[int, int]:
    """(H, W) from the frame header; the frame kinds, precision and component counts stb_image
    accepts, refused before any pixel is decoded otherwise."""
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            raise MediaError(f"JPEG is malformed: no marker at byte {i}")
        m = data[i + 1]
        if m == 0xFF:
            i += 1
        elif m == 0x01 or 0xD0 <= m <= 0xD8:
            i += 2
        elif m in (0xD9, 0xDA):
            break
        else:
            seg = int.from_bytes(data[i + 2:i + 4], "big")
            if seg < 2 or i + 2 + seg > len(data):
                raise MediaError("JPEG segment is truncated")
            if m in _JPEG_OTHER_FRAMES:
                raise MediaError(f"{_JPEG_OTHER_FRAMES[m]} JPEG is not supported (baseline or progressive 8-bit only)")
            if m in _JPEG_FRAMES:
                if seg < 8:
                    raise MediaError("JPEG frame header is truncated")
                bits, H, W, comps = data[i + 4], int.from_bytes(data[i + 5:i + 7], "big"), \
                    int.from_bytes(data[i + 7:i + 9], "big"), data[i + 9]
                if bits != 8:
                    raise MediaError(f"{bits}-bit JPEG is not supported (8-bit only)")
                if comps not in (1, 3):
                    raise MediaError(f"JPEG with {comps} components is not supported (grey or colour, not CMYK)")
                if H == 0:
                    raise MediaError("JPEG whose height is given by a DNL marker is not supported")
                return H, W
            i += 2 + seg
    raise MediaError("JPEG has no frame header before its image data")


def _decode_jpeg(data: bytes, max_placeholders: int, count=None) -> np.ndarray:
    H, W = _jpeg_geometry(data)
    _check_geometry(H, W, max_placeholders, count)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            im = Image.open(io.BytesIO(data), formats=["JPEG"])
            im.load()
            if im.size != (W, H):
                raise MediaError("JPEG header and image data disagree")
            return np.array(im.convert("RGB"), dtype=np.uint8)
    except MediaError:
        raise
    except (OSError, ValueError, SyntaxError, EOFError, MemoryError) as e:
        raise MediaError(f"cannot decode JPEG: {e}") from None


def decode_image(path, max_placeholders: int, count=None) -> MediaItem:
    """`count(H, W)`: the engine's token count for an image (ValueError: refused); None: bytes-v1."""
    data = _read(path)
    if data.startswith(_PNG_SIG):
        rgb = _decode_png(data, max_placeholders, count)
    elif data[:2] == b"P6":
        rgb = _decode_ppm(data, max_placeholders, count)
    elif data[:2] == b"\xff\xd8":
        rgb = _decode_jpeg(data, max_placeholders, count)
    elif not data:
        raise MediaError("image file is empty")
    else:
        raise MediaError("unsupported image encoding (accepted: PNG, binary PPM P6, JPEG)")
    H, W, _ = rgb.shape
    return MediaItem("image", (H, W, 3), rgb, None if count is None else count(H, W))


def decode_audio(path, max_placeholders: int) -> MediaItem:
    data = _read(path)
    try:
        with wave.open(io.BytesIO(data), "rb") as w:
            channels, width, rate, frames = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            if channels != 1 or width != 2 or rate != SAMPLE_RATE:
                raise MediaError(f"unsupported WAV format ({channels} channels, {8 * width}-bit, {rate} Hz);"
                                 f" need PCM 16-bit mono {SAMPLE_RATE} Hz")
            if frames == 0:
                raise MediaError("WAV file has no samples")
            # No placeholder limit here: a WAV file holds its samples uncompressed (no bomb), and
            # an input longer than max_input_len fails its batch at run time (CR-BATCH-5); only
            # images are refused from their header (spec/tokenizer.md section 3).
            pcm = w.readframes(frames)
    except MediaError:
        raise
    except (wave.Error, EOFError, OSError, ValueError, struct.error) as e:
        raise MediaError(f"cannot decode WAV: {e}") from None
    if len(pcm) != 2 * frames:
        raise MediaError("WAV sample data is truncated")
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    return MediaItem("audio", (len(samples),), samples)

