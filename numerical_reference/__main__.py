"""`python -m conformance.numerics`: the kit's float64 forward as a reference command.

    python -m conformance.numerics --engineDir D --inputFile IN --outputFile OUT

IN is a request file (media and adapter paths absolute, or relative to the working folder) in
which each request to score carries `teacher_forced_ids`, the tokens a backend generated; the
engine folder D is in the reference layout (spec/engine.md section 5). OUT receives one entry
per generated token of each scored request (format kvconform-teacher-forced-v1, spec/RUNNING.md
section 5). This is the protocol a backend's manifest names with `numerical_reference:
{"source": "command", ...}`; the kit's own tests run it that way.

Exit 0 when every scored request was scored; 2 on bad input (one line naming the file and the
JSON path, nothing written).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from .. import oracle
from ..schemas import read_json
from ..errors import KvconformError
from .layout import LayoutError
from .source import TEACHER_FORCED_FORMAT, ReferenceUnavailable, WeightsReference


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.numerics", description=__doc__.split("\n\n")[0])
    parser.add_argument("--engineDir", required=True)
    parser.add_argument("--inputFile", required=True)
    parser.add_argument("--outputFile", required=True)
    args = parser.parse_args(argv)
    try:
        answer = score_file(args.engineDir, args.inputFile)
    except KvconformError as e:
        print(f"python -m conformance.numerics: error: {e}", file=sys.stderr)
        return 2
    with open(args.outputFile, "w") as f:
        json.dump(answer, f)
    return 0


def score_file(engine_dir: str, input_file: str) -> dict:
    from reference.engine import resolve_paths
    config_path = os.path.join(engine_dir, "config.json")
    try:
        engine = oracle.engine_of(resolve_paths(read_json(config_path), engine_dir))
    except oracle.InputError as e:
        raise KvconformError(e.message, config_path, e.path) from None
    doc = read_json(input_file)
    base_dir = os.getcwd()
    try:
        parsed = oracle.parse(doc, base_dir, engine, oracle.flags_of({}))
    except oracle.InputError as e:
        raise KvconformError(e.message, input_file, e.path) from None
    items = []
    for i, request in enumerate(doc["requests"]):
        forced = request.get("teacher_forced_ids")
        if forced is None:
            continue
        if not (isinstance(forced, list) and all(type(t) is int and 0 <= t < engine.vocab_size for t in forced)):
            raise KvconformError(f"expected a list of token ids below {engine.vocab_size}", input_file,
                                 f"$.requests[{i}].teacher_forced_ids")
        items.append((parsed.requests[i], request, forced))
    try:
        scored = WeightsReference().score_all(engine_dir, engine, items, doc, base_dir)
    except (ReferenceUnavailable, LayoutError) as e:
        raise KvconformError(str(e), engine_dir) from None
    return {"format": TEACHER_FORCED_FORMAT,
            "responses": [{"request_idx": p.index, "steps": [s.to_json() for s in sc.steps]}
                          for (p, _, _), sc in zip(items, scored)]}


if __name__ == "__main__":
    sys.exit(main())
