"""Generated request sets (issue 4, deliverable 3): Hypothesis draws examples, each checked
after every batch against the oracle and a bypass replay; a failure is shrunk and written as a
runnable case file, which is then re-run alone to confirm it fails the same way.

Hypothesis runs with a fixed seed, no example database and a time budget. Its shrinker keeps
going while it finds smaller failing examples; the smallest failing trace seen is kept here
(measured by request count, then size), so a shrink phase cut short by the budget still yields
the best reproducer found so far.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from hypothesis import HealthCheck, Phase, Verbosity, given, reject, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from ..adapters.base import Adapter, AdapterError, BuildRefused
from ..cases import load_case
from ..engines import digest
from ..report import write_reproducer
from ..verdicts import CaseResult, Failure, Verdict
from .draw import FAMILIES, draw_setup, policy_switch, recipes
from .machine import Example, Mismatch, run_whole

RULES = {
    "text": ["CR-PLAN-1", "CR-PLAN-2", "CR-ID-1", "CR-ID-3", "CR-PUB-2", "CR-PUB-4", "CR-CAP-4", "CR-CAP-6",
             "CR-BATCH-2", "CR-POL-2", "CR-MET-13", "CR-OUT-1"],
    "vision": ["CR-ID-4", "CR-MEDIA-2", "CR-MEDIA-3", "CR-MEDIA-4", "CR-PLAN-1", "CR-PUB-1", "CR-MET-3",
               "CR-OUT-1"],
    "hybrid": ["CR-HYB-3", "CR-HYB-4", "CR-HYB-5", "CR-HYB-6", "CR-CAP-4", "CR-MET-11", "CR-OUT-1"],
}


def supported(family: str, manifest: dict) -> list[str]:
    """What the family needs and the manifest lacks (empty: it can run)."""
    models, vision = FAMILIES[family]
    missing = []
    if not set(models) & set(manifest.get("model_kinds", [])):
        missing.append(" or ".join(f"model:{m}" for m in models))
    if vision and "image" not in manifest.get("media", []):
        missing.append("media:image")
    return missing


def run_generated(family: str, adapter: Adapter, manifest: dict | None, *, workdir: Path,
                  run_case_fn: Callable, examples: int = 40, budget_s: float = 60.0, seed: int = 0,
                  max_steps: int = 6, reproducer_dir: Path | None = None,
                  regressions_dir: Path | None = None, shrink: bool = True) -> CaseResult:
    result = CaseResult(f"generated/{family}", RULES[family], True, "conformance/generate", None)
    started = time.monotonic()
    if manifest is None:
        return result.settle(Verdict.ERROR, "no capability manifest")
    missing = supported(family, manifest)
    if missing:
        return result.settle(Verdict.NOT_SUPPORTED, f"the backend does not declare {', '.join(missing)}")
    media_dir, base_dir = workdir / "media", str(workdir)
    state = {"best": None, "examples": 0, "shrink_runs": 0, "steps": 0, "shrink_deadline": None, "warnings": []}
    deadline = started + budget_s

    def run_case_doc(doc: dict) -> CaseResult:
        path = write_reproducer(doc, base_dir, workdir / "pending", "pending")
        return run_case_fn(load_case(path))

    def record(ex: Example, failures: list[Failure]) -> None:
        rules = list(dict.fromkeys(f.rule for f in failures if f.rule))
        line = failures[0].line()
        doc = ex.case_doc("pending", f"Found by generated testing (family {family}, seed {seed}): "
                                     + (line if len(line) <= 400 else line[:397] + "..."), rules)
        size = (len(ex.requests), len(json.dumps(doc)))
        if state["best"] is None or size < state["best"][0]:
            state["best"] = (size, doc, failures)
        if state["shrink_deadline"] is None:
            state["shrink_deadline"] = time.monotonic() + max(20.0, budget_s / 2)

    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False, print_blob=False,
              phases=[Phase.generate, Phase.shrink] if shrink else [Phase.generate], verbosity=Verbosity.quiet)
    @hypothesis_seed(seed)
    @given(st.data())
    def example(data):
        now = time.monotonic()
        if state["shrink_deadline"] is not None:
            if now > state["shrink_deadline"]:
                reject()
        elif now > deadline:
            return
        setup = draw_setup(data, family, manifest)
        ex = None
        try:
            ex = Example(family, adapter, manifest, setup, media_dir, base_dir)
            ex.start()
            steps = data.draw(recipes(setup, max_steps), label="steps")
            if adapter.sessions and len(steps) > 1:
                setup.switch_at = data.draw(policy_switch(setup, len(steps)), label="policy_switch")
            for lora, step in steps:
                batch = ex.add_step(lora, step)
                if adapter.sessions:
                    ex.step(batch)
                    state["steps"] += 1
            if not adapter.sessions:
                run_whole(ex, run_case_doc)
            if ex.warnings and not state["warnings"]:
                state["warnings"] = ex.warnings[:5]
        except Mismatch as m:
            record(ex, m.failures)
            raise AssertionError(str(m)) from None
        except (AdapterError, BuildRefused) as e:
            failure = Failure(None, "adapter", "a result", type(e).__name__, str(e), verdict=Verdict.ERROR)
            if ex is not None:
                record(ex, [failure])
            raise AssertionError(str(e)) from None
        finally:
            if ex is not None:
                ex.close()
            state["examples" if state["shrink_deadline"] is None else "shrink_runs"] += 1

    try:
        example()
    except Exception:  # the failure itself, or Hypothesis noticing the budget cut the shrink short
        pass
    result.details = {"examples": state["examples"], "shrink_runs": state["shrink_runs"],
                      "steps_checked": state["steps"], "seed": seed, "max_examples": examples, "budget_s": budget_s}
    if state["best"] is None:
        for f in state["warnings"]:
            result.add(f)
        result.reason = (f"{state['examples']} examples ({state['steps']} batches checked), "
                         + ("no disagreement" if not state["warnings"] else "warnings only (first example shown)"))
        result.duration_s = time.monotonic() - started
        return result
    _, doc, failures = state["best"]
    for f in failures:
        result.add(f)
    name = f"gen-{family}-{digest(doc, 8)}"
    doc["_conformance"]["id"] = f"regressions/{name}"
    folder = reproducer_dir or workdir / "reproducers"
    path = write_reproducer(doc, base_dir, folder, name)
    result.reproducer = str(path)
    if regressions_dir is not None:
        write_reproducer(doc, base_dir, regressions_dir, name)
    rerun = run_case_fn(load_case(path))   # exactly what `kvconform run --case PATH` does
    signatures = {f.signature() for f in rerun.failures}
    first = result.first_failure()
    reproduced = rerun.verdict == result.verdict and (first is None or first.signature() in signatures)
    result.details.update(reproduced=reproduced, reproducer_verdict=str(rerun.verdict),
                          reproducer_requests=len(doc["requests"]))
    result.reason = (f"{'shrunk to' if shrink else 'found with (not shrunk)'} {len(doc['requests'])} request(s); "
                     "the reproducer, run alone, "
                     + ("fails the same way" if reproduced else f"ends {rerun.verdict} (not the same failure)"))
    result.duration_s = time.monotonic() - started
    return result
