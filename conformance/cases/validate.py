"""The checks of `kvconform validate` (conformance/commands/validate.py): schema and semantic
checks of one file, each problem a (JSON path, message) pair.

The kind of each file (request, case, engine, output, profile, predictions, report,
capabilities) is told from its content unless `--kind` says it. Request and case files are also
parsed by the reference oracle (tokenization, media decoding, LoRA availability, one adapter
per batch, policy values; adapter weight files must exist for request files, whose paths are
relative to the file, not for cases, whose paths name the engine folder's files); a case's
`_conformance` block must cite known rule ids and describe an engine that builds, and a case
with `negative` must fail exactly as it declares. A valid request or case file's keys the
format does not know are listed apart (`unknown_keys`: ignored, and may be typos). The runner
checks every case it plans with `check_case` before anything runs.
"""
from __future__ import annotations

import os
from pathlib import Path

from . import schemas
from .. import KvconformError
from ..judge import oracle
from .case import Case, check_templates
from .rules import spec_rule_ids

KINDS = ("request", "case", "engine", "output", "profile", "predictions", "report", "capabilities")
_FORMATS = {"kvconform-engine-v1": "engine", "kvconform-predictions-v1": "predictions",
            "kvconform-report-v1": "report", "kvconform-capabilities-v1": "capabilities"}


def unknown_keys(file: str, kind: str | None) -> list[tuple[str, str]]:
    """The ignored keys of a request or case file that validated (schemas.unknown_request_keys)."""
    if kind not in ("request", "case"):
        return []
    return schemas.unknown_request_keys(schemas.read_json(file), limit=schemas.WARNINGS_SHOWN)


def check_file(file: str, kind: str | None = None, engine=None) -> tuple[list[tuple[str | None, str]], str | None]:
    """([(json path or None, message)], kind) for one file; no problems means valid."""
    try:
        doc = schemas.read_json(file)
    except KvconformError as e:
        return [(e.json_path, e.message)], kind
    kind = kind or detect_kind(doc)
    if kind is None:
        return [("$", "cannot tell what kind of file this is (request, case, engine, output, "
                      "profile, predictions, report, capabilities); pass --kind")], None
    base_dir = os.path.dirname(os.path.realpath(file))
    try:
        if kind == "case":
            return check_case(doc, base_dir, file), kind
        problems = schemas.schema_errors(doc, kind)
        if problems:
            return problems, kind
        if kind == "request":
            oracle.parse_request_file(doc, base_dir, engine, lora_files=True)
        elif kind == "engine":      # its tokenizer folder is relative to the file, as a runtime reads it
            oracle.check_token_ids(oracle.engine_from_config(oracle.resolve_engine_paths(doc, base_dir)))
        elif kind in ("predictions", "report"):
            return _unknown_rules(doc), kind
    except oracle.InputError as e:
        return [(e.path, e.message)], kind
    except RecursionError:
        return [("$", "nested too deeply")], kind
    return [], kind


def detect_kind(doc) -> str | None:
    if not isinstance(doc, dict):
        return None
    if "_conformance" in doc:
        return "case"
    if isinstance(doc.get("format"), str) and doc["format"] in _FORMATS:  # a list here is unhashable
        return _FORMATS[doc["format"]]
    if "requests" in doc:
        return "request"
    if "responses" in doc:
        return "output"
    if "layer_kinds" in doc or "tokens_per_page" in doc:
        return "engine"
    if "context_cache" in doc or "prefill" in doc:
        return "profile"
    return None


def check_case(doc: dict, base_dir: str, file: str) -> list[tuple[str | None, str]]:
    """A case: the request schema (the `_conformance` block included), known rule ids, an
    engine block that builds, runtime flags, `generated` and `expect` shaped like the requests,
    and a request file that parses, or fails exactly as `negative` declares."""
    errors = schemas.schema_errors(doc, "request")
    if not isinstance(doc, dict) or not isinstance(doc.get("_conformance"), dict):  # --kind case on anything
        return [e for e in errors if e[0] in ("$", "$._conformance")] or [("$", "a case needs a _conformance block")]
    block_errors = [e for e in errors if e[0].startswith("$._conformance")]
    if block_errors:
        return block_errors
    meta = doc["_conformance"]
    known = spec_rule_ids()
    problems = [(f"$._conformance.rules[{i}]", f"unknown rule id {rule!r} (not in spec/context-reuse.md)")
                for i, rule in enumerate(meta["rules"]) if rule not in known]
    rejected = meta.get("expect", {}).get("rejected")
    if rejected and rejected["rule"] not in known:
        problems.append(("$._conformance.expect.rejected.rule", f"unknown rule id {rejected['rule']!r}"))
    try:
        flags = oracle.RuntimeFlags.from_case_runtime(meta.get("runtime"))
    except oracle.InputError as e:
        return problems + [(e.path, e.message)]
    args = dict(meta["engine"])
    if isinstance(args.get("tokenizer"), str) and not os.path.isabs(args["tokenizer"]):
        args["tokenizer"] = os.path.join(base_dir, args["tokenizer"])     # relative to the case file
    try:
        engine = oracle.derive_engine(args)
    except oracle.InputError as e:
        # A refused build is a legitimate case (the backend's build must refuse it too), but
        # then nothing runs, so the case cannot expect counts or a parse failure.
        if set(meta.get("expect", {})) - {"rejected"} or meta.get("negative"):
            return problems + [(e.path, f"the engine block does not build ({e.message}), "
                                        "yet the case expects a run")]
        engine = None
    negative = meta.get("negative")
    request_errors = [e for e in errors if not e[0].startswith("$._conformance")]
    if negative is None:
        if request_errors:
            return problems + request_errors
        try:
            parsed = oracle.parse_request_file(doc, base_dir, engine, flags.batch_size)
        except oracle.InputError as e:
            return problems + [(e.path, e.message)]
        count = len(parsed.requests)
        for key in ("generated",):
            entries = meta.get(key)
            if entries is not None:
                if len(entries) != count:
                    problems.append((f"$._conformance.{key}", f"has {len(entries)} entries for {count} requests"))
                for i, entry in enumerate(entries):
                    try:
                        oracle.parse_generated(entry, f"$._conformance.{key}[{i}]")
                    except oracle.InputError as e:
                        problems.append((e.path, e.message))
        expected = meta.get("expect", {}).get("requests")
        if expected is not None and len(expected) != count:
            problems.append(("$._conformance.expect.requests", f"has {len(expected)} entries for {count} requests"))
        try:
            check_templates(Case(Path(file), doc))
        except KvconformError as e:
            problems.append((e.json_path, e.message))
        return problems
    failures = request_errors
    if not failures:
        try:
            oracle.parse_request_file(doc, base_dir, engine, flags.batch_size)
        except oracle.InputError as e:
            failures = [(e.path, e.message)]
    if not failures:
        return problems + [("$._conformance.negative", f"declares an input error at {negative['path']} "
                                                      "but the request file is valid")]
    matching = [m for p, m in failures if p == negative["path"]]
    if not matching:
        return problems + [("$._conformance.negative.path",
                            f"declares an input error at {negative['path']}, but it fails at "
                            f"{failures[0][0]}: {failures[0][1]}")]
    wanted = negative.get("message_contains")
    if wanted and not any(wanted.lower() in m.lower() for m in matching):
        problems.append(("$._conformance.negative.message_contains",
                         f"{wanted!r} is not in the message {matching[0]!r}"))
    return problems


def _unknown_rules(doc: dict) -> list[tuple[str, str]]:
    """Rule ids cited by a predictions or report file must exist in the spec."""
    known, out = spec_rule_ids(), []
    if isinstance(doc.get("rejected"), dict) and doc["rejected"].get("rule") not in known:
        out.append(("$.rejected.rule", f"unknown rule id {doc['rejected']['rule']!r}"))
    for i, batch in enumerate(doc.get("batches") or []):
        if isinstance(batch, dict) and batch.get("rule") and batch["rule"] not in known:
            out.append((f"$.batches[{i}].rule", f"unknown rule id {batch['rule']!r}"))
    for i, case in enumerate(doc.get("cases") or []):
        for j, rule in enumerate(case.get("rules", []) if isinstance(case, dict) else []):
            if rule not in known:
                out.append((f"$.cases[{i}].rules[{j}]", f"unknown rule id {rule!r}"))
    return out


def load_engine(path: str):
    """The engine description of `--engine-dir`/`--engine-config` (a folder or its config.json)."""
    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    config = schemas.read_json(file)
    problems = schemas.schema_errors(config, "engine")
    if problems:
        raise KvconformError(problems[0][1], file, problems[0][0])
    try:
        engine = oracle.engine_from_config(oracle.resolve_engine_paths(config, os.path.dirname(os.path.realpath(file))))
        oracle.check_token_ids(engine)
        return engine
    except oracle.InputError as e:
        raise KvconformError(e.message, file, e.path) from None
