"""Text of an exact number of tokens under a real tokenizer (spec/hf-tokenizer.md).

The kit lays cases out position by position, and writes its scenario text from letters, one
per position, which is exact for bytes-v1 (one ASCII character, one token). Under a real
tokenizer a letter is not a token and neighbouring text merges (BPE), so each byte of such text
is written as a *unit*: a word that the engine's tokenizer encodes as exactly one token, with a
space before it so that no merge crosses into its neighbours (the pre-tokenizers of the BPE
tokenizers in use split before a space). A text that starts after something other than text
(the input's start, the chat template's own text, a media item's token) starts without a space:
the tokenizer would make a token of it. Distinct bytes get distinct units, so texts that
differed still differ and equal texts stay equal.

Whether a laid-out request really has one token per unit is not assumed: the caller checks the
result with the engine's own tokenization (the structure check of conformance/materialize).
"""
from __future__ import annotations

from functools import lru_cache

from ..cases.case import OUTPUT_TEMPLATE

UNITS = 256


@lru_cache(maxsize=8)
def _words(folder: str, loader: str) -> tuple[str, ...]:
    """UNITS distinct words that each add exactly one token wherever `unit_text` puts them: first
    in a text (no space before it: some tokenizers prepend their own word boundary, Phi-3's "▁"),
    after a space, and right after an added token such as the end-of-sequence or image token
    (whose `rstrip` may eat the space, spec/hf-tokenizer.md TOK-HF-7). The vocabulary's own
    pieces, lowercase letters only, in id order: deterministic."""
    from ..judge.oracle import load_hf_tokenizer
    tok = load_hf_tokenizer(folder, loader)
    backend = tok._backend
    contexts = ["", "\n"] + [tok.decode([t]) for t in (tok.eos_token_id, tok.image_token_id) if t is not None]

    def n(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False))

    def fits(word: str) -> bool:
        return all(n(c + word) == n(c) + 1 and n(f"{c}{word} {word} {word}") == n(c) + 3 for c in contexts)

    found: list[str] = []
    for token_id in range(backend.get_vocab_size(with_added_tokens=False)):
        piece = backend.id_to_token(token_id) or ""
        word = piece.lstrip("\u2581\u0120")                     # Metaspace or byte-level space marker
        if word == piece or not (3 <= len(word) <= 8 and word.isascii() and word.isalpha() and word.islower()):
            continue
        if word not in found and fits(word):
            found.append(word)
            if len(found) == UNITS:
                return tuple(found)
    raise ValueError(f"{folder}: only {len(found)} single-token words for the kit's text units")


def unit_text(engine, data: bytes, after_text: bool) -> str:
    """`data` (one position per byte) as units of the engine's `hf` tokenizer; `after_text`:
    the text continues text of the same input (it then starts with a space)."""
    words = _words(engine.tokenizer["files"], engine.tokenizer["loader"])
    text = " ".join(words[b] for b in data)
    return " " + text if after_text and text else text


def unit_ids(engine) -> list[int]:
    """The token id of each unit (what a unit is encoded as at the start of a text)."""
    tok = engine.hf_tokenizer()
    return [tok.encode(w, add_special_tokens=False)[0]
            for w in _words(engine.tokenizer["files"], engine.tokenizer["loader"])]


def write_units(request: dict, dst, template: bool) -> None:
    """Every text of the request as one-token units; `{{output:K}}` markers kept as they are.
    A text continuing text (the contents of a file without chat template are joined) starts with
    a space; one after the template's own text, a media item or the input's start does not."""
    after_text = False
    for message in request["messages"]:
        content = message["content"]
        if template:
            after_text = False                               # the template writes text between messages
        items = [None] if isinstance(content, str) else range(len(content))
        for k in items:
            text = content if k is None else content[k].get("text")
            if text is None:
                after_text = False                           # a media item
                continue
            pieces = OUTPUT_TEMPLATE.split(text)
            markers = OUTPUT_TEMPLATE.findall(text)
            out = unit_text(dst, pieces[0].encode("utf-8"), after_text)
            for marker, piece in zip(markers, pieces[1:]):
                out += f"{{{{output:{marker}}}}}" + unit_text(dst, piece.encode("utf-8"), True)
            if k is None:
                message["content"] = out
            else:
                content[k]["text"] = out
            after_text = after_text or bool(out)
