"""Generated tokens from a backend's output file (spec/RUNNING.md section 4, step 5).

The oracle never judges outputs: CR-OUT-1 (greedy tokens equal a bypass replay), CR-OUT-2
(log-probabilities within tolerance) and CR-OUT-3 (no read of foreign KV, checked with
poisoned pages) are checked by the runner. The oracle only needs the generated tokens, which
decide decode-end publication (CR-PUB-2) and decode growth (CR-CAP-9).
"""

from .tokenizer import EOS, VOCAB_SIZE

_TEXT_COMPLETE = ("end-of-sequence", "max-length")


def transcript_tokens(output: dict, engine=None) -> list:
    """One entry per response, in file order (as responses are written): the generated token
    ids (the end-of-sequence token included), or None when they cannot be known.

    Taken from `output_ids` if present; else from the top candidate of each `logprobs` step;
    else, for the bytes-v1 tokenizer only, by re-tokenizing `output_text` (adding <|eos|> after
    an end-of-sequence finish) when the text is complete, i.e. the finish was end-of-sequence or
    max-length (a stop string truncates the text). A real tokenizer's text does not say its ids
    (TOK-HF-2). A response whose finish_reason is "error" gives None.
    """
    responses = output.get("responses") if isinstance(output, dict) else None
    if not isinstance(responses, list):
        return []
    vocab = engine.vocab_size if engine is not None else VOCAB_SIZE
    text = engine is None or not engine.hf
    return [_tokens(r, vocab, text) if isinstance(r, dict) else None for r in responses]


def _valid(tokens, vocab: int) -> bool:
    return (isinstance(tokens, list) and len(tokens) > 0
            and all(type(t) is int and 0 <= t < vocab for t in tokens))


def _tokens(response: dict, vocab: int, from_text: bool) -> list | None:
    reason = response.get("finish_reason")
    if reason == "error":
        return None
    ids = response.get("output_ids")
    if ids is not None:
        return list(ids) if _valid(ids, vocab) else None
    steps = response.get("logprobs")
    if isinstance(steps, list) and steps:
        try:
            tokens = [max(step, key=lambda c: c["logprob"])["token_id"] for step in steps]
        except (LookupError, TypeError, ValueError):
            return None
        return tokens if _valid(tokens, vocab) else None
    text = response.get("output_text")
    if from_text and isinstance(text, str) and reason in _TEXT_COMPLETE:
        tokens = list(text.encode("utf-8")) + ([EOS] if reason == "end-of-sequence" else [])
        return tokens if tokens else None
    return None
