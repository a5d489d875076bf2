"""Generated ids recovered from a printed text under a real tokenizer, where that is exact.

Re-tokenizing a text gives *a* tokenization, not necessarily the one the model generated: a
greedy model may emit `he` `llo` where the tokenizer encodes `hello` as one token, and the two
lead to different pages. So a text's ids are taken as known only when exactly one sequence of
the tokens the engine may emit (its tokenizer's normal tokens, spec/engine.md section 5
"Emission") decodes to that text with the length its finish implies (`max-length`: exactly
max_generate_length tokens; `end-of-sequence`: any number, then the end-of-sequence token), and
the tokenizer's own decode of that sequence round-trips to the text.

Counting sequences needs decode to be compositional. It is, for the decoders in use, in this
form: decode(t1 .. tk) = decode([t1]) + c(t2) + .. + c(tk), where c(t), the text t adds after
another token, is measured as decode([a, t]) minus decode([a]) for a fixed anchor token a
(SentencePiece decoders strip one leading space from the whole text only, byte-level decoders
concatenate). A tokenizer for which some token does not extend the anchor's text this way is
not used for recovery at all.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

MAX_WORK = 2_000_000
"""Bound on DP states x piece lengths per text: beyond it the ids count as not recovered."""
_LOCK = threading.Lock()
_PIECES: dict = {}


@dataclass
class Pieces:
    first: dict            # text of a token decoded alone -> token ids
    cont: dict             # text a token adds after another -> token ids
    longest: int
    empty_cont: bool       # some token adds nothing after another


def recover_ids(engine, text: str, finish: str, max_length: int) -> list[int] | None:
    """The generated ids (end-of-sequence included) when `text` has exactly one tokenization as the
    engine's emitted tokens that fits `finish`, else None."""
    tok = engine.hf_tokenizer()
    pieces = _pieces(tok, engine.eos_token_id)
    if pieces is None:
        return None
    count = max_length if finish == "max-length" else None
    if finish == "end-of-sequence" and text == "":
        seq = [] if "" not in pieces.first else None
    else:
        seq = _unique(text, pieces, count, max_length)
    if seq is None or (count is not None and len(seq) != count):
        return None
    if seq and tok.decode(seq, skip_special_tokens=True) != text:
        return None
    return seq + ([engine.eos_token_id] if finish == "end-of-sequence" else [])


def _pieces(tok, eos: int) -> Pieces | None:
    key = (tok.folder, tok.loader, eos)
    with _LOCK:
        if key not in _PIECES:
            _PIECES[key] = _measure(tok, eos)
        return _PIECES[key]


def _measure(tok, eos: int) -> Pieces | None:
    """The emitted tokens' texts alone and after the anchor (module docstring)."""
    backend = tok._backend
    size = backend.get_vocab_size(with_added_tokens=True)
    added = set(backend.get_added_tokens_decoder())
    alone = backend.decode_batch([[i] for i in range(size)], skip_special_tokens=False)
    normal = [i for i in range(size) if i not in added and i != eos and "\ufffd" not in alone[i]]
    anchor = next((i for i in normal if alone[i].isalpha()), None)
    if anchor is None:
        return None
    head = alone[anchor]
    after = backend.decode_batch([[anchor, i] for i in normal], skip_special_tokens=False)
    first: dict = {}
    cont: dict = {}
    for i, text in zip(normal, after):
        if not text.startswith(head):
            return None
        first.setdefault(alone[i], []).append(i)
        cont.setdefault(text[len(head):], []).append(i)
    longest = max(max(map(len, first)), max(map(len, cont)))
    return Pieces(first, cont, longest, "" in cont)


def _unique(text: str, pieces: Pieces, count: int | None, max_length: int) -> list[int] | None:
    """The one token sequence decoding to `text` (of length `count` if given, at most
    `max_length`), or None when there is none or more than one."""
    limit = count if count is not None else max_length
    if pieces.empty_cont and count is None:
        return None                              # a token that adds nothing: endless sequences
    if (len(text) + 1) * (limit + 1) * (pieces.longest + 1) > MAX_WORK:
        return None
    L = len(text)
    # ways[k][pos]: sequences of k tokens decoding to text[:pos] (capped at 2), with one witness
    ways = [dict() for _ in range(limit + 1)]
    for piece, ids in pieces.first.items():
        if text.startswith(piece):
            _add(ways[1], len(piece), len(ids), (None, ids[0]))
    for k in range(1, limit):
        for pos, (n, _) in sorted(ways[k].items()):
            for length in range(0, min(pieces.longest, L - pos) + 1):
                ids = pieces.cont.get(text[pos:pos + length])
                if ids:
                    _add(ways[k + 1], pos + length, n * len(ids), ((k, pos), ids[0]))
    lengths = [count] if count is not None else range(1, limit + 1)
    found = [(k, ways[k][L]) for k in lengths if L in ways[k]]
    if sum(min(n, 2) for _, (n, _) in found) != 1:
        return None
    k, _ = found[0]
    seq, state = [], (k, L)
    while state is not None:
        _, (back, token) = ways[state[0]][state[1]]
        seq.append(token)
        state = back
    return seq[::-1]


def _add(row: dict, pos: int, n: int, witness) -> None:
    have = row.get(pos)
    row[pos] = (min(2, n + (have[0] if have else 0)), have[1] if have else witness)
