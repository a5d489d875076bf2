"""Where each input token of a request comes from (bytes-v1, spec/tokenizer.md section 2).

The oracle tokenizes; this module says, for every position it produces, which part of the
request file made it: a special token of the chat template, one byte of a text, or one
placeholder of a media item. The re-layout needs that to resize a request by editing its JSON
(text goes into text, media grows by whole items) without changing anything else.

A text holding `{{output:K}}` ends what can be laid out: the answer it stands for is known only
at run time, so the positions after it are not known here (an `opaque` atom marks the spot).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..cases.case import OUTPUT_TEMPLATE


@dataclass(frozen=True)
class Atom:
    """One input position of a request. `kind` is special, text, media or opaque.

    text: `message`, `item` (None for a string content) and `offset`, the byte offset in the
    text's UTF-8 encoding; `boundary_before` / `boundary_after` say whether a character starts
    at it / ends with it (filler may only go between characters). media: `message`, `item`,
    `offset` (placeholder index in the item) and `count` (the item's placeholders). `width`: the
    tokens it becomes on the target engine, 1 except where a real tokenizer's chat template
    writes more or fewer tokens than bytes-v1 (hf_positions.py)."""
    kind: str
    message: int | None = None
    item: int | None = None
    offset: int = 0
    boundary_before: bool = True
    boundary_after: bool = True
    count: int = 1
    width: int = 1

    def same_item(self, other: "Atom") -> bool:
        return (self.kind == other.kind == "media" and self.message == other.message
                and self.item == other.item)


def atoms_of(request: dict, chat_template: bool, generation_prompt: bool, media_count) -> list[Atom]:
    """The positions of one request, in order, up to the first `{{output:K}}` (inclusive).

    `media_count(item)` returns the placeholders of an image or audio item (its decoded size).
    """
    out: list[Atom] = []
    special = Atom("special")
    if chat_template:
        out.append(special)
    for m, message in enumerate(request["messages"]):
        if chat_template:
            out.append(special)                                    # the role token
        content = message["content"]
        items = [(None, {"type": "text", "text": content})] if isinstance(content, str) else enumerate(content)
        for k, item in items:
            if item["type"] == "text":
                if _text(out, item["text"], m, k):
                    return out
            else:
                count = media_count(item)
                out += [Atom("media", m, k, j, count=count) for j in range(count)]
        if chat_template:
            out.append(special)                                    # <|end|>
    if chat_template and generation_prompt:
        out.append(special)                                        # <|assistant|>
    return out


def _text(out: list[Atom], text: str, message: int, item: int | None) -> bool:
    """Append the byte atoms of `text`; True when a template cut it short."""
    found = OUTPUT_TEMPLATE.search(text)
    head = text[:found.start()] if found else text
    data = head.encode("utf-8")
    for j, byte in enumerate(data):
        starts = byte & 0xC0 != 0x80
        ends = j + 1 == len(data) or data[j + 1] & 0xC0 != 0x80
        out.append(Atom("text", message, item, j, starts, ends))
    if found:
        out.append(Atom("opaque", message, item, len(data)))
    return found is not None
