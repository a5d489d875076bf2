"""The text side of an engine with an `hf` tokenizer: prompt layout and generated text.

Prompt layout (spec/hf-tokenizer.md; the kit's oracle lays prompts out the same way):

  a. list contents are flattened to one string per message, each image item becoming the
     image placeholder text (TOK-HF-5): `<|vision_start|><|image_pad|><|vision_end|>` when the
     tokenizer has `<|image_pad|>`, else `<|image|>`;
  b. chat template on: rendered (TOK-HF-4) with the engine's `chat_template_kwargs` and, over
     them, the request file's `enable_thinking` when it sets one; encoded without special
     tokens (TOK-HF-6);
     off: the flattened contents joined with no separator, encoded once, no special tokens
     (TOK-HF-8);
  c. the k-th image token is repeated as many times as the engine's counter gives image k
     (TOK-HF-7, spec/media-tokens.md); image tokens and image items must pair up exactly;
  d. n is the length of the result (TOK-HF-9).

Generation: the sampler may emit only "normal" tokens (not an added token, and a piece that
decodes to whole characters) and the EOS, so `output_text` is the plain decode of the
generated ids and can be fed back in a later turn without spelling a special token.

    HFText(engine_dir, cfg)            raises EngineTextError(json_path, message)
    .layout(messages, chat, add_generation_prompt) -> (ids, spans, text)   ValueError
    .image_count(h, w) -> int          CounterRefusal
    .text(ids) -> str; .token_entry(id) -> (piece, bytes); .allowed (torch bool [V]); .eos
"""
import os

import numpy as np
import torch

from .chat_template import ChatTemplate, template_source
from .limits import INPUT_TEXT_BYTES
from .hf_loader import LOADERS, TokenizerFolderError, load_tokenizer, read_config
from .identity import MediaSpan
from .image_counters import check_settings, count_image

# (image token, the text one image item becomes), in order of preference (TOK-HF-5)
IMAGE_CONVENTIONS = (("<|image_pad|>", "<|vision_start|><|image_pad|><|vision_end|>"), ("<|image|>", "<|image|>"))
_normal_cache: dict = {}


class EngineTextError(ValueError):
    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path, self.message = path, message


def image_convention(tok):
    """(token id, placeholder text) of the tokenizer's single image token, or None."""
    for token, text in IMAGE_CONVENTIONS:
        if tok.token_to_id(token) is not None:
            return tok.token_to_id(token), text
    return None


def normal_tokens(tok) -> np.ndarray:
    """bool [V]: ids the sampler may emit besides the EOS. Added tokens are out (they re-tokenize
    as specials); so are pieces that are not whole characters on their own (a lone byte of a
    multi-byte character, which decodes to U+FFFD and would not round-trip)."""
    key = id(tok)
    if key not in _normal_cache:
        V = tok.get_vocab_size(with_added_tokens=True)
        added = set(tok.get_added_tokens_decoder())
        pieces = tok.decode_batch([[i] for i in range(V)], skip_special_tokens=False)
        mask = np.array([i not in added and "\ufffd" not in p for i, p in enumerate(pieces)], dtype=bool)
        _normal_cache[key] = (tok, mask)                 # the tokenizer is cached forever: id() stays valid
    return _normal_cache[key][1]


def _check_profile(profile) -> None:
    if not isinstance(profile, dict) or profile.get("profile") != "hf":
        raise EngineTextError("$.tokenizer", "expected \"bytes-v1\" or an object with profile \"hf\"")
    for key in profile:
        if key not in ("profile", "files", "loader", "chat_template_kwargs"):
            raise EngineTextError(f"$.tokenizer.{key}", "unknown key of an hf tokenizer profile")
    if not isinstance(profile.get("files"), str) or not profile["files"] or "\0" in profile["files"]:
        raise EngineTextError("$.tokenizer.files", f"expected a folder path, got {profile.get('files')!r}")
    if profile.get("loader") not in LOADERS:
        raise EngineTextError("$.tokenizer.loader",
                              f"expected one of {', '.join(LOADERS)}, got {profile.get('loader')!r}")
    if not isinstance(profile.get("chat_template_kwargs", {}), dict):
        raise EngineTextError("$.tokenizer.chat_template_kwargs", "expected an object")


class HFText:
    def __init__(self, engine_dir, cfg: dict):
        profile = cfg.get("tokenizer")
        _check_profile(profile)
        folder = os.path.join(str(engine_dir), profile["files"])
        try:
            self.tok = load_tokenizer(folder, profile["loader"])
            config = read_config(folder)
        except TokenizerFolderError as e:
            raise EngineTextError("$.tokenizer", str(e)) from None
        self.kwargs = dict(profile.get("chat_template_kwargs") or {})
        source = template_source(folder, config)
        self.template = ChatTemplate(source, config) if source is not None else None
        self.vocab_size = V = self.tok.get_vocab_size(with_added_tokens=True)
        if cfg.get("vocab_size") != V:
            raise EngineTextError("$.vocab_size", f"the tokenizer has {V} ids (base vocabulary plus added tokens),"
                                                  f" the config says {cfg.get('vocab_size')!r}")
        self.eos = cfg.get("eos_token_id")
        if type(self.eos) is not int or not 0 <= self.eos < V:
            raise EngineTextError("$.eos_token_id", f"expected a token id below {V}, got {self.eos!r}")
        if cfg.get("audio") is not None:
            raise EngineTextError("$.audio", "audio input is not defined with an hf tokenizer")
        self.image_token_id, self.placeholder, self.counter = None, None, None
        if cfg.get("vision") is not None:
            self._init_vision(cfg)
        mask = normal_tokens(self.tok).copy()
        mask[self.eos] = True
        self.allowed = torch.from_numpy(mask)
        self.allowed_count = int(mask.sum())

    def _init_vision(self, cfg):
        convention = image_convention(self.tok)
        if convention is None:
            raise EngineTextError("$.vision", "the tokenizer has no <|image_pad|> or <|image|> token")
        if cfg.get("image_token_id") != convention[0]:
            raise EngineTextError("$.image_token_id", f"expected the tokenizer's image token {convention[0]},"
                                                      f" got {cfg.get('image_token_id')!r}")
        self.image_token_id, self.placeholder = convention
        vision = cfg["vision"]
        try:
            self.settings = check_settings(vision.get("counter"), vision.get("settings", {}))
        except ValueError as e:
            raise EngineTextError("$.vision", str(e)) from None
        self.counter = vision["counter"]

    # ------------------------------------------------------------------ prompts

    def image_count(self, h: int, w: int) -> int:
        return count_image(self.counter, self.settings, h, w)

    def layout(self, messages, chat: bool, add_generation_prompt: bool, keywords: dict | None = None):
        """`messages`: [(role, [("text", str) | ("image", MediaItem)])], each image's
        `placeholders` already set by `image_count`; `keywords`: the request file's template
        keywords, over the engine's. Returns (ids int32 [n], [MediaSpan], the encoded text).
        ValueError when the template fails or the image tokens and image items do not pair up."""
        flat, images = [], []
        for role, items in messages:
            parts = []
            for kind, value in items:
                if kind == "text":
                    parts.append(value)
                else:
                    images.append(value)
                    parts.append(self.placeholder)
            flat.append({"role": role, "content": "".join(parts)})
        if chat:
            text = self.template.render(flat, add_generation_prompt, {**self.kwargs, **(keywords or {})})
        else:
            text = "".join(m["content"] for m in flat)
        if len(text.encode("utf-8", "surrogatepass")) > INPUT_TEXT_BYTES:
            raise ValueError(f"the input text of this request is {len(text.encode('utf-8', 'surrogatepass'))} bytes, "
                             f"above the {INPUT_TEXT_BYTES} a request may hold before tokenization")
        ids = self.tok.encode(text, add_special_tokens=False).ids
        return self._expand(ids, images) + (text,)

    def _expand(self, ids: list, images: list):
        marks = [] if self.image_token_id is None else [i for i, t in enumerate(ids) if t == self.image_token_id]
        if len(marks) != len(images):
            raise ValueError(f"the prompt holds {len(marks)} image tokens for {len(images)} image items"
                             " (each image item must give exactly one image token)")
        out, spans, prev = [], [], 0
        for at, item in zip(marks, images):
            out.extend(ids[prev:at])
            spans.append(MediaSpan(len(out), item.placeholders, item.digest, "image", item.data, item.content))
            out.extend([self.image_token_id] * item.placeholders)
            prev = at + 1
        out.extend(ids[prev:])
        return np.asarray(out, dtype=np.int32), spans

    # ------------------------------------------------------------------ generated tokens

    def text(self, ids) -> str:
        """Decoded text of generated ids, the EOS left out."""
        return self.tok.decode([int(t) for t in ids if t != self.eos], skip_special_tokens=True)

    def token_entry(self, token_id: int) -> tuple[str, list[int]]:
        """(token, bytes) of a log-probability candidate: the vocabulary piece and its UTF-8 bytes."""
        piece = self.tok.id_to_token(int(token_id)) or ""
        return piece, list(piece.encode("utf-8"))
