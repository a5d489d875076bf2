"""A full disk is one line and exit 2, never a traceback, and leaves nothing half-written: during
`kvconform run` (it was a traceback with exit 1, NOT CONFORMANT's code) and for `kvconform
describe --output` (it left a 0-byte file).

Where this machine lets a test mount a small tmpfs in a private mount namespace (`unshare -m`, as
root), the disk really fills up; elsewhere, and always for the run, `os.fsync` is made to fail
with ENOSPC part-way through the run."""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli import main as kvconform
from tests.conformance.test_describe import engine_folder, qwen3_config

ROOT = Path(__file__).resolve().parents[2]
RUN = ["run", "--backend", "reference", "--no-generated", "--no-progress", "--section", "PLAN"]


def _whole(folder: Path) -> list[str]:
    """What is not whole in `folder`: temporary files, JSON files that do not parse, empty files."""
    bad = []
    for p in sorted(folder.rglob("*")):
        if not p.is_file():
            continue
        if p.name.endswith(".tmp") or p.name.startswith(".kvconform-") and p.suffix == ".json":
            bad.append(f"{p}: a temporary file left behind")
        elif p.stat().st_size == 0 and p.name != ".kvconform-lock":
            bad.append(f"{p}: empty")
        elif p.suffix == ".json" or p.name == ".kvconform-report":
            try:
                json.loads(p.read_text())
            except ValueError:
                bad.append(f"{p}: half-written JSON")
    return bad


def test_a_disk_that_fills_during_a_run_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    calls = []
    real = os.fsync

    def fsync(fd):
        calls.append(fd)
        if len(calls) > 4:                 # the marker and a few cases are in; then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    folder = tmp_path / "rep"
    assert kvconform(RUN + ["--report", str(folder)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("kvconform run:")]
    assert "Traceback" not in err and len(lines) == 1, err
    assert "No space left on device" in lines[0] and str(folder) in lines[0], err
    assert not _whole(folder), _whole(folder)
    doc = json.loads((folder / "report.json").read_text())
    assert doc["complete"] is False and 0 < len(doc["cases"]), "the last report written is whole"


def _namespaces_work() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    try:
        return subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


NEEDS_TMPFS = pytest.mark.skipif(not _namespaces_work(), reason="cannot mount a tmpfs in a private namespace here")

_IN_TMPFS = r"""
import json, os, subprocess, sys
mnt, size, fill = sys.argv[1], sys.argv[2], int(sys.argv[3])
subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mnt], check=True)
if fill:                                          # leave the disk (almost) full
    fd = os.open(os.path.join(mnt, "filler"), os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError:
        os.close(fd)
p = subprocess.run([sys.executable, "-m", "conformance.cli", *sys.argv[4:]], capture_output=True, text=True)
files = {}
for root, _, names in os.walk(mnt):
    for n in names:
        path = os.path.join(root, n)
        if n != "filler":
            files[os.path.relpath(path, mnt)] = open(path, "rb").read().decode("utf-8", "replace")
print(json.dumps({"rc": p.returncode, "err": p.stderr, "files": files}))
"""


def _in_small_tmpfs(tmp_path: Path, size: str, fill: bool, argv: list[str]) -> dict:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    p = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", _IN_TMPFS, str(mnt), size,
                        "1" if fill else "0", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


@NEEDS_TMPFS
def test_a_run_on_a_small_tmpfs_fills_it_and_ends_in_one_line(tmp_path):
    got = _in_small_tmpfs(tmp_path, "96k", False, RUN + ["--report", str(tmp_path / "disk" / "rep")])
    lines = [line for line in got["err"].splitlines() if line.strip() and not line.startswith("kvconform run:")]
    assert got["rc"] == 2 and len(lines) == 1 and "No space left on device" in lines[0], got["err"][-3000:]
    assert "Traceback" not in got["err"]
    for name, text in got["files"].items():
        assert not name.endswith(".tmp"), f"{name}: a temporary file left behind"
        if name.endswith(".json"):
            json.loads(text)                       # whole: the old version or the new one


@NEEDS_TMPFS
def test_describe_on_a_full_disk_leaves_no_empty_file(tmp_path):
    folder = engine_folder(tmp_path, qwen3_config())
    out = tmp_path / "disk" / "described.json"
    got = _in_small_tmpfs(tmp_path, "64k", True, ["describe", "--engine-dir", str(folder), "--output", str(out)])
    lines = [line for line in got["err"].splitlines() if line.strip() and not line.startswith("kvconform: note:")]
    assert got["rc"] == 2 and len(lines) == 1 and "No space left on device" in lines[0], got["err"][-3000:]
    assert got["files"] == {}, f"left behind: {list(got['files'])}"


def test_describe_whose_write_fails_leaves_nothing(tmp_path, capsys, monkeypatch):
    folder = engine_folder(tmp_path, qwen3_config())
    out = tmp_path / "described.json"

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full)
    assert kvconform(["describe", "--engine-dir", str(folder), "--output", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("kvconform: note:")]
    assert len(err) == 1 and "No space left on device" in err[0], err
    assert not out.exists() and not list(tmp_path.glob(".kvconform-*")), list(tmp_path.iterdir())
