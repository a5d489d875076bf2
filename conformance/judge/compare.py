"""Comparing what a backend wrote with the oracle and with its own bypass replay
(spec/RUNNING.md sections 3 and 5).

Counters, pools, records, per-request facts and prefill counts are compared exactly; outputs
are compared metamorphically against the bypass replay, with the near-tie and log-probability
tolerances below. Every mismatch becomes a Failure naming the rule, the request, expected and
observed values, the oracle's reason and the chain of its steps that decided the expected
value (conformance/judge/explain.py formats the oracle's trace); a difference the spec leaves open
(CR-MEDIA-6) is UNSPECIFIED, as the trace says (verdicts.counter_verdict, request_verdict).
"""
from __future__ import annotations

import math

from .explain import Explainer
from .verdicts import Failure, Verdict, counter_verdict, request_verdict

NEAR_TIE_NATS = 0.05
LOGPROB_DRIFT = 0.02
LOGPROB_FAIL = 0.1
TOLERANCES = {
    "near_tie_top2_gap_nats": NEAR_TIE_NATS,
    "logprob_drift_nats": LOGPROB_DRIFT,
    "logprob_fail_nats": LOGPROB_FAIL,
    "counters": "exact",
    "note": "spec/RUNNING.md section 5: a differing greedy token is a QUALITY_WARNING only when each run's "
            "token is among the other's candidates and the bypass run's top-1/top-2 gap is below "
            "near_tie_top2_gap_nats; log-probabilities of agreeing tokens differing from the bypass run's by more "
            "than logprob_drift_nats are a QUALITY_WARNING, by more than logprob_fail_nats a FAIL",
}

COUNTER_RULES = {
    "admitted_sequences": "CR-MET-1", "hit_sequences": "CR-MET-2", "media_aware_sequences": "CR-MET-3",
    "lookup_bypass_sequences": "CR-MET-4", "forced_cold_sequences": "CR-MET-4",
    "matched_tokens": "CR-MET-5", "reused_tokens": "CR-MET-5", "plans": "CR-MET-6",
    "publications": "CR-MET-7", "records": "CR-MET-8", "resource_pools": "CR-MET-9",
    "reclaimed_resources": "CR-MET-10", "hybrid": "CR-MET-11", "speculative": "CR-MET-11",
}
NOT_COMPARED = {"planning_nanoseconds"}
PREFILL_KEYS = ("total_runs", "reused_tokens", "computed_tokens")


def leaves(d: dict, prefix: str = ""):
    """(dotted key, value) for every leaf of a nested dict: `{"a": {"b": 1}}` -> `("a.b", 1)`."""
    for k, v in d.items():
        if isinstance(v, dict):
            yield from leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def dotted_get(d, dotted: str):
    """The value at a dotted key, or MISSING."""
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return MISSING
        d = d[part]
    return d


MISSING = object()


def check_shape(responses, count: int) -> list[Failure]:
    """One response per request, in file order (RUNNING.md section 2): else the output is garbage."""
    if not isinstance(responses, list):
        return [Failure(None, "responses", f"a list of {count}", type(responses).__name__,
                        "the output has no responses array", verdict=Verdict.ERROR)]
    out = []
    if len(responses) != count:
        out.append(Failure(None, "responses", count, len(responses),
                           "one response per request of the file is required", verdict=Verdict.ERROR))
    for i, r in enumerate(responses[:count]):
        if not isinstance(r, dict) or r.get("request_idx") != i:
            got = r.get("request_idx") if isinstance(r, dict) else r
            out.append(Failure(None, f"responses[{i}].request_idx", i, got,
                               "responses must be in file order", i, Verdict.ERROR))
            break
    return out


RECORD_INTERNALS = ("records", "resource_pools", "reclaimed_resources")


def compare_profile(expected: dict, observed: dict | None, ex: Explainer, prefill: bool,
                    record_internals: bool = True, prefill_required: bool = False,
                    tally: dict | None = None) -> list[Failure]:
    """The profile's context_cache section (CR-MET-1..11, CR-POL-6) and, if declared, prefill (CR-MET-12).
    `record_internals`: compare the record-granular counters (spec/profiles.md: mandatory in
    edge-llm-0.10, else only when the backend declares them). `prefill_required`: the semantics
    profile writes the prefill section with every profile file, so its absence is a FAIL."""
    out = []
    want = expected.get("context_cache")
    have = (observed or {}).get("context_cache")
    if observed is None and (want is not None or prefill):
        return [Failure(None, "profile", "a profile file", None, "no profile was written", verdict=Verdict.ERROR)]
    if (want is None) != (have is None):
        out.append(Failure("CR-POL-6", "profile.context_cache", "present" if want is not None else "absent",
                           "present" if have is not None else "absent",
                           "the context_cache section is present exactly when --enableContextReuse is on"))
    elif want is not None:
        for key, value in leaves(want):
            if key.split(".")[-1] in NOT_COMPARED or (not record_internals and key.split(".")[0] in RECORD_INTERNALS):
                continue
            _count(tally)
            got = dotted_get(have, key)
            if got is MISSING or not isinstance(got, int) or isinstance(got, bool):
                out.append(Failure(COUNTER_RULES.get(key.split(".")[0]), f"profile.context_cache.{key}", value,
                                   None if got is MISSING else got, "missing or not an integer",
                                   verdict=Verdict.ERROR))
            elif got != value:
                why, chain = ex.counter(key, value, got)
                out.append(Failure(COUNTER_RULES.get(key.split(".")[0]), f"profile.context_cache.{key}",
                                   value, got, why, verdict=counter_verdict(ex.trace), chain=chain))
    if prefill:
        want_p, have_p = expected.get("prefill") or {}, (observed or {}).get("prefill")
        if want_p and have_p is None:
            out.append(Failure("CR-MET-12", "profile.prefill", "present", "absent",
                               "the semantics profile writes the prefill section with every profile file"
                               if prefill_required else "--dumpProfile writes the prefill section",
                               verdict=Verdict.FAIL if prefill_required else Verdict.ERROR))
        elif want_p:
            for key in PREFILL_KEYS:
                _count(tally)
                if have_p.get(key) != want_p.get(key):
                    why, chain = ex.prefill(key, want_p.get(key), have_p.get(key))
                    out.append(Failure("CR-MET-12", f"profile.prefill.{key}", want_p.get(key), have_p.get(key),
                                       why, verdict=counter_verdict(ex.trace), chain=chain))
    return out


REQUEST_FIELDS = ("plan", "matched_tokens", "reused_tokens", "media_aware", "lookup_bypass", "forced_cold",
                  "hybrid_restore", "snapshot_pressure_skips", "publications")


def compare_requests(predicted: list[dict], responses: list[dict], ex: Explainer, per_request: bool,
                     input_tokens: bool, start: int = 0, tally: dict | None = None) -> list[Failure]:
    """Per request from index `start` on: success or failure of its batch, n, and the cache facts
    (CR-MET-13). `tally`, when given, counts the values compared under "counts"."""
    out = []
    tally = {} if tally is None else tally
    for i, (p, r) in enumerate(zip(predicted, responses)):
        if i < start:
            continue
        status = "error" if r.get("finish_reason") == "error" else "ok"
        if p["status"] is None and status == "error":
            continue               # admission facts only (conformance/judge/transcripts.py): a failed batch says none
        if p["status"] is not None:
            _count(tally)
        if p["status"] is not None and status != p["status"]:
            rule, why, chain = ex.status(i)
            if p["status"] == "ok":
                why += f"; the backend failed it: {str(r.get('output_text'))[:120]}"
            out.append(Failure(rule, f"responses[{i}].finish_reason",
                               "error" if p["status"] == "error" else "not error", r.get("finish_reason"), why, i,
                               chain=chain))
            continue
        if input_tokens and "input_tokens" in r:
            _count(tally)
        if input_tokens and "input_tokens" in r and r["input_tokens"] != p["input_tokens"]:
            rule, why, chain = ex.input_tokens(i, r["input_tokens"])
            out.append(Failure(rule, f"responses[{i}].input_tokens", p["input_tokens"], r["input_tokens"], why, i,
                               chain=chain))
        want = p.get("context_cache")
        if not per_request or want is None:
            continue
        have = r.get("context_cache")
        if not isinstance(have, dict):
            out.append(Failure("CR-MET-13", f"responses[{i}].context_cache", "an object", have,
                               "the backend declares per-request metrics", i, Verdict.ERROR))
            continue
        for key in REQUEST_FIELDS:
            if key not in want:
                continue
            _count(tally)
            if have.get(key) != want[key]:
                rule, why, chain = ex.request_field(i, key, want, have)
                out.append(Failure(rule, f"responses[{i}].context_cache.{key}", want[key], have.get(key), why, i,
                                   request_verdict(ex.trace, i), chain))
    return out


def _count(tally: dict, what: str = "counts") -> None:
    tally[what] = tally.get(what, 0) + 1


# --- outputs (CR-OUT) -------------------------------------------------------------------------

OBSERVABLES = ("output_ids", "logprobs", "output_text")
"""What an output comparison compares, most exact first: the generated ids, the ids of the chosen
candidates in `logprobs`, the printed text (spec/RUNNING.md section 5)."""


def _logprob_ids(r: dict) -> list | None:
    """The chosen token of every `logprobs` step (greedy: the most likely candidate), or None when
    some step has no candidate with a token id."""
    steps = r.get("logprobs")
    if not (isinstance(steps, list) and steps and all(isinstance(s, list) and s for s in steps)):
        return None
    try:
        return [max(s, key=lambda c: c["logprob"])["token_id"] for s in steps]
    except (LookupError, TypeError, ValueError):
        return None


def observable_of(a: dict, b: dict, ids: bool) -> str:
    """The most exact observable both responses carry: like is compared with like, never one
    run's ids with the other's text. `ids`: the manifest declares `output_ids`."""
    if ids and isinstance(a.get("output_ids"), list) and isinstance(b.get("output_ids"), list):
        return "output_ids"
    if _logprob_ids(a) is not None and _logprob_ids(b) is not None:
        return "logprobs"
    return "output_text"


def _tokens(r: dict, what: str):
    if what == "output_ids":
        return r["output_ids"]
    if what == "logprobs":
        return _logprob_ids(r)
    text = r.get("output_text")
    return text if isinstance(text, str) else None


def _candidates(r: dict, step: int) -> list[dict] | None:
    steps = r.get("logprobs")
    if isinstance(steps, list) and step < len(steps) and isinstance(steps[step], list) and len(steps[step]) >= 2:
        return sorted(steps[step], key=lambda c: -c["logprob"])
    return None


def _logprob_of(r: dict, step: int, token) -> float | None:
    steps = r.get("logprobs")
    if not isinstance(steps, list) or step >= len(steps):
        return None
    return next((c["logprob"] for c in steps[step] if c.get("token_id") == token), None)


def compare_outputs(main: list[dict], replay: list[dict], ex: Explainer, ids: bool, start: int = 0,
                    undefined: frozenset = frozenset(), used: dict | None = None,
                    tally: dict | None = None) -> list[Failure]:
    """CR-OUT-1/2/3 from index `start` on: the run with reuse against its bypass replay, greedy decoding.
    `undefined`: requests whose outputs the semantics profile does not define (they reuse KV of
    other media, spec/profiles.md), not compared. `used`, when given, collects which observable
    each request was compared on ({observable: [request indices]})."""
    out = []
    for i, (a, b) in enumerate(zip(main, replay)):
        if i < start or i in undefined:
            continue
        out += _nan_check(i, a)
        if a.get("finish_reason") == "error" or b.get("finish_reason") == "error":
            if a.get("finish_reason") != b.get("finish_reason"):
                out.append(Failure("CR-OUT-1", f"responses[{i}].finish_reason", b.get("finish_reason"),
                                   a.get("finish_reason"), "a batch fails or succeeds whatever the lookup policy", i))
            continue
        what = observable_of(a, b, ids)
        if tally is not None:
            _count(tally, "outputs")
        if used is not None:
            used.setdefault(what, []).append(i)
        ta, tb = _tokens(a, what), _tokens(b, what)
        if ta == tb:
            if a.get("finish_reason") != b.get("finish_reason"):
                out.append(Failure("CR-OUT-1", f"responses[{i}].finish_reason", b.get("finish_reason"),
                                   a.get("finish_reason"), ex.output(i, "equal tokens, different finish reason"), i))
            out += _drift(i, a, b, ta if what != "output_text" else _logprob_ids(a), ex)
            continue
        ta, tb = ta if ta is not None else [], tb if tb is not None else []
        t = next((k for k, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
        unit = "character" if what == "output_text" else "generated token"
        near = _near_tie(a, b, t, ta, tb) if what != "output_text" else _text_near_tie(a, b, ex)
        expected, observed = _window(tb, t), _window(ta, t)
        if near is not None:
            gap, step = near if isinstance(near, tuple) else (near, t)
            out.append(Failure("CR-OUT-1", f"responses[{i}].{what}", expected, observed,
                               ex.output(i, f"first difference at generated token {step} is a near-tie "
                                            f"(bypass top-2 gap {gap:.4f} < {NEAR_TIE_NATS} nats)"),
                               i, Verdict.QUALITY_WARNING))
        else:
            out.append(Failure("CR-OUT-1", f"responses[{i}].{what}", expected, observed,
                               ex.output(i, f"first difference at {unit} {t} (compared on {what})"), i))
    return out


def _text_near_tie(a: dict, b: dict, ex: Explainer) -> tuple[float, int] | None:
    """A text that differs from the replay's where the replay's ids are known (its `logprobs`):
    a near-tie when the run's text is the replay's up to some step and then the replay's second
    candidate there, with the replay's top-2 gap below tolerance (spec/RUNNING.md section 5)."""
    tb, text = _logprob_ids(b), a.get("output_text")
    decode = getattr(ex, "decode", None)
    if tb is None or not isinstance(text, str) or decode is None:
        return None
    for t in range(len(tb)):
        if not text.startswith(decode(tb[:t + 1])):
            cb = _candidates(b, t)
            if cb is None or cb[0]["token_id"] != tb[t]:
                return None
            if not text.startswith(decode(tb[:t] + [cb[1]["token_id"]])):
                return None
            gap = cb[0]["logprob"] - cb[1]["logprob"]
            return (gap, t) if gap < NEAR_TIE_NATS else None
    return None


def _window(seq, t: int, width: int = 6):
    """The tokens (or characters) around the first difference, with their offset."""
    lo = max(0, t - 2)
    return {"from": lo, "tokens": seq[lo:t + width] if isinstance(seq, (list, str)) else seq}


def _near_tie(a: dict, b: dict, t: int, ta, tb) -> float | None:
    """RUNNING.md section 5: the run's token among the bypass replay's top two (the replay always
    asks two, `bypass_replay_of`), the replay's token among the run's candidates when the run has
    two or more, and the replay's top-2 gap below tolerance."""
    if not (isinstance(ta, list) and isinstance(tb, list)) or t >= len(ta) or t >= len(tb):
        return None
    ca, cb = _candidates(a, t), _candidates(b, t)
    if cb is None or ta[t] not in {c["token_id"] for c in cb[:2]}:
        return None
    if ca is not None and tb[t] not in {c["token_id"] for c in ca}:
        return None
    gap = cb[0]["logprob"] - cb[1]["logprob"]
    return gap if gap < NEAR_TIE_NATS else None


def _drift(i: int, a: dict, b: dict, tokens, ex: Explainer) -> list[Failure]:
    """CR-OUT-2: log-probabilities of agreeing tokens within LOGPROB_DRIFT of the bypass run; beyond
    LOGPROB_FAIL the drift is no rounding noise (spec/RUNNING.md section 5): a FAIL."""
    if tokens is None or not a.get("logprobs") or not b.get("logprobs"):
        return []
    worst, at = 0.0, None
    for s, token in enumerate(tokens):
        la, lb = _logprob_of(a, s, token), _logprob_of(b, s, token)
        if la is not None and lb is not None and abs(la - lb) > worst:
            worst, at = abs(la - lb), s
    if worst > LOGPROB_DRIFT:
        verdict = Verdict.FAIL if worst > LOGPROB_FAIL else Verdict.QUALITY_WARNING
        return [Failure("CR-OUT-2", f"responses[{i}].logprobs[{at}]", f"within {LOGPROB_DRIFT} of the bypass run "
                        f"(tolerance {LOGPROB_FAIL})", round(worst, 6),
                        ex.output(i, f"log-probability drift {worst:.4f} nats at token {at}"), i, verdict)]
    return []


def _nan_check(i: int, r: dict) -> list[Failure]:
    """CR-OUT-3: a read of foreign or poisoned KV shows up as NaN log-probabilities."""
    for s, step in enumerate(r.get("logprobs") or []):
        for c in step if isinstance(step, list) else []:
            v = c.get("logprob") if isinstance(c, dict) else None
            if isinstance(v, float) and (math.isnan(v) or math.isinf(v) and v > 0):
                return [Failure("CR-OUT-3", f"responses[{i}].logprobs[{s}]", "a finite log-probability", str(v),
                                "NaN output: the sequence read KV it neither computed nor reused (poisoned pages)", i)]
    return []
