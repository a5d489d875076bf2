"""Tokenizer and media-count defects: the prompt the runtime builds is not the one its engine's
tokenizer profile and image counter define (TOK-HF, TOK-MEDIA). Every later page key, hit and
output rests on these ids, so a wrong id or a wrong count shifts everything after it."""
from __future__ import annotations

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


def _transformers_rounding(name, settings, h, w):
    if name != "edge-llm/qwen-vl":
        return image_counters.count_image(name, settings, h, w)
    f = settings["patch"] * settings["merge"]
    return image_counters.qwen_vl_hf(h, w, patch=settings["patch"], merge=settings["merge"],  # DEFECT
                                     min_pixels=settings["min_image_tokens"] * f * f,
                                     max_pixels=settings["max_image_tokens"] * f * f)


@variant("edge-llm-rounds-half-even", "tokenizer")
class EdgeLlmRoundsHalfEven(Runtime):
    """An Edge-LLM Qwen-VL engine counts image tokens with transformers' `smart_resize`
    (halves to even, float aspect check) instead of Edge-LLM's own port (halves away from zero).

    Bug class: media-token-count-drift. Violates: TOK-MEDIA-3.
    Mirrors: Edge-LLM's C++ port of smart_resize rounds 2.5 to 3 where Python rounds it to 2
    (spec/media-tokens.md TOK-MEDIA-3): a 70-pixel side gets one more row of patches.
    """

    def _load_vocab(self, cfg):
        return _with_counter(self, cfg, _transformers_rounding)


def _thumbnail_always(name, settings, h, w):
    if name != "hf/internvl":
        return image_counters.count_image(name, settings, h, w)
    c, r = image_counters._grid(h, w, settings["min_patches"], settings["max_patches"], settings["tile"])
    return 2 + 256 * (c * r + 1)                                                       # DEFECT


@variant("internvl-thumbnail-always", "tokenizer")
class InternvlThumbnailAlways(Runtime):
    """An InternVL engine under transformers' counter adds the thumbnail tile also to a
    one-tile image, as Edge-LLM does.

    Bug class: media-token-count-drift. Violates: TOK-MEDIA-4.
    Mirrors: InternVL's HF processor adds the thumbnail only when an image has more than one
    tile, Edge-LLM always (spec/media-tokens.md TOK-MEDIA-4, 5): a small image costs 514 tokens
    under Edge-LLM's rule, 258 under transformers'.
    """

    def _load_vocab(self, cfg):
        return _with_counter(self, cfg, _thumbnail_always)
