"""Generated request sets: Hypothesis draws examples, each checked after every batch against
the oracle and a bypass replay; a failure is shrunk and written as a runnable case file, which is
then re-run alone to confirm it fails the same way.

Hypothesis runs with a fixed seed, no example database and a time budget. Its shrinker keeps
going while it finds smaller failing examples; the smallest failing trace seen is kept here
(measured by request count, then size), so a shrink phase cut short by the budget still yields
the best reproducer found so far.

A family passes only on evidence: it must judge at least `min(min_batches, examples)` batches.
That minimum always runs, however slow the machine: the time budget bounds only the examples
beyond it, and no example is drawn once the budget is spent and the minimum judged (so
`--examples` may be as large as one likes). Examples that could not be judged here make a family
NOT_SUPPORTED; TIMEOUT is a backend call that exceeded the adapter's timeout, never a budget; and
anything the kit raises while drawing or judging ends the family ERROR with the traceback's
tail, like a case the kit could not run.
"""
from __future__ import annotations

import json
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hypothesis import HealthCheck, Phase, Verbosity, given, reject, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import HypothesisException
from hypothesis import strategies as st

from ..adapters.base import Adapter, AdapterError, BuildRefused
from ..adapters.engines import digest
from ..cases.case import load_case
from ..judge.numerical_judge import merge_facts
from ..judge.verdicts import CaseResult, Failure, Verdict
from ..report.folder import write_reproducer
from ..run.interrupts import raise_pending
from .draw import FAMILIES, draw_setup, fixed_engine_gaps, policy_switch, recipes
from .example import Example, Mismatch, run_whole

RULES = {
    "text": ["CR-PLAN-1", "CR-PLAN-2", "CR-ID-1", "CR-ID-3", "CR-PUB-2", "CR-PUB-4", "CR-CAP-4", "CR-CAP-6",
             "CR-BATCH-2", "CR-POL-2", "CR-MET-13", "CR-OUT-1"],
    "vision": ["CR-ID-4", "CR-MEDIA-2", "CR-MEDIA-3", "CR-MEDIA-4", "CR-PLAN-1", "CR-PUB-1", "CR-MET-3",
               "CR-OUT-1"],
    "hybrid": ["CR-HYB-3", "CR-HYB-4", "CR-HYB-5", "CR-HYB-6", "CR-CAP-4", "CR-MET-11", "CR-OUT-1"],
}


def missing_capabilities(family: str, manifest: dict) -> list[str]:
    """What the family needs and the manifest lacks (empty: it can run)."""
    models, vision = FAMILIES[family]
    missing = []
    if not set(models) & set(manifest.get("model_kinds", [])):
        missing.append(" or ".join(f"model:{m}" for m in models))
    if vision and "image" not in manifest.get("media", []):
        missing.append("media:image")
    return missing


def cannot_run(family: str, adapter: Adapter, manifest: dict | None) -> str:
    """Why the family cannot run on this backend and engine ("" when it can): what the manifest
    lacks, or what the engine under test lacks."""
    if manifest is None:
        return ""                                # an ERROR, decided when the family runs
    missing = missing_capabilities(family, manifest)
    if missing:
        return f"the backend does not declare {', '.join(missing)}"
    fixed = adapter.fixed_engine()
    gaps = fixed_engine_gaps(family, fixed.config) if fixed is not None else []
    return f"the engine under test lacks {' and '.join(gaps)}" if gaps else ""


MIN_BATCHES = 25
"""Batches a family must judge before it can PASS (fewer when fewer examples are asked for)."""


class _BudgetSpent(KeyboardInterrupt):
    """Ends a family's Hypothesis run between two examples. Hypothesis treats any other exception
    as a failure of the example (and would replay and shrink it); an interrupt it passes through
    untouched, and `run_generated` catches this one right outside it."""


@dataclass
class _Progress:
    """What one family's Hypothesis run did. Shrinking re-runs examples; those are counted apart,
    so that `examples` is what was asked for and scenarios per minute mean what they say."""
    examples: int = 0          # examples run before any failure (the generate phase)
    shrink_steps: int = 0      # examples run while shrinking a failure
    batches: int = 0           # batches judged in the generate phase
    after_budget: int = 0      # examples started after the budget because the minimum was not judged yet
    longest_s: float = 0.0     # the longest example of the generate phase (what one example may overrun)
    best: tuple | None = None  # ((requests, size), case doc, failures, traceback tail)
    shrink_deadline: float | None = None
    warnings: list = field(default_factory=list)
    unsupported: str = ""      # why the last example could not be judged here
    reference: dict | None = None   # requests checked against the numerical reference


def run_generated(family: str, adapter: Adapter, manifest: dict | None, *, workdir: Path,
                  run_case_fn: Callable, examples: int = 40, budget_s: float = 60.0, seed: int = 0,
                  max_steps: int = 6, reproducer_dir: Path | None = None,
                  regressions_dir: Path | None = None, shrink: bool = True,
                  min_batches: int = MIN_BATCHES, profile: str | None = None) -> CaseResult:
    result = CaseResult(f"generated/{family}", RULES[family], True, "conformance/generate", None)
    started = time.monotonic()
    if manifest is None:
        return result.settle(Verdict.ERROR, "no capability manifest")
    why = cannot_run(family, adapter, manifest)
    if why:
        return result.settle(Verdict.NOT_SUPPORTED, why)
    fixed = adapter.fixed_engine()
    engine = fixed.config if fixed is not None else None
    media_dir, base_dir = workdir / "media", str(workdir)
    state = _Progress()
    deadline = started + budget_s
    required = max(1, min(min_batches, examples))

    def run_case_doc(doc: dict) -> CaseResult:
        path = write_reproducer(doc, base_dir, workdir / "pending", "pending")
        return run_case_fn(load_case(path))

    def record(ex: Example, failures: list[Failure], trace: str = "") -> None:
        rules = list(dict.fromkeys(f.rule for f in failures if f.rule))
        line = failures[0].line()
        doc = ex.case_doc("pending", f"Found by generated testing (family {family}, seed {seed}): "
                                     + (line if len(line) <= 400 else line[:397] + "..."), rules)
        size = (len(ex.requests), len(json.dumps(doc)))
        if state.best is None or size < state.best[0]:
            state.best = (size, doc, failures, trace)
        if state.shrink_deadline is None:
            state.shrink_deadline = time.monotonic() + max(20.0, budget_s / 2)

    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False, print_blob=False,
              phases=[Phase.generate, Phase.shrink] if shrink else [Phase.generate], verbosity=Verbosity.quiet)
    @hypothesis_seed(seed)
    @given(st.data())
    def example(data):
        raise_pending()                 # a Ctrl-C that a garbage-collector callback swallowed
        shrinking = state.shrink_deadline is not None
        if shrinking and time.monotonic() > state.shrink_deadline:
            reject()
        began = time.monotonic()
        if not shrinking and began > deadline:
            # Past the budget only the family's minimum is still owed. Examples that judge no
            # batch cannot owe it for ever: `required` of them after the budget is enough for
            # any example that can be judged here (each judges one batch or more).
            if state.batches >= required or state.after_budget >= required:
                raise _BudgetSpent
            state.after_budget += 1
        setup = draw_setup(data, family, manifest, engine)
        if profile is not None:
            setup.runtime["semanticsProfile"] = profile           # spec/profiles.md
        steps = data.draw(recipes(setup, max_steps), label="steps")
        if adapter.sessions and len(steps) > 1:
            setup.switch_at = data.draw(policy_switch(setup, len(steps)), label="policy_switch")
        if shrinking:
            state.shrink_steps += 1
        else:
            state.examples += 1
        ex = None
        try:
            ex = Example(family, adapter, manifest, setup, media_dir, base_dir)
            ex.start()
            for lora, step in steps:
                batch = ex.add_step(lora, step)
                if adapter.sessions:
                    ex.step(batch)
                    state.batches += not shrinking
                    if ex.refused is not None or ex.out_of_scope:
                        break          # a refused deployment runs nothing; an unpredictable batch ends the example
            if not adapter.sessions:
                judged, why = run_whole(ex, run_case_doc)
                state.batches += judged if not shrinking else 0
                state.unsupported = why or state.unsupported
            if ex.warnings and not state.warnings:
                state.warnings = ex.warnings[:5]
            if not shrinking and ex.reference:
                state.reference = merge_facts(state.reference, ex.reference)
        except Mismatch as m:
            record(ex, m.failures)
            raise AssertionError(str(m)) from None
        except (AdapterError, BuildRefused) as e:
            failure = Failure(None, "adapter", "a result", type(e).__name__, str(e), verdict=Verdict.ERROR)
            if ex is not None:
                record(ex, [failure], getattr(e, "stderr_tail", ""))
            raise AssertionError(str(e)) from None
        except HypothesisException:
            raise                  # Hypothesis's own control flow (an assumption, a frozen draw)
        except Exception as e:     # the kit could not judge this example: never a PASS
            trace = _tail(traceback.format_exc())
            failure = Failure(None, "kit", "a judgement of the example", f"{type(e).__name__}: {e}",
                              "the kit raised while drawing or judging this example (traceback in stderr_tail)",
                              verdict=Verdict.ERROR)
            if ex is not None:
                record(ex, [failure], trace)
                raise AssertionError(str(e)) from None
            raise
        finally:
            if ex is not None:
                ex.close()
            if not shrinking:
                state.longest_s = max(state.longest_s, time.monotonic() - began)

    escaped = None
    try:
        example()
    except _BudgetSpent:       # the minimum is judged and the budget spent: no more examples are drawn
        pass
    except Exception as e:  # the failure itself, Hypothesis noticing the budget cut the shrink short, or a kit bug
        escaped = e, _tail(traceback.format_exc())
    result.details = {"examples": state.examples, "shrink_steps": state.shrink_steps,
                      "batches_checked": state.batches, "batches_required": required,
                      "examples_after_budget": state.after_budget, "longest_example_s": round(state.longest_s, 3),
                      "seed": seed, "max_examples": examples, "budget_s": budget_s}
    if state.reference:
        result.details["reference"] = state.reference
    result.duration_s = time.monotonic() - started
    if state.best is None:
        return _verdict_without_failure(result, state, required, escaped)
    _, doc, failures, trace = state.best
    for f in failures:
        result.add(f)
    result.stderr_tail = trace
    name = f"gen-{family}-{digest(doc, 8)}"
    doc["_conformance"]["id"] = f"regressions/{name}"
    folder = reproducer_dir or workdir / "reproducers"
    path = write_reproducer(doc, base_dir, folder, name)
    result.reproducer = str(path)
    if regressions_dir is not None:
        write_reproducer(doc, base_dir, regressions_dir, name)
    rerun = run_case_fn(load_case(path))   # exactly what `kvconform run --case PATH` does
    result.invocations = rerun.invocations
    signatures = {f.signature() for f in rerun.failures}
    first = result.first_failure()
    reproduced = rerun.verdict == result.verdict and (first is None or first.signature() in signatures)
    result.details.update(reproduced=reproduced, reproducer_verdict=str(rerun.verdict),
                          reproducer_requests=len(doc["requests"]))
    if "page_map" in rerun.details:        # the shrunk reproducer's pages, as its own run drew them
        result.details["page_map"] = rerun.details["page_map"]
    result.reason = (f"{'shrunk to' if shrink else 'found with (not shrunk)'} {len(doc['requests'])} request(s); "
                     "the reproducer, run alone, "
                     + ("fails the same way" if reproduced else f"ends {rerun.verdict} (not the same failure)"))
    result.duration_s = time.monotonic() - started
    return result


def _verdict_without_failure(result: CaseResult, state: _Progress, required: int, escaped):
    """No example disagreed: PASS only when enough batches were judged and nothing escaped."""
    counted = (f"{state.examples} examples, {state.batches} batches judged"
               + (f", {state.shrink_steps} shrink steps" if state.shrink_steps else ""))
    if escaped is not None:
        e, trace = escaped
        result.stderr_tail = trace
        return result.settle(Verdict.ERROR, f"the generator raised {type(e).__name__}: {e} ({counted})")
    if state.batches < required:
        return result.settle(Verdict.NOT_SUPPORTED, f"{counted}: fewer than the {required} batches a family must "
                                                    "judge; the examples could not be judged here"
                                                    + (f" ({state.unsupported})" if state.unsupported else ""))
    for f in state.warnings:
        result.add(f)
    result.reason = f"{counted}, " + ("no disagreement" if not state.warnings
                                      else "warnings only (first example shown)")
    return result


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
