"""Decompression bombs inside the 16384-pixel side limit are refused from the header by the pixel
budget both sides share (spec/tokenizer.md section 3: 2^21 pixels), before anything is
decompressed, on every path: no engine (`kvconform validate`), an engine whose media counter
resizes (`hf` counters: the oracle's `simulate` and `validate --engine-config`, the backend's
`infer`). They once took 7.2 GB (`gpu_backend infer`), more than 90 s (`kvconform validate`,
pure-Python unfiltering), or a traceback (`PIL.Image.DecompressionBombError` for a JPEG).

Each bomb is made here: a real 16384 x 16384 PNG (its image data inflates to 268 MB) and a JPEG
whose frame header says 16384 x 16384. Every command runs in a child process under a 3 GiB cap;
the test asserts one line, exit 2, and peak memory and CPU time far below the machine."""
from __future__ import annotations

import io
import json
import struct
import zlib

import pytest

from tests.robustness.bounded import measured

SIDE = 16384
MEMORY_MB = 1024          # the bound asserted: well below the machine, well above a run's baseline
CPU_S = 10.0


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png_bomb() -> bytes:
    """16384 x 16384 grey, every row of zeros: 268 MB of pixels in a file of about 260 KB."""
    z = zlib.compressobj(9)
    row = bytes(1 + SIDE)
    idat = b"".join(z.compress(row) for _ in range(SIDE)) + z.flush()
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", SIDE, SIDE, 8, 0, 0, 0, 0))
            + _chunk(b"IDAT", idat) + _chunk(b"IEND", b""))


def _jpeg_bomb() -> bytes:
    """A 16 x 16 baseline JPEG whose frame header (SOF0) says 16384 x 16384."""
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 10, 10)).save(buf, "JPEG")
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", SIDE, SIDE)
    return bytes(data)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from gpu_backend import build_engine
    from conformance.commands.selftest import FIXED_ENGINES
    root = tmp_path_factory.mktemp("bombs")
    (root / "bomb.png").write_bytes(_png_bomb())
    (root / "bomb.jpg").write_bytes(_jpeg_bomb())
    engine = root / "hf-internvl"       # Phi-3-vision's tokenizer, the InternVL counter: at most 1280 tokens an image
    build_engine(str(engine), FIXED_ENGINES["p128-phi3-vision-hf-internvl"])
    for kind in ("png", "jpg"):
        (root / f"{kind}.json").write_text(json.dumps({"apply_chat_template": False, "max_generate_length": 1,
                                                       "requests": [{"messages": [{"role": "user", "content": [
                                                           {"type": "image", "image": f"bomb.{kind}"},
                                                           {"type": "text", "text": "what is it?"}]}]}]}))
    return root, engine


PATHS = {
    "validate, no engine": ("conformance.cli", ["validate", "{req}"]),
    "validate, hf counter": ("conformance.cli", ["validate", "--engine-config", "{engine}/config.json", "{req}"]),
    "simulate, hf counter": ("conformance.cli", ["simulate", "--engineDir", "{engine}", "--inputFile", "{req}",
                                                 "--profileOutputFile", "{tmp}/p.json"]),
    "backend infer, hf counter": ("gpu_backend", ["infer", "--engineDir", "{engine}", "--inputFile", "{req}",
                                                  "--outputFile", "{tmp}/o.json", "--device", "cpu"]),
}


@pytest.mark.parametrize("kind", ["png", "jpg"])
@pytest.mark.parametrize("path", list(PATHS))
def test_a_bomb_is_refused_from_its_header_on_every_path(world, tmp_path, path, kind):
    root, engine = world
    if kind == "jpg" and path in ("validate, hf counter", "simulate, hf counter"):
        pytest.skip("the oracle's JPEG path is the one `validate, no engine` takes; two children are enough")
    module, argv = PATHS[path]
    argv = [a.format(req=root / f"{kind}.json", engine=engine, tmp=tmp_path) for a in argv]
    got = measured(module, argv, tmp_path)
    lines = [line for line in got.err.splitlines() if line.strip()]
    assert got.rc == 2, got.err[-3000:]
    assert len(lines) == 1 and "Traceback" not in got.err, got.err[-3000:]
    assert f"{SIDE}x{SIDE}" in lines[0] and "pixel" in lines[0] and "budget" in lines[0], lines[0]
    assert got.rss_mb < MEMORY_MB and got.cpu_s < CPU_S, (got.rss_mb, got.cpu_s)
    assert not (tmp_path / "o.json").exists() and not (tmp_path / "p.json").exists()


def _png_rgba(width: int, height: int, filter_type: int) -> bytes:
    row = bytes([filter_type]) + bytes(range(256)) * (width * 4 // 256) + bytes(width * 4 % 256)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(row * height, 9)) + _chunk(b"IEND", b""))


def test_the_budget_is_the_same_on_both_sides_at_its_edge(tmp_path):
    """2048 x 1024 (the budget) is decoded by both; 2048 x 1025 refused by both, from the header."""
    from gpu_backend.media import MAX_PIXELS as BACKEND, MediaError, decode_image
    from reference.decode import MAX_PIXELS as ORACLE, DecodeError, load_image
    assert ORACLE == BACKEND == 2 ** 21
    (tmp_path / "edge.png").write_bytes(_png_rgba(2048, 1024, 0))
    (tmp_path / "over.png").write_bytes(_png_rgba(2048, 1025, 0))
    assert load_image(str(tmp_path / "edge.png")).geometry == (1024, 2048, 3)
    assert decode_image(str(tmp_path / "edge.png"), 10 ** 9).geometry == (1024, 2048, 3)
    with pytest.raises(DecodeError, match="2099200 pixels"):
        load_image(str(tmp_path / "over.png"))
    with pytest.raises(MediaError, match="2099200 pixels"):
        decode_image(str(tmp_path / "over.png"), 10 ** 9)


def test_the_worst_image_within_the_budget_is_bounded(tmp_path):
    """The slowest image the oracle accepts, 2048 x 1024 RGBA with every row Paeth-filtered
    (its pure-Python unfiltering does the most work per byte), decodes in bounded memory and CPU."""
    (tmp_path / "worst.png").write_bytes(_png_rgba(2048, 1024, 4))
    (tmp_path / "worst.json").write_text(json.dumps({"requests": [{"messages": [{"role": "user", "content": [
        {"type": "image", "image": "worst.png"}]}]}]}))
    got = measured("conformance.cli", ["validate", tmp_path / "worst.json"], tmp_path)
    assert got.rc == 0, got.err[-2000:]
    assert got.rss_mb < MEMORY_MB and got.cpu_s < CPU_S, (got.rss_mb, got.cpu_s)
