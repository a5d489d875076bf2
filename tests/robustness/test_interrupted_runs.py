"""Interrupted runs: Ctrl-C, SIGTERM or kill -9 during `kvconform run`
leave a valid report.json of the cases finished so far, marked `"complete": false` (written
atomically after every case); `--resume` continues it, running only what is missing; a report
folder is never overwritten without `--force`.

The subprocess tests drive the command adapter with the fake backend: the third case hangs,
so the run is caught in the middle; the signal arrives once two cases are in the report.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conformance.adapters.reference import ReferenceAdapter
from conformance.cases.case import discover
from conformance.cli import main as kvconform
from conformance.report.document import check_report
from tests.helpers import HELPERS

ROOT = Path(__file__).resolve().parents[2]
FAKE = HELPERS / "fake_llm_inference.py"
CASES = {c.id: c for c in discover()}
IDS = ["sections/plan/boundary-p4-k1-exact", "sections/plan/boundary-p4-k1-minus1",
       "sections/plan/boundary-p4-k1-plus1", "sections/plan/boundary-p4-k2-exact"]   # run in this (id) order


def _report(folder: Path) -> dict:
    doc = json.loads((folder / "report.json").read_text())
    assert not check_report(doc), check_report(doc)
    return doc


@pytest.fixture
def fake_run(tmp_path, monkeypatch):
    """argv of a `kvconform run` over IDS through the fake backend, and its environment."""
    from conformance.adapters import make_adapter
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps(make_adapter("reference").capabilities()))
    env = dict(os.environ, KVCONFORM_CACHE=str(tmp_path / "cache"), KVCONFORM_FAKE_LOG=str(tmp_path / "ran.log"),
               KVCONFORM_FAKE_MODES=json.dumps({IDS[2]: "sleep"}), PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "conformance.cli", "run", "--backend", "command",
            "--executable", f"{sys.executable} {FAKE} infer", "--build-command", f"{sys.executable} {FAKE} build",
            "--capabilities", str(caps), "--timeout", "300", "--no-progress", "--report", str(tmp_path / "rep")]
    for i in IDS:
        argv += ["--case", str(CASES[i].path)]
    return argv, env


def _start_and_interrupt(argv, env, sig, folder: Path) -> subprocess.CompletedProcess:
    # SIGINT is ignored by background jobs of a non-interactive shell; give the child the default.
    p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if len(json.loads((folder / "report.json").read_text())["cases"]) >= 2:
                break
        except (OSError, ValueError):
            pass
        if p.poll() is not None:
            pytest.fail(f"the run ended early: {p.communicate()}")
        time.sleep(0.1)
    else:
        p.kill()
        pytest.fail("the run never recorded two cases")
    log = folder.parent / "ran.log"       # the fake backend logs each case as it starts
    while IDS[2] not in (log.read_text() if log.exists() else ""):
        if time.monotonic() > deadline or p.poll() is not None:
            p.kill()
            pytest.fail(f"the third (hanging) case never started: {p.communicate()}")
        time.sleep(0.1)
    time.sleep(0.2)                       # inside the third case, whatever the machine's load
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_interrupted_run_leaves_a_partial_report_that_resume_completes(fake_run, tmp_path, sig):
    argv, env = fake_run
    folder = tmp_path / "rep"
    got = _start_and_interrupt(argv, env, sig, folder)
    assert got.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 128 + sig), got.stderr
    doc = _report(folder)
    assert doc["complete"] is False and doc["finished"] is None
    assert [c["id"] for c in doc["cases"]] == IDS[:2] and all(c["verdict"] == "PASS" for c in doc["cases"])
    if sig != signal.SIGKILL:
        assert "Traceback" not in got.stderr and "--resume" in got.stderr and signal.Signals(sig).name in got.stderr
        assert "complete: False" in (folder / "summary.md").read_text()
    # the hanging backend died with the run (its own process group, killed on the way out); a
    # kill -9 gives the kit no way out, so there the test cleans up after it
    left = _backends_of(tmp_path)
    if sig == signal.SIGKILL:
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    else:
        assert not left, f"backend processes outlived the run: {left}"
    ran = (tmp_path / "ran.log").read_text().split()
    assert list(dict.fromkeys(ran)) == IDS[:3]
    # a plain second run refuses the folder; --resume runs only the missing cases
    again = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "--force" in again.stderr and "--resume" in again.stderr
    env = dict(env, KVCONFORM_FAKE_MODES="{}")
    resumed = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--resume", "--no-progress",
                              "--report", str(folder)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    doc = _report(folder)
    assert doc["complete"] is True and sorted(c["id"] for c in doc["cases"]) == IDS
    assert doc["summary"]["verdicts"]["PASS"] == 4 and len(doc["options"]["resumed"]) == 1
    after = (tmp_path / "ran.log").read_text().split()[len(ran):]
    assert set(after) == set(IDS[2:]), f"finished cases ran again: {after}"
    assert not list(folder.glob(".report.json.*"))


def _backends_of(tmp_path) -> list[int]:
    """Fake backend processes started for this test (their command line names its engine cache)."""
    time.sleep(0.3)
    out = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if proc.name.isdigit() and str(FAKE) in cmd and str(tmp_path) in cmd and " infer" in cmd.replace("\0", " "):
            out.append(int(proc.name))
    return out


def _reference_run(tmp_path, *extra) -> int:
    return kvconform(["run", "--backend", "reference", "--no-generated", "--no-progress", "-k", "boundary-p4-k1",
                      "--report", str(tmp_path / "rep"), *extra])


def test_report_folder_needs_force(tmp_path, capsys):
    assert _reference_run(tmp_path) == 0
    capsys.readouterr()
    (tmp_path / "rep" / "reproducers").mkdir()
    (tmp_path / "rep" / "reproducers" / "old.json").write_text("{}")
    (tmp_path / "rep" / "notes.txt").write_text("mine")
    assert _reference_run(tmp_path) == 2
    err = capsys.readouterr().err
    assert "the report folder exists" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert _reference_run(tmp_path, "--force") == 0
    assert not (tmp_path / "rep" / "reproducers").exists(), "--force removes the previous run's outputs"
    assert (tmp_path / "rep" / "notes.txt").read_text() == "mine", "--force removes nothing else"
    (tmp_path / "file").write_text("x")
    assert kvconform(["run", "--backend", "reference", "--no-progress", "--report", str(tmp_path / "file")]) == 2


def test_resume_refusals(tmp_path, capsys):
    assert _reference_run(tmp_path, "--resume") == 2                       # nothing to resume
    assert "file not found" in capsys.readouterr().err
    assert _reference_run(tmp_path) == 0
    assert _reference_run(tmp_path, "--resume") == 2                       # complete already
    assert "nothing to resume" in capsys.readouterr().err
    doc = _report(tmp_path / "rep")
    (tmp_path / "rep" / "report.json").write_text(json.dumps(dict(doc, complete=False)))
    code = kvconform(["run", "--resume", "--backend", "reference", "--seed", "7", "--report", str(tmp_path / "rep")])
    assert code == 2 and "ran with --seed 0" in capsys.readouterr().err       # a different run
    (tmp_path / "rep" / "report.json").write_text('{"format": "kvconform-report-v1"}')
    assert _reference_run(tmp_path, "--resume") == 2
    assert "invalid report" in capsys.readouterr().err
    assert _reference_run(tmp_path, "--resume", "--force") == 2             # exclusive flags: one line
    assert "not allowed with argument --resume" in capsys.readouterr().err


def test_ctrl_c_with_jobs_does_not_run_the_queued_cases(tmp_path, monkeypatch, capsys):
    """With --jobs, Ctrl-C stops at once: the queued cases are cancelled (Executor.map cancels its
    futures when the loop over its results is interrupted), not run before the report is written."""
    import conformance.commands.run as run_command
    started = []

    class Interrupting(ReferenceAdapter):
        def start(self, engine, runtime):
            started.append(1)
            if len(started) == 3:
                # what Ctrl-C does: SIGINT delivered to the main thread, blocked waiting for results
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            if len(started) >= 3:
                time.sleep(0.3)                     # a slow backend from here on
            return super().start(engine, runtime)
    monkeypatch.setattr(run_command, "make_adapter", lambda *a, **k: Interrupting())
    code = kvconform(["run", "--backend", "reference", "--no-generated", "--no-progress", "--section", "PLAN",
                      "--jobs", "2", "--report", str(tmp_path / "rep")])
    assert code == 130
    doc = _report(tmp_path / "rep")
    assert doc["complete"] is False and len(doc["cases"]) <= 2
    time.sleep(1.0)                                 # let the in-flight cases end
    assert len(started) <= 6, f"{len(started)} invocations: queued cases ran after Ctrl-C"


class _InterruptsWhenCollected:
    """An object whose finalizer receives a Ctrl-C: Python runs the handler there, and the
    exception it raises is printed as "Exception ignored" and dropped (as in a garbage-collector
    callback of Hypothesis's, where a campaign once lost its Ctrl-C and ran on)."""

    def __del__(self):
        signal.raise_signal(signal.SIGINT)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")      # the swallowed exception
def test_a_ctrl_c_that_a_finalizer_swallowed_still_stops_the_run(tmp_path, monkeypatch):
    import conformance.commands.run as run_command
    started = []

    class Interrupting(ReferenceAdapter):
        def start(self, engine, runtime):
            started.append(1)
            if len(started) == 3:
                _InterruptsWhenCollected()          # collected at once: the KeyboardInterrupt is lost
            return super().start(engine, runtime)
    monkeypatch.setattr(run_command, "make_adapter", lambda *a, **k: Interrupting())
    code = kvconform(["run", "--backend", "reference", "--no-generated", "--no-progress", "--section", "PLAN",
                      "--report", str(tmp_path / "rep")])
    assert code == 130, f"the run went on after Ctrl-C: {len(started)} invocations"
    doc = _report(tmp_path / "rep")
    assert doc["complete"] is False and len(doc["cases"]) <= 3


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_signals_are_handled_only_inside_a_command():
    from conformance.run import interrupts
    before = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
    with interrupts.handled():
        with pytest.raises(interrupts.Interrupted) as caught:
            _InterruptsWhenCollected()
            interrupts.raise_pending()
        assert caught.value.signum == signal.SIGINT
        with interrupts.handled():                  # nested: nothing changes
            pass
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
    assert {s: signal.getsignal(s) for s in interrupts.SIGNALS} == before
    interrupts.raise_pending()                      # the received signal is forgotten with the block
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # a background job's ignored Ctrl-C stays ignored
    try:
        with interrupts.handled():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before[signal.SIGINT])


def test_partial_report_is_always_valid_json(tmp_path):
    """Every write is a whole file: readers polling report.json never see half of one."""
    from conformance.report.folder import write_json_atomic
    path = tmp_path / "report.json"
    write_json_atomic(path, {"cases": []})
    stop, bad = threading.Event(), []

    def reader():
        while not stop.is_set():
            try:
                json.loads(path.read_text())
            except ValueError as e:
                bad.append(e)
    t = threading.Thread(target=reader)
    t.start()
    for i in range(300):
        write_json_atomic(path, {"cases": [{"id": str(k), "pad": "x" * 2000} for k in range(i % 40)]})
    stop.set()
    t.join()
    assert not bad and not list(tmp_path.glob(".report.json.*"))
