"""Hostile media: every bad image or WAV, odd path and special file is
refused by the oracle (`kvconform validate`) and by the backend (`gpu_backend infer`) alike, as
an input error naming the item's JSON path, before anything runs; good media and paths that
leave the request file's folder upwards are accepted by both.

Contract (spec/tokenizer.md section 3, notes/robustness-questions.md Q2): a media path is used
as written, relative to the request file's folder or absolute, with no sandbox; what it names
must be a regular file in an accepted encoding. Decompression bombs are refused from the header.
Audio longer than max_input_len is not an input error: its batch fails (CR-BATCH-5).
"""
from __future__ import annotations

import json

import pytest

from tests.robustness import fixtures
from tests.robustness import harness

COMMITTED_BAD = {
    "bad_corrupt.png": "corrupt PNG (bad IHDR CRC)", "bad_truncated.png": "truncated PNG",
    "bad_empty.png": "zero-byte file", "bad_not_an_image.png": "text file named .png",
    "bad_bomb.png": "header declares 100000x100000", "bad_interlaced.png": "interlaced PNG",
    "bad_16bit.png": "16-bit PNG", "bad_arith.jpg": "arithmetic-coded JPEG", "bad_12bit.jpg": "12-bit JPEG",
    "bad_lossless.jpg": "lossless JPEG", "bad_cmyk.jpg": "CMYK JPEG", "bad_truncated.jpg": "truncated JPEG",
    "bad_audio_8k.wav": "8 kHz WAV", "bad_audio_stereo.wav": "stereo WAV", "bad_audio_corrupt.wav": "corrupt WAV",
    "bad_audio_empty.wav": "WAV with 0 samples",
}
HOSTILE = {name: what for name, (_, what) in fixtures.HOSTILE.items() if name != "wav_long.wav"}
SPECIAL = {"fifo.png": "a FIFO (opening blocks)", "zero.png": "symlink to /dev/zero", "urandom.wav": "symlink to /dev/urandom",
           "a_directory.png": "a directory", "dangling.png": "dangling symlink", "missing.png": "no such file"}
PATHS = {"../../../../../../../../../../etc/passwd": "upward escape to a non-media file", "/dev/zero": "a device",
         "/": "the root directory", "a\u0000b.png": "NUL byte in the path", "\ud800.png": "lone surrogate in the path"}
GOOD = ["img_a_16x16.png", "img_a_16x16.ppm", "img_j_a_32x48.jpg", "img_j_a_32x48_progressive.jpg", "img_a_16x16_palette.png", "img_a_16x16_rgba.png", "img_20x40.png",
        "img_g_16x16_gray.png", "link_to_good.png", "audio_a_16k.wav", "audio_c_16k.wav"]


def _file(world, ref: str) -> tuple:
    kind = "audio" if ref.endswith(".wav") else "image"
    doc = {"apply_chat_template": False, "temperature": 0, "max_generate_length": 2,
           "requests": [{"messages": [{"role": "user", "content": [{"type": "text", "text": "ab"},
                                                                   {"type": kind, kind: ref}]}]}]}
    f = world["req"] / f"media-{abs(hash(ref))}-{kind}.json"
    f.write_text(json.dumps(doc))
    return f, f"$.requests[0].messages[0].content[1].{kind}"


def _both(world, ref: str):
    f, path = _file(world, ref)
    out = f.with_suffix(".out.json")
    v = harness.kvconform(["validate", str(f), "--engine-config", str(world["config"])])
    b = harness.backend(["infer", "--engineDir", str(world["engine"]), "--inputFile", str(f), "--outputFile", str(out),
                         "--device", "cpu"])
    return f, path, out, v, b


@pytest.mark.parametrize("ref", sorted(COMMITTED_BAD) + sorted(HOSTILE) + sorted(SPECIAL))
def test_bad_media_refused_by_oracle_and_backend(world, ref):
    f, path, out, v, b = _both(world, f"../media/{ref}")
    assert harness.check_validate(v, str(f), True) is False and f": {path}: " in v.err, v.err
    assert harness.check_infer(b, str(f), str(out)) == 2 and f": {path}: " in b.err, b.err


@pytest.mark.parametrize("ref", sorted(PATHS))
def test_odd_paths_refused(world, ref):
    f, path, out, v, b = _both(world, ref)
    assert harness.check_validate(v, str(f), True) is False and f": {path}: " in v.err, v.err
    assert harness.check_infer(b, str(f), str(out)) == 2 and f": {path}: " in b.err, b.err


@pytest.mark.parametrize("ref", GOOD)
def test_good_media_accepted_relative_upwards_and_absolute(world, ref):
    for path in (f"../media/{ref}", str(world["media"] / ref)):
        f, _, out, v, b = _both(world, path)
        assert harness.check_validate(v, str(f), True) is True, v.err
        assert harness.check_infer(b, str(f), str(out)) == 0, b.err


def test_the_bomb_is_refused_from_its_header(world, monkeypatch):
    """Both decoders refuse 16384x16384 (268M pixels, 1M placeholders) by the pixel budget,
    without decompressing anything."""
    import zlib
    calls = []
    real = zlib.decompressobj
    monkeypatch.setattr(zlib, "decompressobj", lambda *a: calls.append(a) or real(*a))
    f, path, out, v, b = _both(world, "../media/wide_bomb.png")
    assert v.rc == 2 and b.rc == 2 and "pixel budget" in v.err and "pixel budget" in b.err
    assert not calls, "a decoder decompressed the bomb's image data"


def test_audio_longer_than_max_input_len_fails_its_batch(world):
    """Not an input error (only images are refused from their header): CR-BATCH-5 at run time."""
    f, path, out, v, b = _both(world, "../media/wav_long.wav")
    assert harness.check_validate(v, str(f), True) is True
    assert harness.check_infer(b, str(f), str(out)) == 1
    assert json.loads(out.read_text())["responses"][0]["finish_reason"] == "error"
    s = harness.kvconform(["simulate", "--engineConfig", str(world["config"]), "--inputFile", str(f),
                           "--profileOutputFile", str(f.with_suffix(".prof.json"))])
    assert harness.check_simulate(s, [str(f)], True) == 1 and "CR-BATCH-5" in s.err
