"""The conformance suite as pytest tests: every curated case, and a short generated run per
family, against the backend named by KVCONFORM_BACKEND (default: inprocess, the bundled backend;
never the oracle unless asked for: a bundled backend that cannot be imported fails these tests).
The same cases and verdicts as `kvconform run`; NOT_SUPPORTED is a skip, UNSPECIFIED and
QUALITY_WARNING pass with a warning.

    KVCONFORM_BACKEND=reference python -m pytest tests/conformance/test_suite.py
    KVCONFORM_GENERATED_EXAMPLES=300 ... # a longer generated run (default 20 examples per family)
"""
from __future__ import annotations

import os
import warnings

import pytest

from conformance.adapters import DEFAULT, make_adapter
from conformance.cases.case import discover, select
from conformance.run.execute import run_case
from conformance.generate import run_generated
from conformance.generate.draw import FAMILIES
from conformance.judge.verdicts import Verdict

BACKEND = os.environ.get("KVCONFORM_BACKEND") or DEFAULT
CASES = select(discover(), slow=bool(os.environ.get("KVCONFORM_SLOW")))


@pytest.fixture(scope="module")
def backend():
    adapter = make_adapter(BACKEND, device=os.environ.get("KVCONFORM_DEVICE"))
    try:
        manifest, error = adapter.capabilities(), ""
    except Exception as e:
        manifest, error = None, f"{type(e).__name__}: {e}"
    yield adapter, manifest, error
    adapter.close()


def judge(result) -> None:
    if result.verdict == Verdict.NOT_SUPPORTED:
        pytest.skip(result.reason)
    lines = [result.reason] + [f.line() for f in result.failures[:10]] + (
        [f"reproducer: {result.reproducer}"] if result.reproducer else []) + (
        [result.stderr_tail] if result.stderr_tail else [])
    assert result.conformant, f"{result.id}: {result.verdict}\n" + "\n".join(x for x in lines if x)
    if result.verdict in (Verdict.UNSPECIFIED, Verdict.QUALITY_WARNING):
        warnings.warn(f"{result.id}: {result.verdict}: " + "; ".join(lines[:3]))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case(case, backend):
    adapter, manifest, error = backend
    judge(run_case(case, adapter, manifest, error))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_generated(family, backend, tmp_path):
    adapter, manifest, error = backend
    examples = int(os.environ.get("KVCONFORM_GENERATED_EXAMPLES", "20"))
    judge(run_generated(family, adapter, manifest, workdir=tmp_path, budget_s=120, examples=examples,
                        seed=int(os.environ.get("KVCONFORM_SEED", "0")), reproducer_dir=tmp_path / "reproducers",
                        run_case_fn=lambda c: run_case(c, adapter, manifest, error)))
