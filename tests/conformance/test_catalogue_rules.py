"""Each faulty variant's first FAIL names a rule the variant breaks: the oracle's decision trace
(reference/trace.py) explains a mismatch by the step that decided the differing value and the
chain of its causes, so the rules a FAIL names (its own and its chain's, as `Failure.line`
prints them) must include one of the rules of the variant's `Violates:` line.

Each variant runs on the one case that kills it in the recorded selftest
(faulty_backends/kills.json), under the semantics profile it breaks, the way the selftest runs
it (a FaultyAdapter on CPU). All variants together take a few seconds."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.adapters.faulty import FaultyAdapter
from conformance.cases.case import discover
from conformance.run.execute import run_case
from conformance.judge.verdicts import Verdict
from faulty_backends import CATALOGUE

ROOT = Path(__file__).resolve().parents[2]
KILLS = json.loads((ROOT / "faulty_backends" / "kills.json").read_text())["variants"]


@pytest.fixture(scope="module")
def cases():
    return {c.id: c for c in discover()}


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_the_first_fail_names_a_rule_of_the_variants_docstring(name, cases):
    v = CATALOGUE[name]
    assert name in KILLS, f"{name}: faulty_backends/kills.json records no killing case (run kvconform selftest)"
    case = cases[KILLS[name]["case"]]
    if v.profile:
        case = case.for_profile(v.profile)
    adapter = FaultyAdapter(v, device="cpu")
    try:
        result = run_case(case, adapter, adapter.capabilities())
    finally:
        adapter.close()
    fails = [f for f in result.failures if f.verdict == Verdict.FAIL]
    if not fails:
        # a variant that crashes on its killing case (a zero-token prefill) ends ERROR: a crash
        # decides no predicted value, so there is no rule to check, only that it is not a pass
        assert result.verdict == Verdict.ERROR and result.reason.startswith("run:"), \
            f"{name} on {case.id}: {result.verdict}, no FAIL: {result.reason}"
        return
    first = fails[0]
    named = first.rules()
    assert set(named) & set(v.rules), (
        f"{name} on {case.id}: the first FAIL names {named} (deciding step {first.rule}), "
        f"the variant's docstring says it breaks {list(v.rules)}: {first.line()[:300]}")
