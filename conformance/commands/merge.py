"""`kvconform merge OUT DIR...`: one report from the report folders of a sharded run.

Only the shards of one run are merged: the same kit, spec and RUNNING versions, the same backend
(adapter, its settings and manifest) and the same plan (the selection before sharding, its
generation settings and seed), each shard once. Anything else is refused (exit 2). Cases are
joined, the summary is recomputed, reproducers are copied. A merge that lacks a shard, or holds
an interrupted one, is INCOMPLETE: written, but never CONFORMANT (exit 1).
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from .. import KvconformError
from ..cases.schemas import read_json
from ..judge.verdicts import CaseResult, summarize
from ..report.document import check_report, write_outputs
from ..report.folder import claim_report_folder, write_json_atomic
from ..report.tables import section_of, section_order, verdict_table
from ..run.loop import exit_code

SAME = ("kit_version", "spec_version", "running_version", "semantics_profile")


def add_arguments(parser) -> None:
    parser.add_argument("output", metavar="OUT", help="the merged report folder")
    parser.add_argument("shards", nargs="+", metavar="DIR", help="report folders written with --shard I/N")
    parser.add_argument("--force", action="store_true", help="replace OUT if it holds an earlier report")


def merge(docs: list[dict]) -> dict:
    first = docs[0]
    for doc in docs[1:]:
        for key in SAME:
            if doc[key] != first[key]:
                raise KvconformError(f"the reports disagree on {key}: {first[key]!r} vs {doc[key]!r}")
        if _backend(doc) != _backend(first):
            raise KvconformError(f"the reports tested different backends: {_describe(first)} vs {_describe(doc)}")
        if doc.get("plan") != first.get("plan"):
            raise KvconformError("the reports ran different plans (cases, generated families, seed or generation "
                                 "settings): only the shards of one run can be merged")
    shards = [_shard(doc) for doc in docs]
    totals = {n for _, n in shards}
    if len(totals) != 1:
        raise KvconformError(f"the reports are shards of different splits: {sorted(f'{i}/{n}' for i, n in shards)}")
    total = totals.pop()
    seen_shards = [i for i, _ in shards]
    if len(set(seen_shards)) != len(seen_shards):
        raise KvconformError(f"shard {max(seen_shards, key=seen_shards.count)}/{total} is given twice")
    cases, seen = [], set()
    for doc in docs:
        for c in doc["cases"]:
            if c["id"] in seen:
                raise KvconformError(f"case {c['id']!r} is in more than one shard")
            seen.add(c["id"])
            cases.append(c)
    cases.sort(key=lambda c: c["id"])
    missing = sorted(set(range(1, total + 1)) - set(seen_shards))
    complete = not missing and all(d["complete"] for d in docs)
    results = [CaseResult.from_json(c) for c in cases]
    stops = [d["stopped_early"] for d in docs if d.get("stopped_early")]     # shards run with --fail-fast
    stopped = ({"at": ", ".join(s["at"] for s in stops), "not_run": sum(s["not_run"] for s in stops)}
               if stops else None)
    merged = dict(first, shard=None, cases=cases, complete=complete,
                  summary=summarize(results, complete, bool(first["backend"].get("self_check")), group=section_of,
                                    order=section_order, selection=(first.get("plan") or {}).get("selection"),
                                    stopped=stopped),
                  started=min(d.get("started") or "" for d in docs),
                  finished=max(d.get("finished") or "" for d in docs) or None)
    merged.pop("stopped_early", None)
    if stopped:
        merged["stopped_early"] = stopped
    merged["options"] = dict(first.get("options") or {}, merged_from=[d.get("shard") for d in docs],
                             missing_shards=[f"{i}/{total}" for i in missing],
                             interrupted_shards=[d["shard"] for d in docs if not d["complete"]])
    return merged


def _shard(doc: dict) -> tuple[int, int]:
    if not doc.get("shard"):
        raise KvconformError("a report without --shard cannot be merged: merge joins the shards of one run")
    if not doc.get("plan"):
        raise KvconformError(f"shard {doc['shard']} records no plan identity (written by an older kit): re-run it")
    i, n = doc["shard"].split("/")
    return int(i), int(n)


def _backend(doc: dict) -> dict:
    b = doc["backend"]
    return {k: b.get(k) for k in ("adapter", "settings", "capabilities", "self_check")}


def _describe(doc: dict) -> str:
    b = doc["backend"]
    return f"{b['adapter']} {b.get('settings') or ''}".strip()


def main(args) -> int:
    docs, folders = [], [Path(f) for f in args.shards]
    for folder in folders:
        doc = read_json(folder / "report.json")
        errors = check_report(doc)
        if errors:
            raise KvconformError(errors[0][1], str(folder / "report.json"), errors[0][0])
        docs.append(doc)
    merged = merge(docs)
    out = Path(args.output)
    if any(out.resolve() == folder.resolve() for folder in folders):
        raise KvconformError("the merged report cannot be written into one of its shards", str(out))
    claim_report_folder(out, args.force, hint="pass --force to replace it", command="merge")
    out.mkdir(parents=True, exist_ok=True)
    for folder in folders:
        for kept in ("reproducers", "materialized"):
            if (folder / kept).is_dir():
                try:
                    shutil.copytree(folder / kept, out / kept, dirs_exist_ok=True)
                except (OSError, shutil.Error) as e:
                    raise KvconformError(f"cannot copy {folder / kept}: {getattr(e, 'strerror', None) or e}",
                                         str(out / kept)) from None
    write_json_atomic(out / "report.json", merged)
    results = [CaseResult.from_json(c) for c in merged["cases"]]
    write_outputs(out, merged, results)
    print(verdict_table(results))
    summary = merged["summary"]
    gaps = merged["options"]["missing_shards"] + [f"{s} (interrupted)" for s in merged["options"]["interrupted_shards"]]
    print(f"\n{summary['headline']}: {len(results)} case(s) from {len(docs)} report(s)"
          + (f"; lacking shard(s) {', '.join(gaps)}" if gaps else "") + f"; merged report in {out}/")
    return exit_code(summary)
