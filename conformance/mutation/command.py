"""`kvconform selftest --mutate [PATH...]`: the options and the printing of the campaign.

Exit code: 0 when the campaign finished (and, with `--check`, every survivor is triaged as
equivalent); 1 when `--check` finds an unexplained survivor or mutants are left pending; 2 on
bad input; 130 when interrupted (the store keeps every verdict: run the same command again).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import KvconformError, executors


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("mutation campaign (docs/mutation.md; needs pip install 'kvconform[mutate]')")
    g.add_argument("--mutate", nargs="*", metavar="PATH",
                   help="mutate these modules (PATH or PATH::NAME,... for some definitions; a folder for its modules; "
                        "none: the bundled backend's reuse logic, semantics, media and template handling, peer "
                        "caches and serve.py) and judge every mutant as its deployment's user judges a runtime")
    g.add_argument("--check", action="store_true",
                   help="with --mutate: exit 1 on any survivor the triage file does not explain")
    g.add_argument("--store", default="kvconform-mutation/store.sqlite", metavar="FILE",
                   help="the campaign's resumable store (default kvconform-mutation/store.sqlite)")
    g.add_argument("--triage", metavar="FILE", help="the survivors' triage (default docs/mutation-triage.json)")
    g.add_argument("--batch", type=int, default=6, metavar="N", help="mutants per unit of work (default 6)")
    g.add_argument("--mutant-timeout", type=float, default=600.0, metavar="S",
                   help="seconds a mutant may take before it counts as a hang, i.e. TIMEOUT (default 600)")
    g.add_argument("--rejudge", action="append", choices=("survived", "not_covered", "killed"), metavar="STATUS",
                   help="judge the mutants with this status again (after adding cases: --rejudge survived)")
    g.add_argument("--table", metavar="FILE", help="also write the table and the survivors as Markdown to FILE")
    g.add_argument("--case", action="append", metavar="PATH",
                   help="with --mutate: judge backend mutants with these curated cases only (repeatable; default all)")
    g.add_argument("--profile", action="append", metavar="NAME",
                   help="with --mutate: the semantics or peer profiles to judge under (repeatable; default all: "
                        "kvconform-1 and edge-llm-0.10, and the four peer profiles)")
    g.add_argument("--limit", type=int, metavar="N",
                   help="with --mutate: judge at most N pending mutants this time (the rest stay pending)")
    executors.add_arguments(parser, "--jobs worker processes")


def main(args) -> int:
    from . import report, triage
    from .campaign import Campaign
    from .store import Store
    from .targets import ROOT, expand
    executors.check(args)
    from .targets import EDGE_PROFILES, PEER_DEPLOYMENTS, PEER_PROFILES
    for name in args.profile or []:
        if name not in EDGE_PROFILES and name not in PEER_PROFILES and name not in PEER_DEPLOYMENTS:
            raise KvconformError(f"--profile {name}: not a profile or peer deployment the campaign judges under "
                                 f"({', '.join([*EDGE_PROFILES, *PEER_PROFILES])}, or a name of "
                                 "conformance/mutation/targets.py PEER_DEPLOYMENTS)")
    for path in args.case or []:
        if not Path(path).exists():
            raise KvconformError(f"--case {path}: no such case file or folder")
    if args.limit is not None and args.limit < 0:
        raise KvconformError(f"--limit must be at least 0, got {args.limit}")
    if args.batch < 1:
        raise KvconformError(f"--batch must be at least 1, got {args.batch}")
    targets = expand(args.mutate or [])
    explained = triage.load(Path(args.triage) if args.triage else triage.DEFAULT)
    store = Store(Path(args.store))
    pool = executors.make_pool(args, "cpu", "inprocess", args.jobs)
    print(f"kvconform selftest --mutate: {len(targets)} module(s), {pool.describe()['name']} executor, "
          f"{pool.slots} worker(s), store {args.store}", file=sys.stderr)
    progress = (lambda text: None) if args.no_progress else (lambda text: print(text, file=sys.stderr, flush=True))
    interrupted = False
    try:
        if args.executor == "ray":
            from ..executors.units import kit_fingerprint
            pool.check_nodes([str(ROOT)], kit_fingerprint())
        Campaign(store, pool, ROOT, batch=args.batch, deadline_s=args.mutant_timeout, progress=progress,
                 cases=[str(Path(c).resolve()) for c in args.case or []], profiles=args.profile,
                 limit=args.limit).run(targets, tuple(args.rejudge or ()))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        pool.close()
    rows = store.rows(sorted({rel for rel, _ in targets}))
    store.close()
    modules = report.module_rows(rows, explained)
    total = report.total_of(modules)
    print(report.table(modules + [total]))
    left = report.survivors(rows, explained)
    stale = triage.line_keyed(explained)
    if stale:
        print(f"\n{len(stale)} triage entr{'y is' if len(stale) == 1 else 'ies are'} keyed by line number and explain "
              f"nothing (first: {stale[0]}): rekey them with python tools/migrate_mutation_triage.py", file=sys.stderr)
    if left:
        print(f"\nsurvivors not explained by {args.triage or 'docs/mutation-triage.json'} ({len(left)}):")
        for line in left:
            print("  " + line)
    if args.table:
        write_markdown(Path(args.table), modules, total, left, args)
    if interrupted:
        print(f"\ninterrupted: every verdict so far is in {args.store}; run the same command again to go on",
              file=sys.stderr)
        return 130
    pending = total["pending"]
    if pending:
        print(f"\n{pending} mutant(s) still pending (--limit, or a unit that did not come back): run the same "
              "command again", file=sys.stderr)
    if args.check and (left or pending):
        print(f"MUTATION CHECK FAILED: {len(left)} survivor(s) without a triage entry, {pending} pending")
        return 1
    print("MUTATION CHECK PASSED" if args.check else f"kill rate {fmt(total['kill rate'])}")
    return 0


def fmt(value) -> str:
    return "-" if value is None else f"{value:.1f}%"


def write_markdown(path: Path, modules: list[dict], total: dict, left: list[str], args) -> None:
    from . import report
    chosen = "".join(f" --profile {p}" for p in args.profile or []) + "".join(f" --case {c}" for c in args.case or [])
    lines = [f"Command: `kvconform selftest --mutate {' '.join(args.mutate or [])}{chosen} --jobs {args.jobs}"
             f"{' --executor ' + args.executor if args.executor != 'local' else ''}` on {os.cpu_count()} cores"
             + (" (a kill rate judged with these cases and profiles only: a lower bound of the whole suite's)."
                if chosen else "."), "",
             report.table(modules + [total], fmt="github"), ""]
    if left:
        lines += ["Survivors without a triage entry:", ""] + [f"- `{line}`" for line in left] + [""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
