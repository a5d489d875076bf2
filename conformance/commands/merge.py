"""`kvconform merge OUT DIR...`: one report from the report folders of a sharded run.

The shards must come from the same kit, spec, RUNNING version and adapter; their cases are
joined (an id in two shards is an error), the summary is recomputed, reproducers are copied,
and the merged report is complete only when every shard is complete and shards 1..N are all
present.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from ..errors import KvconformError
from ..report import check_report, claim_report_folder, verdict_table, write_json_atomic, write_outputs
from ..schemas import read_json
from ..verdicts import CaseResult, summarize

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
                raise KvconformError(f"shards disagree on {key}: {first[key]!r} vs {doc[key]!r}")
        if doc["backend"]["adapter"] != first["backend"]["adapter"]:
            raise KvconformError(f"shards ran different adapters: {first['backend']['adapter']} vs "
                                 f"{doc['backend']['adapter']}")
    cases, seen = [], set()
    for doc in docs:
        for c in doc["cases"]:
            if c["id"] in seen:
                raise KvconformError(f"case {c['id']!r} is in more than one shard")
            seen.add(c["id"])
            cases.append(c)
    cases.sort(key=lambda c: c["id"])
    shards = sorted({d.get("shard") for d in docs if d.get("shard")})
    total = {int(s.split("/")[1]) for s in shards}
    covered = len(total) == 1 and {int(s.split("/")[0]) for s in shards} == set(range(1, total.pop() + 1))
    results = [CaseResult.from_json(c) for c in cases]
    merged = dict(first, shard=None, cases=cases, summary=summarize(results),
                  complete=all(d["complete"] for d in docs) and (covered or not shards),
                  started=min(d.get("started") or "" for d in docs),
                  finished=max(d.get("finished") or "" for d in docs) or None)
    merged["options"] = dict(first.get("options") or {}, merged_from=[d.get("shard") for d in docs])
    return merged


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
    claim_report_folder(out, args.force, hint="pass --force to replace it")
    out.mkdir(parents=True, exist_ok=True)
    for folder in folders:
        if (folder / "reproducers").is_dir():
            shutil.copytree(folder / "reproducers", out / "reproducers", dirs_exist_ok=True)
    write_json_atomic(out / "report.json", merged)
    results = [CaseResult.from_json(c) for c in merged["cases"]]
    write_outputs(out, merged, results)
    print(verdict_table(results))
    state = "CONFORMANT" if merged["summary"]["conformant"] else "NOT CONFORMANT"
    print(f"\n{state}: {len(results)} case(s) from {len(docs)} report(s); complete: {merged['complete']}; "
          f"merged report in {out}/", file=sys.stdout)
    return 0 if merged["summary"]["conformant"] and merged["complete"] else 1
