"""Images in peer cases: which images, how a server receives them, and how the kit counts them.

A runtime that keys cached blocks by the images they hold (vLLM: each image's hash and where it
starts in the block, PEER-VLLM-2) is judged on image requests only where the kit knows how many
tokens each image takes: the model folder given with `--tokenizer` names its image processor in
`preprocessor_config.json`, as every Hugging Face vision model's folder does. The kit reads the
Qwen-VL processors (patch size, merge size, pixel bounds), whose count is vLLM's
(`vllm/qwen-vl`, spec/media-tokens.md), lays each image out as its tokenizer's image token
repeated that many times (TOK-HF-7), and gives the oracle each image's digest and span. A folder
with a processor the kit does not count marks a vision model too: its run then says it was judged
on text only.

The images are the kit's own (cases/media/), sent as `image_url` parts with data: URLs, so no
server fetches anything:

    part = image_part("a")                         # {"type": "image_url", "image_url": {"url": ...}}
    vision = read_vision(folder)                   # Vision, or None (no image processor)
    vision.count(url), vision.digest(url)          # tokens, identity of a case image
"""
from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..judge.oracle import DecodeError, image_tokens, load_image

MEDIA = Path(__file__).resolve().parents[2] / "cases" / "media"
CASE_IMAGES = {"a": "img_a_16x16.png", "b": "img_b_16x16.png"}
"""Two images of one size and different pixels: the same tokens, told apart only by their keys."""
PROCESSOR = "preprocessor_config.json"
QWEN_VL = ("Qwen2VLImageProcessor", "Qwen2_5_VLImageProcessor", "Qwen3VLImageProcessor")
"""Image processors counted by `vllm/qwen-vl` (smart_resize over patch * merge)."""
MAX_PROCESSOR_BYTES = 1 << 20


def _url(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


_URLS: dict = {}


def image_url(name: str) -> str:
    """The data: URL of case image `name` (CASE_IMAGES)."""
    if name not in _URLS:
        _URLS[name] = _url(MEDIA / CASE_IMAGES[name])
    return _URLS[name]


def image_part(name: str) -> dict:
    """An OpenAI chat content part carrying case image `name`."""
    return {"type": "image_url", "image_url": {"url": image_url(name)}}


def image_urls(messages: list) -> list:
    """The URLs of every image part of `messages`, in order."""
    return [part["image_url"]["url"] for m in messages if isinstance(m.get("content"), list)
            for part in m["content"] if isinstance(part, dict) and part.get("type") == "image_url"]


def kit_messages(messages: list) -> list:
    """The messages as the kit's tokenizer takes them: image parts become {"type": "image"}."""
    return [dict(m, content=[{"type": "image"} if part.get("type") == "image_url" else part for part in m["content"]])
            if isinstance(m.get("content"), list) else m for m in messages]


@dataclass(frozen=True)
class Vision:
    """A model that takes images, as its folder describes it. `counter` is None when the kit does
    not count its processor's images; `problem` then says why image cases cannot run."""
    processor: str
    counter: str | None
    settings: dict
    problem: str | None = None

    def _image(self, url: str):
        name = next((n for n in CASE_IMAGES if image_url(n) == url), None)
        if name is None:
            raise ValueError("an image that is not one of the kit's case images")
        return load_image(str(MEDIA / CASE_IMAGES[name]))

    def count(self, url: str) -> int:
        """Tokens the server gives the image (the processor's count)."""
        item = self._image(url)
        return image_tokens(self.counter, item.geometry[0], item.geometry[1], self.settings)

    def digest(self, url: str) -> str:
        """The image's identity (CR-ID-4: its geometry and decoded pixels), as the oracle keys it."""
        return self._image(url).digest.hex()


@dataclass(frozen=True)
class ImagePlan:
    """How the run lays image prompts out: the tokenizer's image token, or why it cannot."""
    token: int | None
    problem: str | None = None


def read_vision(folder: str | None) -> Vision | None:
    """What `folder`'s `preprocessor_config.json` says about the model's images; None when it has
    none (a text model, as far as the kit can tell)."""
    if folder is None:
        return None
    path = os.path.join(folder, PROCESSOR)
    if not os.path.isfile(path):
        return None
    try:
        if os.path.getsize(path) > MAX_PROCESSOR_BYTES:
            raise ValueError(f"larger than {MAX_PROCESSOR_BYTES} bytes")
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        return Vision("unreadable", None, {}, f"{path} cannot be read ({e}), so the kit cannot count its images")
    kind = str(doc.get("image_processor_type", "unnamed")).removesuffix("Fast")
    if kind not in QWEN_VL:
        return Vision(kind, None, {}, f"the model's image processor is {kind} ({PROCESSOR}); the kit counts the "
                                      f"image tokens of {', '.join(QWEN_VL)} only")
    size = doc.get("size") if isinstance(doc.get("size"), dict) else {}
    settings = {"patch": doc.get("patch_size", 14), "merge": doc.get("merge_size", 2),
                "min_pixels": doc.get("min_pixels", size.get("shortest_edge", 56 * 56)),
                "max_pixels": doc.get("max_pixels", size.get("longest_edge", 28 * 28 * 1280))}
    if not all(type(v) is int and 1 <= v <= 1 << 31 for v in settings.values()):
        return Vision(kind, None, {}, f"{PROCESSOR} holds settings the kit cannot use: {settings}")
    vision = Vision(kind, "vllm/qwen-vl", settings)
    try:
        vision.count(image_url("a"))
    except (DecodeError, ValueError) as e:
        return Vision(kind, None, {}, f"the kit's case images cannot be counted with {PROCESSOR}'s settings: {e}")
    return vision
