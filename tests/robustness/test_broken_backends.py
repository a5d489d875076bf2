"""Broken backends through the `command` adapter.

tests/helpers/fake_llm_inference.py is the oracle behind the command contract of
spec/RUNNING.md section 2, misbehaving on request (its MODES). Every misbehaviour gives ERROR,
FAIL or TIMEOUT with a reason that says what happened, never PASS; a run over several cases,
each with its own misbehaviour, goes on to the end and reports every one.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from conformance.adapters.command import CommandAdapter
from conformance.cases.case import discover
from conformance.cli import main as kvconform
from conformance.run.execute import run_case
from conformance.judge.verdicts import Verdict
from tests.helpers import HELPERS, fake_llm_inference

ROOT = Path(__file__).resolve().parents[2]
FAKE = HELPERS / "fake_llm_inference.py"
MODES = fake_llm_inference.MODES

CASES = {c.id: c for c in discover()}
CASE = "sections/plan/boundary-p4-k2-exact"      # 3 requests, reuse on, --dumpProfile
E, F, T = Verdict.ERROR, Verdict.FAIL, Verdict.TIMEOUT

# mode: (verdict, words the reason must contain)
MATRIX = {
    "crash": (E, "killed by signal 6"), "segv": (E, "killed by signal 11"), "kill9": (E, "killed by signal 9"),
    "exit1_silent": (F, "refused (exit 1)"), "exit5_after_output": (F, "CR-CAP-8"),
    "exit0_no_output": (E, "exit 0 but no output file was written"), "exit2_valid": (F, "refused as bad input"),
    "sleep": (T, "no exit within 3 s"), "hang_after_output": (T, "no exit within 3 s"),
    "garbage": (E, "malformed output file"), "truncated": (E, "malformed output file"),
    "empty_output": (E, "malformed output file"), "not_object": (E, "malformed output file"),
    "invalid_utf8": (E, "not valid UTF-8"), "nan": (E, "NaN is not a JSON number"),
    "output_dir": (E, "is a directory"), "output_fifo": (E, "not a regular file"),
    "short": (E, "one response per request"), "extra": (E, "one response per request"),
    "reorder": (E, "file order"), "renumber": (E, "file order"), "finish_error": (F, "finish_reason"),
    "no_profile": (E, "no profile was written"), "profile_garbage": (E, "malformed profile file"),
    "profile_missing": (E, "missing required property 'hit_sequences'"),
    "counter_string": (E, "hit_sequences: expected integer"), "counter_bool": (E, "hit_sequences: expected integer"),
    "counter_float": (E, "hit_sequences: expected integer"), "counter_negative": (E, "hit_sequences: -1 violates"),
    "counter_null": (E, "hit_sequences: expected integer"), "miscount": (F, "hit_sequences"),
}
CONTROLS = ("ok", "orphan", "stderr_flood")      # misbehaving around a correct run: PASS is right


def test_the_matrix_covers_every_mode():
    assert set(MATRIX) | set(CONTROLS) == set(MODES)


@pytest.fixture
def adapter(tmp_path, monkeypatch, reference_manifest_file):
    monkeypatch.setenv("KVCONFORM_CACHE", str(tmp_path / "cache"))

    def make(mode: str, timeout: float = 60.0, build_mode: str = "ok") -> CommandAdapter:
        monkeypatch.setenv("KVCONFORM_FAKE_MODE", mode)
        monkeypatch.setenv("KVCONFORM_FAKE_BUILD_MODE", build_mode)
        return CommandAdapter(f"{sys.executable} {FAKE} infer", build_command=f"{sys.executable} {FAKE} build",
                              capabilities=reference_manifest_file, timeout=timeout, workdir=str(tmp_path / "work"))
    return make


@pytest.fixture(scope="session")
def reference_manifest_file(tmp_path_factory):
    from conformance.adapters import make_adapter
    path = tmp_path_factory.mktemp("caps") / "caps.json"
    path.write_text(json.dumps(make_adapter("reference").capabilities()))
    return str(path)


def _text(result) -> str:
    return " ".join([result.reason] + [f.line() for f in result.failures])


@pytest.mark.parametrize("mode", sorted(MATRIX))
def test_broken_backend_is_never_pass(adapter, mode):
    verdict, words = MATRIX[mode]
    a = adapter(mode, timeout=3 if mode in ("sleep", "hang_after_output") else 60)
    start = time.monotonic()
    result = run_case(CASES[CASE], a, a.capabilities())
    assert result.verdict == verdict, (mode, result.verdict, _text(result))
    assert words in _text(result), (mode, _text(result))
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("mode", CONTROLS)
def test_controls_pass_and_leave_nothing_behind(adapter, mode, tmp_path):
    """A correct run passes even when the backend floods stderr or leaves a child process; the
    child is killed with the backend's process group, and only a bounded tail of stderr is read."""
    result = run_case(CASES[CASE], adapter(mode), None or adapter(mode).capabilities())
    assert result.verdict == Verdict.PASS, _text(result)
    for pid_file in (tmp_path / "work").rglob("orphan.pid"):
        pid = int(pid_file.read_text())
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            pytest.fail(f"the backend's child {pid} outlived the case")


def test_stderr_tail_is_bounded(tmp_path):
    from conformance.adapters.command import TAIL_BYTES, run_process
    code = "import sys\nfor i in range(200000): sys.stderr.write(f'line {i}\\n')\nsys.exit(3)"
    rc, err = run_process([sys.executable, "-c", code], 60, str(tmp_path))
    assert rc == 3 and err.endswith("line 199999") and len(err) < TAIL_BYTES


@pytest.mark.parametrize("build_mode, words", [
    ("crash", "killed by signal 11"), ("sleep", "did not finish within 3 s"), ("exit1", "exited 1"),
    ("no_config", "engine is unusable"),
])
def test_broken_build_command_is_an_error_and_is_not_cached(adapter, build_mode, words):
    a = adapter("ok", timeout=3, build_mode=build_mode)
    result = run_case(CASES[CASE], a, a.capabilities())
    assert result.verdict == Verdict.ERROR and words in result.reason, result.reason
    fixed = adapter("ok")            # the same cache folder: the failed build left nothing behind
    assert run_case(CASES[CASE], fixed, fixed.capabilities()).verdict == Verdict.PASS


def test_a_run_over_many_broken_cases_goes_on(tmp_path, monkeypatch, reference_manifest_file, capsys):
    """One `kvconform run`, one misbehaviour per case: every case is reported, in the report and
    on the console, nothing passes but the control, and the exit code is 1."""
    ids = [CASE, "sections/plan/boundary-p4-k1-exact", "sections/plan/boundary-p8-k1-exact",
           "sections/pub/multi-turn-including", "sections/plan/one-page-rewind"]
    modes = dict(zip(ids, ["crash", "sleep", "garbage", "miscount", "ok"]))
    monkeypatch.setenv("KVCONFORM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KVCONFORM_FAKE_MODES", json.dumps(modes))
    argv = ["run", "--backend", "command", "--executable", f"{sys.executable} {FAKE} infer",
            "--build-command", f"{sys.executable} {FAKE} build", "--capabilities", reference_manifest_file,
            "--timeout", "3", "--no-progress", "--report", str(tmp_path / "rep")]
    for i in ids:
        argv += ["--case", str(CASES[i].path)]
    assert kvconform(argv) == 1
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    got = {c["id"]: c["verdict"] for c in doc["cases"]}
    assert got == {ids[0]: "ERROR", ids[1]: "TIMEOUT", ids[2]: "ERROR", ids[3]: "FAIL", ids[4]: "PASS"}, got
    assert doc["complete"] is True
    out = capsys.readouterr().out
    assert all(i in out for i in ids[:4]) and "NOT CONFORMANT" in out
