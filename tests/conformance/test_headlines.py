"""Headlines that say exactly what was judged (spec/RUNNING.md section 6): cases that ended
ERROR or TIMEOUT are not counted as judged, thinly judged sections are named, a selection says
it is one, cases judged in part say so, and a campaign counts its outputs checked against the
numerical reference as a run does."""
from __future__ import annotations

import json
from pathlib import Path

from conformance.cli import main as kvconform
from conformance.executors.findings import Findings
from conformance.judge.verdicts import CaseResult, Verdict, headline_clauses, summarize


def result(case_id, verdict, section="PLAN", **details):
    r = CaseResult(case_id, ["CR-PLAN-1"], True, None, section, verdict)
    r.details = details
    return r


def test_error_and_timeout_cases_are_not_judged():
    results = [result("a", Verdict.PASS), result("b", Verdict.ERROR), result("c", Verdict.TIMEOUT),
               result("d", Verdict.NOT_SUPPORTED)]
    from conformance.judge.verdicts import judged_line
    s = summarize(results)
    assert s["judged"] == 1 and s["not_judged"] == {"NOT_SUPPORTED": 1, "TIMEOUT": 1, "ERROR": 1}
    assert judged_line(s, 4) == "1 of 4 case(s) judged (not judged: 1 NOT_SUPPORTED, 1 TIMEOUT, 1 ERROR)"
    every_error = summarize([result(x, Verdict.ERROR) for x in "abc"])
    assert every_error["judged"] == 0 and every_error["headline"] == "NOT CONFORMANT"


def test_a_thinly_judged_section_is_named_in_the_headline():
    results = ([result(f"m{k}", Verdict.NOT_SUPPORTED, "MEDIA") for k in range(13)] + [result("m", Verdict.PASS, "MEDIA")]
               + [result(f"t{k}", Verdict.NOT_SUPPORTED, "TOK") for k in range(9)]
               + [result(f"p{k}", Verdict.PASS) for k in range(10)])
    from conformance.report.tables import section_of, section_order
    s = summarize(results, group=section_of, order=section_order)
    assert s["headline"] == "CONFORMANT"
    assert s["thin_sections"] == ["3 Media spans", "12 Tokenizers and media counts"]
    assert {"section": "3 Media spans", "judged": 1, "cases": 14} in s["sections"]
    clause = next(c for c in headline_clauses(s) if c.startswith("thin coverage"))
    assert "3 Media spans 1 of 14 judged" in clause and "12 Tokenizers and media counts 0 of 9 judged" in clause


def test_cases_judged_in_part_are_counted_in_the_headline():
    partly = result("a", Verdict.PASS, judged={"counts": 3, "not_judged": [{"what": "x", "values": 7, "reason": "r"}]})
    s = summarize([partly, result("b", Verdict.PASS)])
    assert s["partly_judged"] == {"cases": 1, "values_not_judged": 7}
    assert any("1 case(s) judged in part: 7 value(s) NOT_SUPPORTED" in c for c in headline_clauses(s))


def test_a_narrowed_run_says_it_is_a_selection(tmp_path, capsys):
    code = kvconform(["run", "--backend", "reference", "--no-progress", "-k", "golden/neg-", "--no-generated",
                      "--report", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    selection = doc["summary"]["selection"]
    assert selection["narrowed"] and selection["filters"] == ["-k golden/neg-", "--no-generated"]
    assert selection["selected"] < selection["available"]
    assert f"a selection: {selection['selected']} of {selection['available']} cases and families" in out
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "a selection:" in summary.splitlines()[0] and "judged / cases per section:" in summary


def test_a_campaign_entry_keeps_its_reference_checks():
    findings = Findings(["text"], min_batches=1)
    unit = CaseResult("generated/text", ["CR-PUB-2"])
    unit.details = {"examples": 3, "batches_checked": 5,
                    "reference": {"source": "weights", "requests": 12, "steps": 40, "worst_drift": 0.001,
                                  "kv_rounding": 0.0}}
    findings.add("text", 0, unit, Path("."), "w", 1.0, 1.0)
    [entry] = findings.entries()
    assert entry.details["reference"]["requests"] == 12
    s = summarize([entry])
    assert s["reference_checked"] == 12 and s["outputs_judged_against"] == "numerical reference and bypass replay"


def test_without_a_bar_each_finished_section_is_one_line(tmp_path, capsys):
    """--no-progress (or a stderr that is no terminal, as in CI) prints one line per finished
    section and per family, and no carriage return."""
    code = kvconform(["run", "--backend", "reference", "--no-progress", "--section", "PLAN", "--section", "PUB",
                      "--families", "text", "--examples", "2", "--min-batches", "1", "--report", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 0 and "\r" not in err
    lines = [line for line in err.splitlines() if line.startswith("kvconform run: ") and "done" in line
             or line.startswith("kvconform run: generated/")]
    assert [line.split(":")[1].strip() for line in lines] == ["2 Planning", "4 Publication", "generated/text"], lines
    assert "18 case(s) done (18 PASS)" in lines[0]


def test_summary_lists_the_cases_judged_in_part(tmp_path):
    from conformance.report.document import Report
    report = Report(tmp_path / "r", "reference", None, {}, {})
    report.add(result("a", Verdict.PASS, judged={"counts": 3, "not_judged": [
        {"what": "responses[1..2]: finish_reason", "values": 2, "reason": "from batch 1 on, request 2 may meet ..."}]}))
    report.finish()
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "## Cases judged in part" in summary
    assert "`a` (PASS, 3 value(s) judged): responses[1..2]: finish_reason not judged: from batch 1 on" in summary


def test_the_headline_stays_one_readable_line():
    """Every section thin and eight filters made a 677-character headline: the clauses name the
    first few and count the rest, which summary.md lists."""
    from conformance.report.tables import section_of, section_order
    sections = ["ID", "PLAN", "MEDIA", "PUB", "POL", "CAP", "BATCH", "HYB", "SUP", "MET", "SPEC", "TOK"]
    results = [result(f"{s}{k}", Verdict.NOT_SUPPORTED, s) for s in sections for k in range(9)]
    results += [result(f"{s}-judged", Verdict.PASS, s) for s in sections]
    s = summarize(results, group=section_of, order=section_order,
                  selection={"narrowed": True, "selected": 120, "available": 189,
                             "filters": [f"-k some/long/case-name-{k}" for k in range(8)] + ["--no-generated"]})
    assert len(s["thin_sections"]) == 12
    note = "; ".join(["profile kvconform-1"] + headline_clauses(s))
    assert len(note) <= 330, (len(note), note)
    assert "and 10 more section(s), in summary.md" in note and "and 7 more" in note
