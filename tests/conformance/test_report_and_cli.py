"""Reports (spec/RUNNING.md section 7), sharding and merging, and the `kvconform run` command."""
from __future__ import annotations

import json
import os
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from conformance.cli import main as kvconform
from conformance.run.execute import run_case
from conformance.report.document import Report, check_report
from conformance.report.tables import verdict_table
from conformance.judge.verdicts import Verdict

from tests.helpers.cases import case
from tests.helpers.mutants import MutantAdapter


def test_report_files_are_valid(tmp_path, reference_adapter, reference_manifest):
    report = Report(tmp_path / "r", "reference", reference_manifest, {}, {"seed": 0})
    for case_id in ("sections/plan/boundary-p4-k1-exact", "sections/media/trim-split", "golden/sup-1-block-diffusion"):
        report.add(run_case(case(case_id), reference_adapter, reference_manifest))
    partial = json.loads((tmp_path / "r" / "report.json").read_text())
    assert partial["complete"] is False and not check_report(partial)
    doc = report.finish()
    assert doc["complete"] is True and not check_report(doc), check_report(doc)
    # the oracle's manifest declares no numerical reference: outputs against the bypass replay only
    assert doc["summary"] == {"verdicts": {**{v.name: 0 for v in Verdict}, "PASS": 3}, "conformant": True,
                              "judged": 3, "headline": "CONFORMANT", "reference_checked": 0,
                              "outputs_judged_against": "bypass replay only",
                              "not_judged": {"NOT_SUPPORTED": 0, "TIMEOUT": 0, "ERROR": 0},
                              "sections": [{"section": "2 Planning", "judged": 1, "cases": 1},
                                           {"section": "3 Media spans", "judged": 1, "cases": 1},
                                           {"section": "9 Support matrix", "judged": 1, "cases": 1}],
                              "thin_sections": []}
    assert doc["tolerances"]["near_tie_top2_gap_nats"] == 0.05
    suites = ET.parse(tmp_path / "r" / "junit.xml").getroot()
    assert sum(int(s.get("tests")) for s in suites) == 3
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "CONFORMANT" in summary and "| 3 Media spans" in summary


def test_a_failing_run_writes_reproducers_and_exits_1(tmp_path, monkeypatch):
    import conformance.commands.run as run_command
    monkeypatch.setattr(run_command, "make_adapter", lambda *a, **k: MutantAdapter("no_media_trim"))
    code = kvconform(["run", "--backend", "reference", "--no-generated", "--no-progress", "-k", "media/trim",
                      "--report", str(tmp_path / "rep")])
    assert code == 1
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    failed = [c for c in doc["cases"] if c["verdict"] == "FAIL"]
    assert failed and all(c["reproducer"] and (tmp_path / "rep" / c["reproducer"]).exists() for c in failed)
    junit = ET.parse(tmp_path / "rep" / "junit.xml").getroot()
    assert junit.iter("failure") and "CR-MEDIA-3" in (tmp_path / "rep" / "summary.md").read_text()
    repro = tmp_path / "rep" / failed[0]["reproducer"]
    code = kvconform(["run", "--backend", "reference", "--no-progress", "--case", str(repro),
                      "--report", str(tmp_path / "again")])
    assert code == 1, "the reproducer, run alone, fails the same way"
    assert json.loads((tmp_path / "again" / "report.json").read_text())["cases"][0]["verdict"] == "FAIL"


def test_shards_merge_into_the_whole_run(tmp_path, capsys):
    common = ["run", "--backend", "reference", "--no-generated", "--no-progress", "--section", "PLAN"]
    assert kvconform(common + ["--report", str(tmp_path / "whole")]) == 0
    for i in (1, 2, 3):
        assert kvconform(common + ["--shard", f"{i}/3", "--report", str(tmp_path / f"s{i}")]) == 0
    assert kvconform(["merge", str(tmp_path / "merged")] + [str(tmp_path / f"s{i}") for i in (1, 2, 3)]) == 0
    whole = json.loads((tmp_path / "whole" / "report.json").read_text())
    merged = json.loads((tmp_path / "merged" / "report.json").read_text())
    assert [c["id"] for c in merged["cases"]] == [c["id"] for c in whole["cases"]]
    assert merged["summary"] == whole["summary"] and merged["complete"] and not check_report(merged)
    # a missing shard leaves the merge incomplete
    assert kvconform(["merge", str(tmp_path / "partial"), str(tmp_path / "s1"), str(tmp_path / "s2")]) == 1
    assert json.loads((tmp_path / "partial" / "report.json").read_text())["complete"] is False


def test_merge_never_overwrites_without_force(tmp_path, capsys):
    common = ["run", "--backend", "reference", "--no-generated", "--no-progress", "-k", "boundary-p4"]
    assert kvconform(common + ["--shard", "1/1", "--report", str(tmp_path / "s1")]) == 0
    shard = (tmp_path / "s1" / "report.json").read_bytes()
    assert kvconform(["merge", str(tmp_path / "s1"), str(tmp_path / "s1"), "--force"]) == 2
    assert "into one of its shards" in capsys.readouterr().err
    assert (tmp_path / "s1" / "report.json").read_bytes() == shard
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "report.json").write_text("{}")
    assert kvconform(["merge", str(tmp_path / "m"), str(tmp_path / "s1")]) == 2
    assert "--force" in capsys.readouterr().err and (tmp_path / "m" / "report.json").read_text() == "{}"
    # a folder no kit run wrote is not emptied even with --force; one a merge wrote is replaced
    assert kvconform(["merge", str(tmp_path / "m"), str(tmp_path / "s1"), "--force"]) == 2
    assert (tmp_path / "m" / "report.json").read_text() == "{}"
    assert kvconform(["merge", str(tmp_path / "m2"), str(tmp_path / "s1")]) == 0
    assert kvconform(["merge", str(tmp_path / "m2"), str(tmp_path / "s1"), "--force"]) == 0


def test_merge_refuses_overlapping_shards(tmp_path, capsys):
    common = ["run", "--backend", "reference", "--no-generated", "--no-progress", "-k", "boundary-p4"]
    kvconform(common + ["--shard", "1/2", "--report", str(tmp_path / "a")])
    capsys.readouterr()
    assert kvconform(["merge", str(tmp_path / "m"), str(tmp_path / "a"), str(tmp_path / "a")]) == 2
    assert "shard 1/2 is given twice" in capsys.readouterr().err


def test_verdict_table_groups_by_section(reference_adapter, reference_manifest):
    results = [run_case(case(c), reference_adapter, reference_manifest)
               for c in ("sections/id/chain-same-tail", "sections/plan/one-page-rewind")]
    table = verdict_table(results)
    assert "1 Cache identity" in table and "2 Planning" in table and "total" in table


def test_list_and_bad_input(tmp_path, capsys):
    assert kvconform(["run", "--list", "-k", "vlm_context_reuse"]) == 0
    assert "vlm_context_reuse" in capsys.readouterr().out
    assert kvconform(["run", "--shard", "4/3"]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"requests": []}')
    assert kvconform(["run", "--case", str(bad)]) == 2
    assert "not a case file" in capsys.readouterr().err


def test_exclude_leaves_out_the_cases_it_names_and_the_headline_says_so(tmp_path, capsys):
    """`--exclude` is the inverse of -k: the cases of boundary-p4 but the one of k = 1, and the
    summary names the option (a selection is never reported as the whole suite)."""
    from conformance.cases.case import discover, select
    wanted = [c.id for c in select(discover(), ["boundary-p4"]) if "boundary-p4-k1" not in c.id]
    assert wanted and len(wanted) < len(select(discover(), ["boundary-p4"]))
    code = kvconform(["run", "--backend", "reference", "--no-generated", "--no-progress", "-k", "boundary-p4",
                      "--exclude", "boundary-p4-k1", "--report", str(tmp_path)])
    doc = json.loads((tmp_path / "report.json").read_text())
    assert code == 0 and [c["id"] for c in doc["cases"]] == wanted
    assert "--exclude boundary-p4-k1" in capsys.readouterr().out
    assert kvconform(["run", "--list", "--exclude", "*"]) == 2
    assert "--exclude *" in capsys.readouterr().err


def test_committed_cases_match_their_generator():
    """cases/{llm,vlm}_context_reuse.json and sections/ are written by tools/make_cases.py."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "tools/make_cases.py", "--check"], cwd=root, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_generated_case_says_so_and_a_hand_edit_is_told_where_to_go(tmp_path, monkeypatch, capsys):
    """Each file make_cases.py writes starts with its `_generated_by` marker, which validate
    accepts; --check names the generator as the place to edit, and finds a marked file the
    generator no longer writes."""
    from tools import make_cases
    monkeypatch.setattr(make_cases, "CASES", tmp_path)
    assert make_cases.main([]) == 0
    first = tmp_path / "sections" / "id" / "distinct-pages-birthday.json"
    assert first.read_text().splitlines()[1] == f' "_generated_by": {json.dumps(make_cases.GENERATED_BY)},'
    assert kvconform(["validate", str(first)]) == 0
    assert "warning" not in capsys.readouterr().err
    assert make_cases.main(["--check"]) == 0
    first.write_text(first.read_text().replace('"batch_size": 8', '"batch_size": 4'))
    (tmp_path / "sections" / "id" / "gone.json").write_text(json.dumps({"_generated_by": make_cases.GENERATED_BY}))
    capsys.readouterr()
    assert make_cases.main(["--check"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == ["stale: cases/sections/id/distinct-pages-birthday.json differs from what tools/make_cases.py "
                   "writes: edit the generator (tools/make_cases.py), not the JSON, then run python "
                   "tools/make_cases.py",
                   "orphan: cases/sections/id/gone.json carries the tools/make_cases.py marker, but the generator "
                   "no longer writes it: delete it, or give it back to the generator"]

def test_written_files_are_readable_as_the_umask_allows(tmp_path):
    """Files were written through mkstemp and kept its 0600: a CI artifact server reading the
    report folder as another user could not. Every file the kit writes is 0666 less the umask
    (umask 027 here, so 0640: the group bit shows it is the umask, not a fixed mode)."""
    umask, mode = 0o027, 0o640
    import stat
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def kv(*argv):
        done = subprocess.run([sys.executable, "-m", "conformance.cli", *map(str, argv)], cwd=root, env=env,
                              capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.umask(umask))
        assert done.returncode == 0, done.stderr
    kv("run", "--backend", "reference", "--no-generated", "-k", "golden/plan-kinds-p4", "--no-progress",
       "--report", tmp_path / "rep")
    request = tmp_path / "in.json"
    request.write_text(json.dumps({"max_generate_length": 1, "requests": [{"messages": [{"role": "user", "content": "hi"}]}]}))
    kv("simulate", "--engineConfig", root / "tests" / "meta" / "fixtures" / "engine" / "valid" / "attention.json",
       "--inputFile", request, "--outputFile", tmp_path / "pred.json",
       "--profileOutputFile", tmp_path / "prof.json")
    written = [tmp_path / "rep" / n for n in ("report.json", "summary.md", "junit.xml", "report.html")]
    written += [tmp_path / "pred.json", tmp_path / "prof.json"]
    for path in written:
        assert stat.S_IMODE(path.stat().st_mode) == mode, f"{path.name}: {oct(stat.S_IMODE(path.stat().st_mode))}"
