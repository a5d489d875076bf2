"""Command lines of docs/ARCHITECTURE.md section 4: `build`, `infer`, `capabilities`, `serve`.

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
from .peer_cache import SERVED

PROG = "gpu_backend"


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):            # one line instead of argparse's usage block
        raise _Usage(message)


def _bool_flag(p, name, what=None):
    p.add_argument(f"--{name}", action="store_true", default=None, help=what)


REQUIRED_INT_FLAGS = ("maxInputLen", "maxKVCacheCapacity", "maxKVPoolPages")
BUILD_INT_FLAGS = (
    ("maxInputLen", "max_input_len: the longest input (below --maxKVCacheCapacity)"),
    ("maxKVCacheCapacity", "max_kv_cache_capacity: tokens of KV one sequence may hold"),
    ("maxKVPoolPages", "kv_pool_pages: the page pool; 0 resolves to the minimum (CR-CAP-1)"),
    ("maxBatchSize", "max_batch_size (default 1)"),
    ("tokensPerPage", "tokens_per_page P (default 128)"),
    ("numLayers", "layers (default 2)"), ("hiddenSize", "hidden size (default 64)"),
    ("numHeads", "attention heads (default 4)"), ("numKVHeads", "KV heads, dividing --numHeads (default 2)"),
    ("headDim", "head dimension (default 16)"), ("intermediateSize", "MLP size (default 128)"),
    ("stateSize", "recurrent state size (default 16)"), ("convKernel", "recurrent conv kernel (default 4)"),
    ("loraRank", "rank of every LoRA adapter (default 4)"), ("seed", "weights seed (default 0)"),
    ("maxDraftKVPoolPages", "draft KV pool of an attention-only eagle engine; 0: as the base pool (CR-SPEC-5)"))
BUILD_SWITCHES = (
    ("untiedEmbeddings", "a separate output head"), ("vision", "an image encoder"), ("audio", "an audio encoder"),
    ("actionRunner", "deployment switch: an action runner"), ("blockDiffusion", "deployment switch: block diffusion"),
    ("visionBidirectional", "deployment switch: bidirectional vision attention"))


def _parser():
    top = _Parser(prog=PROG, allow_abbrev=False)
    sub = top.add_subparsers(dest="command", parser_class=_Parser)
    b = sub.add_parser("build", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Build an engine folder: config.json (the description the kit's oracle reads), "
                                   "the weights and the adapters. Every flag, its config key, default and limits: "
                                   "spec/engine.md section 1.")
    b.add_argument("--engineDir", required=True, metavar="D", help="the engine folder (created; see --force)")
    for name, what in BUILD_INT_FLAGS:
        b.add_argument(f"--{name}", type=int, required=name in REQUIRED_INT_FLAGS, metavar="N", help=what)
    b.add_argument("--model", help="attention (default), recurrent or hybrid")
    b.add_argument("--kvCacheDtype", help="fp16 (default) or fp8")
    b.add_argument("--loraAdapters", metavar="A,B", help="LoRA adapter names (lora/NAME.safetensors)")
    b.add_argument("--specDecode", help="eagle, mtp, dflash, dspark or gemma4-mtp (a deployment switch)")
    b.add_argument("--tokenizer", metavar="DIR", help="a Hugging Face tokenizer folder (spec/hf-tokenizer.md), "
                                                      "copied into D/tokenizer/")
    b.add_argument("--tokenizerLoader", help="tokenizers-raw (default) or transformers-auto")
    b.add_argument("--chatTemplateKwargs", metavar="JSON", help="JSON object of chat template keywords")
    b.add_argument("--imageCounter", help="media token counter (spec/media-tokens.md)")
    b.add_argument("--imageCounterSettings", metavar="JSON", help="JSON object of the counter's settings")
    b.add_argument("--force", action="store_true", help="replace whatever --engineDir holds")
    for name, what in BUILD_SWITCHES:
        _bool_flag(b, name, what)

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
    i.add_argument("--semanticsProfile", default="kvconform-1",
                   help="behave as this semantics profile: kvconform-1 (default) or edge-llm-0.10")

    c = sub.add_parser("capabilities", allow_abbrev=False)
    c.add_argument("--device", default="auto")

    s = sub.add_parser("serve", allow_abbrev=False, help="an OpenAI-compatible server of a peer profile (serve.py)")
    s.add_argument("--profile", required=True, choices=tuple(SERVED))
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--host", default="127.0.0.1", help="loopback only")
    s.add_argument("--engineDir")
    s.add_argument("--tokenizer", help="tokenizer folder of the engine built when --engineDir is not given")
    s.add_argument("--setting", action="append", metavar="KEY=VALUE", help="a profile setting: N, true|false or a fraction (repeatable)")
    s.add_argument("--device", default="cpu")
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
    args = {k: v for k, v in vars(a).items() if k not in ("command", "engineDir", "force") and v is not None}
    if "loraAdapters" in args:
        args["loraAdapters"] = [n for n in args["loraAdapters"].split(",") if n] if args["loraAdapters"] else []
    for flag in ("chatTemplateKwargs", "imageCounterSettings"):
        if flag in args:
            args[flag] = _json_object(flag, args[flag])
    build_engine(a.engineDir, args, force=a.force)
    _say(f"built {_summary(a.engineDir)}")
    return 0


def _summary(engine_dir: str) -> str:
    """What a build wrote, in one line: the folder and the description's main facts."""
    with open(os.path.join(engine_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    tok = cfg.get("tokenizer")
    tokenizer = tok if isinstance(tok, str) else f"hf {tok.get('loader')} ({cfg.get('vocab_size')} ids)"
    extras = [k for k in ("vision", "audio") if cfg.get(k)] + [f"LoRA {','.join(cfg['lora_adapters'])}"
                                                              for _ in [0] if cfg.get("lora_adapters")]
    return (f"{engine_dir}: {cfg['model']} model of {len(cfg['layer_kinds'])} layers, P = {cfg['tokens_per_page']}, "
            f"pool {cfg['kv_pool_pages']} pages, max_input_len {cfg['max_input_len']}, capacity "
            f"{cfg['max_kv_cache_capacity']}, batch {cfg['max_batch_size']}, tokenizer {tokenizer}"
            + (f", {', '.join(extras)}" if extras else "") + " (config.json: spec/engine.md)")


def _json_object(flag: str, text: str) -> dict:
    """A flag's JSON object (RFC 8259: no NaN or Infinity, no repeated key)."""
    def pairs(items):
        obj = dict(items)
        if len(obj) != len(items):
            raise ValueError("a key is repeated")
        return obj

    def constant(name):
        raise ValueError(f"{name} is not a JSON number")
    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except (ValueError, RecursionError) as e:
        raise BackendInputError(f"--{flag}", f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise BackendInputError(f"--{flag}", f"expected a JSON object, got {text[:200]}")
    return value


OUTPUT_FLAGS = ("outputFile", "profileOutputFile", "outputHiddenStates")


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one file: through symbolic links, or hard links when both exist.
    A path no file can have (a lone surrogate from a JSON escape) names none."""
    try:
        return os.path.realpath(a) == os.path.realpath(b) or os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def _inside(path: str, folder: str) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _check_outputs(a, inputs: list) -> None:
    """Every output path must be a new or regular file outside the engine folder, differ from
    every input and from the other outputs (spec/engine.md section 3): checked before the engine
    loads, so a mistyped flag never costs a run nor overwrites weights, configs or requests."""
    seen = []
    for flag in OUTPUT_FLAGS:
        path = getattr(a, flag)
        if path is None:
            continue
        if os.path.isdir(path):
            raise BackendInputError(f"--{flag}", f"{path} is a directory, expected a file to write")
        if os.path.lexists(path) and not os.path.isfile(path):       # a device, a FIFO, a dangling link
            raise BackendInputError(f"--{flag}", f"{path} exists and is not a regular file")
        if _inside(path, a.engineDir):
            raise BackendInputError(f"--{flag}", f"{path} is inside the engine folder {a.engineDir}")
        clash = next((i for i in inputs if _same_file(path, i)), None)
        if clash is not None:
            raise BackendInputError(f"--{flag}", f"refusing to overwrite an input file: {path}")
        other = next((f for f, p in seen if _same_file(path, p)), None)
        if other is not None:
            raise BackendInputError(f"--{flag}", f"names the same file as --{other}: {path}")
        seen.append((flag, path))
        if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise BackendInputError(f"--{flag}", f"the directory of {path} does not exist")


def _referenced_files(doc, base_dir: str) -> list:
    """The files a request file names (adapter weights, media), resolved as the parser resolves
    them; malformed parts are skipped here and reported by the parser."""
    doc = doc if isinstance(doc, dict) else {}
    weights = doc.get("available_lora_weights")
    refs = list(weights.values()) if isinstance(weights, dict) else []
    for item in _content_items(doc.get("requests")):
        if item.get("type") in ("image", "audio"):
            refs.append(item.get(item["type"]))
    return [ref if os.path.isabs(ref) else os.path.join(base_dir, ref)
            for ref in refs if isinstance(ref, str) and ref and "\0" not in ref]


def _content_items(requests):
    """Every content item object of well-formed requests and messages."""
    for r in requests if isinstance(requests, list) else []:
        messages = r.get("messages") if isinstance(r, dict) else None
        for m in messages if isinstance(messages, list) else []:
            content = m.get("content") if isinstance(m, dict) else None
            yield from (item for item in (content if isinstance(content, list) else []) if isinstance(item, dict))


def _engine_files(engine_dir: str) -> list:
    """The weight files an engine's config names (they may lie outside its folder)."""
    from .runtime import load_engine_config
    cfg = load_engine_config(engine_dir)
    names = [cfg.get("weights", "model.safetensors")]
    names += [spec.get("path") for spec in cfg.get("lora_adapters", {}).values() if isinstance(spec.get("path"), str)]
    return [os.path.join(engine_dir, name) for name in names if name and "\0" not in name]


def _infer(a) -> int:
    from .refusals import check_warmup
    check_warmup(a.warmup)                  # flag bounds first: they cost nothing to check
    _check_outputs(a, [a.inputFile])
    doc = read_json_file(a.inputFile, "a JSON file", missing_flag="--inputFile")
    base_dir = os.path.dirname(os.path.realpath(a.inputFile))
    _check_outputs(a, [a.inputFile] + _engine_files(a.engineDir) + _referenced_files(doc, base_dir))
    from .runtime import Runtime            # torch (about 2 s of CPU) only for an input worth running
    rt = Runtime(a.engineDir, enable_context_reuse=a.enableContextReuse, max_records=a.contextCacheMaxRecords,
                 recurrent_snapshot_bytes=a.contextCacheRecurrentSnapshotPoolBytes,
                 partial_kv_snapshot_bytes=a.contextCachePartialKVSnapshotPoolBytes, tp_size=a.tpSize,
                 device=a.device, poison_fresh_pages=a.poisonFreshPages,
                 output_hidden_states=a.outputHiddenStates is not None, dump_profile=a.dumpProfile,
                 seed=a.seed, check_invariants=a.checkInvariants, semantics_profile=a.semanticsProfile)
    try:
        rf = rt.prepare(doc, base_dir, batch_size=a.batchSize, max_generate_length=a.maxGenerateLength)
    except BackendInputError as e:
        if e.path.startswith("$"):
            e.file = e.file or a.inputFile
        raise
    for path, message in rf.warnings:
        _say(f"warning: {a.inputFile}: {path}: {message}")
    result = rt.run(rf, warmup=a.warmup)
    _write_json(a.outputFile, {"input_file": a.inputFile, "responses": result["responses"]})
    if a.profileOutputFile:
        _write_json(a.profileOutputFile, rt.profile())
    if a.outputHiddenStates:
        from safetensors.torch import save_file
        tensors = {f"request_{i}": t.contiguous() for i, t in result["hidden_states"].items()}
        _atomic_write(a.outputHiddenStates, lambda tmp: save_file(tensors, tmp))
    for batch_idx, reason in result["failures"]:            # exit 1 says that; these lines say why
        _say(f"batch {batch_idx} failed: {reason}")
    return 1 if result["failed_batches"] else 0


def _say(text) -> None:
    """One line on stderr, whatever the text holds (a newline in a path or a message)."""
    print(f"{PROG}: " + " ".join(str(text).split()), file=sys.stderr)


def main(argv=None) -> int:
    try:
        a = _parser().parse_args(argv)
        if a.command is None:
            raise _Usage("expected a command: build, infer, capabilities or serve")
        if a.command == "build":
            return _build(a)
        if a.command == "infer":
            return _infer(a)
        if a.command == "serve":
            from .serve import main as serve
            return serve(a)
        from .capabilities import capabilities
        print(json.dumps(capabilities(a.device), indent=2))
        return 0
    except _Usage as e:
        _say(f"error: {e}")
        return 2
    except BackendInputError as e:
        _say(f"error: {e.one_line()}")
        return 2
    except DeploymentRejected as e:
        _say(f"error: {e.message}")
        return 3
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    except BaseException as e:  # a bug: report it in one line, never a traceback
        if isinstance(e, SystemExit) and e.code in (0, None):
            return 0
        _say(f"internal error: {type(e).__name__}: {e}")
        return 70
