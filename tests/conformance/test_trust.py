"""No verdict without evidence: every path that once printed PASS or CONFORMANT where nothing was
judged, and every bad-input gap of `kvconform run` and `kvconform merge`, each pinned by a test
that failed before the fix."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conformance.adapters.base import Adapter, Session
from conformance.adapters.reference import ReferenceAdapter
from conformance.cli import main as kvconform
from conformance.run.execute import run_case
from conformance.generate import run_generated
from conformance.judge.verdicts import Verdict

from tests.helpers import HELPERS
from tests.helpers.cases import case
from tests.helpers.mutants import MutantAdapter

ROOT = Path(__file__).resolve().parents[2]
FAKE = HELPERS / "fake_llm_inference.py"
RUN = ["run", "--no-progress"]


class StringLogprobs(ReferenceAdapter):
    """The oracle as a backend, writing log-probabilities as strings: the judging code raises."""

    def start(self, engine, runtime) -> Session:
        inner = super().start(engine, runtime)

        class Wrapped(Session):
            def run(self, request, base_dir):
                got = inner.run(request, base_dir)
                for r in got.responses or []:
                    for step in r.get("logprobs") or []:
                        for c in step:
                            c["logprob"] = str(c["logprob"])
                return got
        return Wrapped()


def generated(adapter, tmp_path, family="text", **kw):
    manifest = adapter.capabilities()
    options = dict(examples=30, budget_s=20, seed=0, run_case_fn=lambda c: run_case(c, adapter, manifest))
    options.update(kw)
    return run_generated(family, adapter, manifest, workdir=tmp_path, **options)


# --- 1. generated families: the kit's own errors, and honest counters ----------------------------------

def test_an_exception_while_judging_ends_the_family_error(tmp_path):
    result = generated(StringLogprobs(), tmp_path, shrink=False)
    assert result.verdict == Verdict.ERROR, result.reason
    assert "TypeError" in " ".join(f.line() for f in result.failures) + result.reason
    assert "Traceback" in result.stderr_tail or "File " in result.stderr_tail


def test_the_same_backend_is_error_in_curated_cases_too(reference_manifest):
    adapter = StringLogprobs()
    result = run_case(case("sections/batch/shared-system-prompt"), adapter, adapter.capabilities())
    assert result.verdict == Verdict.ERROR and "TypeError" in result.reason


def test_examples_and_shrink_steps_are_counted_apart(tmp_path):
    adapter = MutantAdapter("lora_not_in_identity")
    result = generated(adapter, tmp_path, examples=60)
    assert result.verdict == Verdict.FAIL
    d = result.details
    assert 1 <= d["examples"] <= 60, d
    assert d["shrink_steps"] >= 1, "the failure was shrunk, and those runs are not examples"


# --- 2. the oracle is never a silent fallback -----------------------------------------------------------

def test_a_backend_that_cannot_be_imported_stops_the_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gpu_backend", None)     # `import gpu_backend` raises ImportError
    assert kvconform(RUN + ["--no-generated", "-k", "golden/plan", "--report", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "cannot start the inprocess adapter" in err and "gpu_backend" in err
    assert not (tmp_path / "r" / "report.json").exists()


def test_the_pytest_entry_does_not_fall_back_to_the_oracle(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['gpu_backend'] = None  # import fails\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    env.pop("KVCONFORM_BACKEND", None)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "tests/conformance/test_suite.py", "-k", "boundary-p4-k1-exact"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0, p.stdout[-2000:]
    assert "import of gpu_backend halted" in p.stdout + p.stderr


def test_the_oracle_self_check_says_no_backend_was_tested(tmp_path, capsys):
    assert kvconform(RUN + ["--backend", "reference", "--no-generated", "-k", "golden/plan",
                            "--report", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "SELF-CHECK PASSED (profile kvconform-1; no backend was tested" in out and "CONFORMANT" not in out.replace("NOT CONFORMANT", "")
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    assert doc["backend"]["self_check"] is True
    assert doc["summary"]["headline"] == "SELF-CHECK PASSED" and doc["summary"]["conformant"] is False
    assert "No backend was tested" in (tmp_path / "r" / "summary.md").read_text()


# --- 3. options of another adapter ---------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["--backend", "inprocess", "--executable", "/bin/false"], "--executable applies to --backend command"),
    (["--backend", "reference", "--engine-dir", "/tmp"], "--engine-dir applies to --backend command"),
    (["--backend", "reference", "--device", "cpu"], "--device applies to"),
    (["--backend", "broken", "--capabilities", "c.json"], "--capabilities applies to --backend command"),
    (["--executable", "/bin/false", "--engine-dir", "/tmp", "--device", "cuda"], "--device applies to the bundled"),
])
def test_an_option_of_another_adapter_is_bad_input(argv, words, tmp_path, capsys):
    assert kvconform(RUN + argv + ["--no-generated", "--report", str(tmp_path / "r")]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.fixture
def fake_backend(tmp_path, monkeypatch, reference_manifest):
    """Command-adapter options for tests/helpers/fake_llm_inference.py (an llm_inference
    stand-in that misbehaves as KVCONFORM_FAKE_MODE says)."""
    monkeypatch.setenv("KVCONFORM_CACHE", str(tmp_path / "cache"))
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps(reference_manifest))
    return ["--executable", f"{sys.executable} {FAKE} infer", "--build-command", f"{sys.executable} {FAKE} build",
            "--capabilities", str(caps)]


def test_executable_alone_selects_the_command_adapter(tmp_path, fake_backend, monkeypatch):
    monkeypatch.setenv("KVCONFORM_FAKE_MODE", "crash")
    code = kvconform(RUN + fake_backend + ["--no-generated", "-k", "boundary-p4-k1-exact",
                                           "--report", str(tmp_path / "r")])
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    assert code == 1 and doc["backend"]["adapter"] == "command"
    assert {c["verdict"] for c in doc["cases"]} == {"ERROR"}


# --- 4. a reproducer re-runs against the same backend, with its evidence kept ---------------------------------

def test_failures_carry_a_rerun_command_and_the_invocation_files(tmp_path, fake_backend, monkeypatch):
    monkeypatch.setenv("KVCONFORM_FAKE_MODE", "miscount")
    report = tmp_path / "r"
    assert kvconform(RUN + fake_backend + ["--no-generated", "-k", "boundary-p4-k1-exact",
                                           "--report", str(report)]) == 1
    doc = json.loads((report / "report.json").read_text())
    failed = [c for c in doc["cases"] if c["verdict"] == "FAIL"]
    assert failed
    for c in failed:
        assert "--backend command" in c["rerun"] and f"--case {report.resolve() / c['reproducer']}" in c["rerun"]
        assert "fake_llm_inference.py infer" in c["rerun"] and "--capabilities" in c["rerun"]
        evidence = report / c["evidence"]
        names = {p.name for p in evidence.iterdir()}
        assert {"1-run.request.json", "1-run.output.json", "1-run.profile.json", "1-run.summary.json"} <= names
        assert json.loads((evidence / "1-run.request.json").read_text())["_conformance"]["id"] == c["id"]
        assert c["rerun"] in (report / "summary.md").read_text()
    rerun = failed[0]["rerun"].replace(shlex.quote(failed[0]["rerun"].split()[3]), "", 0)
    argv = shlex.split(rerun.split("&&", 1)[1])
    assert argv[1:3] == ["run", "--backend"]
    code = kvconform(argv[1:] + ["--no-progress"])
    assert code == 1, "the reproducer, re-run as printed, tests the same (faulty) backend"
    again = json.loads((report / "reruns" / Path(failed[0]["reproducer"]).stem / "report.json").read_text())
    assert again["backend"]["adapter"] == "command" and again["cases"][0]["verdict"] == "FAIL"


def test_a_reproducer_folder_skips_the_evidence(tmp_path, fake_backend, monkeypatch):
    monkeypatch.setenv("KVCONFORM_FAKE_MODE", "miscount")
    kvconform(RUN + fake_backend + ["--no-generated", "-k", "boundary-p4-k1", "--report", str(tmp_path / "r")])
    assert kvconform(RUN + ["--backend", "reference", "--list", "--case", str(tmp_path / "r" / "reproducers")]) == 0


# --- 5. selections that run nothing, names that do not exist ----------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["--section", "BOGUS"], "unknown section"),
    (["--rule", "CR-NOPE-9"], "not a rule id"),
    (["-k", "nomatch"], "runs nothing"),
    (["--no-generated", "--generated-only"], "not allowed with"),
    (["--families", "bogus"], "unknown family"),
    (["--families", "text,bogus", "--generated-only"], "unknown family"),
    (["--rule", "CR-ID-5", "-k", "media"], "runs nothing"),
    (["--list", "-k", "nomatch"], "runs nothing"),
])
def test_an_empty_or_unknown_selection_is_bad_input(argv, words, tmp_path, capsys):
    assert kvconform(RUN + ["--backend", "reference"] + argv + ["--report", str(tmp_path / "r")]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


# --- 6. numbers that check nothing ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["--budget-seconds", "-5"], ["--budget-seconds", "0"], ["--budget-seconds", "nan"], ["--max-steps", "0"],
    ["--examples", "0"], ["--examples", "-1"], ["--timeout", "nan"], ["--timeout", "0"], ["--timeout", "-1"],
    ["--timeout", "inf"], ["--jobs", "0"], ["--jobs", "-3"], ["--min-batches", "0"], ["--examples", "x"],
])
def test_a_number_out_of_range_is_bad_input(argv, tmp_path, capsys):
    assert kvconform(RUN + ["--backend", "reference"] + argv + ["--report", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and argv[0] in err, err


def test_a_family_passes_only_on_its_minimum_even_with_no_budget(tmp_path, reference_adapter):
    """A budget spent before the first example does not make a PASS of nothing judged, nor a
    TIMEOUT of a correct backend: the minimum is judged, then no more examples are drawn."""
    result = generated(reference_adapter, tmp_path, budget_s=1e-6)
    assert result.verdict == Verdict.PASS and result.details["batches_checked"] >= 25, result.reason
    assert 0 < result.details["examples"] <= result.details["examples_after_budget"] <= 25


# --- 7. merge: only the shards of one run; incomplete is never CONFORMANT --------------------------------------

def _shards(tmp_path, prefix, *extra):
    common = RUN + ["--backend", "reference", "--no-generated", "--section", "PLAN"] + list(extra)
    for i in (1, 2):
        assert kvconform(common + ["--shard", f"{i}/2", "--report", str(tmp_path / f"{prefix}{i}")]) == 0


def test_an_incomplete_merge_never_prints_conformant(tmp_path, capsys):
    _shards(tmp_path, "s")
    capsys.readouterr()
    assert kvconform(["merge", str(tmp_path / "m"), str(tmp_path / "s1")]) == 1
    out = capsys.readouterr().out
    assert "INCOMPLETE" in out and "lacking shard(s) 2/2" in out and "PASSED" not in out
    doc = json.loads((tmp_path / "m" / "report.json").read_text())
    assert doc["complete"] is False and doc["summary"]["headline"] == "INCOMPLETE"
    assert doc["summary"]["conformant"] is False


@pytest.mark.parametrize("other, words", [
    (["--section", "MEDIA"], "different plans"),
    (["--seed", "7"], "different plans"),
])
def test_merge_refuses_reports_of_different_runs(tmp_path, capsys, other, words):
    _shards(tmp_path, "s")
    _shards(tmp_path, "o", *other)
    capsys.readouterr()
    assert kvconform(["merge", str(tmp_path / "m"), str(tmp_path / "s1"), str(tmp_path / "o2")]) == 2
    assert words in capsys.readouterr().err and not (tmp_path / "m").exists()


def test_merge_refuses_a_shard_with_an_unsharded_run(tmp_path, capsys):
    _shards(tmp_path, "s")
    assert kvconform(RUN + ["--backend", "reference", "--no-generated", "--section", "PLAN",
                            "--report", str(tmp_path / "whole")]) == 0
    capsys.readouterr()
    assert kvconform(["merge", str(tmp_path / "m"), str(tmp_path / "s1"), str(tmp_path / "whole")]) == 2
    assert "without --shard cannot be merged" in capsys.readouterr().err


def test_merge_refuses_another_backend(tmp_path, capsys, fake_backend):
    _shards(tmp_path, "s")
    assert kvconform(RUN + fake_backend + ["--no-generated", "--section", "PLAN", "--shard", "2/2",
                                           "--report", str(tmp_path / "c2")]) == 0
    capsys.readouterr()
    assert kvconform(["merge", str(tmp_path / "m"), str(tmp_path / "s1"), str(tmp_path / "c2")]) == 2
    assert "different backends" in capsys.readouterr().err


# --- 8. a slow backend that judges too few batches --------------------------------------------------------------

class OneFilePerProcess(ReferenceAdapter):
    """The oracle behind a one-file-per-process adapter whose every file takes 0.3 s."""
    sessions = False


def test_a_family_too_slow_for_its_budget_still_judges_its_minimum(tmp_path):
    import time
    adapter = OneFilePerProcess()
    manifest = adapter.capabilities()

    def slow(c):
        time.sleep(0.3)
        return run_case(c, adapter, manifest)
    result = run_generated("text", adapter, manifest, workdir=tmp_path, examples=300, budget_s=2, seed=0,
                           run_case_fn=slow)
    assert result.verdict == Verdict.PASS, result.reason
    assert result.details["batches_checked"] >= 25 and result.details["examples"] < 300


def test_whole_examples_count_their_batches(tmp_path):
    adapter = OneFilePerProcess()
    result = generated(adapter, tmp_path, examples=30, budget_s=60)
    assert result.verdict == Verdict.PASS, result.reason
    assert result.details["batches_checked"] >= 25


# --- bad input rows of `run` and `merge` --------------------------------------------------------------------------

@pytest.mark.parametrize("report", ["/proc/nope", "FILE/sub"])
def test_an_unusable_report_folder_is_bad_input(report, tmp_path, capsys):
    (tmp_path / "FILE").write_text("x")
    report = report.replace("FILE", str(tmp_path / "FILE"))
    assert kvconform(RUN + ["--backend", "reference", "--no-generated", "-k", "golden/plan", "--report", report]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_merge_into_an_unusable_folder_is_bad_input(tmp_path, capsys):
    _shards(tmp_path, "s")
    capsys.readouterr()
    assert kvconform(["merge", "/proc/nope", str(tmp_path / "s1"), str(tmp_path / "s2")]) == 2
    assert "/proc/nope" in capsys.readouterr().err


def test_bad_quoting_in_executable_is_bad_input(tmp_path, capsys):
    assert kvconform(RUN + ["--executable", "foo 'bar", "--engine-dir", str(tmp_path), "--no-generated",
                            "--report", str(tmp_path / "r")]) == 2
    assert "No closing quotation" in capsys.readouterr().err


def _copy_case(tmp_path, case_id, edit) -> Path:
    c = case(case_id)
    doc = json.loads(c.path.read_text())
    edit(doc)
    path = tmp_path / "case.json"
    path.write_text(json.dumps(doc))
    for media in c.path.parent.glob("*.png"):
        (tmp_path / media.name).write_bytes(media.read_bytes())
    return path


def test_a_case_with_a_missing_image_is_bad_input(tmp_path, capsys):
    def edit(doc):
        doc["requests"][0]["messages"][0]["content"][1]["image"] = "no-such-image.png"
    path = _copy_case(tmp_path, "sections/media/trim-split", edit)
    assert kvconform(RUN + ["--case", str(path), "--report", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "$.requests[0].messages[0].content[1].image" in err


def test_the_former_case_folder_still_names_the_cases(tmp_path, monkeypatch, capsys):
    """tests/test_cases, the path the design card and older scripts name, is a link to cases/: a
    case given by it runs with its media, and the report names it by its cases/ path."""
    from conformance.cases.case import CASES_DIR
    assert CASES_DIR == ROOT / "cases" and (ROOT / "tests" / "test_cases").resolve() == CASES_DIR
    monkeypatch.chdir(ROOT)
    assert kvconform(RUN + ["--backend", "reference", "--case", "tests/test_cases/sections/media/trim-split.json",
                            "--report", str(tmp_path / "r")]) == 0
    assert "SELF-CHECK PASSED" in capsys.readouterr().out
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    assert [c["source"] for c in doc["cases"]] == ["cases/sections/media/trim-split.json"]


def test_a_case_given_by_a_relative_path_finds_its_media(tmp_path, monkeypatch, capsys):
    """Media paths are relative to the case file; a relative --case path once joined them twice."""
    monkeypatch.chdir(ROOT)
    assert kvconform(RUN + ["--backend", "reference", "--case", "cases/sections/media/trim-split.json",
                            "--report", str(tmp_path / "r")]) == 0
    assert "SELF-CHECK PASSED" in capsys.readouterr().out


def test_a_case_citing_an_unknown_rule_is_bad_input(tmp_path, capsys):
    path = _copy_case(tmp_path, "sections/plan/boundary-p4-k1-exact",
                      lambda doc: doc["_conformance"]["rules"].append("CR-NOPE-1"))
    assert kvconform(RUN + ["--case", str(path), "--report", str(tmp_path / "r")]) == 2
    assert "unknown rule id 'CR-NOPE-1'" in capsys.readouterr().err


def test_a_command_adapter_that_fails_to_start_leaves_no_folder(tmp_path, monkeypatch):
    from conformance.adapters.command import CommandAdapter
    from conformance import KvconformError
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    bad = tmp_path / "caps.json"
    bad.write_text("{}")
    with pytest.raises(KvconformError):
        CommandAdapter("/bin/true", build_command="/bin/true", capabilities=str(bad))
    assert list(tmp_path.iterdir()) == [bad]


def test_the_broken_judging_adapter_is_error_where_logprobs_are_judged(tmp_path):
    """The selftest baseline's requirement, on one curated case and one family."""
    from conformance.adapters.broken import BrokenJudgingAdapter
    adapter = BrokenJudgingAdapter(device="cpu")
    result = run_case(case("sections/batch/shared-system-prompt"), adapter, adapter.capabilities())
    assert result.verdict == Verdict.ERROR, result.reason
    family = generated(adapter, tmp_path, examples=20, shrink=False)
    assert family.verdict == Verdict.ERROR, family.reason


class NoSessions(Adapter):
    """A manifest and nothing else: every generated example fails to build an engine."""
    def capabilities(self):
        return ReferenceAdapter().capabilities()

    def engine(self, build_args):
        raise ZeroDivisionError("a bug in the adapter")


def test_a_kit_bug_before_any_example_ran_is_error(tmp_path):
    result = generated(NoSessions(), tmp_path, examples=5)
    assert result.verdict == Verdict.ERROR and "ZeroDivisionError" in result.reason + result.stderr_tail
