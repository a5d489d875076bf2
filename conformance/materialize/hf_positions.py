"""Where each input token of a request comes from under a real tokenizer.

layout.py knows this for bytes-v1 by construction (one token per template role, byte and
placeholder). Under an `hf` profile the chat template writes its own text around each message
(Phi-3-vision: `<|user|>` and a newline; Qwen: `<|im_start|>user` and a newline) and may write
nothing where bytes-v1 has a token (Phi-3-mini's has no BOS). To keep a case's page structure the
re-layout needs, for every run of template positions of the bytes-v1 layout, how many tokens
the engine's template writes there (`with_target_widths`).

`token_labels` renders the request twice: with each message's content replaced by a sentinel,
which shows where the template writes contents, and with the real contents; the tokenizer's
character offsets then say which tokens lie inside which content item. Nothing is assumed about
the template beyond writing each message's content once, unchanged.
"""
from __future__ import annotations

from dataclasses import replace

from ..cases.case import OUTPUT_TEMPLATE
from .layout import Atom
from .relayout import CannotRelayout

SENTINEL = "\u2063kvconform-content-{}\u2063"


def token_labels(request: dict, engine, template: bool, prompt: bool, keywords: dict | None = None) -> list[tuple]:
    """A label for each token of the request's ids before image expansion: ("text", m, k) inside a
    text item, ("image", m, k) for an image item's token, ("output", m, k) for a `{{output:K}}`
    marker (written as the end-of-sequence token, which merges with nothing), ("template",) for
    what the chat template writes. `keywords`: the request file's template keywords (TOK-HF-4)."""
    tok = engine.hf_tokenizer()
    marker = tok.decode([tok.eos_token_id])
    contents, ranges, images = [], [], 0
    for m, message in enumerate(request["messages"]):
        content = message["content"]
        parts, at = [], 0
        for k, item in ([(None, {"type": "text", "text": content})] if isinstance(content, str) else
                        enumerate(content)):
            if item["type"] == "text":
                pieces = OUTPUT_TEMPLATE.split(item["text"])
                for n, piece in enumerate(pieces):
                    if n:
                        parts.append(("output", m, k, marker))
                    parts.append(("text", m, k, piece))
            else:
                images += 1
                parts.append(("image", m, k, tok.image_placeholder(images)))
        text = ""
        for kind, m_, k, piece in parts:
            ranges.append((m, len(text), len(text) + len(piece), (kind, m_, k)))
            text += piece
        contents.append(text)
    starts = _content_starts(request, contents, tok, engine, template, prompt, keywords or {})
    rendered = starts.pop()
    encoding = tok._backend.encode(rendered, add_special_tokens=False)
    spans = sorted((starts[m] + a, starts[m] + b, label) for m, a, b, label in ranges if b > a)
    labels, s = [], 0
    for token, (a, _) in zip(encoding.ids, encoding.offsets):
        while s < len(spans) and spans[s][1] <= a:
            s += 1
        inside = spans[s][2] if s < len(spans) and spans[s][0] <= a else None
        if inside is None or (inside[0] == "image" and token != tok.image_token_id):
            labels.append(("template",))
        else:
            labels.append(inside)
    return labels


def _content_starts(request, contents, tok, engine, template, prompt, keywords) -> list:
    """Where each message's content starts in the rendered text, and (last) the rendered text."""
    if not template:                                   # TOK-HF-8: contents joined, nothing between
        starts, at = [], 0
        for text in contents:
            starts.append(at)
            at += len(text)
        return starts + ["".join(contents)]
    kwargs = {**(engine.tokenizer.get("chat_template_kwargs") or {}), **keywords}
    messages = [dict(message, content=SENTINEL.format(m)) for m, message in enumerate(request["messages"])]
    shape = tok.apply_chat_template(messages, prompt, **kwargs)
    out, rendered, at = [], "", 0
    for m, text in enumerate(contents):
        sentinel = SENTINEL.format(m)
        found = shape.find(sentinel, at)
        if found < 0 or shape.count(sentinel) != 1:
            raise CannotRelayout(f"the chat template does not write message {m}'s content exactly once")
        rendered += shape[at:found]
        out.append(len(rendered))
        rendered += text
        at = found + len(sentinel)
    return out + [rendered + shape[at:]]


def with_target_widths(atoms: list[Atom], labels: list[tuple]) -> list[Atom]:
    """The bytes-v1 atoms with the width each takes on the engine: the tokens the engine's
    template writes between two contents go to the template atoms between them (the first takes
    any surplus; a deficit is taken from the first ones down to zero), or to the content before
    them when bytes-v1 writes none there. Every byte and placeholder must be one token on the
    engine (units.py); CannotRelayout otherwise."""
    out: list[Atom] = []
    gap: list[int] = []                    # indexes in `out` of the template atoms of the current gap
    lead = 0                               # template tokens before the first content, with no atom for them
    j = 0

    def close(count: int) -> None:
        nonlocal lead
        surplus = count - len(gap)
        if gap:
            for i in gap:
                cut = min(out[i].width, max(0, -surplus))
                out[i] = replace(out[i], width=out[i].width - cut)
                surplus += cut
            out[gap[0]] = replace(out[gap[0]], width=out[gap[0]].width + max(0, surplus))
        elif out:
            out[-1] = replace(out[-1], width=out[-1].width + count)
        else:
            lead += count
        gap.clear()

    for atom in atoms:
        if atom.kind == "special":
            gap.append(len(out))
            out.append(atom)
            continue
        if atom.kind == "media" and atom.offset > 0:
            out.append(atom)                               # the rest of an item: its token is taken
            continue
        count = 0
        while j < len(labels) and labels[j][0] == "template":
            count, j = count + 1, j + 1
        want = {"text": "text", "media": "image", "opaque": "output"}[atom.kind]
        if j == len(labels) or labels[j] != (want, atom.message, atom.item):
            got = labels[j] if j < len(labels) else "the end of the input"
            raise CannotRelayout(f"the engine's tokens do not follow the request's items: expected {want} of "
                                 f"message {atom.message} item {atom.item}, found {got} (token {j})")
        close(count)
        out.append(replace(atom, width=atom.width + lead) if lead else atom)
        lead, j = 0, j + 1
    if not atoms or atoms[-1].kind != "opaque":
        close(sum(1 for label in labels[j:] if label[0] == "template"))
        if j < len(labels) and any(label[0] != "template" for label in labels[j:]):
            raise CannotRelayout("the engine's tokens hold more content than the request's items")
    return out
