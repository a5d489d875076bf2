"""Media decoding (spec/tokenizer.md section 3): every accepted encoding decodes to the pixels
Pillow sees, every refused one is refused with a reason, identity follows CR-ID-4."""
import os
import struct
import wave
import zlib
from pathlib import Path

import pytest
from PIL import Image

from reference.decode import DecodeError, load_audio, load_image
from reference.identity import media_item_digest

MEDIA = Path(__file__).resolve().parents[2] / "cases" / "media"


def pil_digest(path) -> bytes:
    im = Image.open(path).convert("RGB")
    return media_item_digest("image", (im.height, im.width, 3), im.tobytes())


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def filtered_png(pixels: bytes, width: int, height: int, filters) -> bytes:
    """An RGB PNG whose row y uses filter filters[y % len(filters)] (0-4), encoded by hand."""
    bpp, stride = 3, width * 3
    rows, prior = [], bytes(stride)
    for y in range(height):
        line = pixels[y * stride:(y + 1) * stride]
        f = filters[y % len(filters)]
        out = bytearray()
        for i, x in enumerate(line):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prior[i], (prior[i - bpp] if i >= bpp else 0)
            if f == 0:
                pred = 0
            elif f == 1:
                pred = a
            elif f == 2:
                pred = b
            elif f == 3:
                pred = (a + b) // 2
            else:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            out.append((x - pred) & 0xFF)
        rows.append(bytes([f]) + bytes(out))
        prior = line
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"tEXt", b"k\x00v")
            + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))


@pytest.mark.parametrize("name", sorted(p.name for p in MEDIA.glob("img_*")))
def test_committed_images_decode_to_the_pixels_pillow_sees(name):
    item = load_image(str(MEDIA / name))
    assert item.digest == pil_digest(MEDIA / name), f"{name}: decoded pixels differ from Pillow's"


def test_placeholder_counts():
    """spec/tokenizer.md: ceil(H/16) * ceil(W/16); the 20x40 worked example gives 6."""
    counts = {n: load_image(str(MEDIA / n)).placeholders for n in
              ("img_a_16x16.png", "img_a_16x64.png", "img_a_32x32.png", "img_20x40.png", "img_t_16x32.png")}
    assert counts == {"img_a_16x16.png": 1, "img_a_16x64.png": 4, "img_a_32x32.png": 4, "img_20x40.png": 6,
                      "img_t_16x32.png": 2}


def test_same_pixels_in_other_encodings_are_one_item_and_geometry_separates_items():
    """CR-ID-4: identity is over decoded pixels and geometry."""
    a = {load_image(str(MEDIA / n)).digest for n in ("img_a_16x16.png", "img_a_16x16.ppm", "img_a_16x16_palette.png",
                                                     "img_a_16x16_rgba.png", "img_a_16x16_z0.png")}
    assert len(a) == 1
    assert load_image(str(MEDIA / "img_g_16x16_gray.png")).digest == load_image(str(MEDIA / "img_g_16x16_rgb.png")).digest
    assert load_image(str(MEDIA / "img_t_16x32.png")).digest != load_image(str(MEDIA / "img_t_32x16.png")).digest


@pytest.mark.parametrize("filters", [[0], [1], [2], [3], [4], [0, 1, 2, 3, 4]])
def test_every_png_filter_type(tmp_path, filters):
    width, height = 7, 5
    pixels = bytes((x * 37 + y * 91 + c * 13) % 256 for y in range(height) for x in range(width) for c in range(3))
    path = tmp_path / "f.png"
    path.write_bytes(filtered_png(pixels, width, height, filters))
    assert load_image(str(path)).digest == media_item_digest("image", (height, width, 3), pixels)
    assert load_image(str(path)).digest == pil_digest(path)


@pytest.mark.parametrize("mode, options", [("L", {}), ("LA", {}), ("RGBA", {}), ("P", {"bits": 1}), ("P", {"bits": 2}),
                                           ("P", {"bits": 4}), ("P", {})])
def test_png_colour_types_and_palette_depths(tmp_path, mode, options):
    colours = 2 ** options.get("bits", 8)
    source = Image.frombytes("RGB", (13, 9), bytes((i * 53) % 251 for i in range(13 * 9 * 3)))
    image = source.quantize(colors=colours) if mode == "P" else source.convert(mode)
    path = tmp_path / "x.png"
    image.save(path, **options)
    assert load_image(str(path)).digest == pil_digest(path)


def test_ppm_header_comments(tmp_path):
    pixels = bytes(range(2 * 3 * 3))
    path = tmp_path / "c.ppm"
    path.write_bytes(b"P6\n# a comment\n3 # width\n2\n255\n" + pixels)
    assert load_image(str(path)).digest == media_item_digest("image", (2, 3, 3), pixels)


@pytest.mark.parametrize("name, reason", [
    ("bad_16bit.png", "bit depth 16"), ("bad_bomb.png", "100000x100000"), ("bad_corrupt.png", "CRC"),
    ("bad_empty.png", "not a PNG"), ("bad_interlaced.png", "interlaced"),
    ("bad_arith.jpg", "arithmetic-coded"), ("bad_12bit.jpg", "12-bit"), ("bad_lossless.jpg", "lossless"),
    ("bad_cmyk.jpg", "CMYK"), ("bad_truncated.jpg", "corrupt"),
    ("bad_not_an_image.png", "not a PNG"), ("bad_truncated.png", "truncated"), ("does_not_exist.png", "not found"),
])
def test_refused_images(name, reason):
    with pytest.raises(DecodeError, match=reason):
        load_image(str(MEDIA / name))


def test_directory_and_unsupported_encodings_are_refused(tmp_path):
    with pytest.raises(DecodeError, match="directory"):
        load_image(str(tmp_path))
    ppm = tmp_path / "p.ppm"
    ppm.write_bytes(b"P6 2 2 65535\n" + bytes(24))
    with pytest.raises(DecodeError, match="maxval"):
        load_image(str(ppm))
    bilevel = tmp_path / "b.png"
    Image.new("1", (8, 8)).save(bilevel)
    with pytest.raises(DecodeError, match="bit depth 1"):
        load_image(str(bilevel))


def test_placeholder_limit_refuses_from_the_header():
    """A 32x32 image needs 4 placeholders: refused when max_input_len is 3."""
    with pytest.raises(DecodeError, match="max_input_len 3"):
        load_image(str(MEDIA / "img_a_32x32.png"), max_placeholders=3)
    assert load_image(str(MEDIA / "img_a_32x32.png"), max_placeholders=4).placeholders == 4


def test_audio():
    assert load_audio(str(MEDIA / "audio_a_16k.wav")).placeholders == 10       # ceil(3200/320)
    assert load_audio(str(MEDIA / "audio_c_16k.wav")).placeholders == 4        # ceil(961/320)
    assert load_audio(str(MEDIA / "audio_a_16k.wav")).digest != load_audio(str(MEDIA / "audio_b_16k.wav")).digest
    for name, reason in (("bad_audio_8k.wav", "8000 Hz"), ("bad_audio_stereo.wav", "2-channel"),
                         ("bad_audio_corrupt.wav", "WAV"), ("bad_audio_empty.wav", "0 samples")):
        with pytest.raises(DecodeError, match=reason):
            load_audio(str(MEDIA / name))


def test_audio_identity_is_the_float32_samples(tmp_path):
    samples = [0, 1, -1, 32767, -32768, 1234]
    path = tmp_path / "a.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(struct.pack("<6h", *samples))
    floats = struct.pack("<6f", *(x / 32768 for x in samples))
    assert load_audio(str(path)).digest == media_item_digest("audio", (6,), floats)


def test_a_rewritten_file_is_decoded_again(tmp_path):
    """Decoded items are cached by (path, size, mtime): new content under the same name counts."""
    path = tmp_path / "x.ppm"
    path.write_bytes(b"P6 1 1 255\n" + b"\x01\x02\x03")
    os.utime(path, ns=(1, 1))
    first = load_image(str(path)).digest
    path.write_bytes(b"P6 1 1 255\n" + b"\x09\x02\x03")
    os.utime(path, ns=(2, 2))
    assert load_image(str(path)).digest != first


def test_jpeg_identity_is_over_decoded_pixels_and_counts_come_from_the_header():
    """spec/tokenizer.md section 3: baseline and progressive 8-bit JPEG, as Edge-LLM 0.10's stb_image
    decodes it (cpp/runtime/imageUtils.cpp loadImageFromFile). The placeholder count comes from the
    frame header (32 x 48: 2 x 3 patches); the same pixels in two encodings are one item; transposed
    geometry is another."""
    a = load_image(str(MEDIA / "img_j_a_32x48.jpg"))
    assert (a.geometry, a.placeholders) == ((32, 48, 3), 6)
    assert load_image(str(MEDIA / "img_j_a_32x48_progressive.jpg")).digest == a.digest
    b = load_image(str(MEDIA / "img_j_b_48x32.jpg"))
    assert (b.geometry, b.placeholders) == ((48, 32, 3), 6) and b.digest != a.digest
    with pytest.raises(DecodeError, match="needs 6 placeholders"):
        load_image(str(MEDIA / "img_j_a_32x48.jpg"), max_placeholders=5)       # refused from the header
