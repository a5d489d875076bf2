"""`kvconform run`: the conformance run (the kit's main job, spec/RUNNING.md).

With no arguments: the bundled backend through its Python API (`inprocess`; `reference` when
torch or the backend cannot be imported), every curated case under tests/test_cases, and the
generated families, then a verdict table per spec section and a report folder. Exit code 0 only
when the backend is conformant (no mandatory case TIMEOUT, FAIL or ERROR), 1 otherwise, 2 on bad
input, 128 + the signal number when Ctrl-C, SIGTERM or SIGHUP interrupts it (report.json then
holds the finished cases with `"complete": false`, and `--resume` continues it). An existing,
non-empty report folder is refused unless `--force` or `--resume` says what to do with it.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from ..adapters import NAMES, AdapterError, default_backend, make_adapter
from ..cases import parse_shard
from ..errors import KvconformError
from ..report import Report, check_report, claim_report_folder, problems_table, verdict_table
from ..schemas import read_json
from ..suite import execute, make_plan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    g = parser.add_argument_group("backend")
    g.add_argument("--backend", choices=NAMES, help="adapter (default: inprocess where torch imports, else reference)")
    g.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="bundled backend device")
    g.add_argument("--timeout", type=float, default=120.0, metavar="S", help="seconds per invocation (default 120)")
    g.add_argument("--executable", metavar="CMD",
                   help="command adapter: an llm_inference-compatible command line (default: the bundled CLI)")
    g.add_argument("--engine-dir", metavar="DIR", help="command adapter: one fixed engine folder for every case")
    g.add_argument("--engine-config", metavar="FILE",
                   help="command adapter: the fixed engine's description (spec/engine.md) if DIR has none")
    g.add_argument("--build-command", metavar="CMD",
                   help="command adapter: builds an engine per case with the flags of spec/engine.md")
    g.add_argument("--capabilities", metavar="FILE", help="command adapter: the backend's capability manifest")
    g.add_argument("--backend-arg", action="append", default=[], metavar="ARG",
                   help="command adapter: an extra argument for every invocation (repeatable)")
    c = parser.add_argument_group("cases")
    c.add_argument("--case", action="append", metavar="PATH",
                   help="a case file or folder (repeatable; default: tests/test_cases)")
    c.add_argument("-k", "--keyword", action="append", metavar="TEXT",
                   help="run cases whose id contains TEXT or matches it as a glob (repeatable)")
    c.add_argument("--section", action="append", metavar="NAME", help="spec section: ID, PLAN, MEDIA, PUB, ... (repeatable)")
    c.add_argument("--rule", action="append", metavar="ID", help="cases citing this rule id (repeatable)")
    c.add_argument("--slow", action="store_true", help="include cases flagged slow")
    c.add_argument("--shard", metavar="I/N", help="run the I-th of N interleaved shards (merge with kvconform merge)")
    c.add_argument("--list", action="store_true", help="list the selected cases and exit")
    c.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="run N cases at once (useful with --backend command: processes overlap)")
    gen = parser.add_argument_group("generated request sets")
    gen.add_argument("--no-generated", action="store_true", help="curated cases only")
    gen.add_argument("--generated-only", action="store_true", help="generated families only")
    gen.add_argument("--families", metavar="LIST", help="comma-separated: text,vision,hybrid (default all)")
    gen.add_argument("--examples", type=int, default=300, metavar="N", help="examples per family at most (default 300)")
    gen.add_argument("--budget-seconds", type=float, default=180.0, metavar="S",
                     help="a cap on the time of all generated families together, shrinking aside (default 180; "
                          "--examples normally bounds the run, so the same examples run every time)")
    gen.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0: the same examples every run)")
    gen.add_argument("--max-steps", type=int, default=6, metavar="N", help="batches per example at most (default 6)")
    gen.add_argument("--save-regressions", action="store_true",
                     help="also write generated reproducers to tests/test_cases/regressions/")
    out = parser.add_argument_group("report")
    out.add_argument("--report", default="kvconform-report", metavar="DIR", help="report folder (default kvconform-report)")
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    again = out.add_mutually_exclusive_group()
    again.add_argument("--force", action="store_true", help="replace the report folder if it exists")
    again.add_argument("--resume", action="store_true",
                       help="continue the interrupted run recorded in the report folder: keep its finished "
                            "cases, run the rest with the options it recorded")


def _one_torch_thread() -> None:
    """Run the in-process backend's CPU ops on one thread unless OMP_NUM_THREADS says otherwise.

    The kit's engines are tiny: each torch op is microseconds of work, below what intra-op
    threads repay, and when another process holds a core the OpenMP workers wait for it.
    Measured on 2 shared cores (benchmarks/README.md, issue 6): the default run took 194 s with
    torch's default 2 threads and 62 s with one.
    """
    if os.environ.get("OMP_NUM_THREADS"):
        return
    import torch
    torch.set_num_threads(1)


# Options that decide what a run does; `--resume` takes them from the interrupted run's report.
RESUMED = ("case", "keyword", "section", "rule", "slow", "shard", "no_generated", "generated_only", "families",
           "examples", "budget_seconds", "seed", "max_steps", "save_regressions", "backend", "device", "timeout",
           "executable", "engine_dir", "engine_config", "build_command", "capabilities", "backend_arg")


def _resume_options(args) -> dict:
    """The interrupted report, after restoring its options into `args` (a different explicit
    option is refused: a resumed run must be the same run)."""
    path = Path(args.report) / "report.json"
    doc = read_json(path)
    problems = check_report(doc)
    if problems:
        raise KvconformError(f"cannot resume from an invalid report: {problems[0][1]}", str(path), problems[0][0])
    if doc["complete"]:
        raise KvconformError("the run is complete: nothing to resume (pass --force to run it again)", str(path))
    for key in ("kit_version", "spec_version", "running_version"):
        if doc[key] != Report.VERSIONS[key]:
            raise KvconformError(f"written by {key} {doc[key]}, this kit is {Report.VERSIONS[key]}: run it again "
                                 "with --force", str(path))
    saved = doc.get("options") or {}
    defaults = argparse.ArgumentParser()
    add_arguments(defaults)
    defaults = vars(defaults.parse_args([]))
    for key in RESUMED:
        if key not in saved:
            continue
        mine = getattr(args, key)
        if mine != defaults[key] and mine != saved[key]:
            flag = "--" + key.replace("_", "-")
            raise KvconformError(f"--resume continues the run recorded here, which ran with {flag} "
                                 f"{saved[key]!r}; leave {flag} out", str(path))
        setattr(args, key, saved[key])
    return doc


def _signals_interrupt():
    """SIGTERM and SIGHUP end the run like Ctrl-C: the partial report is kept and says so.
    Returns a function that restores the previous handlers."""
    def handler(signum, frame):
        raise Interrupted(signum)
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:        # not the main thread: leave signals alone
            pass
    return lambda: [signal.signal(sig, old) for sig, old in previous.items()]


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def main(args) -> int:
    resumed = _resume_options(args) if args.resume else None
    shard = parse_shard(args.shard)
    plan = make_plan(args.case, args.keyword, args.section, args.rule, args.slow,
                     generated=not args.no_generated, curated=not args.generated_only,
                     families=args.families.split(",") if args.families else None, shard=shard,
                     examples=args.examples, budget_s=args.budget_seconds, seed=args.seed,
                     max_steps=args.max_steps, save_regressions=args.save_regressions)
    if args.list:
        for case in plan.cases:
            print(f"{case.id}\t{case.section}\t{case.source()}")
        for family in plan.families:
            print(f"generated/{family}\tgenerated")
        return 0
    if not args.resume:
        claim_report_folder(Path(args.report), args.force)
    backend = args.backend or default_backend()
    if backend == "inprocess":
        _one_torch_thread()
    try:
        adapter = make_adapter(backend, device=args.device, timeout=args.timeout, executable=args.executable,
                               engine_dir=args.engine_dir, engine_config=args.engine_config,
                               build_command=args.build_command, capabilities=args.capabilities,
                               extra_args=args.backend_arg)
    except AdapterError as e:
        raise KvconformError(f"cannot start the {backend} adapter: {e}") from None
    try:
        manifest = adapter.capabilities()
    except Exception:
        manifest = None
    options = {k: v for k, v in vars(args).items() if k not in ("func",) and not callable(v)}
    report = Report(Path(args.report), backend, manifest, adapter.describe(), options, args.shard)
    if resumed is not None:
        done = report.resume(resumed)
        plan.cases = [c for c in plan.cases if c.id not in done]
        plan.families = [f for f in plan.families if f"generated/{f}" not in done]
        print(f"kvconform run: resuming {report.folder}: {len(done)} case(s) already finished", file=sys.stderr)
    start = time.monotonic()
    print(f"kvconform run: backend {backend}, {len(plan.cases)} case(s)"
          + (f", generated {','.join(plan.families)} (seed {args.seed}, {args.budget_seconds:g} s)" if plan.families else "")
          + (f", shard {args.shard}" if shard else ""), file=sys.stderr)
    restore = _signals_interrupt()
    try:
        execute(plan, adapter, report, progress=not args.no_progress, jobs=args.jobs)
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", signal.SIGINT)
        report.interrupted()
        print(verdict_table(report.results))
        print(f"interrupted ({signal.Signals(signum).name}): partial report of {len(report.results)} case(s) in "
              f"{report.folder}/report.json (complete: false); continue it with --resume", file=sys.stderr)
        return 128 + signum
    finally:
        restore()
        adapter.close()
    results = report.results
    doc = report.finish()
    print()
    print(verdict_table(results))
    problems = problems_table(results, folder=str(report.folder))
    if problems:
        print()
        print(problems)
    conformant = doc["summary"]["conformant"]
    print(f"\n{'CONFORMANT' if conformant else 'NOT CONFORMANT'}: {len(results)} case(s) in "
          f"{time.monotonic() - start:.0f} s; report in {report.folder}/ (report.json, junit.xml, summary.md)")
    return 0 if conformant else 1
