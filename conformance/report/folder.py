"""The report folder itself (spec/RUNNING.md section 7): claimed before a run, every file written
atomically with the known secrets masked, reproducers and the failing invocations' files.

A report folder that exists is never replaced without `--force`; a run that ends with bad input
before writing anything removes the folders it created. A reader, a kill -9 or a power cut sees
each file whole: the old one or the new one.
"""
from __future__ import annotations

import copy
import datetime
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from .. import KvconformError
from ..adapters.secrets import mask

OUTPUTS = ("report.json", "junit.xml", "summary.md", "report.html", "reproducers", "materialized")


def make_folder(folder: Path) -> None:
    """Create a folder the kit writes into; an unusable path is bad input, not a traceback."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise KvconformError(f"cannot create the folder: {e.strerror or e}", str(folder)) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise KvconformError("the folder is not writable", str(folder))


CREATED: list[Path] = []
"""Report folders this process created (with the parents it created), newest last: a run that
ends with bad input before writing anything removes them again (`remove_created_folders`)."""

MARKER = ".kvconform-report"
"""The file that names the run which wrote a report folder (JSON: command, run id, process,
start time). `--force` removes files only from a folder that holds it: a folder no kit run wrote
is never emptied, whatever its files are called."""

LOCK = ".kvconform-lock"
"""Locked (flock) by the command writing the folder, for as long as it runs: a second command
into the same folder is refused instead of writing between the first one's files."""

_OWN = (MARKER, LOCK)
_HELD: dict[Path, int] = {}          # folder -> the descriptor of the lock this process holds
_MARKED: list[Path] = []             # folders this command wrote a marker into


def remove_created_folders() -> None:
    """Undo a command that ended with bad input before it wrote anything: the marker and lock files
    it wrote into a folder that holds nothing else, and the folders it created that are empty
    again. A folder something was written into is kept."""
    for folder in _MARKED:
        try:
            if not [n for n in os.listdir(folder) if n not in _OWN]:
                (folder / MARKER).unlink(missing_ok=True)
                _release(folder)
                (folder / LOCK).unlink(missing_ok=True)
        except OSError:
            pass
    release_report_folders()
    while CREATED:
        folder = CREATED.pop()
        try:
            folder.rmdir()
        except OSError:
            pass


def release_report_folders() -> None:
    """Unlock every report folder this process claimed (the command that claimed it ended)."""
    for folder in list(_HELD):
        _release(folder)
    _MARKED.clear()


def _release(folder: Path) -> None:
    fd = _HELD.pop(folder, None)
    if fd is not None:
        os.close(fd)          # closing the descriptor drops its flock


def _foreign(folder: Path) -> list[str]:
    """The names in `folder` other than the kit's own marker and lock."""
    try:
        return sorted(n for n in os.listdir(folder) if n not in _OWN)
    except OSError as e:
        raise KvconformError(f"cannot list the folder: {e.strerror or e}", str(folder)) from None


def _marker(folder: Path) -> dict | None:
    """The marker of a kit run, or None when the folder has none (or something else by its name)."""
    try:
        doc = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("format") == "kvconform-report-folder-v1" else None


def _lock(folder: Path, command: str) -> None:
    """Hold the folder's lock until the command ends; refused (one line) while another holds it."""
    if folder in _HELD:
        return
    path = folder / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise KvconformError(f"cannot create the lock file: {e.strerror or e}", str(path)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        try:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
        finally:
            os.close(fd)
        raise KvconformError(f"another kvconform command is writing into this report folder ({holder}); "
                             "wait for it to end or choose another folder", str(folder)) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"kvconform {command}, process {os.getpid()}\n".encode(), 0)
    _HELD[folder] = fd


def claim_report_folder(folder: Path, force: bool,
                        hint: str = "pass --force to replace it or --resume to continue an interrupted run",
                        *, command: str = "run", outputs: tuple = OUTPUTS, resume: bool = False) -> None:
    """Claim a report folder for one command: locked against a second command writing into it
    (LOCK), and marked as a kit run's (MARKER).

    A folder that exists and holds anything is refused unless `force` or `resume`. `force`
    removes the previous run's `outputs`, and only from a folder a kit run marked: a folder
    without the marker is refused, so that nothing of the user's is ever deleted. Every check
    is made again once the lock is held (two commands may start at the same moment)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise KvconformError("exists and is not a folder", str(folder))
    if not folder.exists():
        missing = [p for p in [folder, *folder.parents] if not p.exists()]
        make_folder(folder)          # checked now, before any case runs
        CREATED.extend(reversed(missing))
    else:
        make_folder(folder)
    if not resume and _foreign(folder) and _marker(folder) is None:
        _refuse(folder, force, hint)           # no kit run wrote it: refused before a lock file is made
    _lock(folder, command)
    if not resume and _foreign(folder):        # checked again under the lock: one more run may have started
        _refuse(folder, force, hint)
    if force and not resume:
        for name in outputs:
            path = folder / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
        for stale in folder.glob(".report.json.*.tmp"):
            stale.unlink()
    write_json_atomic(folder / MARKER, {"format": "kvconform-report-folder-v1", "command": command,
                                        "run": uuid.uuid4().hex, "process": os.getpid(), "started": _now()})
    _MARKED.append(folder)


def marked_by(folder: Path) -> str | None:
    """The command whose run wrote `folder` (its marker), or None."""
    marker = _marker(Path(folder))
    return marker.get("command") if marker else None


def _refuse(folder: Path, force: bool, hint: str) -> None:
    """A folder that holds something: without `force` refused; with it, refused unless a kit run
    marked it (then the caller removes that run's outputs)."""
    if not force:
        raise KvconformError(f"the report folder exists; {hint}", str(folder))
    if _marker(folder) is None:
        raise KvconformError(f"--force: no kvconform run wrote this folder (it has no {MARKER} file), so "
                             "nothing in it is removed; choose another report folder or empty it yourself",
                             str(folder))


def lock_report_folder(folder: Path, command: str) -> None:
    """Lock an existing report folder for a command that rewrites some of its files (`kvconform
    report`), so that it never writes while a run is writing."""
    _lock(Path(folder), command)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: Path, doc: dict, *, compact: bool = False) -> None:
    """Write a temporary file in the same folder, flush it to disk, then rename it over `path`:
    a reader, a kill -9 or a power cut sees the old file or the new one, never half of one."""
    write_text_atomic(path, json.dumps(doc, indent=None if compact else 1, default=str) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Every file of the report folder goes through here: the secrets the kit knows are masked
    (conformance/adapters/secrets.py). A write that fails (a full disk, a quota, a folder made
    read-only) is bad input of the run's environment: one line naming the file (KvconformError,
    exit 2), the temporary file removed, the previous file whole."""
    write_bytes_atomic(Path(path), mask(text).encode("utf-8"))


_UMASK = os.umask(0o022)
os.umask(_UMASK)        # read once, at import (single-threaded): os.umask cannot be read without setting it


def readable_by_umask(fd: int) -> None:
    """A temporary file is created 0600; the file it becomes is 0666 less the umask, as `open`
    would make it (0644 usually): a CI artifact server reading as another user can read it."""
    os.fchmod(fd, 0o666 & ~_UMASK)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a temporary file beside `path`, fsync it, rename it over `path` (see write_text_atomic)."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        readable_by_umask(fd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        _discard(tmp)
        raise KvconformError(f"cannot write: {e.strerror or e}; the report folder keeps its last complete files",
                             str(path)) from None
    except BaseException:
        _discard(tmp)
        raise


def _discard(tmp: str | None) -> None:
    if tmp is not None:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _copy_atomic(src, target: Path) -> None:
    """A copy that is whole or absent (the source is read whole: media and evidence files are
    bounded by the input bounds, spec/RUNNING.md section 8)."""
    try:
        data = Path(src).read_bytes()
    except OSError as e:
        raise KvconformError(f"cannot read: {e.strerror or e}", str(src)) from None
    write_bytes_atomic(target, data)


def _make_dirs(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise KvconformError(f"cannot create the folder: {e.strerror or e}", str(folder)) from None


def write_reproducer(doc: dict, base_dir: str, folder: Path, name: str) -> Path:
    """Write a standalone case file: media copied beside it under media/, paths made relative.

    The file runs alone with `kvconform run --case FILE` and fails the same way.
    """
    _make_dirs(folder)
    out = copy.deepcopy(doc)
    for request in out.get("requests", []) if isinstance(out.get("requests"), list) else []:
        for message in request.get("messages", []) if isinstance(request, dict) else []:
            content = message.get("content") if isinstance(message, dict) else None
            for item in content if isinstance(content, list) else []:
                kind = item.get("type") if isinstance(item, dict) else None
                if kind in ("image", "audio") and isinstance(item.get(kind), str) and item[kind]:
                    src = Path(item[kind]) if os.path.isabs(item[kind]) else Path(base_dir) / item[kind]
                    if src.is_file():
                        data = src.read_bytes()
                        target = folder / "media" / f"{hashlib.sha256(data).hexdigest()[:10]}-{src.name}"
                        _make_dirs(target.parent)
                        if not target.exists():
                            write_bytes_atomic(target, data)
                        item[kind] = f"media/{target.name}"
    path = folder / f"{safe_name(name)}.json"
    write_text_atomic(path, json.dumps(out, indent=1) + "\n")
    return path


def safe_name(name: str) -> str:
    """A case id as a file name: anything but letters, digits, `-`, `_` and `.` becomes `_`."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


EVIDENCE_SUFFIX = ".files"
"""A reproducer `NAME.json` keeps its failing invocations' files in the folder `NAME.files/`."""


def write_evidence(invocations: list, folder: Path) -> None:
    """Keep what each backend invocation of a failing case saw and wrote: the request file, the
    output and profile files (byte for byte when the backend wrote files, else as JSON), the
    tail of stderr, and a summary with the outcome, exit code and command line.

    Files are numbered in invocation order: `1-run.request.json`, `2-bypass-replay.output.json`...
    """
    _make_dirs(folder)
    for k, (label, got) in enumerate(invocations, 1):
        stem = folder / f"{k}-{safe_name(label.replace(' ', '-'))}"
        copied = set()
        for role, path in got.files.items():
            suffix = ".txt" if role == "stderr" else ".json"
            if role != "command" and os.path.isfile(path):
                _copy_atomic(path, Path(f"{stem}.{role}{suffix}"))
                copied.add(role)
        written = {"request": got.request, "output": None if got.responses is None else {"responses": got.responses},
                   "profile": got.profile}
        for role, doc in written.items():
            if role not in copied and doc is not None:
                write_text_atomic(Path(f"{stem}.{role}.json"), json.dumps(doc, indent=1, default=str) + "\n")
        if "stderr" not in copied and got.stderr_tail:
            write_text_atomic(Path(f"{stem}.stderr.txt"), got.stderr_tail + "\n")
        summary = {"invocation": label, "outcome": got.outcome, "exit_code": got.exit_code,
                   "message": got.message, "command": got.files.get("command")}
        write_text_atomic(Path(f"{stem}.summary.json"), json.dumps(summary, indent=1) + "\n")
