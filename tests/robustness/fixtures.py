"""The world the fuzz tests run in: an engine with both encoders and two adapters, media files
good and bad (the committed assets plus hostile files made here: a FIFO, a symlink to
/dev/zero, a directory, PNGs with bad CRCs, out-of-range palette indices or extra image data,
truncated and 8-bit WAVs), and the hints that steer generated request files towards them.
"""
from __future__ import annotations

import os
import shutil
import struct
import zlib
from pathlib import Path

from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
MEDIA = ROOT / "cases" / "media"

# Small enough that every valid request runs in milliseconds, big enough for a few images.
ENGINE_ARGS = {"maxInputLen": 48, "maxKVCacheCapacity": 64, "maxKVPoolPages": 0, "tokensPerPage": 4,
               "maxBatchSize": 2, "vision": True, "audio": True, "loraAdapters": ["a", "b"]}


def _chunk(kind: bytes, payload: bytes, crc: int | None = None) -> bytes:
    crc = zlib.crc32(kind + payload) if crc is None else crc
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def png(width: int, height: int, raw: bytes, colour: int = 2, depth: int = 8, palette: bytes | None = None,
        bad_crc: bool = False) -> bytes:
    """A PNG from raw filtered scanlines (each row: filter byte + pixels)."""
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    body = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr)
    if palette is not None:
        body += _chunk(b"PLTE", palette)
    idat = zlib.compress(raw)
    body += _chunk(b"IDAT", idat, crc=(zlib.crc32(b"IDAT" + idat) ^ 1) if bad_crc else None)
    return body + _chunk(b"IEND", b"")


def wav(samples: int, rate: int = 16000, channels: int = 1, width: int = 2, fmt: int = 1,
        declared: int | None = None) -> bytes:
    data = bytes(samples * channels * width)
    size = len(data) if declared is None else declared
    fmt_chunk = struct.pack("<HHIIHH", fmt, channels, rate, rate * channels * width, channels * width, 8 * width)
    return (b"RIFF" + struct.pack("<I", 36 + size) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt_chunk
            + b"data" + struct.pack("<I", size) + data)


HOSTILE = {
    # name: (bytes, what it is)
    "crc.png": (png(16, 16, b"".join(b"\0" + bytes(48) for _ in range(16)), bad_crc=True), "IDAT with a bad CRC"),
    "extra_rows.png": (png(16, 16, b"".join(b"\0" + bytes(48) for _ in range(20))), "more image data than rows"),
    "short_rows.png": (png(16, 16, b"".join(b"\0" + bytes(48) for _ in range(8))), "less image data than rows"),
    "bad_filter.png": (png(16, 16, b"".join(b"\7" + bytes(48) for _ in range(16))), "unknown row filter type 7"),
    "palette_index.png": (png(16, 16, b"".join(b"\0" + bytes([5] * 16) for _ in range(16)), colour=3,
                              palette=bytes(6)), "palette index 5 in a 2-entry palette"),
    "no_palette.png": (png(16, 16, b"".join(b"\0" + bytes(16) for _ in range(16)), colour=3), "palette PNG without PLTE"),
    "zero_width.png": (png(0, 16, b""), "width 0"),
    "wide_bomb.png": (png(16384, 16384, b"\0"), "16384x16384 declared: 268M pixels, 1M placeholders"),
    "side_bomb.png": (png(16385, 1, b"\0"), "a side above 16384"),
    "ppm_bomb.ppm": (b"P6\n100000 100000\n255\n" + bytes(64), "PPM declaring 100000x100000"),
    "ppm_maxval.ppm": (b"P6\n16 16\n65535\n" + bytes(16 * 16 * 6), "PPM maxval 65535"),
    "ppm_short.ppm": (b"P6\n16 16\n255\n" + bytes(100), "PPM with truncated pixels"),
    "ppm_garbage.ppm": (b"P6\nxx yy\n255\n", "PPM with a non-numeric header"),
    "ppm_digits.ppm": (b"P6\n" + b"9" * 5000 + b" 16\n255\n", "PPM width of 5000 digits"),
    "wav_8bit.wav": (wav(320, width=1), "8-bit PCM"),
    "wav_float.wav": (wav(320, width=4, fmt=3), "float PCM (format 3)"),
    "wav_44k.wav": (wav(320, rate=44100), "44.1 kHz"),
    "wav_truncated.wav": (wav(320, declared=6400), "data chunk declares 3200 samples, holds 320"),
    "wav_long.wav": (wav(48 * 320 + 1), "15361 samples: more placeholders than max_input_len"),
    "wav_odd.wav": (wav(100)[:-1], "odd number of data bytes"),
    "riff_only.wav": (b"RIFF", "four bytes"),
}


def make_media(tmp: Path) -> tuple[Path, dict[str, list[str]]]:
    """A media folder (committed assets + hostile files), and path lists for the hints:
    'image' and 'audio' paths as a request file in `tmp/req/` would write them."""
    media = tmp / "media"
    shutil.copytree(MEDIA, media)
    for name, (data, _) in HOSTILE.items():
        (media / name).write_bytes(data)
    (media / "a_directory.png").mkdir()
    os.mkfifo(media / "fifo.png")
    os.symlink("/dev/zero", media / "zero.png")
    os.symlink("/dev/urandom", media / "urandom.wav")
    os.symlink(media / "img_a_16x16.png", media / "link_to_good.png")
    os.symlink(media / "missing_target.png", media / "dangling.png")
    (tmp / "req").mkdir()
    names = sorted(p.name for p in media.iterdir())
    images = [n for n in names if not n.endswith(".wav")]
    audio = [n for n in names if n.endswith(".wav")]
    escapes = ["../../../../../../../../etc/passwd", "/etc/passwd", "/dev/zero", "/", ".", "..", "../media",
               "missing.png", "../media/missing.png", "/nonexistent/x.png", "a\u0000b.png", "\ud800.png",
               "x" * 5000 + ".png", "~/img.png", "file:///etc/passwd", " ../media/img_a_16x16.png"]
    paths = {
        "image": [f"../media/{n}" for n in images] + [str(media / n) for n in images[:6]] + escapes,
        "audio": [f"../media/{n}" for n in audio] + [str(media / n) for n in audio[:3]] + escapes,
    }
    return media, paths


def request_hints(paths: dict) -> dict:
    """JSON-path regex -> strategy, so generated request files reach the interesting code."""
    item = r"\$\.requests\[\d+\]\.messages\[\d+\]\.content\[\d+\]"
    good_images = [p for p in paths["image"] if "/img_" in p]
    good_audio = [p for p in paths["audio"] if "/audio_" in p]
    text = st.one_of(st.text(max_size=10), st.text("abcdefgh ", min_size=20, max_size=60),
                     st.sampled_from(["", "<|image|>", "\u00e9\u00e9", "\ud83d\ude00"]))
    return {
        rf"{item}\.image": st.one_of(st.sampled_from(good_images), st.sampled_from(paths["image"])),
        rf"{item}\.audio": st.one_of(st.sampled_from(good_audio), st.sampled_from(paths["audio"])),
        rf"{item}\.text": text,
        r"\$\.requests\[\d+\]\.lora_name": st.sampled_from(["a", "b", "c", "a"]),
        r"\$\.available_lora_weights": st.sampled_from([
            {}, {"a": "lora/a.safetensors"}, {"a": "lora/a.safetensors", "b": "lora/b.safetensors"},
            {"a": "lora/b.safetensors", "c": "lora/a.safetensors"}, {"a": "missing.safetensors"},
            {"a": "../media/img_a_16x16.png"}, {"b": "/dev/zero"}]),
        r"\$\.max_generate_length": st.integers(1, 24) | st.integers(1, 10 ** 6),
        r"\$\.batch_size": st.integers(1, 3),
    }
