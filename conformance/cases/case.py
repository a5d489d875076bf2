"""Case files: loading, selection and materialization (spec/RUNNING.md section 4).

A case is an Edge-LLM request file with a `_conformance` block. Before a backend sees it the
runner *materializes* it: media paths become absolute, relative LoRA weight paths are resolved
against the engine directory, and `{{output:K}}` templates are replaced by the generated text of
request K of the same file (see `resolve_outputs`).
"""
from __future__ import annotations

import copy
import fnmatch
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .. import KvconformError
from .schemas import read_json, schema_errors

ROOT = Path(__file__).resolve().parents[2]
CASES_DIR = ROOT / "cases"

# Spec sections in document order: the verdict table groups cases by the first rule they cite.
SECTIONS = {
    "ID": "1 Cache identity", "PLAN": "2 Planning", "MEDIA": "3 Media spans",
    "PUB": "4 Publication", "POL": "5 Policies", "CAP": "6 Capacity", "BATCH": "7 Batching",
    "HYB": "8 Recurrent and hybrid", "SUP": "9 Support matrix", "MET": "10 Metrics",
    "OUT": "11 Outputs", "TOK": "12 Tokenizers and media counts",
}

OUTPUT_TEMPLATE = re.compile(r"\{\{output:(\d+)\}\}")


@dataclass
class Case:
    """One case file. `doc` is the whole JSON document, `meta` its `_conformance` block."""
    path: Path
    doc: dict

    @property
    def meta(self) -> dict:
        return self.doc["_conformance"]

    @property
    def id(self) -> str:
        return self.meta["id"]

    @property
    def rules(self) -> list[str]:
        return list(self.meta["rules"])

    @property
    def section(self) -> str:
        first = self.rules[0]
        return "TOK" if first.startswith("TOK-") else first.split("-")[1]

    @property
    def mandatory(self) -> bool:
        return self.meta.get("mandatory", True)

    @property
    def flags(self) -> list[str]:
        return list(self.meta.get("flags", []))

    @property
    def engine_args(self) -> dict:
        return self.meta["engine"]

    @property
    def runtime(self) -> dict:
        return dict(self.meta.get("runtime", {}))

    @property
    def compare_outputs(self) -> bool:
        return self.meta.get("compare_outputs", True)

    @property
    def negative(self) -> dict | None:
        return self.meta.get("negative")

    @property
    def base_dir(self) -> str:
        """Absolute: media paths are joined to it, and a backend may run in another folder."""
        return str(self.path.resolve().parent)

    def batch_size(self) -> int:
        return self.runtime.get("batchSize") or self.doc.get("batch_size", 1)

    @property
    def profiles(self) -> list[str]:
        """The semantics profiles the case holds in (spec/profiles.md): as it says, else every
        profile in which all of its rules hold."""
        from ..judge.oracle import PROFILE_NAMES, load_profile
        if "profiles" in self.meta:
            return list(self.meta["profiles"])
        return [p for p in PROFILE_NAMES if all(load_profile(p).holds(r) for r in self.rules)]

    def for_profile(self, name: str) -> "Case":
        """The case as it runs under one semantics profile: the runtime flag `semanticsProfile`
        set (the oracle reads it, a backend that implements several profiles gets it), and the
        hand-derived expectations of that profile (`profile_expect`, else `expect`)."""
        doc = dict(self.doc)
        meta = doc["_conformance"] = dict(self.meta)
        meta["runtime"] = dict(self.runtime, semanticsProfile=name)
        if name in meta.get("profile_expect", {}):
            meta["expect"] = meta["profile_expect"][name]
        return Case(self.path, doc)

    def source(self) -> str:
        try:
            return str(self.path.resolve().relative_to(ROOT))
        except ValueError:
            return str(self.path)


def load_case(path: str | Path) -> Case:
    """Read a case file; KvconformError if it is not valid JSON, not a case, or off-schema."""
    doc = read_json(path)
    if not isinstance(doc, dict) or "_conformance" not in doc:
        raise KvconformError("not a case file: no _conformance block", str(path))
    errors = schema_errors(doc, "request")
    if errors and not (doc["_conformance"].get("negative")):
        json_path, message = errors[0]
        raise KvconformError(message, str(path), json_path)
    if errors:  # a negative case may break the request format on purpose, not its case block
        block = [(p, m) for p, m in errors if p.startswith("$._conformance")]
        if block:
            raise KvconformError(block[0][1], str(path), block[0][0])
    engine = doc["_conformance"].get("engine")
    if isinstance(engine, dict) and isinstance(engine.get("tokenizer"), str) and not os.path.isabs(engine["tokenizer"]):
        # a tokenizer folder is named relative to the case file, like media; resolved once, so
        # that a reproducer written elsewhere still names it
        engine["tokenizer"] = os.path.realpath(os.path.join(os.path.dirname(os.path.realpath(path)), engine["tokenizer"]))
    case = Case(Path(path), doc)
    check_templates(case)
    return case


def discover(paths: list[str | Path] | None = None) -> list[Case]:
    """All case files under the given files and folders (default cases/), by id.

    JSON files without a `_conformance` block are plain request files and are skipped when
    found in a folder; named explicitly they are an error.
    """
    cases, seen = [], {}
    for root in [Path(p) for p in (paths or [CASES_DIR])]:
        if root.is_file():
            files = [root]
        elif root.is_dir():
            files = sorted(root.rglob("*.json"))
        else:
            raise KvconformError("no such case file or folder", str(root))
        for f in files:
            if root.is_dir() and (not _looks_like_case(f) or _is_evidence(f, root)):
                continue
            case = load_case(f)
            if case.id in seen:
                raise KvconformError(f"duplicate case id {case.id!r} (also in {seen[case.id]})",
                                     str(f), "$._conformance.id")
            seen[case.id] = f
            cases.append(case)
    return sorted(cases, key=lambda c: c.id)


def _is_evidence(path: Path, root: Path) -> bool:
    """Files a report keeps beside a reproducer (`NAME.files/`) are evidence, not cases, even
    though the request files among them still carry their case's `_conformance` block."""
    return any(part.endswith(".files") for part in path.relative_to(root).parts[:-1])


def _looks_like_case(path: Path) -> bool:
    try:
        return '"_conformance"' in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def select(cases: list[Case], keywords: list[str] | None = None, sections: list[str] | None = None,
           rules: list[str] | None = None, slow: bool = False, *, exclude: list[str] | None = None) -> list[Case]:
    """Cases whose id contains (or glob-matches) any keyword and no `exclude` text, in any
    section, citing any rule."""
    out = []
    for c in cases:
        if "slow" in c.flags and not slow:
            continue
        if keywords and not matches(c.id, keywords):
            continue
        if exclude and matches(c.id, exclude):
            continue
        if sections and c.section not in {s.upper() for s in sections}:
            continue
        if rules and not set(rules) & set(c.rules):
            continue
        out.append(c)
    return out


def matches(case_id: str, texts: list[str]) -> bool:
    """Whether `case_id` contains any text or matches it as a glob (the -k and --exclude rule)."""
    return any(t in case_id or fnmatch.fnmatch(case_id, t) for t in texts)


def in_shard(index: int, shard: tuple[int, int] | None) -> bool:
    """Shard i/n (1-based) takes every n-th item starting at i-1."""
    return shard is None or index % shard[1] == shard[0] - 1


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    m = re.fullmatch(r"(\d+)/(\d+)", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise KvconformError(f"--shard must be I/N with 1 <= I <= N, got {text!r}")
    return int(m.group(1)), int(m.group(2))


# --- materialization --------------------------------------------------------------------------

def materialize(doc: dict, base_dir: str, engine_dir: str | None) -> dict:
    """The request file a backend runs: absolute media paths and LoRA weight paths.

    The `_conformance` block stays (llm_inference ignores unknown keys), so the file written
    for an external executable still says which case it is.
    """
    out = copy.deepcopy(doc)
    for request in out.get("requests", []):
        for message in request.get("messages", []) if isinstance(request, dict) else []:
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, list):
                continue
            for item in content:
                if isinstance(item, dict) and item.get("type") in ("image", "audio"):
                    key = item["type"]
                    if isinstance(item.get(key), str) and item[key] and not os.path.isabs(item[key]):
                        item[key] = os.path.normpath(os.path.join(base_dir, item[key]))
    weights = out.get("available_lora_weights")
    if isinstance(weights, dict) and engine_dir:
        for name, path in weights.items():
            if isinstance(path, str) and path and not os.path.isabs(path):
                weights[name] = os.path.join(engine_dir, path)
    return out


def bypass_replay_of(doc: dict) -> dict:
    """The file under `bypass` (CR-OUT-1's reference run), asking at least two log-probability
    candidates per step, whatever the file asks: a first difference is then judged a near-tie or
    not by the replay's own top-2 gap even when the case asks one (spec/RUNNING.md section 5)."""
    out = dict(doc, context_cache_lookup_policy="bypass", num_logprobs=max(2, doc.get("num_logprobs") or 0))
    out["requests"] = [dict(r, num_logprobs=max(2, r["num_logprobs"])) if isinstance(r, dict)
                       and isinstance(r.get("num_logprobs"), int) else r for r in doc.get("requests", [])]
    return out


# --- {{output:K}} templates -------------------------------------------------------------------

def template_refs(doc: dict) -> dict[int, set[int]]:
    """{request index: the request indices K its `{{output:K}}` templates refer to}."""
    refs: dict[int, set[int]] = {}
    for i, request in enumerate(doc.get("requests", [])):
        text = json.dumps(request.get("messages", []) if isinstance(request, dict) else [])
        found = {int(k) for k in OUTPUT_TEMPLATE.findall(text)}
        if found:
            refs[i] = found
    return refs


def check_templates(case: Case) -> None:
    """`{{output:K}}` in request i must name a request of an earlier batch: K's text exists
    only after K's batch has run, and a batch runs after the previous one (CR-BATCH-1)."""
    size = case.batch_size()
    for i, ks in template_refs(case.doc).items():
        for k in ks:
            if not (isinstance(size, int) and size >= 1 and k < (i // size) * size):
                raise KvconformError(
                    f"{{{{output:{k}}}}} in request {i} must refer to a request of an earlier batch "
                    f"(batch size {size})", str(case.path), f"$.requests[{i}]")


def resolve_outputs(doc: dict, texts: dict[int, str], upto: int | None = None) -> dict:
    """Replace `{{output:K}}` by `texts[K]` in the requests before index `upto` (all if None).

    With greedy decoding request K's text is a function of its input, so a case can continue a
    conversation with whatever answer the backend gives, and the answer is fed back exactly
    (spec/tokenizer.md section 4: generated text round-trips).
    """
    out = dict(doc)
    requests = copy.deepcopy(doc["requests"])
    for i, request in enumerate(requests[:upto] if upto is not None else requests):
        for message in request.get("messages", []):
            if isinstance(message.get("content"), str):
                message["content"] = _substitute(message["content"], texts, i)
            elif isinstance(message.get("content"), list):
                for item in message["content"]:
                    if item.get("type") == "text" and isinstance(item.get("text"), str):
                        item["text"] = _substitute(item["text"], texts, i)
    out["requests"] = requests
    return out


def _substitute(text: str, texts: dict[int, str], where: int) -> str:
    def repl(m: re.Match) -> str:
        k = int(m.group(1))
        if k not in texts:
            raise KvconformError(f"request {where}: no output of request {k} to substitute for {m.group(0)}")
        return texts[k]
    return OUTPUT_TEMPLATE.sub(repl, text)
