#!/usr/bin/env python3
"""Write the media assets of cases/media/ deterministically.

    python tools/make_media.py [OUT_DIR]

The assets are committed; re-running this script must reproduce them byte for byte on the
same Pillow/zlib versions (the tests only depend on their decoded pixels and samples, which
are fixed by the seeds below). What each asset is for:

- `img_{a,b,c}_16x16.png`: three different images of one placeholder each (bytes-v1: one
  placeholder per 16x16 patch).
- `img_{a,b}_16x64.png`: four placeholders in one row, to split an image across pages.
- `img_a_32x32.png`, `img_20x40.png`: 4 and 2*3 = 6 placeholders (partial patches pad).
- `img_q_70x28.png`: 70 rows, where Qwen-VL's resize rounds 70/28 = 2.5 to 3 rows of patches in
  Edge-LLM and to 2 in transformers (spec/media-tokens.md).
- `img_l_900x912.png`, `img_l_448x2240.png`, `img_l_600x800.png`: large images that every image
  counter resizes (Qwen-VL's max-pixels branch, a 4x1 InternVL grid, a Phi-3-vision HD
  transform), of 2.5M, 3.0M and 1.4M samples: the numerical reference checks their encoder
  rows, whose resampling positions must be exact (spec/engine.md section 5).
- `img_k_HxW.png`: images at the comparison bounds of the image counters and one grid step or
  pixel each side (tools/make_cases.py `counter_bound_cases`): Qwen-VL's rounded area at
  min_pixels and max_pixels and its aspect limit of 200, a 10-pixel side that Edge-LLM clamps to
  one factor, InternVL's tile limits, Phi-3-vision's crop limit.
- `qwen3-bytes/`: an `hf` tokenizer folder for cases about the chat template's switches and
  special tokens (`mini_qwen3_tokenizer`): Qwen3's own chat template and special tokens over a
  byte-level vocabulary of one token per byte (id b for byte b), so every count is derived by
  hand from the rendered text.
- `qwen3-bytes-<name>/`: the same tokenizer with another template (`TEMPLATES`): `features`
  (tojson on a mapping, the EOS token's variable, a `{% generation %}` block), `named` (the
  config's list of named templates, no chat_template.jinja: the one named `default` is used),
  `1mib` (a source of exactly 1 MiB), and templates at the bounds on untrusted code: `ballast`
  (a string of the keyword `ballast_bytes`' size), `recursion` (a macro that calls itself). (The
  output bound is left to the tests: a render past 16 Mi characters is past the 1 MiB input-text
  bound too, so no request tells the two apart.)
- `img_t_16x32.png` / `img_t_32x16.png`: the same raw RGB bytes under transposed geometry:
  different items by CR-ID-4 although their bytes are equal.
- `img_a_16x16` re-encoded: `_palette.png` (colour type 3), `_rgba.png` (alpha dropped),
  `_z0.png` (no compression, other filters), `.ppm` (binary P6): the same decoded pixels, so
  the same item.
- `img_g_16x16_gray.png` / `img_g_16x16_rgb.png`: a grey image as colour type 0 and as RGB.
- Refused images: `bad_corrupt.png`, `bad_truncated.png`, `bad_empty.png`,
  `bad_not_an_image.png`, `bad_bomb.png` (a header declaring 100000x100000),
  `bad_interlaced.png`, `bad_16bit.png`.
- `img_j_a_32x48.jpg` / `img_j_b_48x32.jpg`: baseline JPEG (6 placeholders each), the two images
  of the port of Edge-LLM's vlm_context_reuse.json; `img_j_a_32x48_progressive.jpg` the first one
  re-encoded progressive. Refused JPEG (spec/tokenizer.md section 3): `bad_arith.jpg`,
  `bad_12bit.jpg`, `bad_lossless.jpg` (frame headers only), `bad_cmyk.jpg`, `bad_truncated.jpg`.
  `img_j_a_32x48_exif6.jpg` is the first one with an EXIF orientation of 6 (not applied:
  the same item), `img_j_a_32x48_fill.jpg` the first one with three 0xFF fill bytes before each
  marker (skipped: the same item), `img_j_a_32x48_com.jpg` the first one with an empty comment
  segment and one of 300 bytes (skipped: the same item). `img_j_g_1x272.jpg` (grey, one row)
  and `img_j_t_272x1.jpg` (colour, one column): the least side, a side above 255 (both bytes of
  the frame header's field count) and one component. Refused: `bad_jpeg_cmyk_ids.jpg`
  (`bad_cmyk.jpg` with its components named 1-4, as grey and colour files name theirs); malformed headers:
  `bad_jpeg_no_frame.jpg` (the file ends after APP0), `bad_jpeg_eoi_first.jpg` (EOI right after
  SOI), `bad_jpeg_ff00_first.jpg` (0xFF 0x00 right after SOI), `bad_jpeg_sof_cut.jpg` (a frame header longer than the file), `bad_jpeg_sof_short.jpg`
  (a frame header of 7 bytes, below the 8 its fields need).
- `audio_{a,b}_16k.wav` (3200 samples: 10 placeholders), `audio_c_16k.wav` (961 samples: 4);
  refused: `bad_audio_8k.wav`, `bad_audio_stereo.wav`, `bad_audio_corrupt.wav`,
  `bad_audio_empty.wav`.
"""
from __future__ import annotations

import io
import json
import random
import struct
import sys
import wave
import zlib
from pathlib import Path

from PIL import Image

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "cases" / "media"


def pixels(seed: int, height: int, width: int, colours: int = 64) -> bytes:
    """Row-major RGB bytes drawn from a small seeded palette (so a palette PNG can hold them)."""
    rng = random.Random(seed)
    palette = [tuple(rng.randrange(256) for _ in range(3)) for _ in range(colours)]
    out = bytearray()
    for _ in range(height * width):
        out.extend(palette[rng.randrange(colours)])
    return bytes(out)


def striped(seed: int, height: int, width: int) -> bytes:
    """A large image whose rows repeat a band of seeded rows: neighbouring samples differ as in
    `pixels`, but the PNG stays small (the band fits deflate's 32 KiB window, which finds it)."""
    band = pixels(seed, max(1, 30000 // (3 * width)), width)
    return (band * (height * width * 3 // len(band) + 1))[: height * width * 3]


def rgb_image(data: bytes, height: int, width: int) -> Image.Image:
    return Image.frombytes("RGB", (width, height), data)


def png_bytes(image: Image.Image, **options) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG", **options)
    return buf.getvalue()


def ppm_bytes(data: bytes, height: int, width: int) -> bytes:
    return f"P6\n{width} {height}\n255\n".encode() + data


def png_chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def png_header_only(width: int, height: int, interlace: int, body: bytes = b"") -> bytes:
    """A PNG whose header is valid, for files a decoder must refuse from the header alone."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr)
            + png_chunk(b"IDAT", zlib.compress(body)) + png_chunk(b"IEND", b""))


def jpeg_bytes(image: Image.Image, **options) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=90, **options)
    return buf.getvalue()


def jpeg_segments(data: bytes) -> list[int]:
    """The offsets of the marker segments before the scan (after SOI)."""
    out, i = [], 2
    while i + 4 <= len(data) and data[i] == 0xFF and data[i + 1] != 0xDA:
        out.append(i)
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    return out + [i]


def with_exif_orientation(data: bytes, orientation: int) -> bytes:
    """The same JPEG with an APP1 EXIF segment saying `orientation` (6: shown rotated 90 degrees
    clockwise): the coefficients and so the pixels are unchanged; a loader that applies the
    orientation (stb_image does not) turns 32x48 into 48x32."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    payload = exif.tobytes()
    return data[:2] + b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload + data[2:]


def with_fill_bytes(data: bytes, count: int) -> bytes:
    """The same JPEG with `count` 0xFF fill bytes before each marker after SOI (ITU T.81 B.1.1.2
    allows any number): a parser that does not skip them meets 0xFF where it expects a marker."""
    out, last = bytearray(data[:2]), 2
    for at in jpeg_segments(data):
        out += data[last:at] + b"\xff" * count
        last = at
    return bytes(out + data[last:])


def with_comments(data: bytes, comments: list[bytes]) -> bytes:
    """The same JPEG with a COM segment per comment after its APP0 segment: an empty one (length
    2, the least a segment may say) and one longer than 255 bytes (a length whose high byte
    counts): the pixels are unchanged."""
    at = jpeg_segments(data)[1]
    return data[:at] + b"".join(b"\xff\xfe" + (len(c) + 2).to_bytes(2, "big") + c for c in comments) + data[at:]


def with_component_ids(data: bytes, ids: bytes) -> bytes:
    """The same JPEG with its components renamed `ids` in the frame header and in each scan
    header (component ids are labels; the count is the byte before them)."""
    out, i = bytearray(data), 2
    while i + 4 <= len(out) and out[i] == 0xFF:
        length = int.from_bytes(out[i + 2:i + 4], "big")
        if out[i + 1] in (0xC0, 0xC1, 0xC2):
            for k in range(out[i + 9]):
                out[i + 10 + 3 * k] = ids[k]
        if out[i + 1] == 0xDA:
            for k in range(out[i + 4]):
                out[i + 5 + 2 * k] = ids[k]
            i += 2 + length
            while not (out[i] == 0xFF and out[i + 1] not in (0x00, *range(0xD0, 0xD8))):   # entropy-coded data
                i += 1
            continue
        i += 2 + length
    return bytes(out)


def jpeg_header_only(marker: int, precision: int, height: int, width: int, components: int = 3) -> bytes:
    """A JPEG of one frame header and nothing else, for frames a decoder must refuse from the header."""
    body = bytes([precision]) + struct.pack(">HH", height, width) + bytes([components])
    body += b"".join(bytes([c + 1, 0x11, 0]) for c in range(components))
    return b"\xff\xd8\xff" + bytes([marker]) + struct.pack(">H", len(body) + 2) + body + b"\xff\xd9"


def gradient(seed: int, height: int, width: int) -> Image.Image:
    """A smooth RGB picture (JPEG's kind of content), different for each seed."""
    rng = random.Random(seed)
    r0, g0, b0 = (rng.randrange(256) for _ in range(3))
    data = bytearray()
    for y in range(height):
        for x in range(width):
            data += bytes(((r0 + 4 * x) % 256, (g0 + 5 * y) % 256, (b0 + 3 * (x + y)) % 256))
    return rgb_image(bytes(data), height, width)


def wav_bytes(samples: list[int], rate: int = 16000, channels: int = 1) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(struct.pack(f"<{len(samples)}h", *samples))
    return buf.getvalue()


def tone(seed: int, count: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(-20000, 20000) for _ in range(count)]


# Sizes at and beside the image counters' comparison bounds (their counts: tools/make_cases.py)
BOUND_SIZES = ((40, 60), (50, 60), (50, 90), (110, 90), (110, 114), (110, 130), (2, 399), (2, 400), (2, 401),
               (10, 1000), (16, 48), (16, 64), (16, 80), (16, 96), (16, 32), (16, 16), (16, 63), (16, 65))


QWEN3_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")


def mini_qwen3_tokenizer() -> dict[str, bytes]:
    """tokenizer.json and tokenizer_config.json of a tokenizer with Qwen3's chat template (from
    spec/tokenizers/qwen3/tokenizer_config.json, unchanged) and its special tokens, over a
    byte-level BPE without merges: byte b is id b (GPT-2's byte-to-character map), the specials
    follow at 256.. in QWEN3_SPECIALS order; the EOS is <|im_end|> (258), as Qwen3's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    shifted = iter(range(256, 512))
    char = {b: chr(b if b in printable else next(shifted)) for b in range(256)}   # GPT-2 bytes_to_unicode
    tok = Tokenizer(models.BPE(vocab={char[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(QWEN3_SPECIALS))
    qwen3 = json.loads((Path(__file__).resolve().parent.parent / "spec/tokenizers/qwen3/tokenizer_config.json")
                       .read_text(encoding="utf-8"))
    config = {"tokenizer_class": "Qwen2Tokenizer", "add_bos_token": False, "add_prefix_space": False,
              "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
              "chat_template": qwen3["chat_template"],
              "added_tokens_decoder": {str(256 + k): {"content": t, "lstrip": False, "normalized": False,
                                                      "rstrip": False, "single_word": False, "special": True}
                                       for k, t in enumerate(QWEN3_SPECIALS)}}
    files = {"tokenizer.json": (tok.to_str(pretty=True) + "\n").encode(),
             "tokenizer_config.json": (json.dumps(config, indent=1) + "\n").encode()}
    out = {f"qwen3-bytes/{name}": data for name, data in files.items()}
    # the same tokenizer with a ChatML template whose block tags are indented, as many
    # hand-written templates are: only jinja2's lstrip_blocks (transformers sets it) removes the
    # indentation before a tag; chat_template.jinja wins over the config's template (TOK-HF-4)
    out.update({f"qwen3-bytes-indented/{name}": data for name, data in files.items()})
    out["qwen3-bytes-indented/chat_template.jinja"] = INDENTED_CHATML.encode()
    # templates for the rest of transformers' environment and for the bounds on untrusted
    # templates (spec/hf-tokenizer.md TOK-HF-4): each folder is the same tokenizer with one template
    for folder, template in TEMPLATES.items():
        out.update({f"qwen3-bytes-{folder}/{name}": data for name, data in files.items()})
        out[f"qwen3-bytes-{folder}/chat_template.jinja"] = template.encode()
    named = dict(config, chat_template=[{"name": "tool_use", "template": TOOL_CHATML}, {"name": "default", "template": CHATML}])
    out["qwen3-bytes-named/tokenizer.json"] = files["tokenizer.json"]
    out["qwen3-bytes-named/tokenizer_config.json"] = (json.dumps(named, indent=1) + "\n").encode()
    return out


INDENTED_CHATML = """{% for message in messages %}
    {% if message['role'] == 'system' %}
<|im_start|>system
{{ message['content'] }}<|im_end|>
    {% else %}
<|im_start|>{{ message['role'] }}
{{ message['content'] }}<|im_end|>
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}
"""

CHATML = """{% for message in messages %}
<|im_start|>{{ message['role'] }}
{{ message['content'] }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}
"""
TOOL_CHATML = "<|im_start|>system\n# Tools\n<|im_end|>\n" + CHATML


def padded(template: str, size: int) -> str:
    """`template` followed by a comment that makes its source exactly `size` bytes (renders nothing)."""
    return template + "{#" + "k" * (size - len(template.encode()) - 4) + "#}"


TEMPLATES = {
    # transformers' environment: tojson on a mapping (plain json.dumps: key order kept, non-ASCII
    # kept), the config's named special tokens as variables, the {% generation %} block
    "features": """{% for message in messages %}
{% if message['role'] == 'assistant' %}
<|im_start|>assistant
{% generation %}
{{ message['content'] }}{{ eos_token }}
{% endgeneration %}
{% else %}
<|im_start|>{{ message | tojson }}{{ eos_token }}
{% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}
""",
    "1mib": padded(CHATML, 1 << 20),                                # the largest source a template may have
    "ballast": "{% set ballast = 'x' * ballast_bytes %}\n" + CHATML,  # memory: a string of the keyword's size
    "recursion": "{% macro nest(depth) %}{{ nest(depth + 1) }}{% endmacro %}{{ nest(0) }}\n" + CHATML,
}


def assets() -> dict[str, bytes]:
    a16 = pixels(1, 16, 16)
    out = {
        "img_a_16x16.png": png_bytes(rgb_image(a16, 16, 16)),
        "img_b_16x16.png": png_bytes(rgb_image(pixels(2, 16, 16), 16, 16)),
        "img_c_16x16.png": png_bytes(rgb_image(pixels(3, 16, 16), 16, 16)),
        "img_a_16x64.png": png_bytes(rgb_image(pixels(4, 16, 64), 16, 64)),
        "img_b_16x64.png": png_bytes(rgb_image(pixels(5, 16, 64), 16, 64)),
        "img_a_32x32.png": png_bytes(rgb_image(pixels(6, 32, 32), 32, 32)),
        "img_20x40.png": png_bytes(rgb_image(pixels(7, 20, 40), 20, 40)),
        "img_q_70x28.png": png_bytes(rgb_image(pixels(8, 70, 28), 70, 28)),
    }
    for seed, (h, w) in ((21, (900, 912)), (22, (448, 2240)), (23, (600, 800))):
        out[f"img_l_{h}x{w}.png"] = png_bytes(rgb_image(striped(seed, h, w), h, w))
    for k, (h, w) in enumerate(BOUND_SIZES):
        out[f"img_k_{h}x{w}.png"] = png_bytes(rgb_image(pixels(40 + k, h, w, colours=4), h, w))
    transposed = pixels(8, 16, 32)
    out["img_t_16x32.png"] = png_bytes(rgb_image(transposed, 16, 32))
    out["img_t_32x16.png"] = png_bytes(rgb_image(transposed, 32, 16))

    a = rgb_image(a16, 16, 16)
    out["img_a_16x16_palette.png"] = png_bytes(a.quantize(colors=256, method=Image.Quantize.MAXCOVERAGE, dither=Image.Dither.NONE))
    alpha = a.copy()
    alpha.putalpha(Image.frombytes("L", (16, 16), bytes(range(0, 256))))
    out["img_a_16x16_rgba.png"] = png_bytes(alpha)
    out["img_a_16x16_z0.png"] = png_bytes(a, compress_level=0)
    out["img_a_16x16.ppm"] = ppm_bytes(a16, 16, 16)

    grey = bytes(random.Random(9).randrange(256) for _ in range(16 * 16))
    out["img_g_16x16_gray.png"] = png_bytes(Image.frombytes("L", (16, 16), grey))
    out["img_g_16x16_rgb.png"] = png_bytes(Image.frombytes("L", (16, 16), grey).convert("RGB"))

    valid = out["img_a_16x16.png"]
    out["bad_corrupt.png"] = valid[:16] + bytes(random.Random(10).randrange(256) for _ in range(200))
    out["bad_truncated.png"] = valid[: len(valid) // 2]
    out["bad_empty.png"] = b""
    out["bad_not_an_image.png"] = b"this is a text file, not an image\n"
    out["bad_bomb.png"] = png_header_only(100_000, 100_000, interlace=0, body=b"\0" * 64)
    out["bad_interlaced.png"] = png_header_only(16, 16, interlace=1, body=b"\0" * (16 * 49 + 16))
    out["bad_16bit.png"] = png_bytes(Image.frombytes("I;16", (16, 16), bytes(512)))
    photo_a, photo_b = gradient(16, 32, 48), gradient(17, 48, 32)
    out["img_j_a_32x48.jpg"] = jpeg_bytes(photo_a)
    out["img_j_b_48x32.jpg"] = jpeg_bytes(photo_b)
    out["img_j_a_32x48_progressive.jpg"] = jpeg_bytes(photo_a, progressive=True)
    out["bad_arith.jpg"] = jpeg_header_only(0xC9, 8, 16, 16)
    out["bad_12bit.jpg"] = jpeg_header_only(0xC1, 12, 16, 16)
    out["bad_lossless.jpg"] = jpeg_header_only(0xC3, 8, 16, 16)
    out["bad_cmyk.jpg"] = jpeg_bytes(photo_a.convert("CMYK"))
    out["bad_truncated.jpg"] = out["img_j_a_32x48.jpg"][:300]
    out["img_j_a_32x48_exif6.jpg"] = with_exif_orientation(out["img_j_a_32x48.jpg"], 6)
    out["img_j_a_32x48_fill.jpg"] = with_fill_bytes(out["img_j_a_32x48.jpg"], 3)
    out["img_j_a_32x48_com.jpg"] = with_comments(out["img_j_a_32x48.jpg"], [b"", b"k" * 300])
    out["img_j_g_1x272.jpg"] = jpeg_bytes(Image.frombytes("L", (272, 1), bytes(7 * x % 256 for x in range(272))))
    out["img_j_t_272x1.jpg"] = jpeg_bytes(gradient(18, 272, 1))
    a = out["img_j_a_32x48.jpg"]
    out["bad_jpeg_cmyk_ids.jpg"] = with_component_ids(out["bad_cmyk.jpg"], b"\x01\x02\x03\x04")
    out["bad_jpeg_no_frame.jpg"] = a[:jpeg_segments(a)[1]]          # SOI and APP0, then the file ends
    out["bad_jpeg_eoi_first.jpg"] = a[:2] + b"\xff\xd9" + a[2:]        # the image ends before its frame
    out["bad_jpeg_ff00_first.jpg"] = a[:2] + b"\xff\x00" + a[2:]        # a stuffed zero where a marker must be
    out["bad_jpeg_sof_cut.jpg"] = b"\xff\xd8\xff\xc0\x00\x08\x08\x00\x20\x00\x30"   # 8 bytes said, 7 there
    out["bad_jpeg_sof_short.jpg"] = b"\xff\xd8\xff\xc0\x00\x07\x08\x00\x20\x00\x30"  # a frame header of 7 bytes

    out["audio_a_16k.wav"] = wav_bytes(tone(11, 3200))
    out["audio_b_16k.wav"] = wav_bytes(tone(12, 3200))
    out["audio_c_16k.wav"] = wav_bytes(tone(13, 961))
    out["bad_audio_8k.wav"] = wav_bytes(tone(14, 1600), rate=8000)
    out["bad_audio_stereo.wav"] = wav_bytes(tone(15, 3200), channels=2)
    out["bad_audio_corrupt.wav"] = b"RIFF\x10\x00\x00\x00WAVEjunk" + bytes(32)
    out["bad_audio_empty.wav"] = wav_bytes([])
    out.update(mini_qwen3_tokenizer())
    return out


def main(argv: list[str]) -> int:
    out_dir = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, data in assets().items():
        (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (out_dir / name).write_bytes(data)
    print(f"wrote {len(assets())} assets to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
