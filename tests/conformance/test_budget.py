"""The generated families' time budget goes to the families that can run on the backend and its
engine, and a family that runs out of time says how to give it enough."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import conformance.run.suite as suite
from conformance.adapters.base import Engine
from conformance.adapters.reference import ReferenceAdapter
from conformance.generate import run_generated
from conformance.report.document import Report
from conformance.run.suite import Plan
from conformance.judge.verdicts import CaseResult, Verdict

ROOT = Path(__file__).resolve().parents[2]


class TextOnlyEngine(ReferenceAdapter):
    """The oracle on one fixed attention-only engine without encoders."""

    def fixed_engine(self):
        return Engine("fixed", {"layer_kinds": ["attention", "attention"], "vision": None}, None, fixed=True)


def test_a_text_only_engine_gives_the_whole_budget_to_the_text_family(tmp_path, monkeypatch):
    budgets = {}

    def fake_family(family, plan, budget_s, *args, **kwargs):
        budgets[family] = budget_s
        return CaseResult(f"generated/{family}", [], True, None, None, Verdict.NOT_SUPPORTED)
    monkeypatch.setattr(suite, "run_one_family", fake_family)
    adapter = TextOnlyEngine()
    plan = Plan([], ["hybrid", "text", "vision"], budget_s=180.0)
    report = Report(tmp_path / "r", "reference", adapter.capabilities(), {}, {})
    suite.execute(plan, adapter, report, progress=False)
    assert budgets["text"] >= 179.0, budgets
    budgets.clear()
    suite.execute(plan, ReferenceAdapter(), Report(tmp_path / "s", "reference", None, {}, {}), progress=False)
    assert all(55.0 <= b <= 181.0 for b in budgets.values()) and budgets["hybrid"] < 61.0, budgets


class SlowReference(ReferenceAdapter):
    """The oracle behind a backend that takes `delay` seconds per call, as a correct runtime on a
    machine at load 15 does."""
    delay = 0.2

    def start(self, engine, runtime):
        inner = super().start(engine, runtime)
        delay = self.delay

        class Slow(type(inner)):
            def run(self, request, base_dir):
                time.sleep(delay)
                return inner.run(request, base_dir)
        slow = Slow.__new__(Slow)
        slow.__dict__.update(inner.__dict__)
        return slow


def test_a_slow_backend_judges_its_minimum_and_is_conformant(tmp_path):
    """A correct backend made slow (0.2 s a call) under a 1 s budget and a minimum of 10 batches:
    the old rule (a family that judged fewer than its minimum within the budget was a TIMEOUT)
    judged at most 5 batches and turned it NOT CONFORMANT; the minimum always runs, so it is
    CONFORMANT, and no example is drawn once the minimum is judged past the budget."""
    adapter = SlowReference()
    plan = Plan([], ["text"], examples=300, budget_s=1.0, min_batches=10)
    report = Report(tmp_path / "r", "slow", adapter.capabilities(), {}, {})
    suite.execute(plan, adapter, report, progress=False)
    doc = report.finish()
    (family,) = doc["cases"]
    assert family["verdict"] == "PASS", family["reason"]
    assert doc["summary"]["headline"] == "CONFORMANT", doc["summary"]
    details = family["details"]
    assert details["batches_checked"] >= 10 and 0 < details["examples_after_budget"] <= 10, details
    assert details["examples"] < 300, "past the budget, the examples stop once the minimum is judged"


def test_budget_seconds_caps_the_examples_drawn(tmp_path):
    """`--examples 10^18 --budget-seconds 3` ends about 3 s after it started (plus the example in
    hand at the deadline): no example is drawn after the budget once the minimum is judged. The
    bound is the family's own clock, so it holds on a loaded machine too."""
    budget = 3.0
    p = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--backend", "reference", "--generated-only",
                        "--families", "text", "--examples", str(10 ** 18), "--budget-seconds", str(budget),
                        "--min-batches", "2", "--no-progress", "--report", str(tmp_path / "r")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    (family,) = json.loads((tmp_path / "r" / "report.json").read_text())["cases"]
    details = family["details"]
    assert family["verdict"] == "PASS" and details["examples"] > 2, family
    assert family["duration_s"] <= budget + 2 * details["longest_example_s"] + 2.0, details


def test_examples_that_cannot_be_judged_are_not_supported_not_a_timeout(tmp_path):
    """Past the budget, examples that judge no batch do not owe the minimum for ever: as many as
    the minimum are run, then the family is NOT_SUPPORTED (never TIMEOUT, never PASS), with
    `--examples` as large as one likes."""
    class OneFilePerProcess(ReferenceAdapter):
        sessions = False

    def cannot_run(case):
        return CaseResult(case.id, [], True, None, None).settle(Verdict.NOT_SUPPORTED, "no such engine here")
    adapter = OneFilePerProcess()
    result = run_generated("text", adapter, adapter.capabilities(), workdir=Path(tmp_path), examples=10 ** 18,
                           budget_s=1e-6, min_batches=10, run_case_fn=cannot_run, shrink=False)
    assert result.verdict == Verdict.NOT_SUPPORTED, result.reason
    assert result.details["examples_after_budget"] == 10 and result.details["batches_checked"] == 0
    assert "fewer than the 10 batches" in result.reason and "no such engine here" in result.reason
