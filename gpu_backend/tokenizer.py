"""The bytes-v1 tokenizer and prompt layout (spec/tokenizer.md).

ids 0-255 are raw UTF-8 bytes; 256-263 are the special tokens below; 264-319 are reserved.
Text is never scanned for special-token spellings.
"""
import numpy as np

from .identity import MediaSpan

VOCAB = 320
BOS, EOS, SYSTEM, USER, ASSISTANT, END, IMAGE, AUDIO = range(256, 264)
ROLE_TOKEN = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT}
SPELLING = {BOS: "<|bos|>", EOS: "<|eos|>", SYSTEM: "<|system|>", USER: "<|user|>",
            ASSISTANT: "<|assistant|>", END: "<|end|>", IMAGE: "<|image|>", AUDIO: "<|audio|>"}
PLACEHOLDER = {"image": IMAGE, "audio": AUDIO}


def token_entry(token_id: int) -> tuple[str, list[int]]:
    """(token, bytes) of a log-probability candidate (spec/tokenizer.md section 4)."""
    if token_id < 256:
        return chr(token_id) if token_id < 128 else bytes([token_id]).decode("latin-1"), [token_id]
    spelling = SPELLING.get(token_id, f"<|reserved_{token_id}|>")
    return spelling, list(spelling.encode("utf-8"))


def encode_prompt(messages, apply_chat_template: bool, add_generation_prompt: bool):
    """Token ids and media spans of a prompt.

    `messages` is a list of (role, items) with items ("text", str) or (modality, MediaItem).
    Returns (ids int32 array, [MediaSpan] in prompt order): one span per media item (CR-ID-4),
    so two adjacent items stay two items.
    """
    ids: list[int] = []
    spans: list[MediaSpan] = []
    if apply_chat_template:
        ids.append(BOS)
    for role, items in messages:
        if apply_chat_template:
            ids.append(ROLE_TOKEN[role])
        for kind, value in items:
            if kind == "text":
                ids.extend(value.encode("utf-8"))
            else:
                spans.append(MediaSpan(len(ids), value.placeholders, value.digest, kind, value.data, value.content))
                ids.extend([PLACEHOLDER[kind]] * value.placeholders)
        if apply_chat_template:
            ids.append(END)
    if apply_chat_template and add_generation_prompt:
        ids.append(ASSISTANT)
    return np.asarray(ids, dtype=np.int32), spans


def render(ids) -> str:
    """Human-readable prompt: bytes as text, special tokens by their spelling."""
    out, buf = [], bytearray()
    for t in ids:
        t = int(t)
        if t < 256:
            buf.append(t)
            continue
        if buf:
            out.append(buf.decode("utf-8", errors="replace"))
            buf = bytearray()
        out.append(SPELLING.get(t, f"<|reserved_{t}|>"))
    if buf:
        out.append(buf.decode("utf-8", errors="replace"))
    return "".join(out)
