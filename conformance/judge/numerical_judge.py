"""Outputs judged against the numerical reference (spec/RUNNING.md section 5, CR-OUT-1, CR-OUT-2).

The numbers come from `numerical_reference/` (the float64 forward, or a reference command the
manifest names); here they become Failures and verdicts. The runner's one entry point is
`check_outputs`. For each greedy request that generated tokens, the reference scores the
backend's own generation teacher-forced, so every step is judged on the backend's prefix:

- the token: it must be the reference's most likely token, unless the reference's gap between
  its top token and the backend's is within the near-tie allowance (QUALITY_WARNING);
- the log-probability of the token, where the backend reports one: within the noise bound it
  passes, up to the tolerance it is a QUALITY_WARNING, beyond it a FAIL.

Both bounds are calibrated per request from the size of KV rounding, measured by the reference
on that very request (`Scored.kv_rounding`, the largest shift of a generated token's
log-probability when keys and values are kept exact instead of rounded to the KV dtype):

    noise bound  N = NOISE_FLOOR + NOISE_KV * kv_rounding
    tolerance    T = TOL_FLOOR   + TOL_KV   * kv_rounding
    near-tie     a differing token is excused when the reference's top-1 log-probability exceeds
                 the backend token's by less than max(NEAR_TIE_NATS, 2 N)

The derivation of the constants is in spec/RUNNING.md section 5.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from numerical_reference import ReferenceUnavailable, reference_for
from numerical_reference.layout import LayoutError, check_headers as check_weight_headers  # noqa: F401 (the runner's pre-flight check of an engine folder)

from . import oracle
from .compare import NEAR_TIE_NATS
from .verdicts import Failure, Verdict

NOISE_FLOOR = 0.005     # nats: float32 compute and FP16 rounding flips (spec/RUNNING.md section 5)
NOISE_KV = 2.0          # a flipped rounding moves an element by twice the largest rounding error
TOL_FLOOR = 0.01        # nats
TOL_KV = 4.0            # four KV roundings: room for FP16 attention compute (queries, probabilities)

TOLERANCES = {
    "reference_noise_bound": f"{NOISE_FLOOR} + {NOISE_KV:g} * kv_rounding nats",
    "reference_tolerance": f"{TOL_FLOOR} + {TOL_KV:g} * kv_rounding nats",
    "reference_near_tie": f"max({NEAR_TIE_NATS}, 2 * noise bound) nats between the reference's top token and "
                          "the backend's",
    "reference_note": "spec/RUNNING.md section 5: kv_rounding is measured per request by the float64 reference "
                      "(exact keys and values against keys and values rounded to the engine's KV dtype)",
}


@dataclass
class Bounds:
    noise: float
    tolerance: float

    @classmethod
    def for_request(cls, kv_rounding: float) -> "Bounds":
        return cls(NOISE_FLOOR + NOISE_KV * kv_rounding, TOL_FLOOR + TOL_KV * kv_rounding)

    @property
    def near_tie(self) -> float:
        return max(NEAR_TIE_NATS, 2 * self.noise)


def judge_request(i: int, response: dict, scored, source: str) -> tuple[list[Failure], dict]:
    """Failures of request `i` (its index in the file or example) and what was judged."""
    bounds = Bounds.for_request(scored.kv_rounding)
    failures, flips, worst, worst_at, lp_steps = [], [], 0.0, None, 0
    reported = response.get("logprobs") if isinstance(response.get("logprobs"), list) else []
    for s, step in enumerate(scored.steps):
        top_token, top_lp = step.top[0]
        if step.token != top_token:
            gap = top_lp - step.logprob
            flips.append((s, gap))
        backend_lp = _logprob_of(reported, s, step.token)
        if backend_lp is None:
            continue
        lp_steps += 1
        drift = abs(backend_lp - step.logprob) if math.isfinite(step.logprob) else math.inf
        if drift > worst or worst_at is None:
            worst, worst_at = drift, s
    hard = [(s, gap) for s, gap in flips if not gap < bounds.near_tie]
    what = f"responses[{i}].output_ids"
    if hard:
        s, gap = hard[0]
        step = scored.steps[s]
        failures.append(Failure(
            "CR-OUT-1", what, _tokens(scored, s, reference=True), _tokens(scored, s),
            f"generated token {s} is {step.token}, the {source} gives it {_nats(gap)} less than its most likely "
            f"token {step.top[0][0]} ({len(hard)} of {len(scored.steps)} step(s) disagree beyond the near-tie "
            f"allowance {bounds.near_tie:.3f}); teacher-forced on the backend's own tokens", i))
    elif flips:
        s, gap = flips[0]
        failures.append(Failure(
            "CR-OUT-1", what, _tokens(scored, s, reference=True), _tokens(scored, s),
            f"generated token {s} differs from the {source}'s most likely token at a near-tie (gap {gap:.4f} < "
            f"{bounds.near_tie:.3f} nats)", i, Verdict.QUALITY_WARNING))
    if worst_at is not None and worst > bounds.noise:
        verdict = Verdict.FAIL if worst > bounds.tolerance else Verdict.QUALITY_WARNING
        failures.append(Failure(
            "CR-OUT-2", f"responses[{i}].logprobs[{worst_at}]",
            f"within {bounds.noise:.4f} of the {source} (tolerance {bounds.tolerance:.4f})",
            round(worst, 6) if math.isfinite(worst) else str(worst),
            f"log-probability of generated token {worst_at} differs from the {source}'s by {_nats(worst)}; KV "
            f"rounding moves it by {scored.kv_rounding:.4f} on this request", i, verdict))
    facts = {"steps": len(scored.steps), "logprob_steps": lp_steps,
             "worst_drift": worst if worst_at is not None and math.isfinite(worst) else None,
             "kv_rounding": scored.kv_rounding, "flips": len(flips)}
    return failures, facts


def _logprob_of(reported: list, step: int, token: int):
    if step >= len(reported) or not isinstance(reported[step], list):
        return None
    for c in reported[step]:
        if isinstance(c, dict) and c.get("token_id") == token and isinstance(c.get("logprob"), (int, float)) \
                and not isinstance(c.get("logprob"), bool):
            return float(c["logprob"])
    return None


def _tokens(scored, s: int, reference: bool = False):
    lo = max(0, s - 2)
    tokens = [st.top[0][0] if reference and k == s else st.token for k, st in enumerate(scored.steps)]
    return {"from": lo, "tokens": tokens[lo:s + 6]}


def _nats(x: float) -> str:
    return f"{x:.4f} nats" if math.isfinite(x) else "an infinite amount (a token it never emits)"


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
    for n, (k, _, _, tokens) in enumerate(items):      # a reference that skipped a token judged nothing there
        if n >= len(scored) or [st.token for st in scored[n].steps] != list(tokens):
            return [Failure(None, f"responses[{offset + k}].output_ids", f"one scored step per generated token "
                            f"({len(tokens)})", "fewer or other steps", f"the {source.label} did not score every "
                            "generated token of this request, so its outputs were not judged", offset + k,
                            Verdict.ERROR)], facts
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
