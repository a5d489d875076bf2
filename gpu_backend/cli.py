"""Command lines of ARCHITECTURE.md section 4: `build`, `infer`, `capabilities`.

Exit codes: 0 every batch ran; 1 some batch failed at run time (all batches ran, all files
written); 2 bad input or usage (one line on stderr, nothing written, nothing run); 3 the
deployment is refused with context reuse (CR-SUP, CR-HYB-2; nothing written); 70 an internal
error (a bug: one line, never a traceback).
"""
import argparse
import json
import os
import sys

from .errors import BackendInputError, DeploymentRejected
from .inputs import read_json_file

PROG = "gpu_backend"


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):            # one line instead of argparse's usage block
        raise _Usage(message)


def _bool_flag(p, name):
    p.add_argument(f"--{name}", action="store_true", default=None)


def _parser():
    top = _Parser(prog=PROG, allow_abbrev=False)
    sub = top.add_subparsers(dest="command", parser_class=_Parser)
    b = sub.add_parser("build", allow_abbrev=False)
    b.add_argument("--engineDir", required=True)
    for name in ("maxInputLen", "maxKVCacheCapacity", "maxKVPoolPages"):
        b.add_argument(f"--{name}", type=int, required=True)
    for name in ("maxBatchSize", "tokensPerPage", "numLayers", "hiddenSize", "numHeads", "numKVHeads", "headDim",
                 "intermediateSize", "stateSize", "convKernel", "loraRank", "seed"):
        b.add_argument(f"--{name}", type=int)
    b.add_argument("--model")
    b.add_argument("--kvCacheDtype")
    b.add_argument("--loraAdapters")
    b.add_argument("--specDecode")
    for name in ("untiedEmbeddings", "vision", "audio", "actionRunner", "blockDiffusion", "visionBidirectional"):
        _bool_flag(b, name)

    i = sub.add_parser("infer", allow_abbrev=False)
    for name in ("engineDir", "inputFile", "outputFile"):
        i.add_argument(f"--{name}", required=True)
    i.add_argument("--enableContextReuse", action="store_true")
    i.add_argument("--contextCacheMaxRecords", type=int, default=1024)
    i.add_argument("--contextCacheRecurrentSnapshotPoolBytes", type=int, default=0)
    i.add_argument("--contextCachePartialKVSnapshotPoolBytes", type=int, default=0)
    i.add_argument("--profileOutputFile")
    i.add_argument("--dumpProfile", action="store_true")
    i.add_argument("--warmup", type=int, default=0)
    i.add_argument("--batchSize", type=int)
    i.add_argument("--maxGenerateLength", type=int)
    i.add_argument("--tpSize", type=int, default=1)
    i.add_argument("--outputHiddenStates")
    i.add_argument("--poisonFreshPages", action="store_true")
    i.add_argument("--device", default="auto")
    i.add_argument("--seed", type=int, default=0)
    i.add_argument("--checkInvariants", action="store_true", help="verify cache invariants after every batch")

    c = sub.add_parser("capabilities", allow_abbrev=False)
    c.add_argument("--device", default="auto")
    return top


def _atomic_write(path: str, write) -> None:
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.tmp{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _write_json(path: str, doc) -> None:
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    _atomic_write(path, write)


def _build(a) -> int:
    from .engine_build import build_engine
    args = {k: v for k, v in vars(a).items() if k not in ("command", "engineDir") and v is not None}
    if "loraAdapters" in args:
        args["loraAdapters"] = [n for n in args["loraAdapters"].split(",") if n] if args["loraAdapters"] else []
    build_engine(a.engineDir, args)
    return 0


def _check_outputs(a) -> None:
    inputs = {os.path.realpath(a.inputFile), os.path.realpath(os.path.join(a.engineDir, "config.json"))}
    seen = set()
    for flag in ("outputFile", "profileOutputFile", "outputHiddenStates"):
        path = getattr(a, flag)
        if path is None:
            continue
        real = os.path.realpath(path)
        if real in inputs:
            raise BackendInputError(f"--{flag}", f"refusing to overwrite an input file: {path}")
        if real in seen:
            raise BackendInputError(f"--{flag}", f"names the same file as another output: {path}")
        seen.add(real)
        if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise BackendInputError(f"--{flag}", f"the directory of {path} does not exist")


def _infer(a) -> int:
    from .runtime import Runtime
    _check_outputs(a)
    doc = read_json_file(a.inputFile, "a JSON file", missing_flag="--inputFile")
    rt = Runtime(a.engineDir, enable_context_reuse=a.enableContextReuse, max_records=a.contextCacheMaxRecords,
                 recurrent_snapshot_bytes=a.contextCacheRecurrentSnapshotPoolBytes,
                 partial_kv_snapshot_bytes=a.contextCachePartialKVSnapshotPoolBytes, tp_size=a.tpSize,
                 device=a.device, poison_fresh_pages=a.poisonFreshPages,
                 output_hidden_states=a.outputHiddenStates is not None, dump_profile=a.dumpProfile,
                 seed=a.seed, check_invariants=a.checkInvariants)
    try:
        result = rt.infer(doc, os.path.dirname(os.path.abspath(a.inputFile)), warmup=a.warmup,
                          batch_size=a.batchSize, max_generate_length=a.maxGenerateLength)
    except BackendInputError as e:
        if e.path.startswith("$"):
            e.file = e.file or a.inputFile
        raise
    _write_json(a.outputFile, {"input_file": a.inputFile, "responses": result["responses"]})
    if a.profileOutputFile:
        _write_json(a.profileOutputFile, rt.profile())
    if a.outputHiddenStates:
        from safetensors.torch import save_file
        tensors = {f"request_{i}": t.contiguous() for i, t in result["hidden_states"].items()}
        _atomic_write(a.outputHiddenStates, lambda tmp: save_file(tensors, tmp))
    return 1 if result["failed_batches"] else 0


def main(argv=None) -> int:
    def say(text):
        print(f"{PROG}: " + " ".join(str(text).split()), file=sys.stderr)
    try:
        a = _parser().parse_args(argv)
        if a.command is None:
            raise _Usage("expected a command: build, infer or capabilities")
        if a.command == "build":
            return _build(a)
        if a.command == "infer":
            return _infer(a)
        from .capabilities import capabilities
        print(json.dumps(capabilities(a.device), indent=2))
        return 0
    except _Usage as e:
        say(f"error: {e}")
        return 2
    except BackendInputError as e:
        say(f"error: {e.one_line()}")
        return 2
    except DeploymentRejected as e:
        say(f"error: {e.message}")
        return 3
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except BaseException as e:  # a bug: report it in one line, never a traceback
        if isinstance(e, SystemExit) and e.code in (0, None):
            return 0
        say(f"internal error: {type(e).__name__}: {e}")
        return 70
