"""The parity suite (tests/parity/*.json): the runtimes' own unit-test assertions through the oracle.

Every expected value in the suite is typed from a runtime's test; these tests check that the
oracle agrees with them (every disagreement documented), that the suite covers what it claims,
that README's table is the one the suite yields, and that the runner does catch a disagreement.
"""
import json
import shutil
from pathlib import Path

import pytest

from conformance import parity
from conformance.cli import main
from conformance.commands import parity as command

SUITE = Path(__file__).resolve().parent
RUNTIMES = {"Edge-LLM 0.10", "vLLM", "SGLang", "llama.cpp server", "TensorRT-LLM"}


@pytest.fixture(scope="module")
def outcomes():
    return parity.evaluate(parity.load(SUITE))


def test_every_disagreement_is_documented(outcomes):
    bad = parity.unexplained(outcomes)
    assert not bad, "\n".join(f"{o.source}: {o.what}: expected {o.expected!r}, observed {o.observed!r}" for o in bad)


def test_the_suite_covers_five_runtimes_and_agrees(outcomes):
    tallies = parity.tallies(outcomes)
    assert set(tallies) == RUNTIMES
    assert sum(t.translated for t in tallies.values()) >= 140
    expressible = sum(t.expressible for t in tallies.values())
    agree = sum(t.agree for t in tallies.values())
    assert expressible >= 140 and agree >= 0.95 * expressible, (agree, expressible)


def test_every_entry_names_its_source():
    for doc in parity.load(SUITE):
        assert len(doc["commit"]) == 40
        ids = [e["id"] for e in doc["entries"]]
        assert len(ids) == len(set(ids)), f"{doc['_path']}: duplicate entry ids"
        for e in doc["entries"]:
            assert e["file"] and e["test"], e["id"]


def test_the_readme_table_is_the_suites(outcomes):
    assert command.readme_table() == command.table(outcomes), (
        "README.md's parity table is out of date: run `kvconform parity --update-readme`")


def _suite_with(tmp_path, edit):
    shutil.copy(SUITE / "edge-llm-0.10.json", tmp_path / "edge-llm-0.10.json")
    path = tmp_path / "edge-llm-0.10.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    return tmp_path


def test_a_wrong_expectation_is_an_unexplained_disagreement(tmp_path, capsys):
    def edit(doc):
        entry = next(e for e in doc["entries"] if e["id"] == "coordinator/cold-prefix-then-longest-full-block")
        entry["assertions"][1]["expected"] = 256
    assert main(["parity", "--suite", str(_suite_with(tmp_path, edit))]) == 1
    out = capsys.readouterr().out
    assert "UNEXPLAINED Edge-LLM 0.10" in out and "PublishesColdPrefixAndReusesLongestFullBlock" in out
    assert "expected 256, observed 128" in out and "PARITY FAILED" in out


def test_a_deliberate_difference_must_name_the_test(tmp_path, capsys):
    def edit(doc):
        entry = next(e for e in doc["entries"] if e["id"] == "coordinator/cold-prefix-then-longest-full-block")
        entry["assertions"][1].update(expected=256, deliberate="spec/profiles.md")   # profiles.md does not name it
    assert main(["parity", "--suite", str(_suite_with(tmp_path, edit))]) == 1


def test_a_malformed_suite_is_one_line_and_exit_2(tmp_path, capsys):
    def edit(doc):
        doc["entries"][0]["assertions"][0]["op"] = "~"
    assert main(["parity", "--suite", str(_suite_with(tmp_path, edit))]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "edge-llm-0.10.json: $.entries[0].assertions[0].op" in err


def test_the_suite_catches_the_old_eagle_and_hybrid_readings(monkeypatch):
    """The suite is not vacuous: the spec 1.1.0 readings of section 12 and CR-HYB-4 disagree
    with Edge-LLM 0.10's own tests again when put back."""
    import reference.batching as batching
    monkeypatch.setattr(batching, "prefill_end_pairs", lambda seq, P: max(seq.n - 1, 0) // P)
    bad = parity.unexplained(parity.evaluate([d for d in parity.load(SUITE) if d["kind"] == "engine"]))
    tests = {o.test for o in bad}
    assert {"FirstVerificationPublishesPairAndNextRequestUsesFullPageReplay",
            "PrefillOnlyCompletionSynchronizesDraftBeforePublishingAndCompaction"} <= tests
