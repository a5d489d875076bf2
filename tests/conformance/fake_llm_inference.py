#!/usr/bin/env python3
"""A stand-in `llm_inference` for testing the command adapter: the reference adapter behind the
command contract of spec/RUNNING.md section 2, misbehaving on request.

    fake_llm_inference.py build --engineDir D --maxInputLen N ...   (writes D/config.json)
    fake_llm_inference.py infer --engineDir D --inputFile IN --outputFile OUT --profileOutputFile P ...

KVCONFORM_FAKE_MODE selects the behaviour of `infer`: ok (default), crash (SIGABRT), garbage
(an output file that is not JSON), sleep (never finishes), short (one response missing),
miscount (hit_sequences off by one).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from conformance.adapters.base import Engine  # noqa: E402
from conformance.adapters.reference import ReferenceSession  # noqa: E402
from reference import InputError, engine_from_build_args  # noqa: E402

INTS = ("maxInputLen", "maxKVCacheCapacity", "maxKVPoolPages", "maxBatchSize", "tokensPerPage", "seed")
RUNTIME_INTS = ("contextCacheMaxRecords", "contextCacheRecurrentSnapshotPoolBytes",
                "contextCachePartialKVSnapshotPoolBytes", "warmup", "batchSize", "maxGenerateLength", "tpSize")


def build(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--engineDir", required=True)
    for k in INTS:
        p.add_argument(f"--{k}", type=int)
    for k in ("model", "loraAdapters", "kvCacheDtype", "specDecode"):
        p.add_argument(f"--{k}")
    for k in ("vision", "audio", "actionRunner", "blockDiffusion", "visionBidirectional", "untiedEmbeddings"):
        p.add_argument(f"--{k}", action="store_true")
    args, _ = p.parse_known_args(argv)  # deployment switches and sizes not modelled here are ignored
    build_args = {k: v for k, v in vars(args).items() if k != "engineDir" and v is not None and v is not False}
    if "loraAdapters" in build_args:
        build_args["loraAdapters"] = build_args["loraAdapters"].split(",")
    try:
        config = engine_from_build_args(build_args).to_config()
    except InputError as e:
        print(f"build: {e}", file=sys.stderr)
        return 2
    Path(args.engineDir).mkdir(parents=True, exist_ok=True)
    (Path(args.engineDir) / "config.json").write_text(json.dumps(config))
    return 0


def infer(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    for k in ("engineDir", "inputFile", "outputFile", "profileOutputFile", "outputHiddenStates"):
        p.add_argument(f"--{k}")
    for k in RUNTIME_INTS:
        p.add_argument(f"--{k}", type=int)
    for k in ("enableContextReuse", "dumpProfile", "poisonFreshPages"):
        p.add_argument(f"--{k}", action="store_true")
    args = p.parse_args(argv)
    mode = os.environ.get("KVCONFORM_FAKE_MODE", "ok")
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGABRT)
    if mode == "sleep":
        time.sleep(3600)
    runtime = {k: v for k, v in vars(args).items() if k in RUNTIME_INTS and v is not None}
    runtime.update({k: True for k in ("enableContextReuse", "dumpProfile") if getattr(args, k)})
    if args.outputHiddenStates:
        runtime["outputHiddenStates"] = True
    config = json.loads((Path(args.engineDir) / "config.json").read_text())
    request = json.loads(Path(args.inputFile).read_text())
    result = ReferenceSession(Engine("fake", config, args.engineDir), runtime).run(request, os.path.dirname(args.inputFile))
    if result.outcome == "input_error":
        print(f"{args.inputFile}: {result.error_path}: {result.message}", file=sys.stderr)
        return 2
    if result.outcome == "rejected":
        print(f"deployment rejected: {result.message}", file=sys.stderr)
        return 3
    print("some progress output on stderr", file=sys.stderr)
    responses = result.responses
    if mode == "short":
        responses = responses[:-1]
    if mode == "miscount" and result.profile.get("context_cache"):
        result.profile["context_cache"]["hit_sequences"] += 1
    if mode == "garbage":
        Path(args.outputFile).write_text("{not json")
        return 0
    Path(args.outputFile).write_text(json.dumps({"input_file": args.inputFile, "responses": responses}))
    if args.profileOutputFile:
        Path(args.profileOutputFile).write_text(json.dumps(result.profile))
    return 1 if result.failed_batches else 0


if __name__ == "__main__":
    sys.exit(build(sys.argv[2:]) if sys.argv[1] == "build" else infer(sys.argv[2:]))
