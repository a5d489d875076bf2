"""Nothing of the user's is ever deleted or mixed: `--force` empties only a folder a kit run
marked as its own (conformance/report/folder.py `MARKER`), and a report folder another command is
writing into is refused (its `LOCK`), for every command that writes one."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.cli import main as kvconform
from tests.robustness.test_interrupted_runs import IDS

ROOT = Path(__file__).resolve().parents[2]
MARKER, LOCK = ".kvconform-report", ".kvconform-lock"      # conformance/report/folder.py
ONE_CASE = ["--backend", "reference", "--no-generated", "--no-progress", "-k", "golden/plan-kinds-p4"]


def _users_folder(folder: Path) -> dict:
    """A folder with the names a report folder uses, written by its user (no kit run wrote it)."""
    (folder / "reproducers").mkdir(parents=True)
    (folder / "summary.md").write_text("mine")
    (folder / "reproducers" / "notes.txt").write_text("keep")
    return _contents(folder)


def _contents(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_text() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def _one_line(err: str) -> str:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_force_refuses_a_folder_no_kit_run_wrote_and_deletes_nothing(tmp_path, capsys):
    folder = tmp_path / "D"
    before = _users_folder(folder)
    assert kvconform(["run", *ONE_CASE, "--report", str(folder), "--force"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(folder) in line and MARKER in line and "nothing in it is removed" in line, line
    assert _contents(folder) == before, "nothing of the user's is removed, nothing is added"


@pytest.mark.parametrize("command", [
    ["merge", "{out}", "{shard}"],
    ["campaign", "--hours", "0.001", "--backend", "reference", "--families", "text", "--examples", "1",
     "--no-progress", "--report", "{out}"],
])
def test_every_command_that_writes_a_report_folder_keeps_the_rule(tmp_path, capsys, command):
    shard = tmp_path / "shard"
    assert kvconform(["run", *ONE_CASE, "--shard", "1/1", "--report", str(shard)]) == 0
    folder = tmp_path / "D"
    before = _users_folder(folder)
    argv = [a.format(out=folder, shard=shard) for a in command]
    capsys.readouterr()
    assert kvconform(argv + ["--force"]) == 2
    assert MARKER in _one_line(capsys.readouterr().err)
    assert _contents(folder) == before


def test_selftest_rewrites_only_a_folder_a_selftest_wrote(tmp_path, capsys):
    folder = tmp_path / "D"
    before = _users_folder(folder)
    argv = ["selftest", "--variant", "lora-not-in-key", "--no-baselines", "--jobs", "1", "--examples", "1",
            "--no-progress", "--report", str(folder)]
    assert kvconform(argv) == 2
    assert "choose another --report" in _one_line(capsys.readouterr().err)
    assert _contents(folder) == before


def test_force_on_a_kit_run_folder_replaces_its_outputs_only(tmp_path, capsys):
    folder = tmp_path / "rep"
    assert kvconform(["run", *ONE_CASE, "--report", str(folder)]) == 0
    marker = json.loads((folder / MARKER).read_text())
    assert marker["command"] == "run" and marker["run"] and marker["process"] == os.getpid()
    (folder / "notes.txt").write_text("mine")
    assert kvconform(["run", *ONE_CASE, "--report", str(folder), "--force"]) == 0
    assert (folder / "notes.txt").read_text() == "mine" and (folder / "report.json").is_file()
    assert json.loads((folder / MARKER).read_text())["run"] != marker["run"], "the marker names the new run"


def test_an_empty_folder_is_taken_and_bad_input_leaves_it_empty(tmp_path, capsys):
    folder = tmp_path / "empty"
    folder.mkdir()
    assert kvconform(["run", *ONE_CASE, "--report", str(folder), "--profile", "no-such-profile"]) == 2
    assert os.listdir(folder) == [], "an exit-2 run leaves no marker or lock behind"
    assert kvconform(["run", *ONE_CASE, "--report", str(folder)]) == 0


def test_a_second_run_into_a_folder_in_use_is_refused(tmp_path, capsys):
    """Two runs into one report folder at once: the second is refused with one line (exit 2), with
    or without --force, and the first run's folder is untouched; once the first ends, --force
    replaces it."""
    from conformance.adapters import make_adapter
    from conformance.cases.case import discover
    cases = {c.id: c for c in discover()}
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps(make_adapter("reference").capabilities()))
    folder = tmp_path / "rep"
    env = dict(os.environ, KVCONFORM_CACHE=str(tmp_path / "cache"), KVCONFORM_FAKE_MODES=json.dumps({IDS[1]: "sleep"}),
               PYTHONPATH=str(ROOT))
    fake = ROOT / "tests" / "helpers" / "fake_llm_inference.py"
    first = subprocess.Popen([sys.executable, "-m", "conformance.cli", "run", "--backend", "command",
                              "--executable", f"{sys.executable} {fake} infer",
                              "--build-command", f"{sys.executable} {fake} build", "--capabilities", str(caps),
                              "--timeout", "300", "--no-progress", "--report", str(folder),
                              "--case", str(cases[IDS[0]].path), "--case", str(cases[IDS[1]].path)],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (folder / "report.json").exists():            # the first case is in, the second hangs
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.1)
        before = _contents(folder)
        for extra in ([], ["--force"]):
            assert kvconform(["run", *ONE_CASE, "--report", str(folder), *extra]) == 2
            line = _one_line(capsys.readouterr().err)
            assert "another kvconform command is writing into this report folder" in line, line
            assert f"process {first.pid}" in line, line
        assert kvconform(["report", str(folder)]) == 2          # nor is its page rewritten meanwhile
        assert "another kvconform command" in _one_line(capsys.readouterr().err)
        assert _contents(folder) == before
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert kvconform(["run", *ONE_CASE, "--report", str(folder), "--force"]) == 0
    assert json.loads((folder / "report.json").read_text())["backend"]["adapter"] == "reference"
    assert (folder / LOCK).exists()
