"""Calling the three command lines in-process and judging what they did with bad input.

In-process calls are ~100x cheaper than subprocesses, which is what makes a fuzz budget of
hundreds of files per target fit in seconds. An exception escaping `main` is exactly what a
user would have seen as a traceback, so it is recorded as one (the check fails on it).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import traceback
from dataclasses import dataclass

from conformance.cli import main as kvconform_main
from conformance.cases.schemas import schema_errors
from gpu_backend.cli import main as backend_main


@dataclass
class Outcome:
    rc: int | None           # None: an exception escaped main (a traceback)
    out: str
    err: str
    crash: str = ""          # the traceback, if any

    def lines(self) -> list[str]:
        """stderr lines, without the warnings about ignored keys (spec/RUNNING.md section 8)."""
        return [line for line in self.err.splitlines() if line.strip() and not WARNING.match(line)]

    def warnings(self) -> list[str]:
        return [line for line in self.err.splitlines() if WARNING.match(line)]


# `kvconform: warning: FILE: $.path: unknown key ignored (...)`, one per ignored key
WARNING = re.compile(r"^(kvconform|gpu_backend): warning: .+: \$.*: (unknown key ignored( \(.+\))?"
                     r"|\.\.\. and [\d,]+ more unknown keys ignored)$")


def _call(fn, argv) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    crash, rc = "", None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = fn(argv)
        except SystemExit as e:      # argparse usage errors
            rc = e.code if isinstance(e.code, int) else 2
        except BaseException:       # noqa: BLE001 - this is what the user would see as a traceback
            crash = traceback.format_exc()
    return Outcome(rc, out.getvalue(), err.getvalue(), crash)


def kvconform(argv: list[str]) -> Outcome:
    return _call(kvconform_main, argv)


def backend(argv: list[str]) -> Outcome:
    return _call(backend_main, argv)


class Bad(AssertionError):
    pass


def _no_traceback(o: Outcome, what: str) -> None:
    if o.crash or "Traceback (most recent call last)" in o.err + o.out:
        raise Bad(f"{what}: traceback\n{o.crash or o.err}")


def _error_line(line: str, prefix: str, files: list[str], json_path: bool) -> None:
    """`PREFIX: error: FILE: $.path: message` (the JSON path optional when the file is not JSON)."""
    body = line[len(prefix + ": error: "):] if line.startswith(prefix + ": error: ") else None
    if body is None:
        raise Bad(f"not a one-line error: {line!r}")
    for f in files:
        if body.startswith(f + ": "):
            rest = body[len(f) + 2:]
            if json_path and not rest.startswith("$"):
                raise Bad(f"the error names no JSON path: {line!r}")
            if rest.startswith("$") and not re.match(r"^\$\S*: \S", rest):
                raise Bad(f"malformed JSON path or empty message: {line!r}")
            return
    raise Bad(f"the error does not name the file ({', '.join(files)}): {line!r}")


def check_validate(o: Outcome, file: str, parseable: bool) -> bool:
    """`kvconform validate FILE`: exit 0 with `FILE: ok (kind)`, or exit 2 with one line per
    problem, each naming the file and (for a JSON file) a JSON path. Returns accepted."""
    _no_traceback(o, "validate")
    if o.rc == 0:
        if o.lines() or not o.out.startswith(f"{file}: ok ("):
            raise Bad(f"validate exit 0 but stdout {o.out!r} stderr {o.err!r}")
        return True
    if o.rc != 2:
        raise Bad(f"validate exit {o.rc}: {o.err}")
    lines = o.lines()
    if not lines:
        raise Bad("validate exit 2 without a message")
    for line in lines:
        _error_line(line, "kvconform", [file], json_path=parseable)
    return False


def check_simulate(o: Outcome, inputs: list[str], parseable: bool) -> int:
    """`kvconform simulate`: 0, 1 (failed batches, one `batch K fails` line each), 3 (refused,
    one line) or 2 (one line naming an input file and a JSON path)."""
    _no_traceback(o, "simulate")
    lines = o.lines()
    if o.rc == 0:
        if lines:
            raise Bad(f"simulate exit 0 with stderr {o.err!r}")
    elif o.rc == 1:
        if not lines or not all(re.match(r"kvconform: batch \d+ fails \(CR-[A-Z]+-\d+\): ", x) for x in lines):
            raise Bad(f"simulate exit 1 with {o.err!r}")
    elif o.rc == 3:
        if len(lines) != 1 or not lines[0].startswith("kvconform: deployment refused (CR-"):
            raise Bad(f"simulate exit 3 with {o.err!r}")
    elif o.rc == 2:
        if len(lines) != 1:
            raise Bad(f"simulate exit 2 with {len(lines)} lines: {o.err!r}")
        _error_line(lines[0], "kvconform", inputs, json_path=parseable)
    else:
        raise Bad(f"simulate exit {o.rc}: {o.err}")
    return o.rc


def check_infer(o: Outcome, input_file: str, output_file: str, config_file: str | None = None,
                parseable: bool = True) -> int:
    """`python -m gpu_backend infer`: 0/1 with a schema-valid output (one response per request,
    exit 1 exactly when a response says error, with one `batch K failed: REASON` line per failed
    batch), 3 (refused) or 2 (one line naming the file and a JSON path, or a flag; nothing
    written). 70 (internal error) is a bug."""
    _no_traceback(o, "infer")
    lines = o.lines()
    if o.rc in (0, 1):
        with open(output_file, "rb") as f:
            doc = json.loads(f.read())
        errors = schema_errors(doc, "output")
        if errors:
            raise Bad(f"infer wrote an output file the schema refuses: {errors[0]}")
        failed = sorted({r["batch_idx"] for r in doc["responses"] if r["finish_reason"] == "error"})
        if bool(failed) != (o.rc == 1):
            raise Bad(f"infer exit {o.rc} but failed batches: {failed}")
        said = [int(m.group(1)) for m in (re.match(r"gpu_backend: batch (\d+) failed: \S", x) for x in lines) if m]
        if said != failed or len(lines) != len(failed):
            raise Bad(f"infer exit {o.rc}: failed batches {failed}, stderr {o.err!r}")
        return o.rc
    if os.path.exists(output_file):
        raise Bad(f"infer exit {o.rc} but wrote {output_file}")
    if o.rc == 3:
        if len(lines) != 1 or not lines[0].startswith("gpu_backend: error: "):
            raise Bad(f"infer exit 3 with {o.err!r}")
        return 3
    if o.rc != 2:
        raise Bad(f"infer exit {o.rc} (70 is an internal error, a bug): {o.err}")
    if len(lines) != 1:
        raise Bad(f"infer exit 2 with {len(lines)} lines: {o.err!r}")
    line = lines[0]
    if re.match(r"gpu_backend: error: --\w+: \S", line):
        return 2
    _error_line(line, "gpu_backend", [f for f in (input_file, config_file) if f], json_path=parseable)
    return 2
