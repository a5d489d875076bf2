"""Tokenizer and media-count defects: the prompt the runtime builds is not the one its engine's
tokenizer profile and image counter define (TOK-HF, TOK-MEDIA). Every later page key, hit and
output rests on these ids, so a wrong id or a wrong count shifts everything after it."""
from __future__ import annotations

import math

import torch

from gpu_backend import image_counters
from gpu_backend.hf_prompt import HFText
from gpu_backend.runtime import Runtime

from .registry import variant


@variant("loader-ignored", "tokenizer")
class LoaderIgnored(Runtime):
    """The engine's loader is ignored: tokenizer.json is always read as written
    (`tokenizers-raw`), also for an engine built for transformers' AutoTokenizer.

    Bug class: tokenizer-loader-mismatch. Violates: TOK-HF-2, TOK-HF-3.
    Mirrors: the same Phi-3 files give `▁Hello` read as written (Edge-LLM's own C++ reader,
    `Tokenizer.from_file`, llama.cpp's GGUF) and `Hello` through transformers 5's AutoTokenizer
    (vLLM, SGLang), measured (spec/hf-tokenizer.md TOK-HF-2).
    """

    def _load_vocab(self, cfg):
        if isinstance(cfg.get("tokenizer"), dict):
            cfg = dict(cfg, tokenizer=dict(cfg["tokenizer"], loader="tokenizers-raw"))      # DEFECT
        return super()._load_vocab(cfg)


class _CountedAs(HFText):
    """An HFText whose image counter is replaced by `count(name, settings, h, w)`."""
    count = None

    def image_count(self, h: int, w: int) -> int:
        return type(self).count(self.counter, self.settings, h, w)


def _with_counter(runtime, cfg, count):
    vocab = Runtime._load_vocab(runtime, cfg)
    if isinstance(vocab, HFText):
        vocab.__class__ = type("FaultyText", (_CountedAs,), {"count": staticmethod(count)})
    return vocab


def _transformers_smart_resize(name, settings, h, w):
    if name != "edge-llm/qwen-vl":
        return image_counters.count_image(name, settings, h, w)
    f = settings["patch"] * settings["merge"]
    return image_counters.qwen_vl_hf(h, w, patch=settings["patch"], merge=settings["merge"],  # DEFECT
                                     min_pixels=settings["min_image_tokens"] * f * f,
                                     max_pixels=settings["max_image_tokens"] * f * f)


@variant("edge-llm-qwen-vl-unclamped", "tokenizer")
class EdgeLlmQwenVlUnclamped(Runtime):
    """An Edge-LLM Qwen-VL engine counts image tokens with transformers' `smart_resize`, which
    leaves a side of at most 14 pixels at 0 and regrows the image, instead of Edge-LLM 0.10's
    port, which clamps it to one factor first.

    Bug class: media-token-count-drift. Violates: TOK-MEDIA-3.
    Mirrors: Edge-LLM's `qwenSmartResize` (cpp/multimodal/imageUtils.cpp, 0.10.0) clamps the first
    step with `std::max(factor, roundByFactor(...))` where Python's smart_resize does not
    (spec/media-tokens.md TOK-MEDIA-3): a 10 x 1000 image costs 36 tokens there, 20 in transformers.
    """

    def _load_vocab(self, cfg):
        return _with_counter(self, cfg, _transformers_smart_resize)


def _max_pixels_inclusive(name, settings, h, w):
    if name != "edge-llm/qwen-vl":
        return image_counters.count_image(name, settings, h, w)
    f = settings["patch"] * settings["merge"]
    max_pixels = settings["max_image_tokens"] * f * f
    h2, w2 = (max(f, round(s / f) * f) for s in (h, w))
    if h2 * w2 >= max_pixels:                                                           # DEFECT: > in 0.10
        beta = math.sqrt(h * w / max_pixels)
        h2, w2 = (max(f, math.floor(s / beta / f) * f) for s in (h, w))
        return (h2 // settings["patch"]) * (w2 // settings["patch"]) // settings["merge"] ** 2
    return image_counters.count_image(name, settings, h, w)


@variant("qwen-vl-max-pixels-inclusive", "tokenizer")
class QwenVlMaxPixelsInclusive(Runtime):
    """An Edge-LLM Qwen-VL engine shrinks an image whose rounded area equals max_pixels (a >=
    where its runtime compares with >): a 110 x 114 image at the 16-token bound becomes 84 x 112,
    12 tokens instead of 16.

    Bug class: media-token-count-drift (off by one at a comparison bound). Violates: TOK-MEDIA-3.
    Mirrors: smart_resize's `if h_bar * w_bar > max_pixels` (transformers
    image_processing_qwen2_vl.py, Edge-LLM 0.10 imageUtils.cpp qwenSmartResize) re-implemented
    with the bound included, a class the kit's power study found unreached: no case put an
    image's rounded area exactly on a counter's bound.
    """

    def _load_vocab(self, cfg):
        return _with_counter(self, cfg, _max_pixels_inclusive)


def _thumbnail_always(name, settings, h, w):
    if name != "hf/internvl":
        return image_counters.count_image(name, settings, h, w)
    c, r = image_counters._grid(h, w, settings["min_patches"], settings["max_patches"], settings["tile"])
    return 2 + 256 * (c * r + 1)                                                       # DEFECT


@variant("internvl-thumbnail-always", "tokenizer")
class InternvlThumbnailAlways(Runtime):
    """An InternVL engine under transformers' counter adds the thumbnail tile also to a
    one-tile image, as Edge-LLM 0.4 to 0.6 did after every image.

    Bug class: media-token-count-drift. Violates: TOK-MEDIA-4.
    Mirrors: InternVL's HF processor adds the thumbnail only when an image has more than one
    tile; Edge-LLM added it after every image until 0.7.0 and since adds it also when its vision
    engine's minimum profile is above one block (spec/media-tokens.md TOK-MEDIA-4, 5): a small
    image costs 514 tokens under the always rule, 258 under transformers'.
    """

    def _load_vocab(self, cfg):
        return _with_counter(self, cfg, _thumbnail_always)


class _SwitchesIgnored(HFText):
    """An HFText that renders every chat with the generation prompt and the engine's keywords."""

    def layout(self, messages, chat: bool, add_generation_prompt: bool, keywords: dict | None = None):
        return super().layout(messages, chat, True, None)                              # DEFECT


@variant("template-switches-ignored", "tokenizer")
class TemplateSwitchesIgnored(Runtime):
    """The request file's template switches are dropped: every chat is rendered with the
    generation prompt and with the engine's chat_template_kwargs only, whatever the file's
    `add_generation_prompt` and `enable_thinking` say.

    Bug class: chat-template-kwargs-dropped. Violates: TOK-HF-4.
    Mirrors: raullenchai/Rapid-MLX #387 / PR #389 (`chat_template_kwargs: {enable_thinking: false}`
    silently dropped by the request model, so the template ran with thinking on) and
    unslothai/unsloth PR #6202 (the Responses route did not forward `chat_template_kwargs`);
    Qwen3's template writes an empty think block after the generation prompt only when the
    request turns thinking off (spec/hf-tokenizer.md TOK-HF-4).
    """

    def _load_vocab(self, cfg):
        vocab = Runtime._load_vocab(self, cfg)
        if isinstance(vocab, HFText):
            vocab.__class__ = _SwitchesIgnored
        return vocab


@variant("special-tokens-emitted", "tokenizer")
class SpecialTokensEmitted(Runtime):
    """The sampler of an hf engine may emit every id of the vocabulary, added and special tokens
    included, where the engine emits only its normal tokens and its EOS.

    Bug class: special-token-emitted. Violates: CR-OUT-1.
    Mirrors: ml-explore/mlx-swift-lm PR #412 (multimodal placeholder tokens sampled as text:
    `<audio|>` in text-only replies, also jundot/omlx #1670) and NVIDIA-NeMo/Speech PR #14555
    (special tokens sampled, fixed by masking every special token but the EOS); the bundled
    weights give added tokens negligible probability, so only a request's logit bias on one
    reaches it (spec/engine.md section 5, Emission).
    """

    def _load_vocab(self, cfg):
        vocab = Runtime._load_vocab(self, cfg)
        if isinstance(vocab, HFText):
            vocab.allowed = torch.ones_like(vocab.allowed)                               # DEFECT
            vocab.allowed_count = int(vocab.allowed.sum())
        return vocab
