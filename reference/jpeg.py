"""JPEG images (spec/tokenizer.md section 3): the frame header read by hand, the pixels by Pillow.

TensorRT Edge-LLM 0.10 loads images with stb_image 2.30 (`cpp/runtime/imageUtils.cpp`,
`loadImageFromFile`: `stbi_load(path, ..., 3)`), which decodes baseline and progressive 8-bit
JPEG and refuses arithmetic coding and 12-bit samples. The kit accepts the same: baseline (SOF0),
extended sequential Huffman (SOF1) and progressive Huffman (SOF2) frames of 8-bit samples with
1 (grey) or 3 components. Lossless, hierarchical and arithmetic-coded frames, other precisions,
CMYK/YCCK (4 components) and a height left to a DNL marker are refused from the header, before
any pixel is decoded; so are the geometry limits of spec/tokenizer.md. Orientation metadata is
not applied (stb_image ignores it too).

Decoded pixels of a lossy format depend on the decoder's IDCT and upsampling, so the kit
defines identity on the pixels a runtime's own decoder yields: what the oracle predicts is which
items are equal (two files decoding to the same pixels are one item), which holds for any
decoder on inputs whose equality does not hinge on rounding. This module is the one place of
reference/ that uses a third-party library (Pillow) besides the hf tokenizer module.
"""

from __future__ import annotations

import io

SOI = b"\xff\xd8"
ACCEPTED = {0xC0: "baseline", 0xC1: "extended sequential", 0xC2: "progressive"}
REFUSED = {0xC3: "lossless", 0xC5: "hierarchical (differential sequential)", 0xC6: "hierarchical (differential progressive)",
           0xC7: "hierarchical (differential lossless)", 0xC9: "arithmetic-coded", 0xCA: "arithmetic-coded progressive",
           0xCB: "arithmetic-coded lossless", 0xCD: "arithmetic-coded hierarchical", 0xCE: "arithmetic-coded hierarchical",
           0xCF: "arithmetic-coded hierarchical"}


class JpegError(Exception):
    """A JPEG file the kit refuses; the message names the reason."""


def frame_header(data: bytes) -> tuple[int, int]:
    """(height, width) of an accepted JPEG frame, from its SOF segment; JpegError otherwise."""
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            raise JpegError(f"JPEG marker expected at byte {pos}")
        marker = data[pos + 1]
        if marker == 0xFF:                               # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:     # standalone markers
            pos += 2
            continue
        if marker in (0xD9, 0xDA):
            raise JpegError("JPEG has no frame header (SOF) before its image data")
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if length < 2 or pos + 2 + length > len(data):
            raise JpegError("JPEG segment is truncated")
        if marker in REFUSED:
            raise JpegError(f"{REFUSED[marker]} JPEG is not supported (accepted: baseline, progressive, 8-bit)")
        if marker in ACCEPTED:
            body = data[pos + 4:pos + 2 + length]
            if len(body) < 6:
                raise JpegError("JPEG frame header is truncated")
            precision, height, width, components = body[0], int.from_bytes(body[1:3], "big"), \
                int.from_bytes(body[3:5], "big"), body[5]
            if precision != 8:
                raise JpegError(f"{precision}-bit JPEG is not supported (8-bit only)")
            if components == 4:
                raise JpegError("CMYK or YCCK JPEG (4 components) is not supported")
            if components not in (1, 3):
                raise JpegError(f"JPEG with {components} components is not supported (1 or 3)")
            if height == 0:
                raise JpegError("JPEG that gives its height in a DNL marker is not supported")
            return height, width
        pos += 2 + length
    raise JpegError("JPEG has no frame header (SOF)")


def decode_rgb(data: bytes, height: int, width: int) -> bytes:
    """H x W RGB bytes decoded by Pillow (grey replicated to three channels)."""
    from PIL import Image, UnidentifiedImageError
    # the pixel budget (reference/decode.py) is checked from the frame header before this is called;
    # Pillow's own bomb check is far above it and would only say the same thing later
    try:
        with Image.open(io.BytesIO(data), formats=["JPEG"]) as im:
            im.load()
            if im.size != (width, height):
                raise JpegError("JPEG frame header and image data disagree")
            return im.convert("RGB").tobytes()
    except (OSError, ValueError, SyntaxError, EOFError, MemoryError, UnidentifiedImageError,
            Image.DecompressionBombError) as e:
        raise JpegError(f"JPEG image data is corrupt: {e}") from None
