"""Page maps: the facts report.html draws per request, taken from what the oracle decided.

A person debugging a runtime's cache wants the pages drawn, not described. The page map of a
case is the data of those drawings, written into report.json (`details.page_map`) by the runner
at the point where it holds the oracle's prediction and the backend's answer, so that the HTML
(conformance/report/html.py) only draws and never derives a count:

- per request: its length n, batch, LoRA adapter, its media items (placeholder spans from the
  oracle's parse) with the page boundaries the oracle's CR-MEDIA-3 trim gave back inside each,
  the trim step itself and the deciding step of each fact (both from the oracle's decision
  trace, reference/trace.py), the oracle's per-request facts (plan, matched, reused,
  publications at prefill end and decode end, lookup bypass, media-aware, hybrid restore)
  beside the backend's, and the first position where they differ;
- per file: the page size, the engine kind, the file's lookup and commit policies, the runtime
  flags that change a plan, and the `prefill` profile section (computed and reused tokens) of
  both sides where present.

For a peer server (spec/peer-profiles.md) the same map is drawn in the profile's blocks: the
block size, the cached tokens predicted and reported, and the N - 1 cap computed by the peer
oracle's own count functions.

This module is the one place that turns oracle output into drawable facts; where a fact is a
decision of a rule (a trim, a plan), it is the oracle's trace step, never worked out here.
"""
from __future__ import annotations

from ..judge import peer_oracle as peers
from ..judge.explain import deciding, step_json

MAX_REQUESTS = 64
"""Requests drawn per case at most: every request a failure names, then the first others."""
MAX_PUBLICATIONS = 16
FACT_KEYS = ("plan", "matched_tokens", "reused_tokens", "lookup_bypass", "media_aware", "forced_cold",
             "hybrid_restore", "snapshot_pressure_skips")
PUBLICATION_KEYS = ("point", "tokens", "pages", "status")
PREFILL_KEYS = ("total_runs", "reused_tokens", "computed_tokens")
STEP_VALUES = FACT_KEYS + ("input_tokens", "status")
"""The values whose deciding trace step a request's map shows (publications have their own)."""


def case_page_map(engine, flags, prediction, responses, profile, failures) -> dict:
    """The page map of one request file: `prediction` is the oracle's (conformance.judge.oracle.Prediction),
    `responses` and `profile` what the backend wrote, `failures` the case's Failures so far."""
    parsed = prediction.parsed
    P = engine.tokens_per_page
    requests = parsed.requests if parsed else []
    named = sorted({f.request for f in failures if isinstance(f.request, int) and 0 <= f.request < len(requests)})
    chosen = _chosen(len(requests), named)
    batch_of = {i: b for b, members in enumerate(parsed.batches if parsed else []) for i in members}
    observed = responses if isinstance(responses, list) else []
    out = {
        "unit": "page", "size": P, "engine": {"kind": engine.kind, "pool_pages": engine.kv_pool_pages},
        "policy": {"lookup": parsed.lookup_policy if parsed else None,
                   "commit": parsed.commit_policy if parsed else None,
                   "context_reuse": flags.enable_context_reuse, "hidden_state_output": flags.output_hidden_states,
                   "max_records": flags.max_records, "warmup": flags.warmup,
                   "semantics_profile": flags.semantics_profile},
        "prefill": _prefill(prediction.profile, profile),
        "requests": [],
    }
    for i in chosen:
        want = prediction.responses[i] if i < len(prediction.responses) else {}
        have = observed[i] if i < len(observed) and isinstance(observed[i], dict) else None
        entry = _request(i, requests[i], want, have, batch_of.get(i), P, _generated(prediction, i), failures,
                         _trim(prediction.trace, i))
        entry["steps"] = _steps(prediction.trace, i)
        out["requests"].append(entry)
    if len(requests) > len(chosen):
        out["omitted_requests"] = len(requests) - len(chosen)
    return out


def _chosen(count: int, named: list) -> list:
    """Every request when there are few; else those a failure names, then the first others."""
    if count <= MAX_REQUESTS:
        return list(range(count))
    keep = named[:MAX_REQUESTS]
    kept = set(keep)
    rest = [i for i in range(MAX_REQUESTS) if i not in kept][:MAX_REQUESTS - len(keep)]
    return sorted(keep + rest)


def _request(i: int, request, want: dict, have: dict | None, batch, P: int, generated, failures,
             trim: dict | None = None) -> dict:
    expected = _facts(want.get("context_cache"))
    seen = _facts(have.get("context_cache")) if have is not None else None
    entry = {
        "request": i, "batch": batch, "n": request.n, "lora": request.lora_name,
        "status": want.get("status"), "error": want.get("error"),
        "generated": want["generated_tokens"] if isinstance(want.get("generated_tokens"), int)
        else len(generated) if generated is not None else None,
        "media": _media(request.spans, trim),
        "trim": trim,
        "expected": expected,
        "observed": seen,
        "observed_n": _int(have.get("input_tokens")) if have is not None else None,
        "rules": sorted({f.rule for f in failures if f.request == i and f.rule}),
    }
    if want.get("outputs_defined") is False:
        entry["outputs_defined"] = False
    entry["first_difference"] = first_difference(expected, seen, P, [f for f in failures if f.request == i])
    return entry


def _media(spans, trim: dict | None) -> list:
    """Each media item's placeholder span, and the page boundaries inside it that the oracle's
    trim gave back (CR-MEDIA-3, as the trace's trim step says)."""
    given_back = trim["given_back"] if trim else []
    out = []
    for k, s in enumerate(spans, 1):
        out.append({"item": k, "modality": s.modality, "start": s.start, "end": s.end,
                    "digest": s.digest.hex()[:8] if isinstance(s.digest, (bytes, bytearray)) else str(s.digest)[:8],
                    "splits": [b for b in given_back if s.start < b < s.end]})
    return out


def _trim(trace, i: int) -> dict | None:
    """The oracle's CR-MEDIA-3 step of request i: reuse before and after, the boundaries it gave
    back and why; None where the request was not trimmed (no media, or nothing reused)."""
    step = next((s for s in (trace.steps_of(i, "reused_tokens") if trace is not None else ())
                 if s.rule == "CR-MEDIA-3"), None)
    if step is None:
        return None
    refs = step.refs or {}
    return {"from": step.before, "to": step.to, "given_back": list(refs.get("boundaries", []))
            if step.before != step.to else [], "why": _scalar(step.why)}


def _steps(trace, i: int) -> list:
    """The deciding step of each of request i's facts (the last that changed it): the reason the
    map shows beside the oracle's value."""
    out = []
    for value in STEP_VALUES:
        steps = trace.steps_of(i, value) if trace is not None else []
        if steps:
            head = deciding(steps)
            out.append(dict(step_json(head), why=_scalar(head.why)))
    return out


def first_difference(expected: dict | None, observed: dict | None, P: int, failures: list) -> dict | None:
    """Where the backend first parts from the oracle on this request: the first position whose
    reuse (then match, then publication) differs, with its page; else the first failure's
    observable. None when the request agrees."""
    if expected and observed:
        for key in ("reused_tokens", "matched_tokens"):
            e, o = expected.get(key), observed.get(key)
            if isinstance(e, int) and isinstance(o, int) and e != o:
                pos = min(e, o)
                return {"what": key, "position": pos, "page": pos // P, "expected": e, "observed": o}
        pubs_e, pubs_o = expected.get("publications") or [], observed.get("publications")
        if isinstance(pubs_o, list):
            for k in range(max(len(pubs_e), len(pubs_o))):
                w = pubs_e[k] if k < len(pubs_e) else None
                h = pubs_o[k] if k < len(pubs_o) else None
                if w != h:
                    ends = [p.get("tokens") for p in (w, h) if isinstance(p, dict) and isinstance(p.get("tokens"), int)]
                    pos = min(ends) if ends else None
                    return {"what": f"publications[{k}]", "position": pos,
                            "page": pos // P if pos is not None else None, "expected": w, "observed": h}
        for key in FACT_KEYS:
            if key in expected and observed.get(key) != expected[key]:
                pos = expected.get("reused_tokens") if key == "plan" else None
                return {"what": key, "position": pos, "page": pos // P if isinstance(pos, int) else None,
                        "expected": expected[key], "observed": observed.get(key)}
    if failures:
        f = failures[0]
        return {"what": f.what, "position": None, "page": None, "expected": _scalar(f.expected),
                "observed": _scalar(f.observed)}
    return None


def _facts(cc) -> dict | None:
    """The per-request cache facts, scalars only (a backend's output is not trusted to be small)."""
    if not isinstance(cc, dict):
        return None
    out = {k: _scalar(cc[k]) for k in FACT_KEYS if k in cc}
    pubs = cc.get("publications")
    if isinstance(pubs, list):
        out["publications"] = [{k: _scalar(p.get(k)) for k in PUBLICATION_KEYS if k in p}
                               for p in pubs[:MAX_PUBLICATIONS] if isinstance(p, dict)]
    elif pubs is not None:
        out["publications"] = _scalar(pubs)
    return out


def _prefill(expected: dict | None, observed: dict | None) -> dict | None:
    """The `prefill` profile sections (CR-MET-12) of the oracle and of the backend, where written."""
    e = (expected or {}).get("prefill") if isinstance(expected, dict) else None
    o = (observed or {}).get("prefill") if isinstance(observed, dict) else None
    if not isinstance(e, dict) and not isinstance(o, dict):
        return None
    pick = lambda d: {k: _scalar(d[k]) for k in PREFILL_KEYS if k in d} if isinstance(d, dict) else None
    return {"expected": pick(e), "observed": pick(o)}


def _generated(prediction, i: int):
    gen = prediction.generated
    return gen[i] if i < len(gen) and gen[i] is not None else None


def _int(value):
    return value if type(value) is int else None


def _scalar(value):
    """A value as the map keeps it: numbers, booleans, None and short strings as they are."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


# --- peer servers --------------------------------------------------------------------------------

def peer_page_map(profile: str, settings: dict, steps: list) -> dict:
    """The block map of a peer case: per request its prompt length N, the cached tokens the peer
    oracle predicted and the server reported, and the most a count may be (the profile's count
    function at a full match: the N - 1 cap, in whole blocks where the profile counts blocks)."""
    p = peers.profile_of(profile)
    size, unit = (settings[p.unit], p.unit_name) if isinstance(settings.get(p.unit), int) else (1, "token")
    rows = []
    for step in steps[:MAX_REQUESTS]:
        n = step.get("prompt_tokens")
        predicted, reported = step.get("predicted"), step.get("reported")
        row = {"request": step.get("request"), "n": n, "predicted": predicted, "reported": reported,
               "cap": p.full_match(settings, n) if isinstance(n, int) else None,
               "fields": {k: _scalar(v) for k, v in (step.get("fields") or {}).items()}}
        row["first_difference"] = (
            {"what": "cached_tokens", "position": min(predicted, reported), "page": min(predicted, reported) // size,
             "expected": predicted, "observed": reported}
            if isinstance(predicted, int) and isinstance(reported, int) and predicted != reported else None)
        rows.append(row)
    return {"unit": unit, "size": size, "profile": profile, "requests": rows}

