"""The bytes-v1 tokenizer and prompt layout (spec/tokenizer.md sections 1 and 2).

Ids 0-255 are bytes; special tokens follow. A media item expands to copies of its placeholder
id and records a MediaSpan, so identity can give each placeholder position its item (CR-MEDIA-1).
"""

import os
import sys
from array import array

from .errors import InputError
from .identity import MediaSpan

MAX_INPUT_TEXT_BYTES = 1 << 20
"""The input text of one request before tokenization, under either tokenizer (bytes-v1 here, hf
in hf_tokenizer.py; spec/RUNNING.md section 8): Edge-LLM's own bound, kMaxInputTextSizeBytes in
cpp/common/inputLimits.h:66."""

BOS, EOS, SYSTEM, USER, ASSISTANT, END, IMAGE, AUDIO = range(256, 264)
VOCAB_SIZE = 320
ROLE_TOKENS = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT}
SPECIAL_SPELLINGS = {BOS: "<|bos|>", EOS: "<|eos|>", SYSTEM: "<|system|>", USER: "<|user|>",
                     ASSISTANT: "<|assistant|>", END: "<|end|>", IMAGE: "<|image|>",
                     AUDIO: "<|audio|>"}


assert array("i").itemsize == 4, "token ids are 32-bit"
_UTF32 = "utf-32-le" if sys.byteorder == "little" else "utf-32-be"   # the array's own byte order


class Prompt:
    """One request's input: token ids (array of int32) and the media spans among them."""

    def __init__(self):
        self.tokens = array("i")
        self.spans: list[MediaSpan] = []

    def text(self, s: str) -> None:
        # Token ids of the UTF-8 bytes. Equivalent to tokens.extend(s.encode("utf-8")), but
        # widened in C: decoded as Latin-1 the bytes are one character each, of the byte's
        # value, and UTF-32 writes each character as one 32-bit id. ASCII text is its bytes.
        chars = s if s.isascii() else s.encode("utf-8").decode("latin-1")
        self.tokens.frombytes(chars.encode(_UTF32))

    def special(self, token: int) -> None:
        self.tokens.append(token)

    def media(self, item, placeholder: int) -> None:
        start = len(self.tokens)
        self.tokens.extend(array("i", [placeholder]) * item.placeholders)
        self.spans.append(MediaSpan(start, len(self.tokens), item.digest, item.modality, item.content))


def tokenize_messages(messages, path: str, base_dir: str, chat_template: bool,
                      generation_prompt: bool, engine=None) -> Prompt:
    """Lay out `messages` (already shape-checked) as spec/tokenizer.md section 2 says."""
    prompt = Prompt()
    if chat_template:
        prompt.special(BOS)
    for j, message in enumerate(messages):
        if chat_template:
            prompt.special(ROLE_TOKENS[message["role"]])
        content = message["content"]
        if isinstance(content, str):
            prompt.text(content)
        else:
            for k, item in enumerate(content):
                _item(prompt, item, f"{path}[{j}].content[{k}]", base_dir, engine)
        if chat_template:
            prompt.special(END)
    if chat_template and generation_prompt:
        prompt.special(ASSISTANT)
    return prompt


def _item(prompt: Prompt, item: dict, path: str, base_dir: str, engine) -> None:
    kind = item["type"]
    if kind == "text":
        prompt.text(item["text"])
        return
    where = f"{path}.{kind}"
    if engine is not None and getattr(engine, "vision" if kind == "image" else "audio") is None:
        raise InputError(where, f"the engine has no {'vision' if kind == 'image' else 'audio'} "
                                f"encoder, so it cannot take {kind} input")
    file = os.path.join(base_dir, item[kind])
    from .decode import DecodeError, load_audio, load_image      # imported only for media input
    try:
        if kind == "image":
            media = load_image(file, engine.max_input_len if engine is not None else None)
        else:
            media = load_audio(file)
    except DecodeError as e:
        raise InputError(where, str(e)) from None
    prompt.media(media, IMAGE if kind == "image" else AUDIO)

