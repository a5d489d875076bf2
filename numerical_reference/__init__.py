"""The numerical reference: outputs judged against what the engine's weights say.

Comparing a run with reuse to the backend's own `bypass` replay shows that reuse changed
nothing; it cannot show that the model is right (a backend whose attention ignores its cache, or
whose logits are garbage, is wrong the same way twice). Where the backend's manifest declares a
numerical reference (`numerical_reference`, spec/schemas/capabilities.schema.json), every greedy
request that generated tokens is also scored by it, teacher-forced on the backend's own tokens,
and judged token by token and log-probability by log-probability (spec/RUNNING.md section 5).

    layout.py    the reference weight layout (spec/engine.md section 5), read as float64
    forward.py   the float64 NumPy forward: attention, recurrence, LoRA, image and audio encoders
    media.py     a request's media items decoded again, checked against the oracle's identities
    scoring.py   teacher-forced log-probabilities of one request and the size of KV rounding on it
    store.py     the on-disk result cache (engine digest + request)
    source.py    weights or a reference command, as the manifest declares
    judge.py     tolerances calibrated from KV rounding, and the Failures
    timing.py    the optional "reuse is real" timing verdict
    __main__.py  `python -m conformance.numerics`: the kit's forward as a reference command

The one entry point of the runner is `check_outputs`.
"""
from __future__ import annotations

from .. import oracle
from ..verdicts import Failure, Verdict
from .judge import TOLERANCES, judge_request
from .source import ReferenceUnavailable, reference_for


def check_outputs(manifest: dict | None, engine_dir: str | None, engine, doc: dict, base_dir: str, parsed,
                  predicted: list, responses: list, offset: int = 0) -> tuple[list[Failure], dict]:
    """Judge the greedy responses of one request file against the declared reference.

    `doc` is the file as the backend received it, `parsed` the oracle's parse of it, `predicted`
    the oracle's per-request predictions (a request whose outputs the semantics profile leaves
    undefined is skipped), `offset` the index of the file's first request in its case or example.
    Returns (failures, facts); facts["requests"] counts the requests checked."""
    source = reference_for(manifest)
    facts = {"source": source.kind if source else None, "requests": 0, "steps": 0, "worst_drift": None,
             "kv_rounding": 0.0}
    greedy = doc.get("temperature", 1.0) == 0 or doc.get("top_k", 50) == 1
    if source is None or not greedy or parsed is None:
        return [], facts
    items = []
    for k, response in enumerate(responses or []):
        if not isinstance(response, dict) or response.get("finish_reason") == "error":
            continue
        if k < len(predicted) and predicted[k].get("outputs_defined") is False:
            continue
        tokens = oracle.transcript(response, engine)
        if tokens:
            items.append((k, parsed.requests[k], doc["requests"][k], tokens))
    if not items:
        return [], facts
    try:
        scored = source.score_all(engine_dir, engine, [(p, r, t) for _, p, r, t in items], doc, base_dir)
    except ReferenceUnavailable as e:
        return [Failure(None, "numerical reference", "teacher-forced log-probabilities", None,
                        f"the declared {source.kind} reference could not score this file: {e}",
                        verdict=Verdict.ERROR)], facts
    failures = []
    for (k, _, _, _), s in zip(items, scored):
        found, judged = judge_request(offset + k, responses[k], s, source.label)
        failures += found
        facts["requests"] += 1
        facts["steps"] += judged["steps"]
        if judged["worst_drift"] is not None:
            facts["worst_drift"] = max(facts["worst_drift"] or 0.0, judged["worst_drift"])
        facts["kv_rounding"] = max(facts["kv_rounding"], judged["kv_rounding"])
    return failures, facts


def merge_facts(total: dict | None, facts: dict) -> dict:
    """Facts of several request files of one case or example added up."""
    if not total:
        return dict(facts)
    out = dict(total)
    out["source"] = out.get("source") or facts.get("source")
    for key in ("requests", "steps"):
        out[key] = out.get(key, 0) + facts.get(key, 0)
    drifts = [d for d in (out.get("worst_drift"), facts.get("worst_drift")) if d is not None]
    out["worst_drift"] = max(drifts) if drifts else None
    out["kv_rounding"] = max(out.get("kv_rounding", 0.0), facts.get("kv_rounding", 0.0))
    return out


__all__ = ["check_outputs", "merge_facts", "reference_for", "ReferenceUnavailable", "TOLERANCES"]
