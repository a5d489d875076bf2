#!/usr/bin/env python3
"""A stand-in `llm_inference` for testing the command adapter: the reference adapter behind the
command contract of spec/RUNNING.md section 2, misbehaving on request.

    fake_llm_inference.py build --engineDir D --maxInputLen N ...   (writes D/config.json)
    fake_llm_inference.py infer --engineDir D --inputFile IN --outputFile OUT --profileOutputFile P ...

KVCONFORM_FAKE_MODE selects the behaviour of `infer`: ok (default), crash (SIGABRT), garbage
(an output file that is not JSON), sleep (never finishes), short (one response missing),
miscount (hit_sequences off by one), and the broken-backend matrix of
tests/robustness/test_broken_backends.py (MODES below). KVCONFORM_FAKE_MODES, a JSON object
{case id: mode}, picks the mode per case (the request file carries its `_conformance.id`), so
one run can mix misbehaviours. KVCONFORM_FAKE_BUILD_MODE breaks `build` the same way.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from conformance.adapters.base import Engine
from conformance.adapters.reference import ReferenceSession
from reference import InputError, engine_from_build_args

MODES = {
    "ok": "a conformant backend",
    "crash": "killed by SIGABRT", "segv": "killed by SIGSEGV", "kill9": "killed by SIGKILL",
    "exit1_silent": "exit 1, writes nothing", "exit5_after_output": "writes everything, exits 5",
    "exit0_no_output": "exit 0, writes nothing", "exit2_valid": "exit 2 (bad input) on a valid file",
    "sleep": "never exits", "hang_after_output": "writes everything, then never exits",
    "orphan": "exits 0 but leaves a child running that holds its stderr",
    "garbage": "output is not JSON", "truncated": "output JSON cut in half", "empty_output": "0-byte output",
    "not_object": "output is a JSON array", "invalid_utf8": "output is not UTF-8", "nan": "output holds NaN",
    "output_dir": "a directory where the output file should be", "output_fifo": "a FIFO as the output file",
    "short": "one response missing", "extra": "one response too many", "reorder": "responses 0 and 1 swapped",
    "renumber": "request_idx counts from 1", "finish_error": "every response says error, exit 0",
    "no_profile": "no profile file with reuse on", "profile_garbage": "profile is not JSON",
    "profile_missing": "profile context_cache lacks hit_sequences",
    "counter_string": "hit_sequences is a string", "counter_bool": "hit_sequences is true",
    "counter_float": "hit_sequences is 1.5", "counter_negative": "hit_sequences is -1",
    "counter_null": "hit_sequences is null", "miscount": "hit_sequences off by one",
    "stderr_flood": "64 MB on stderr, then a correct run",
}

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
    broken = os.environ.get("KVCONFORM_FAKE_BUILD_MODE", "ok")
    if broken == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if broken == "sleep":
        time.sleep(3600)
    if broken == "exit1":
        print("build: out of disk", file=sys.stderr)
        return 1
    if broken == "no_config":
        return 0
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
    for k in ("engineDir", "inputFile", "outputFile", "profileOutputFile", "outputHiddenStates", "semanticsProfile"):
        p.add_argument(f"--{k}")
    for k in RUNTIME_INTS:
        p.add_argument(f"--{k}", type=int)
    for k in ("enableContextReuse", "dumpProfile", "poisonFreshPages"):
        p.add_argument(f"--{k}", action="store_true")
    args = p.parse_args(argv)
    request = json.loads(Path(args.inputFile).read_text())
    per_case = json.loads(os.environ.get("KVCONFORM_FAKE_MODES", "{}"))
    mode = per_case.get((request.get("_conformance") or {}).get("id"), os.environ.get("KVCONFORM_FAKE_MODE", "ok"))
    if mode not in MODES:
        raise SystemExit(f"fake_llm_inference: unknown mode {mode!r}")
    if os.environ.get("KVCONFORM_FAKE_LOG"):          # which cases ran, for the resume tests
        with open(os.environ["KVCONFORM_FAKE_LOG"], "a") as log:
            log.write(f"{(request.get('_conformance') or {}).get('id')}\n")
    signals = {"crash": signal.SIGABRT, "segv": signal.SIGSEGV, "kill9": signal.SIGKILL}
    if mode in signals:
        os.kill(os.getpid(), signals[mode])
    if mode == "sleep":
        time.sleep(3600)
    if mode == "exit1_silent":
        return 1
    if mode == "exit0_no_output":
        return 0
    if mode == "exit2_valid":
        print(f"{args.inputFile}: $.requests: I do not like it", file=sys.stderr)
        return 2
    if mode == "output_dir":
        os.mkdir(args.outputFile)
        return 0
    if mode == "output_fifo":
        os.mkfifo(args.outputFile)
        return 0
    if mode == "orphan":
        import subprocess
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], stderr=sys.stderr)
        Path(args.outputFile).with_name("orphan.pid").write_text(str(child.pid))
    if mode == "stderr_flood":
        chunk = "x" * 1023 + "\n"
        for _ in range(64 * 1024):
            sys.stderr.write(chunk)
        sys.stderr.flush()
    runtime = {k: v for k, v in vars(args).items() if k in RUNTIME_INTS and v is not None}
    runtime.update({k: True for k in ("enableContextReuse", "dumpProfile") if getattr(args, k)})
    if args.semanticsProfile:
        runtime["semanticsProfile"] = args.semanticsProfile
    if args.outputHiddenStates:
        runtime["outputHiddenStates"] = True
    config = json.loads((Path(args.engineDir) / "config.json").read_text())
    result = ReferenceSession(Engine("fake", config, args.engineDir), runtime).run(request, os.path.dirname(args.inputFile))
    if result.outcome == "input_error":
        print(f"{args.inputFile}: {result.error_path}: {result.message}", file=sys.stderr)
        return 2
    if result.outcome == "rejected":
        print(f"deployment rejected: {result.message}", file=sys.stderr)
        return 3
    print("some progress output on stderr", file=sys.stderr)
    responses = [dict(r) for r in result.responses]
    if mode == "short":
        responses = responses[:-1]
    if mode == "extra":
        responses.append(dict(responses[-1], request_idx=len(responses)))
    if mode == "reorder":
        responses[0], responses[1] = responses[1], responses[0]
    if mode == "renumber":
        responses = [dict(r, request_idx=r["request_idx"] + 1) for r in responses]
    if mode == "finish_error":
        responses = [dict(r, finish_reason="error") for r in responses]
    cc = result.profile.get("context_cache")
    counters = {"miscount": (cc or {}).get("hit_sequences", 0) + 1, "counter_string": "3", "counter_bool": True,
                "counter_float": 1.5, "counter_negative": -1, "counter_null": None}
    if mode in counters and cc:
        cc["hit_sequences"] = counters[mode]
    if mode == "profile_missing" and cc:
        del cc["hit_sequences"]
    output = json.dumps({"input_file": args.inputFile, "responses": responses})
    damaged = {"garbage": b"{not json", "truncated": output[:len(output) // 2].encode(), "empty_output": b"",
               "not_object": b"[]", "invalid_utf8": b'{"responses": ["\xff"]}',
               "nan": output.replace('"finish_reason"', '"logprob_sum": NaN, "finish_reason"', 1).encode()}
    Path(args.outputFile).write_bytes(damaged.get(mode, output.encode()))
    if args.profileOutputFile and mode != "no_profile":
        Path(args.profileOutputFile).write_text("{" if mode == "profile_garbage" else json.dumps(result.profile))
    if mode == "hang_after_output":
        time.sleep(3600)
    if mode == "exit5_after_output":
        return 5
    return 1 if result.failed_batches else 0


if __name__ == "__main__":
    sys.exit(build(sys.argv[2:]) if sys.argv[1] == "build" else infer(sys.argv[2:]))
