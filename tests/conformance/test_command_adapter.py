"""The command adapter against a stand-in executable (tests/helpers/fake_llm_inference.py)
and, marked slow, against the bundled backend's CLI compared with the inprocess adapter."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conformance.adapters import make_adapter
from conformance.adapters.command import CommandAdapter, build_flags, runtime_flags
from conformance.run.execute import run_case
from conformance.judge.verdicts import Verdict

from tests.helpers import HELPERS
from tests.helpers.cases import ALL_CASES, case

FAKE = HELPERS / "fake_llm_inference.py"


@pytest.fixture
def fake(tmp_path, monkeypatch, reference_manifest):
    monkeypatch.setenv("KVCONFORM_CACHE", str(tmp_path / "cache"))
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps(reference_manifest))

    def make(mode: str = "ok", timeout: float = 60.0) -> CommandAdapter:
        monkeypatch.setenv("KVCONFORM_FAKE_MODE", mode)
        return CommandAdapter(f"{sys.executable} {FAKE} infer", build_command=f"{sys.executable} {FAKE} build",
                              capabilities=str(caps), timeout=timeout, workdir=str(tmp_path))
    return make


def run(adapter, case_id):
    return run_case(case(case_id), adapter, adapter.capabilities())


def test_flags_follow_the_contract():
    assert build_flags({"maxInputLen": 8, "vision": True, "audio": False, "loraAdapters": ["a", "b"]}) == \
        ["--loraAdapters", "a,b", "--maxInputLen", "8", "--vision"]
    assert runtime_flags({"enableContextReuse": True, "contextCacheMaxRecords": 0, "outputHiddenStates": True}, "H") == \
        ["--enableContextReuse", "--contextCacheMaxRecords", "0", "--outputHiddenStates", "H"]


def test_a_conformant_executable_passes(fake):
    adapter = fake("ok")
    for case_id in ("sections/plan/boundary-p4-k2-exact", "sections/pub/multi-turn-including",
                    "sections/pub/failed-batch-keeps-records", "golden/sup-7-action-runner",
                    "sections/neg/later-request-empty"):
        result = run(adapter, case_id)
        assert result.verdict == Verdict.PASS, (case_id, result.reason, [f.line() for f in result.failures])


@pytest.mark.parametrize("mode, verdict, words", [
    ("crash", Verdict.ERROR, "signal"),
    ("garbage", Verdict.ERROR, "malformed output"),
    ("short", Verdict.ERROR, "one response per request"),
    ("miscount", Verdict.FAIL, "hit_sequences"),
])
def test_misbehaviour_is_reported_and_the_run_goes_on(fake, mode, verdict, words):
    result = run(fake(mode), "sections/plan/boundary-p4-k2-exact")
    assert result.verdict == verdict
    text = result.reason + " ".join(f.line() for f in result.failures)
    assert words in text, text


def test_garbage_keeps_the_stderr_tail(fake):
    result = run(fake("garbage"), "sections/plan/boundary-p4-k2-exact")
    assert "some progress output on stderr" in result.stderr_tail


def test_a_hanging_executable_times_out(fake):
    result = run(fake("sleep", timeout=2), "sections/plan/boundary-p4-k2-exact")
    assert result.verdict == Verdict.TIMEOUT and "no exit within 2 s" in result.reason


def test_a_fixed_engine_gets_every_case_laid_out_for_it(fake, tmp_path, reference_manifest):
    engine = tmp_path / "engine"
    engine.mkdir()
    from reference import engine_from_build_args
    engine_args = case("sections/plan/boundary-p4-k2-exact").engine_args
    (engine / "config.json").write_text(json.dumps(engine_from_build_args(engine_args).to_config()))
    adapter = CommandAdapter(f"{sys.executable} {FAKE} infer", engine_dir=str(engine), workdir=str(tmp_path))
    assert adapter.capabilities()["tokens_per_page"] == [4]
    other = run(adapter, "sections/plan/boundary-p8-k1-exact")          # written for P = 8
    assert other.verdict == Verdict.PASS, (other.reason, [f.line() for f in other.failures])
    assert "pages laid out from 8 to 4 tokens" in other.details["materialized"]["adaptations"]
    result = run(adapter, "sections/plan/boundary-p4-k2-exact")
    assert result.verdict == Verdict.PASS, [f.line() for f in result.failures]
    assert run(adapter, "golden/media-trim-split").verdict == Verdict.NOT_SUPPORTED     # no vision encoder


def test_bundled_cli_agrees_with_inprocess_on_a_few_cases():
    pytest.importorskip("torch")
    command, inprocess = make_adapter("command"), make_adapter("inprocess")
    for case_id in ("sections/pub/multi-turn-including", "golden/sup-2-fp8"):
        a = run_case(case(case_id), command, command.capabilities())
        b = run_case(case(case_id), inprocess, inprocess.capabilities())
        assert (a.verdict, [f.signature() for f in a.failures]) == (b.verdict, [f.signature() for f in b.failures]), \
            (case_id, a.reason, b.reason)


@pytest.mark.slow
def test_bundled_cli_agrees_with_inprocess_on_every_curated_case():
    """The CLI through the command contract gives the inprocess verdicts."""
    pytest.importorskip("torch")
    command, inprocess = make_adapter("command"), make_adapter("inprocess")
    differ = {}
    for c in ALL_CASES:
        a = run_case(c, command, command.capabilities())
        b = run_case(c, inprocess, inprocess.capabilities())
        if a.verdict != b.verdict:
            differ[c.id] = (str(a.verdict), a.reason, str(b.verdict), b.reason)
    assert not differ, differ


def test_generated_examples_run_through_the_command_contract(fake, tmp_path):
    """Without sessions an example is judged once, as the case file it would be written as."""
    from conformance.generate import run_generated
    adapter = fake("miscount")
    manifest = adapter.capabilities()
    result = run_generated("text", adapter, manifest, workdir=tmp_path / "gen", examples=10, budget_s=6, seed=0,
                           run_case_fn=lambda c: run_case(c, adapter, manifest))
    assert result.verdict == Verdict.FAIL and result.details["reproduced"], result.reason
    assert any(f.rule == "CR-MET-2" for f in result.failures)
