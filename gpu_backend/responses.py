"""The output file's entry for one request (spec/schemas/output.schema.json; spec/RUNNING.md
section 3 says what the runner compares).

The per-request context-cache facts are reported only with context reuse on (they describe
reuse), and say what the plan and the publications really were, so the runner compares them
with the oracle's prediction field by field (CR-MET-13).
"""


def facts(s) -> dict:
    """The `context_cache` entry of a sequence's response (CR-MET-13)."""
    p = s.plan
    return {"plan": p.kind, "matched_tokens": p.matched, "reused_tokens": p.reused, "media_aware": s.media_aware,
            "lookup_bypass": p.bypass, "forced_cold": p.forced_cold, "hybrid_restore": p.restores,
            "snapshot_pressure_skips": s.pressure_skips, "publications": s.publications}


def response(s, vocab, reuse: bool) -> dict:
    """The response of a finished sequence: text cut at its stop string (CR-BATCH-7), ids, facts."""
    r = s.req
    text = vocab.text(s.generated)
    if s.text_end is not None:
        text = text[:s.text_end]
    out = {"request_idx": r.idx, "batch_idx": r.batch_idx, "output_text": text, "finish_reason": s.finish,
           "messages": r.messages, "formatted_complete_request": r.formatted, "input_tokens": r.n,
           "output_ids": list(s.generated)}
    if r.num_logprobs:
        out["logprobs"] = s.logprobs
    if s.last_accepted is not None:
        out["last_verification_accepted"] = s.last_accepted
    out["context_cache"] = facts(s) if reuse else None
    return out


def error_response(r, message) -> dict:
    """The response of every request of a failed batch (CR-CAP-8): finish_reason `error`."""
    return {"request_idx": r.idx, "batch_idx": r.batch_idx, "output_text": message, "finish_reason": "error",
            "messages": r.messages, "formatted_complete_request": r.formatted, "input_tokens": r.n,
            "output_ids": [], "context_cache": None}
