"""What a failure says: the rule it cites and the words a runtime engineer reads first.

Each message here was met while judging faulty backends: an input length wrong on an hf engine
cited no rule, and a runtime that refused a deployment as bad input ended in a traceback."""
from __future__ import annotations

from pathlib import Path

import pytest

from conformance.adapters.faulty import FaultyAdapter
from conformance.adapters.inprocess import InprocessAdapter
from conformance.cases.case import load_case
from conformance.run.execute import run_case
from conformance.judge.verdicts import Verdict
from gpu_backend.runtime import Runtime

CASES = Path(__file__).resolve().parents[2] / "cases"


def _run(case_path: str, adapter):
    case = load_case(CASES / case_path)
    return run_case(case, adapter, adapter.capabilities())


@pytest.mark.parametrize("variant,case_path,rule", [
    ("edge-llm-qwen-vl-unclamped", "sections/tok/edge-llm-qwen-vl-thin-side.json", "TOK-MEDIA-3"),   # an image
    ("loader-ignored", "sections/tok/phi3-mini-transformers-auto.json", "TOK-HF-3"),              # text only
])
def test_a_wrong_input_length_on_an_hf_engine_cites_the_counter_or_loader_rule(variant, case_path, rule):
    result = _run(case_path, FaultyAdapter(variant, device="cpu"))
    wrong = [f for f in result.failures if f.what.endswith(".input_tokens")]
    assert result.verdict == Verdict.FAIL and wrong, [f.line() for f in result.failures]
    assert {f.rule for f in wrong} == {rule}, [f.line() for f in wrong]
    assert all(rule in f.why and "gives n = " in f.why for f in wrong)


class RefusesTensorParallelAsBadInput(Runtime):
    """Skips its CR-SUP-9 start-up check, so `--tpSize 2` reaches the one-device flag check."""

    def _check_deployment(self, tp_size, rec_slots, pkv_slots):
        return super()._check_deployment(1, rec_slots, pkv_slots)


def test_a_deployment_refused_as_bad_input_fails_its_sup_rule_without_a_traceback():
    adapter = InprocessAdapter(device="cpu", runtime_factory=RefusesTensorParallelAsBadInput)
    result = _run("golden/sup-9-tensor-parallel.json", adapter)
    assert result.verdict == Verdict.FAIL, (result.verdict, result.reason)
    line = result.first_failure().line()
    assert line.startswith("FAIL [CR-SUP-9] deployment: expected 'the CR-SUP-9 refusal', observed 'refused as "
                           "bad input'; the backend exited 2 with --tpSize:"), line
    assert "Traceback" not in result.stderr_tail and "raised" not in result.reason
