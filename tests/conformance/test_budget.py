"""The generated families' time budget goes to the families that can run on the backend and its
engine, and a family that runs out of time says how to give it enough."""
from __future__ import annotations

from pathlib import Path

import conformance.run.suite as suite
from conformance.adapters.base import Engine
from conformance.adapters.reference import ReferenceAdapter
from conformance.generate import run_generated
from conformance.report.document import Report
from conformance.run.suite import Plan
from conformance.judge.verdicts import CaseResult, Verdict


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


def test_a_family_out_of_time_names_the_remedy_and_its_rate(tmp_path):
    adapter = ReferenceAdapter()
    result = run_generated("text", adapter, adapter.capabilities(), workdir=Path(tmp_path), examples=60,
                           budget_s=0.01, min_batches=10_000, run_case_fn=None, shrink=False)
    assert result.verdict == Verdict.TIMEOUT, result.reason
    assert "batches per minute" in result.reason and "--budget-seconds" in result.reason
    assert "--min-batches" in result.reason
