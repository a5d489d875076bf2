#!/usr/bin/env python3
"""A stand-in for TensorRT Edge-LLM's `llm_inference` on an Edge-LLM engine folder, printing what
Edge-LLM prints: per response `output_text`, `finish_reason`, `request_idx` and `batch_idx`, no
`output_ids`, no `logprobs`, and the `context_cache` profile.

    edge_llm_stand_in.py --engineDir D --inputFile IN --outputFile OUT --profileOutputFile P [flags]

KVCONFORM_STAND_IN_IDS=1 makes it print `output_ids` as well (a comparison in the tests).
It behaves as the oracle does (conformance/adapters/reference.py, the kit's stand-in generator)
on the engine its author described by hand in `D/stand-in-engine.json`: a file a real folder does
not have, so that what `kvconform describe` derives from the folder is checked, not reused.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from conformance.adapters.base import Engine
from conformance.adapters.reference import ReferenceSession

PRINTED = ("request_idx", "batch_idx", "output_text", "finish_reason")
INTS = ("contextCacheMaxRecords", "contextCacheRecurrentSnapshotPoolBytes", "contextCachePartialKVSnapshotPoolBytes",
        "warmup", "batchSize", "maxGenerateLength", "tpSize")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    for k in ("engineDir", "inputFile", "outputFile", "profileOutputFile"):
        p.add_argument(f"--{k}", required=k != "profileOutputFile")
    for k in INTS:
        p.add_argument(f"--{k}", type=int)
    for k in ("enableContextReuse", "dumpProfile"):
        p.add_argument(f"--{k}", action="store_true")
    args = p.parse_args(argv)
    engine_dir = Path(args.engineDir)
    description = engine_dir / "stand-in-engine.json"
    runtime = {k: v for k, v in vars(args).items() if k in INTS and v is not None}
    runtime.update({k: True for k in ("enableContextReuse", "dumpProfile") if getattr(args, k)})
    request = json.loads(Path(args.inputFile).read_text())
    session = ReferenceSession(Engine("edge", json.loads(description.read_text()), str(engine_dir)), runtime)
    result = session.run(request, str(Path(args.inputFile).parent))
    if result.outcome == "input_error":
        print(f"{args.inputFile}: {result.error_path}: {result.message}", file=sys.stderr)
        return 2
    if result.outcome == "rejected":
        print(f"context reuse is not supported for this deployment: {result.message}", file=sys.stderr)
        return 1
    printed = PRINTED + (("output_ids",) if os.environ.get("KVCONFORM_STAND_IN_IDS") else ())
    responses = [{k: r[k] for k in printed} for r in result.responses]
    Path(args.outputFile).write_text(json.dumps({"input_file": args.inputFile, "responses": responses}))
    if args.profileOutputFile:
        Path(args.profileOutputFile).write_text(json.dumps(result.profile))
    return 1 if result.failed_batches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
