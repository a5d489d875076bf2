"""`kvconform simulate`: the profile (and per-request predictions) a backend should write.

    kvconform simulate --engineDir D | --engineConfig FILE --inputFile IN --profileOutputFile PROF
        [--outputFile PRED] [--transcript BACKEND_OUTPUT] [cache and runtime flags]
    kvconform simulate --trace FILE [--profile P ...] [--capacity LIST] ...   (trace replay:
        conformance/traffic/command.py, docs/simulate.md)

The engine is an engine directory written by `python -m gpu_backend build` or a bare config.json
following spec/schemas/engine.schema.json. Generated tokens come from `--transcript` (a
backend's output file) when the counts depend on them. Exit codes: 0 ok, 1 some batch failed
(as predicted), 2 bad input, 3 deployment refused (CR-SUP; the predictions file says so).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
import tempfile

import orjson


from ..cases import schemas
from .. import KvconformError
from ..judge import oracle
from ..judge.oracle import MAX_WARMUP
from ..report.folder import readable_by_umask
from ..judge.oracle import resolve_engine_paths as resolve_paths
from ..traffic import command as traffic


def add_arguments(parser) -> None:
    engine = parser.add_mutually_exclusive_group()          # one is required without --trace (_required)
    engine.add_argument("--engineDir", help="engine directory holding config.json")
    engine.add_argument("--engineConfig", help="an engine description (config.json) file")
    parser.add_argument("--inputFile", help="request file (required without --trace)")
    parser.add_argument("--profileOutputFile", help="where the predicted profile goes (required without --trace)")
    parser.add_argument("--outputFile", help="where the per-request predictions go")
    parser.add_argument("--transcript", help="a backend's output file: generated tokens per request")
    parser.add_argument("--enableContextReuse", action="store_true")
    parser.add_argument("--contextCacheMaxRecords", type=_count, default=1024, metavar="M")
    parser.add_argument("--contextCacheRecurrentSnapshotPoolBytes", type=_count, default=0, metavar="B")
    parser.add_argument("--contextCachePartialKVSnapshotPoolBytes", type=_count, default=0, metavar="B")
    parser.add_argument("--warmup", type=_count, default=0, metavar="N")
    parser.add_argument("--batchSize", type=_positive, metavar="N")
    parser.add_argument("--maxGenerateLength", type=_positive, metavar="N")
    parser.add_argument("--tpSize", type=_positive, default=1, metavar="N")
    parser.add_argument("--outputHiddenStates", nargs="?", const=True, default=False, metavar="FILE",
                        help="hidden-state output: every request bypasses lookup (CR-POL-3)")
    parser.add_argument("--dumpProfile", action="store_true", help="add the prefill section")
    parser.add_argument("--poisonFreshPages", action="store_true", help="accepted; no effect on counts")
    parser.add_argument("--semanticsProfile", choices=oracle.PROFILE_NAMES, default=oracle.DEFAULT_PROFILE,
                        metavar="NAME", help="the semantics profile predicted (spec/profiles.md): "
                        + ", ".join(oracle.PROFILE_NAMES))
    traffic.add_arguments(parser)


def _count(text: str) -> int:
    return _int(text, 0)


def _positive(text: str) -> int:
    return _int(text, 1)


def _int(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
    return value


def main(args) -> int:
    """The command, with Python's cyclic garbage collector paused throughout (speed only): a
    large request file is some hundred thousand containers, none in a cycle, and while they
    live every collection triggered by reading, checking or writing walks them again (about
    60 ms of a 10,000-request run). Reference counting frees everything as before."""
    if args.trace:
        return traffic.main(args)
    _required(args)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _simulate(args)
    finally:
        if was_enabled:
            gc.enable()


def _required(args) -> None:
    """The options a request-file simulation needs (argparse cannot require them only without
    --trace); the message is argparse's own."""
    missing = [flag for flag, value in (("--inputFile", args.inputFile), ("--profileOutputFile", args.profileOutputFile))
               if value is None]
    if args.engineDir is None and args.engineConfig is None:
        raise KvconformError("kvconform simulate: one of the arguments --engineDir --engineConfig is required "
                             "(or --trace FILE)")
    if missing:
        raise KvconformError(f"kvconform simulate: the following arguments are required: {', '.join(missing)} "
                             "(or --trace FILE)")


def _simulate(args) -> int:
    if args.warmup > MAX_WARMUP:            # the same bound as the runtime's (spec/engine.md section 3)
        raise KvconformError(f"--warmup: {args.warmup} is above the maximum {MAX_WARMUP}")
    engine_file = os.path.join(args.engineDir, "config.json") if args.engineDir else args.engineConfig
    _check_outputs(args, [p for p in (args.inputFile, args.transcript, engine_file) if p])
    engine = _engine(engine_file)
    doc = schemas.read_json(args.inputFile)
    schemas.check(doc, "request", args.inputFile)
    generated = _transcript(args.transcript, len(doc["requests"])) if args.transcript else None
    flags = oracle.RuntimeFlags(
        enable_context_reuse=args.enableContextReuse, max_records=args.contextCacheMaxRecords,
        recurrent_snapshot_bytes=args.contextCacheRecurrentSnapshotPoolBytes,
        partial_kv_snapshot_bytes=args.contextCachePartialKVSnapshotPoolBytes,
        warmup=args.warmup, batch_size=args.batchSize, max_generate_length=args.maxGenerateLength,
        tp_size=args.tpSize, output_hidden_states=bool(args.outputHiddenStates),
        dump_profile=args.dumpProfile, semantics_profile=args.semanticsProfile)
    base_dir = os.path.dirname(os.path.realpath(args.inputFile))
    try:
        predictions, profile = oracle.simulate(engine, flags, doc, base_dir, generated, lora_files=True)
    except oracle.InputError as e:
        if e.path.startswith("$.generated"):
            raise KvconformError(e.message, args.transcript, e.path.replace("$.generated", "$.responses", 1)) from None
        raise KvconformError(e.message, args.inputFile, e.path) from None
    except (oracle.NeedsTranscript, oracle.OutOfScope) as e:
        which = re.match(r"request (\d+): ", str(e))      # the request whose counts cannot be predicted
        raise KvconformError(str(e), args.inputFile, f"$.requests[{which.group(1)}]" if which else "$") from None
    for path, message in schemas.unknown_request_keys(doc, limit=schemas.WARNINGS_SHOWN):   # accepted: the warnings
        print(f"kvconform: warning: {KvconformError(message, args.inputFile, path)}", file=sys.stderr)
    predictions["input_file"] = os.path.abspath(args.inputFile)
    if predictions["rejected"] is not None:
        rejected = predictions["rejected"]
        if args.outputFile:
            _write_json(args.outputFile, predictions)
        print(f"kvconform: deployment refused ({rejected['rule']}): {rejected['message']}", file=sys.stderr)
        return 3
    _write_json(args.profileOutputFile, profile)
    if args.outputFile:
        _write_json(args.outputFile, predictions)
    failed = [b for b in predictions["batches"] if b["status"] == "failed"]
    for b in failed:
        print(f"kvconform: batch {b['batch_idx']} fails ({b['rule']}): {b['error']}", file=sys.stderr)
    return 1 if failed else 0


def _check_outputs(args, inputs: list) -> None:
    """Before anything is read: an output is never a directory, an input, or the other output."""
    outputs = [(flag, p) for flag, p in (("--profileOutputFile", args.profileOutputFile),
                                         ("--outputFile", args.outputFile)) if p]
    for flag, out in outputs:
        if os.path.isdir(out):
            raise KvconformError("is a directory, expected a file to write", out)
        if any(_same_file(i, out) for i in inputs):
            raise KvconformError("refusing to overwrite an input file", out)
    if len(outputs) == 2 and _same_file(outputs[0][1], outputs[1][1]):
        raise KvconformError(f"--outputFile names the same file as --profileOutputFile ({args.outputFile}); "
                             "the predictions would replace the profile")


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one file: through symbolic links, or hard links when both exist."""
    try:
        return os.path.realpath(a) == os.path.realpath(b) or os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def _engine(file: str):
    """The description, its `hf` tokenizer folder resolved against the file's own folder (as
    validate and the runtime resolve it, TOK-HF-1) and loaded now, so that a tokenizer the
    library cannot read is named against the engine file."""
    config = schemas.read_json(file)
    schemas.check(config, "engine", file)
    try:
        engine = oracle.engine_from_config(resolve_paths(config, os.path.dirname(os.path.realpath(file))))
        oracle.check_token_ids(engine)          # loads an hf tokenizer (spec/engine.md section 2)
        return engine
    except oracle.InputError as e:
        raise KvconformError(e.message, file, e.path) from None
    except (OSError, ValueError) as e:
        raise KvconformError(str(e), file, "$.tokenizer.files") from None


def _transcript(file: str, count: int) -> list:
    """Generated tokens per request from a backend's output file (reference.transcript_tokens)."""
    output = schemas.read_json(file)
    schemas.check(output, "output", file)
    tokens = oracle.transcript_tokens(output)
    if len(tokens) != count:
        raise KvconformError(f"has {len(tokens)} responses for {count} requests", file, "$.responses")
    return tokens


def dumps(data: dict) -> bytes:
    """JSON indented by two spaces down to the items of top-level lists, which get one line each
    (a response, a batch), in UTF-8. Written by orjson: a 10,000-request predictions file takes
    some 10 ms, against 100 ms for json's C encoder."""
    if not isinstance(data, dict) or not data:
        return _encode(data, indent=True) + b"\n"
    parts = []
    for key, value in data.items():
        name = _encode(str(key))
        if isinstance(value, list) and value:
            body = b",\n".join(b"    " + _encode(item) for item in value)
            parts.append(b"  " + name + b": [\n" + body + b"\n  ]")
        else:
            parts.append(b"  " + name + b": " + _encode(value, indent=True).replace(b"\n", b"\n  "))
    return b"{\n" + b",\n".join(parts) + b"\n}\n"


def _encode(value, indent: bool = False) -> bytes:
    """One value as JSON: orjson (keys that are not strings written as strings, as json does),
    or json where orjson refuses a value (a string holding a lone surrogate, as a file name
    that is not UTF-8 does; json escapes it)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0))
    except orjson.JSONEncodeError:
        return json.dumps(value, indent=2 if indent else None).encode("ascii")


def _write_json(path: str, data: dict) -> None:
    """Write atomically: a temporary file in the same folder, then rename over `path`."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".kvconform-", suffix=".json", dir=folder)
        readable_by_umask(fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(dumps(data))
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise KvconformError(f"cannot write: {e.strerror}", path) from None
