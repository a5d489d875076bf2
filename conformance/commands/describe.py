"""`kvconform describe`: the engine description (kvconform-engine-v1) of a real engine folder.

    kvconform describe --engine-dir D [--multimodal-engine-dir V] [--output FILE] [--force]
        [--allow-defaults]

The folder is read by the mapper of conformance/adapters/edge_llm_folder.py (a description
written by `python -m gpu_backend build`, checked and written unchanged, or a TensorRT Edge-LLM
engine folder written by `llm_build`; its docstring has the mapping). The output goes to stdout,
or to FILE (never replaced without --force). Every fact the oracle needs that is not in the
folder is one line on stderr, and the exit code is then 2, unless --allow-defaults is given and
Edge-LLM documents a default for it (a warning line); constants and derivations are `note:` lines.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

from .. import KvconformError
from ..adapters.edge_llm_folder import Findings, describe
from ..report.folder import readable_by_umask
from .options import deprecated_spelling


def add_arguments(parser) -> None:
    # required, checked in main: argparse would not count the former spelling as giving it
    parser.add_argument("--engine-dir", metavar="D",
                        help="engine folder (required): Edge-LLM llm_build output, or one holding a "
                             "kvconform-engine-v1 config.json")
    parser.add_argument("--multimodal-engine-dir", metavar="V",
                        help="Edge-LLM multimodal engine folder (visual/, audio/, action/)")
    deprecated_spelling(parser, "--engineDir", "--engine-dir")
    deprecated_spelling(parser, "--multimodalEngineDir", "--multimodal-engine-dir")
    parser.add_argument("--output", metavar="FILE", help="where the description goes (default: stdout)")
    parser.add_argument("--force", action="store_true", help="replace FILE if it exists")
    parser.add_argument("--allow-defaults", action="store_true",
                        help="write Edge-LLM's documented default for a missing fact instead of failing")


def main(args) -> int:
    if not args.engine_dir:
        raise KvconformError("kvconform describe: the following arguments are required: --engine-dir")
    _check_output(args.output, args.force)
    findings = Findings(args.allow_defaults)
    doc, inputs = describe(args.engine_dir, args.multimodal_engine_dir, findings)
    if findings.errors:
        for line in findings.errors:
            print(f"kvconform: error: describe: {line}", file=sys.stderr)
        return 2
    _refuse_input_as_output(args.output, inputs)
    for line in findings.warnings:
        print(f"kvconform: warning: describe: {line}", file=sys.stderr)
    for line in findings.notes:
        print(f"kvconform: note: describe: {line}", file=sys.stderr)
    _emit(doc, args.output, args.force)
    return 0


# -- output --------------------------------------------------------------------------------------

def _check_output(path: str | None, force: bool) -> None:
    """Before anything is read: never a directory, never an existing file without --force."""
    if path is None:
        return
    if os.path.isdir(path):
        raise KvconformError(f"--output {path}: is a directory, expected a file to write")
    if os.path.lexists(path) and not force:
        raise KvconformError(f"--output {path}: exists; pass --force to replace it")


def _refuse_input_as_output(path: str | None, inputs: list[str]) -> None:
    """--force must not let the description replace a config it was read from."""
    if path is None:
        return
    for file in inputs:
        try:
            same = os.path.realpath(path) == os.path.realpath(file) or os.path.samefile(path, file)
        except (OSError, ValueError):
            same = False
        if same:
            raise KvconformError(f"--output {path}: names an input of this description; refusing to overwrite it")


def _emit(doc: dict, path: str | None, force: bool) -> None:
    text = json.dumps(doc, indent=2) + "\n"
    if path is None:
        sys.stdout.write(text)
        return
    try:
        _write_whole(path, text, replace=force)
    except FileExistsError:
        raise KvconformError(f"--output {path}: exists; pass --force to replace it") from None
    except OSError as e:
        raise KvconformError(f"--output {path}: cannot write: {e.strerror}; nothing was written") from None


def _write_whole(path: str, text: str, replace: bool) -> None:
    """A temporary file in the same folder, written and flushed to disk, then renamed over `path`
    (`replace`) or linked to it (exclusive: a file that appeared meanwhile stays): `path` is the
    whole description or nothing, also when the disk fills up half-way."""
    fd, tmp = tempfile.mkstemp(prefix=".kvconform-", suffix=".json", dir=os.path.dirname(os.path.abspath(path)))
    readable_by_umask(fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
