"""The decoded samples of a request's media items, for the reference encoder.

The oracle tokenizes a request and knows each media span by its identity digest over
(modality, geometry, decoded samples) (CR-ID-4), but keeps no pixels. Here each span is paired
with its item (the k-th media item of the request's messages, in order, is the k-th span) and
the file is decoded again: images with Pillow (fast) and checked against the span's digest, so
the samples are exactly the ones spec/tokenizer.md section 3 defines; should Pillow ever disagree
the oracle's own stdlib decoder decides. Audio: PCM 16-bit samples / 32768.
"""
from __future__ import annotations

import io
import os
import wave

import numpy as np

from reference import decode as spec_decode
from reference.identity import media_item_digest

_DECODED: dict = {}


class MediaMismatch(Exception):
    """A media file whose decoded samples are not the ones the oracle identified."""


def media_items(request: dict) -> list[tuple[str, str]]:
    """(modality, path) of every media item of a request, in prompt order."""
    out = []
    for message in request.get("messages", []):
        content = message.get("content")
        for item in content if isinstance(content, list) else []:
            if item.get("type") in ("image", "audio"):
                out.append((item["type"], item[item["type"]]))
    return out


def decoded(modality: str, path: str, digest: bytes) -> np.ndarray:
    """RGB uint8 [H, W, 3] or float32 samples [S] of the item at `path`, whose identity digest
    the oracle computed as `digest`."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    if key not in _DECODED:
        if len(_DECODED) >= 256:
            _DECODED.pop(next(iter(_DECODED)))
        _DECODED[key] = _image(path, digest) if modality == "image" else _audio(path, digest)
    return _DECODED[key]


def _image(path: str, digest: bytes) -> np.ndarray:
    with open(path, "rb") as f:
        data = f.read()
    rgb = _pillow_rgb(data)
    if rgb is None or media_item_digest("image", rgb.shape, rgb.tobytes()) != digest:
        parse = (spec_decode._png if data.startswith(b"\x89PNG") else spec_decode._jpeg if data.startswith(b"\xff\xd8")
                 else spec_decode._ppm)
        height, width, thunk = parse(data)
        rgb = np.frombuffer(thunk(), dtype=np.uint8).reshape(height, width, 3)
        if media_item_digest("image", rgb.shape, rgb.tobytes()) != digest:
            raise MediaMismatch(f"{path}: the decoded pixels are not the item the request was tokenized with")
    return rgb


def _pillow_rgb(data: bytes):
    """RGB by Pillow: grey+alpha keeps its grey channel (alpha dropped, not composited)."""
    try:
        from PIL import Image
        im = Image.open(io.BytesIO(data))
        im.load()
        if im.mode in ("LA", "La"):
            im = im.getchannel(0)
        return np.array(im.convert("RGB"), dtype=np.uint8)
    except Exception:       # any decoder trouble: the oracle's decoder decides
        return None


def _audio(path: str, digest: bytes) -> np.ndarray:
    with wave.open(path, "rb") as w:
        pcm = w.readframes(w.getnframes())
    samples = (np.frombuffer(pcm, dtype="<i2").astype(np.float32) / np.float32(32768.0))
    if media_item_digest("audio", (len(samples),), samples.astype("<f4").tobytes()) != digest:
        raise MediaMismatch(f"{path}: the decoded samples are not the item the request was tokenized with")
    return samples
