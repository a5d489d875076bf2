"""`kvconform run --fail-fast`: a screening run that stops at the first case deciding the verdict,
says so in its headline and report, and is never CONFORMANT."""
from __future__ import annotations

import json

from conformance.cases.case import discover, select
from conformance.cli import main as kvconform
from conformance.report.document import check_report
from conformance.run.suite import case_cost
from conformance.judge.verdicts import CaseResult, Failure, Verdict, summarize

from tests.helpers.mutants import MutantAdapter


def _fail_fast_run(tmp_path, monkeypatch, *extra):
    import conformance.commands.run as run_command
    monkeypatch.setattr(run_command, "make_adapter", lambda *a, **k: MutantAdapter("no_media_trim"))
    return kvconform(["run", "--backend", "inprocess", "--fail-fast", "--no-progress", "--section", "MEDIA",
                      "--families", "vision", "--examples", "5", "--report", str(tmp_path / "rep"), *extra])


def test_a_fail_fast_run_stops_at_the_first_failure_and_says_so(tmp_path, monkeypatch, capsys):
    code = _fail_fast_run(tmp_path, monkeypatch)
    out = capsys.readouterr().out
    assert code == 1
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert not check_report(doc) and doc["complete"]
    verdicts = [c["verdict"] for c in doc["cases"]]
    assert verdicts[-1] == "FAIL" and set(verdicts[:-1]) <= {"PASS", "NOT_SUPPORTED"}, verdicts
    assert "generated/vision" not in {c["id"] for c in doc["cases"]}, "nothing runs after the first failure"
    stop = doc["stopped_early"]
    planned = len(select(discover(None), None, ["MEDIA"], None, False)) + 1          # the cases and the family
    assert stop == doc["summary"]["stopped_early"] == {"at": doc["cases"][-1]["id"],
                                                       "not_run": planned - len(doc["cases"])}
    assert doc["summary"]["headline"] == "NOT CONFORMANT" and not doc["summary"]["conformant"]
    assert f"NOT CONFORMANT (profile kvconform-1; stopped early at the first failure, {stop['at']} (--fail-fast): " \
           f"{stop['not_run']} item(s) not run" in out
    assert "**Stopped early**" in (tmp_path / "rep" / "summary.md").read_text()


def test_curated_cases_run_cheapest_first(tmp_path, monkeypatch):
    _fail_fast_run(tmp_path, monkeypatch)
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    by_id = {c.id: c for c in select(discover(None), None, ["MEDIA"], None, False)}
    ran = [by_id[c["id"]] for c in doc["cases"]]
    assert ran == sorted(ran, key=case_cost)
    assert case_cost(ran[0]) == min(case_cost(c) for c in by_id.values())


def test_a_fail_fast_run_that_finds_nothing_runs_everything(tmp_path):
    code = kvconform(["run", "--backend", "reference", "--fail-fast", "--no-progress", "--no-generated",
                      "--section", "PLAN", "--report", str(tmp_path / "rep")])
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert code == 0 and doc["summary"]["headline"] == "SELF-CHECK PASSED"
    assert "stopped_early" not in doc and "stopped_early" not in doc["summary"]
    assert len(doc["cases"]) == len(select(discover(None), None, ["PLAN"], None, False))


def test_a_stop_is_never_conformant():
    passed = CaseResult("a", ["CR-PLAN-1"]).settle(Verdict.PASS, "")
    failed = CaseResult("b", ["CR-PLAN-1"])
    failed.add(Failure("CR-PLAN-1", "x", 1, 2, "why"))
    assert summarize([passed, failed], stopped={"at": "b", "not_run": 3})["headline"] == "NOT CONFORMANT"
    # a report that says it stopped although nothing failed judged less than it was asked to
    assert summarize([passed], stopped={"at": "a", "not_run": 3})["headline"] == "INCOMPLETE"
    assert summarize([passed])["headline"] == "CONFORMANT"


def test_fail_fast_shards_merge_with_their_stops(tmp_path, monkeypatch):
    import conformance.commands.run as run_command
    monkeypatch.setattr(run_command, "make_adapter", lambda *a, **k: MutantAdapter("no_media_trim"))
    for i in (1, 2):
        kvconform(["run", "--backend", "inprocess", "--fail-fast", "--no-progress", "--no-generated", "--section",
                   "MEDIA", "--shard", f"{i}/2", "--report", str(tmp_path / f"s{i}")])
    assert kvconform(["merge", str(tmp_path / "m"), str(tmp_path / "s1"), str(tmp_path / "s2")]) == 1
    merged = json.loads((tmp_path / "m" / "report.json").read_text())
    shards = [json.loads((tmp_path / f"s{i}" / "report.json").read_text())["stopped_early"] for i in (1, 2)]
    assert merged["stopped_early"]["not_run"] == sum(s["not_run"] for s in shards)
    assert merged["summary"]["headline"] == "NOT CONFORMANT" and not check_report(merged)


def test_fail_fast_is_refused_with_ray(capsys):
    assert kvconform(["run", "--fail-fast", "--executor", "ray"]) == 2
    assert "--fail-fast" in capsys.readouterr().err
