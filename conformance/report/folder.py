"""The report folder itself (spec/RUNNING.md section 7): claimed before a run, every file written
atomically with the known secrets masked, reproducers and the failing invocations' files.

A report folder that exists is never replaced without `--force`; a run that ends with bad input
before writing anything removes the folders it created. A reader, a kill -9 or a power cut sees
each file whole: the old one or the new one.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import tempfile
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


def remove_created_folders() -> None:
    """Remove the folders this process created that are still empty: an exit-2 run leaves nothing
    behind. A folder something was written into is kept."""
    while CREATED:
        folder = CREATED.pop()
        try:
            folder.rmdir()
        except OSError:
            pass


def claim_report_folder(folder: Path, force: bool,
                        hint: str = "pass --force to replace it or --resume to continue an interrupted run") -> None:
    """A report folder is never overwritten by accident: one that exists and is not empty is
    refused unless `force`, which removes the previous run's files (and only those)."""
    if folder.exists() and not folder.is_dir():
        raise KvconformError("exists and is not a folder", str(folder))
    if not folder.exists():
        missing = [p for p in [folder, *folder.parents] if not p.exists()]
        make_folder(folder)          # checked now, before any case runs
        CREATED.extend(reversed(missing))
        return
    if not any(folder.iterdir()):
        make_folder(folder)
        return
    if not force:
        raise KvconformError(f"the report folder exists; {hint}", str(folder))
    for name in OUTPUTS:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    for stale in folder.glob(".report.json.*.tmp"):
        stale.unlink()


def write_json_atomic(path: Path, doc: dict, *, compact: bool = False) -> None:
    """Write a temporary file in the same folder, flush it to disk, then rename it over `path`:
    a reader, a kill -9 or a power cut sees the old file or the new one, never half of one."""
    write_text_atomic(path, json.dumps(doc, indent=None if compact else 1, default=str) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Every file of the report folder goes through here: the secrets the kit knows are masked
    (conformance/adapters/secrets.py)."""
    text = mask(text)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_reproducer(doc: dict, base_dir: str, folder: Path, name: str) -> Path:
    """Write a standalone case file: media copied beside it under media/, paths made relative.

    The file runs alone with `kvconform run --case FILE` and fails the same way.
    """
    folder.mkdir(parents=True, exist_ok=True)
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
                        target.parent.mkdir(exist_ok=True)
                        if not target.exists():
                            shutil.copyfile(src, target)
                        item[kind] = f"media/{target.name}"
    path = folder / f"{safe_name(name)}.json"
    path.write_text(mask(json.dumps(out, indent=1) + "\n"))
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
    folder.mkdir(parents=True, exist_ok=True)
    for k, (label, got) in enumerate(invocations, 1):
        stem = folder / f"{k}-{safe_name(label.replace(' ', '-'))}"
        copied = set()
        for role, path in got.files.items():
            suffix = ".txt" if role == "stderr" else ".json"
            if role != "command" and os.path.isfile(path):
                shutil.copyfile(path, f"{stem}.{role}{suffix}")
                copied.add(role)
        written = {"request": got.request, "output": None if got.responses is None else {"responses": got.responses},
                   "profile": got.profile}
        for role, doc in written.items():
            if role not in copied and doc is not None:
                Path(f"{stem}.{role}.json").write_text(mask(json.dumps(doc, indent=1, default=str) + "\n"))
        if "stderr" not in copied and got.stderr_tail:
            Path(f"{stem}.stderr.txt").write_text(mask(got.stderr_tail + "\n"))
        summary = {"invocation": label, "outcome": got.outcome, "exit_code": got.exit_code,
                   "message": got.message, "command": got.files.get("command")}
        Path(f"{stem}.summary.json").write_text(mask(json.dumps(summary, indent=1) + "\n"))
