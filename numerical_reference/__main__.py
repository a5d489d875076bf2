"""`python -m numerical_reference`: the kit's float64 forward as a reference command.

    python -m numerical_reference --engineDir D --inputFile IN --outputFile OUT

IN is a request file (media and adapter paths absolute, or relative to the working folder) in
which each request to score carries `teacher_forced_ids`, the tokens a backend generated; the
engine folder D is in the reference layout (spec/engine.md section 5). OUT receives one entry
per generated token of each scored request (format kvconform-teacher-forced-v1, spec/RUNNING.md
section 5). This is the protocol a backend's manifest names with `numerical_reference:
{"source": "command", ...}`; the kit's own tests run it that way. Its flags are spelt as
`llm_inference`'s, since the protocol mirrors that command's.

Exit 0 when every scored request was scored; 2 on bad input (one line naming the file and the
JSON path, nothing written).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from reference import InputError, RuntimeFlags, engine_from_config, parse_request_file
from reference.engine import resolve_paths

from .layout import LayoutError
from .source import TEACHER_FORCED_FORMAT, ReferenceUnavailable, WeightsReference

PROG = "python -m numerical_reference"


class BadInput(Exception):
    """A file the command cannot score: `str()` is the one line naming the file and JSON path."""

    def __init__(self, message: str, file: str, json_path: str | None = None):
        super().__init__(": ".join(p for p in (file, json_path, message) if p))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--engineDir", required=True)
    parser.add_argument("--inputFile", required=True)
    parser.add_argument("--outputFile", required=True)
    args = parser.parse_args(argv)
    try:
        answer = score_file(args.engineDir, args.inputFile)
    except BadInput as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    with open(args.outputFile, "w") as f:
        json.dump(answer, f)
    return 0


def score_file(engine_dir: str, input_file: str) -> dict:
    config_path = os.path.join(engine_dir, "config.json")
    try:
        engine = engine_from_config(resolve_paths(read_json(config_path), engine_dir))
    except InputError as e:
        raise BadInput(e.message, config_path, e.path) from None
    doc = read_json(input_file)
    base_dir = os.getcwd()
    try:
        parsed = parse_request_file(doc, base_dir, engine, batch_size=RuntimeFlags.from_case_runtime({}).batch_size)
    except InputError as e:
        raise BadInput(e.message, input_file, e.path) from None
    items = []
    for i, request in enumerate(doc["requests"]):
        forced = request.get("teacher_forced_ids")
        if forced is None:
            continue
        if not (isinstance(forced, list) and all(type(t) is int and 0 <= t < engine.vocab_size for t in forced)):
            raise BadInput(f"expected a list of token ids below {engine.vocab_size}", input_file,
                           f"$.requests[{i}].teacher_forced_ids")
        items.append((parsed.requests[i], request, forced))
    try:
        scored = WeightsReference().score_all(engine_dir, engine, items, doc, base_dir)
    except (ReferenceUnavailable, LayoutError) as e:
        raise BadInput(str(e), engine_dir) from None
    return {"format": TEACHER_FORCED_FORMAT,
            "responses": [{"request_idx": p.index, "steps": [s.to_json() for s in sc.steps]}
                          for (p, _, _), sc in zip(items, scored)]}


def read_json(path: str):
    """A JSON file's value, or BadInput naming the file (a FIFO or a folder is refused before it
    could block the read)."""
    if not os.path.isfile(path):
        raise BadInput("not found, or not a regular file", path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f, parse_constant=_not_json)
    except UnicodeDecodeError as e:
        raise BadInput(f"not valid UTF-8 (byte {e.start})", path) from None
    except OSError as e:
        raise BadInput(f"cannot read: {e.strerror}", path) from None
    except json.JSONDecodeError as e:
        raise BadInput(f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}", path) from None
    except (ValueError, RecursionError) as e:
        raise BadInput(f"invalid JSON: {e}", path) from None


def _not_json(name: str):
    raise ValueError(f"{name} is not JSON")


if __name__ == "__main__":
    sys.exit(main())
