"""Media decoding for bytes-v1 (spec/tokenizer.md section 3).

Only encodings whose decoded samples every decoder agrees on are accepted, because media
identity is defined on decoded samples (CR-ID-4): non-interlaced PNG (8-bit grey, RGB,
grey+alpha, RGBA; palette at 1/2/4/8 bits), binary PPM `P6` with maxval 255, and WAV PCM
16-bit mono at 16 kHz. Geometry is read from the header and checked before anything is
decompressed, so a decompression bomb is refused without being decoded.
"""
import io
import math
import struct
import warnings
import wave
import zlib

import numpy as np
from PIL import Image

from .identity import media_digest

PATCH = 16          # pixels per side of one image placeholder's patch
FRAME = 320         # audio samples per audio placeholder
SAMPLE_RATE = 16000
MAX_SIDE = 16384

Image.MAX_IMAGE_PIXELS = None  # our own header checks refuse bombs; Pillow's warning would not

_PNG_SIG = b"\x89PNG\r\n\x1a\n"
_PNG_OK = {0: {8}, 2: {8}, 3: {1, 2, 4, 8}, 4: {8}, 6: {8}}  # colour type -> bit depths


class MediaError(Exception):
    """A media file that is missing, unreadable, undecodable or in an unsupported encoding."""


class MediaItem:
    """A decoded media item: `data` is RGB uint8 [H, W, 3] or float32 samples [S]."""

    __slots__ = ("modality", "geometry", "data", "digest", "placeholders")

    def __init__(self, modality, geometry, data):
        self.modality, self.geometry, self.data = modality, geometry, data
        raw = np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<"), copy=False).tobytes()
        self.digest = media_digest(modality, geometry, raw)
        if modality == "image":
            H, W, _ = geometry
            self.placeholders = math.ceil(H / PATCH) * math.ceil(W / PATCH)
        else:
            self.placeholders = math.ceil(geometry[0] / FRAME)


def _read(path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except IsADirectoryError:
        raise MediaError(f"{path} is a directory") from None
    except FileNotFoundError:
        raise MediaError(f"no such file: {path}") from None
    except OSError as e:
        raise MediaError(f"cannot read {path}: {e.strerror or e}") from None


def _check_geometry(H: int, W: int, max_placeholders: int) -> None:
    if H == 0 or W == 0:
        raise MediaError(f"image has a zero dimension ({H}x{W})")
    if H > MAX_SIDE or W > MAX_SIDE:
        raise MediaError(f"image of {H}x{W} exceeds the {MAX_SIDE}-pixel side limit")
    count = math.ceil(H / PATCH) * math.ceil(W / PATCH)
    if count > max_placeholders:
        raise MediaError(f"image of {H}x{W} needs {count} placeholders, more than max_input_len {max_placeholders}")


def _decode_png(data: bytes, max_placeholders: int) -> np.ndarray:
    if len(data) < 33 or data[12:16] != b"IHDR":
        raise MediaError("PNG has no IHDR header")
    W, H = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    depth, ctype, interlace = data[24], data[25], data[28]
    _check_geometry(H, W, max_placeholders)
    if ctype not in _PNG_OK or depth not in _PNG_OK[ctype]:
        raise MediaError(f"unsupported PNG encoding (colour type {ctype}, bit depth {depth})")
    if interlace != 0:
        raise MediaError("interlaced PNG is not supported")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            im = Image.open(io.BytesIO(data), formats=["PNG"])
            im.load()
            if im.size != (W, H):
                raise MediaError("PNG header and image data disagree")
            if im.mode in ("LA", "La"):
                im = im.getchannel(0)
            rgb = np.array(im.convert("RGB"), dtype=np.uint8)
    except MediaError:
        raise
    except (OSError, ValueError, SyntaxError, EOFError, zlib.error, MemoryError) as e:
        raise MediaError(f"cannot decode PNG: {e}") from None
    return rgb


def _decode_ppm(data: bytes, max_placeholders: int) -> np.ndarray:
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
        if j == i:
            raise MediaError("malformed PPM header")
        fields.append(int(data[i:j]))
        i = j
    if i >= len(data) or not data[i:i + 1].isspace():
        raise MediaError("malformed PPM header")
    W, H, maxval = fields
    _check_geometry(H, W, max_placeholders)
    if maxval != 255:
        raise MediaError(f"PPM maxval {maxval} is not supported (only 255)")
    body = data[i + 1:i + 1 + H * W * 3]
    if len(body) < H * W * 3:
        raise MediaError("PPM pixel data is truncated")
    return np.frombuffer(body, dtype=np.uint8).reshape(H, W, 3).copy()


def decode_image(path, max_placeholders: int) -> MediaItem:
    data = _read(path)
    if data.startswith(_PNG_SIG):
        rgb = _decode_png(data, max_placeholders)
    elif data[:2] == b"P6":
        rgb = _decode_ppm(data, max_placeholders)
    elif not data:
        raise MediaError("image file is empty")
    else:
        raise MediaError("unsupported image encoding (accepted: PNG, binary PPM P6)")
    H, W, _ = rgb.shape
    return MediaItem("image", (H, W, 3), rgb)


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
            if math.ceil(frames / FRAME) > max_placeholders:
                raise MediaError(f"audio of {frames} samples needs {math.ceil(frames / FRAME)} placeholders,"
                                 f" more than max_input_len {max_placeholders}")
            pcm = w.readframes(frames)
    except MediaError:
        raise
    except (wave.Error, EOFError, OSError, ValueError, struct.error) as e:
        raise MediaError(f"cannot decode WAV: {e}") from None
    if len(pcm) != 2 * frames:
        raise MediaError("WAV sample data is truncated")
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    return MediaItem("audio", (len(samples),), samples)

