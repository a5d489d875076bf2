"""Feeding an answer back so that the next prompt provably shares the tokens the server sampled.

A conversation case judges whether a server caches the tokens it generated (PEER-LCPP-2,
PEER-VLLM-4, PEER-SGL-3, PEER-TRT-4) only if the next prompt begins with them. The answer's
text, rendered into the next prompt and tokenized there, often does not give back the sampled
ids right at the answer (a tokenizer that marks word starts, a detokenizer that strips a
leading space). So the text fed back is chosen by its round trip: among the server's text and
the kit's decodings of the sampled ids and of their prefixes, the one whose next prompt shares
the most sampled ids, the server's own text winning ties. Any text is a legal assistant message;
the count is predicted on the ids actually sent, and the case records how many sampled ids each
next prompt shares.

    text, ids, shared = choose_answer(build, prompt_ids, sampled, server_text, tokens)
"""
from __future__ import annotations

from ..judge.peer_oracle import common_prefix


def shared_sampled(prompt_ids: list, sampled: list, next_ids: list) -> int:
    """How many of the ids the server computed after the prompt (`sampled[:-1]`: the last is
    never fed back) the next prompt repeats right after it."""
    computed = list(prompt_ids) + list(sampled)[:-1]
    return max(0, common_prefix(computed, next_ids) - len(prompt_ids))


def answer_candidates(text: str | None, sampled: list | None, tokenizer) -> list:
    """The server's text first, then (with a kit tokenizer) the decodings of the sampled ids and
    of each prefix of them, longest first; no duplicates."""
    out = [text] if isinstance(text, str) else []
    if tokenizer is not None and sampled:
        for j in range(len(sampled), 0, -1):
            out.append(tokenizer.decode(sampled[:j], skip_special_tokens=True))
            out.append(tokenizer.decode(sampled[:j], skip_special_tokens=False))
    seen, unique = set(), []
    for candidate in out:
        if candidate and candidate not in seen:
            seen.add(candidate)
            unique.append(candidate)
    return unique


def choose_answer(build, prompt_ids: list, sampled: list | None, text: str | None, tokens):
    """(text, next prompt ids, sampled ids shared) of the candidate that shares the most.
    `build(text)` gives the next step's messages with `text` as the answer; `tokens.ids`
    tokenizes them (raising what it raises: the caller reports it)."""
    best = None
    for candidate in answer_candidates(text, sampled, getattr(tokens, "kit", None)):
        ids = tokens.ids(build(candidate))
        shared = shared_sampled(prompt_ids, sampled or [], ids)
        if best is None or shared > best[2]:
            best = (candidate, ids, shared)
        if sampled is not None and shared >= len(sampled) - 1:
            break                                            # every computed sampled id is shared
    return best
