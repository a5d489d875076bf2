"""Judging a finished run: the comparisons of spec/RUNNING.md section 4 step 7, shared by the
runner of a case (conformance/run/execute.py) and the generated examples
(conformance/generate/example.py), which judge batch by batch.

`judge` compares a run with the oracle's prediction and with its bypass replay; the helpers
check the shape of the responses, merge the transcripts the oracle needs, turn an oracle
refusal of the backend's transcript into a Failure and compare refusal messages.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import oracle
from .compare import REQUEST_FIELDS, check_shape, compare_outputs, compare_profile, compare_requests, leaves
from .explain import Explainer
from .transcripts import Coverage
from .verdicts import Failure

if TYPE_CHECKING:                     # the adapters' result type; judge/ imports no other room
    from ..adapters.base import RunResult


def observable(manifest: dict, name: str) -> bool:
    """Whether the backend's capability manifest declares it reports `name` (its `observables`):
    a value it does not report is not judged."""
    return bool(manifest.get("observables", {}).get(name))


def shape_failures(main: RunResult, replay: RunResult | None, count: int) -> list[Failure]:
    """Response count and order of the run and of the replay (garbage output is an ERROR)."""
    out = []
    for got, what in ((main, "run"), (replay, "bypass replay")):
        if got is not None:
            for p in check_shape(got.responses, count):
                p.what = f"{what}: {p.what}"
                out.append(p)
    return out


def merged_transcripts(main: RunResult, replay: RunResult | None, engine=None) -> list:
    """Generated tokens for the oracle: the run's own (its counters follow what it generated),
    the replay's where the run exposes none (spec/RUNNING.md section 4 step 5)."""
    generated = oracle.transcripts(main.responses, engine)
    if replay is not None:
        backup = oracle.transcripts(replay.responses, engine)
        generated = [g if g is not None else b for g, b in zip(generated, backup)]
    return generated


def prediction_refused(e) -> Failure:
    """The oracle refused the file or the transcript the backend produced."""
    if e.path.startswith("$.generated["):
        i = int(e.path.split("[")[1].split("]")[0])
        return Failure("CR-BATCH-7", f"responses[{i}].output_ids", "a transcript that ends at <|eos|> or "
                       "max_generate_length", e.message, "generation ends at the first of <|eos|>, a stop string "
                       "or max_generate_length tokens", i)
    if e.path.startswith("$.last_accepted["):
        i = int(e.path.split("[")[1].split("]")[0])
        return Failure("CR-SPEC-4", f"responses[{i}].last_verification_accepted", "1 .. g - 1 tokens",
                       e.message, "a verification round after the prefill's first token accepts at least one "
                       "generated token", i)
    return Failure(None, "input", f"refused (exit 2): {e.path}: {e.message}", "ran",
                   "the spec refuses this request file, so the backend must refuse it before running anything")


def judge(engine, flags, manifest: dict, prediction, main: RunResult, replay: RunResult | None,
          start: int = 0, failed_before: int = 0, coverage: Coverage | None = None,
          record: dict | None = None) -> list[Failure]:
    """Every comparison of a finished run with the oracle and the bypass replay (RUNNING.md step 7).

    `start`: compare requests from this index on (earlier ones were judged already);
    `failed_before`: batches of earlier request files that failed, for the backend's count;
    `coverage`: which counts the prediction covers (conformance/judge/transcripts.py; None: all).
    `record`, when given, receives what was judged: "counts" and "outputs" compared, the
    observable of each output comparison ("outputs_compared_on") and, under "not_judged", the
    counts the prediction does not cover with the reason.
    """
    ex = Explainer(engine, flags, prediction)
    tally: dict = {}
    per_request = observable(manifest, "per_request_metrics")
    out = compare_requests(prediction.responses, main.responses, ex, per_request, True, start, tally)
    covered = len(prediction.responses) if coverage is not None and not coverage.complete else None
    if covered is not None:
        out += _input_tokens_beyond(prediction, main.responses, ex, max(start, covered), tally)
    used: dict = {}
    if replay is not None:
        undefined = frozenset(i for i, p in enumerate(prediction.responses) if p.get("outputs_defined") is False)
        if covered is not None:
            undefined |= _outputs_undefined_beyond(prediction, flags, covered)
        out += compare_outputs(main.responses, replay.responses, ex, observable(manifest, "output_ids"), start,
                               undefined, used, tally)
    if coverage is None or coverage.aggregates:
        out += _aggregates(engine, flags, manifest, prediction, main, ex, failed_before, tally)
    ex.with_chains(out)
    if record is not None:
        record.update(counts=tally.get("counts", 0), outputs=tally.get("outputs", 0))
        if used:
            record["outputs_compared_on"] = used
        if covered is not None:
            record["not_judged"] = _not_judged(prediction, main.responses, coverage, per_request,
                                               max(start, covered))
    return out


def _aggregates(engine, flags, manifest, prediction, main: RunResult, ex, failed_before: int,
                tally: dict) -> list[Failure]:
    """The profile's counters (CR-MET) and the count of failed batches (CR-CAP-8)."""
    profile = flags.semantics
    always = profile.prefill_section == "profile-output-file"
    out = compare_profile(prediction.profile, main.profile, ex,
                          (flags.dump_profile or always) and observable(manifest, "prefill_profile"),
                          record_internals=profile.record_internals == "mandatory"
                          or observable(manifest, "record_internals"),
                          prefill_required=always and not flags.dump_profile, tally=tally)
    failed = sum(1 for b in prediction.batches if b.get("status") != "ok") - failed_before
    tally["counts"] = tally.get("counts", 0) + 1
    if main.failed_batches is not None:
        if failed != main.failed_batches:
            out.append(Failure("CR-CAP-8", "failed_batches", failed, main.failed_batches,
                               f"{failed} batch(es) of this file fail (CR-BATCH-5, CR-SUP-8)",
                               chain=ex.batch_failures()))
    elif bool(failed) != bool(main.exit_code):
        out.append(Failure("CR-CAP-8", "exit code", "non-zero" if failed else 0, main.exit_code,
                           f"{failed} batch(es) of this file fail; the exit code is non-zero exactly then",
                           chain=ex.batch_failures()))
    return out


def _input_tokens_beyond(prediction, responses: list, ex, first: int, tally: dict) -> list[Failure]:
    """n of the requests whose cache facts are not predicted: the tokenization alone decides it."""
    out = []
    for i in range(first, min(len(responses or []), len(prediction.parsed.requests))):
        r = responses[i]
        if isinstance(r, dict) and "input_tokens" in r and r.get("finish_reason") != "error":
            tally["counts"] = tally.get("counts", 0) + 1
            n = len(prediction.parsed.requests[i].tokens)
            if r["input_tokens"] != n:
                rule, why, chain = ex.input_tokens(i, r["input_tokens"])
                out.append(Failure(rule, f"responses[{i}].input_tokens", n, r["input_tokens"], why, i, chain=chain))
    return out


def _outputs_undefined_beyond(prediction, flags, first: int) -> frozenset:
    """Requests beyond the predicted ones whose outputs the profile might leave undefined (they
    could reuse KV of other media, spec/profiles.md): not compared, since that is not known."""
    profile = flags.semantics
    if profile.media_items == "per-item" and profile.media_digest != "raw-bytes":
        return frozenset()
    return frozenset(i for i in range(first, len(prediction.parsed.requests)) if prediction.parsed.requests[i].spans)


def _not_judged(prediction, responses: list, coverage: Coverage, per_request: bool, first: int) -> list[dict]:
    """The counts the prediction does not cover, each entry with how many values and why."""
    reason = "; ".join(coverage.reasons)
    out = []
    partly = [p["request_idx"] for p in coverage.admission]
    if partly:
        rest = [k for k in ("publications", "snapshot_pressure_skips") if per_request]
        out.append({"what": f"responses[{partly[0]}..{partly[-1]}]: finish_reason" + "".join(f", context_cache.{k}" for k in rest),
                    "requests": partly, "values": (1 + len(rest)) * len(partly), "reason": reason})
    later = list(range(first, coverage.total))
    if later:
        fields = 1 + (len(REQUEST_FIELDS) if per_request else 0)
        out.append({"what": f"responses[{later[0]}..{later[-1]}]: finish_reason"
                            + (", context_cache" if per_request else ""),
                    "requests": later, "values": fields * len(later), "reason": reason})
    if not coverage.aggregates:
        entry = {"what": "profile.context_cache, profile.prefill, the failed-batch count", "reason": reason}
        cc = (prediction.profile or {}).get("context_cache")
        if cc:                          # the counters the head of the file predicts have the same keys
            entry["values"] = sum(1 for _ in leaves(cc)) + 1
        out.append(entry)
    return out


def same_reason(expected: str, observed: str) -> bool:
    """A refusal message names the same reason when it has most of the spec message's words."""
    words = {w for w in _words(expected) if len(w) > 3}
    return not words or len(words & set(_words(observed))) >= 0.6 * len(words)


def _words(text: str) -> list[str]:
    return "".join(c.lower() if c.isalnum() else " " for c in text or "").split()
