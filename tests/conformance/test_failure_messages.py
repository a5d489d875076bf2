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


def test_a_prompt_rendered_differently_is_blamed_on_the_template_not_the_loader(monkeypatch):
    """TOK-HF-4: a template worker without lstrip_blocks keeps the four spaces before each
    indented block tag (8 more ids per message on qwen3-bytes). Neither loader reads the
    prompt to that n, so the failure names the chat template's rule, not the loader's (TOK-HF-2);
    a runtime that read the files with the other loader keeps the loader's rule (above)."""
    from gpu_backend.chat_template import ChatTemplate
    rendered = ChatTemplate.render

    def without_lstrip_blocks(self, messages, add_generation_prompt, kwargs):
        return rendered(self, messages, add_generation_prompt, kwargs).replace("<|im_start|>", "    <|im_start|>")
    monkeypatch.setattr(ChatTemplate, "render", without_lstrip_blocks)
    result = _run("sections/tok/template-indented-blocks.json", InprocessAdapter(device="cpu"))
    wrong = [f for f in result.failures if f.what.endswith(".input_tokens")]
    assert result.verdict == Verdict.FAIL and wrong, [f.line() for f in result.failures]
    assert {f.rule for f in wrong} == {"TOK-HF-4"}, [f.line() for f in wrong]
    assert (wrong[0].expected, wrong[0].observed) == (24, 32)
    assert "neither this loader nor transformers-auto" in wrong[0].why and "lstrip_blocks" in wrong[0].why
