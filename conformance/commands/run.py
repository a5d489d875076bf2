"""`kvconform run`: the conformance run (the kit's main job, spec/RUNNING.md).

With no arguments: the bundled backend through its Python API (`inprocess`), every curated case
under cases/, and the generated families, then a verdict table per spec section and a
report folder. The oracle is never a fallback backend: when the bundled backend cannot be
imported the run stops (exit 2) with the import error; `--backend reference` runs the oracle
against itself as an explicit self-check of the kit, and its report says that no backend was
tested.

Exit code 0 only when the backend is CONFORMANT (a complete run that judged at least one case, no
mandatory case TIMEOUT, FAIL or ERROR) or the self-check passed, 1 otherwise, 2 on bad input
(decided before anything runs: unknown names, numbers out of range, an empty selection, options
of another adapter), 128 + the signal number when Ctrl-C, SIGTERM or SIGHUP interrupts it
(report.json then holds the finished cases with `"complete": false`, and `--resume` continues
it). An existing, non-empty report folder is refused unless `--force` or `--resume` says what to
do with it.
"""
from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import time
from pathlib import Path

from .. import KvconformError, executors
from ..adapters import NAMES, SELF_CHECKS, AdapterError, choose_backend, make_adapter, option_flag
from ..cases.case import parse_shard
from ..cases.schemas import read_json
from ..generate import MIN_BATCHES
from ..judge import oracle
from ..judge.verdicts import headline_clauses, judged_line
from ..report.document import Report, check_report
from ..report.folder import claim_report_folder
from ..run.loop import exit_code, print_explanation, print_verdicts, report_files, stop_interrupted
from ..run.suite import execute, make_plan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_backend_arguments(parser)
    _add_case_arguments(parser)


def _peer_profiles() -> str:
    """'a, b, c or d': the peer profiles, for the help text."""
    from ..peers import PROFILES
    return ", ".join(PROFILES[:-1]) + " or " + PROFILES[-1]


def add_backend_arguments(parser: argparse.ArgumentParser, servers: bool = True):
    """The adapter and its options (`kvconform campaign` takes the same, without `servers`: the
    options of `--backend openai`, which it does not drive). Returns the "backend" group."""
    g = parser.add_argument_group("backend")
    g.add_argument("--backend", choices=NAMES if servers else [n for n in NAMES if n != "openai"],
                   help="adapter (default: command when a command option is given, else inprocess)")
    g.add_argument("--device", choices=("auto", "cpu", "cuda"), help="bundled backend device (default auto)")
    g.add_argument("--timeout", type=seconds, default=120.0, metavar="S",
                   help="seconds per invocation: a backend process" + (", or one request to a server with --backend "
                                                                        "openai, its headers and body together"
                                                                        if servers else "") + " (default 120)")
    g.add_argument("--profile", metavar="NAME",
                   help="semantics profile to judge against (spec/profiles.md): kvconform-1 or edge-llm-0.10; "
                        "default: the first the backend's capability manifest declares"
                        + (". With --backend openai: a peer profile (spec/peer-profiles.md): " + _peer_profiles()
                           if servers else ""))
    e = parser.add_argument_group("fixed engine and command adapter (spec/RUNNING.md section 2)")
    e.add_argument("--engine-dir", metavar="DIR",
                   help="command and inprocess adapters: one fixed engine folder for every case (each case is laid "
                        "out for it); alone, the bundled backend runs in process on it")
    e.add_argument("--executable", metavar="CMD",
                   help="command adapter: an llm_inference-compatible command line (default: the bundled CLI)")
    e.add_argument("--engine-config", metavar="FILE",
                   help="command adapter: the fixed engine's description (spec/engine.md), for a folder whose "
                        "config.json is none (an Edge-LLM folder: write it with `kvconform describe`); refused "
                        "where it contradicts DIR/config.json")
    e.add_argument("--build-command", metavar="CMD",
                   help="command adapter: builds an engine per case with the flags of spec/engine.md")
    e.add_argument("--capabilities", metavar="FILE", help="command adapter: the backend's capability manifest")
    e.add_argument("--backend-arg", action="append", default=[], metavar="ARG",
                   help="command adapter: an extra argument for every invocation (repeatable)")
    if not servers:
        parser.set_defaults(base_url=None, api_key_env=None, model=None, tokenizer=None, peer_setting=[])
        return g
    o = parser.add_argument_group("openai backend (an OpenAI-compatible server, spec/peer-profiles.md)")
    o.add_argument("--base-url", metavar="URL", help="openai: the server, e.g. http://127.0.0.1:8080")
    o.add_argument("--api-key-env", metavar="VAR", help="openai: the environment variable holding the API key")
    o.add_argument("--model", metavar="NAME", help="openai: the model name sent with every request")
    o.add_argument("--tokenizer", metavar="DIR",
                   help="openai: the model's tokenizer folder, to tokenize prompts and check the server's ids")
    o.add_argument("--peer-setting", action="append", default=[], metavar="KEY=VALUE",
                   help="openai: a setting of the peer profile, e.g. block_size=16, cache_blocks=64, eagle=true "
                        "(repeatable; settings the server publishes are read from it, docs/peers.md)")
    return g


def _add_case_arguments(parser: argparse.ArgumentParser) -> None:
    c = parser.add_argument_group("case selection")
    c.add_argument("--case", action="append", metavar="PATH",
                   help="a case file or folder (repeatable; default: cases/)")
    c.add_argument("-k", "--keyword", action="append", metavar="TEXT",
                   help="run cases whose id contains TEXT or matches it as a glob (repeatable)")
    c.add_argument("--exclude", action="append", metavar="TEXT",
                   help="leave out cases (and generated families) whose id contains TEXT or matches it as a "
                        "glob (repeatable)")
    c.add_argument("--section", action="append", metavar="NAME", help="spec section: ID, PLAN, MEDIA, PUB, ... (repeatable)")
    c.add_argument("--rule", action="append", metavar="ID", help="cases citing this rule id (repeatable)")
    c.add_argument("--slow", action="store_true", help="include cases flagged slow")
    c.add_argument("--list", action="store_true", help="list the selected cases and exit")
    gen = parser.add_argument_group("generated request sets")
    which = gen.add_mutually_exclusive_group()
    which.add_argument("--no-generated", action="store_true", help="curated cases only")
    which.add_argument("--generated-only", action="store_true", help="generated families only")
    gen.add_argument("--families", metavar="LIST", help="comma-separated: text,vision,hybrid (default all)")
    gen.add_argument("--examples", type=positive_int, default=300, metavar="N",
                     help="examples per family at most (default 300)")
    gen.add_argument("--budget-seconds", type=seconds, default=180.0, metavar="S",
                     help="a cap on the time of all generated families together, shrinking aside (default 180; "
                          "--examples normally bounds the run, so the same examples run every time)")
    gen.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0: the same examples every run)")
    gen.add_argument("--max-steps", type=positive_int, default=6, metavar="N", help="batches per example at most (default 6)")
    gen.add_argument("--min-batches", type=positive_int, default=MIN_BATCHES, metavar="N",
                     help=f"batches a family must judge to PASS (default {MIN_BATCHES}, at most --examples)")
    gen.add_argument("--save-regressions", action="store_true",
                     help="also write generated reproducers to cases/regressions/")
    v = parser.add_argument_group("verdicts")
    v.add_argument("--fail-fast", action="store_true",
                   help="screening: the curated cases first, cheapest first, then the generated families, and "
                        "stop at the first case that ends TIMEOUT, FAIL or ERROR (the headline and the report say "
                        "the run stopped early; it is never CONFORMANT)")
    v.add_argument("--timing", action="store_true",
                   help="also run the optional timing verdict (off by default: wall-clock time is noisy on shared "
                        "machines): a request reusing a long prefix must take under --timing-fraction of the "
                        "time of computing it; PASS or QUALITY_WARNING, never FAIL (spec/RUNNING.md section 5)")
    v.add_argument("--timing-fraction", type=fraction, default=0.5, metavar="F",
                   help="warm / cold prefill time the timing verdict allows (default 0.5)")
    out = parser.add_argument_group("report")
    out.add_argument("--report", default="kvconform-report", metavar="DIR", help="report folder (default kvconform-report)")
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    again = out.add_mutually_exclusive_group()
    again.add_argument("--force", action="store_true", help="replace the report folder if it exists")
    again.add_argument("--resume", action="store_true",
                       help="continue the interrupted run recorded in the report folder: keep its finished "
                            "cases, run the rest with the options it recorded")
    where = parser.add_argument_group("where the work runs")
    where.add_argument("--jobs", type=positive_int, default=1, metavar="N",
                       help="run N cases at once (useful with --backend command: processes overlap)")
    where.add_argument("--shard", metavar="I/N",
                       help="run the I-th of N interleaved shards (merge with kvconform merge)")
    executors.add_arguments(parser, "this process, --jobs cases at once", where)


MAX_SECONDS = 7 * 24 * 3600.0


def seconds(text: str) -> float:
    """A duration: finite, greater than 0, at most a week (a NaN once hung the kit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 and at most {MAX_SECONDS:g}, "
                                         f"got {text!r}")
    return value


def fraction(text: str) -> float:
    """A number in (0, 1]: the timing verdict's warm / cold limit."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


ADAPTER_OPTIONS = ("device", "executable", "engine_dir", "engine_config", "build_command", "capabilities",
                   "backend_arg", "base_url", "api_key_env", "model", "tokenizer", "peer_setting")


def rerun_command(args, backend: str, reproducer: Path) -> str:
    """The command line that re-runs one reproducer against the same backend: the adapter and
    every adapter option of this run, absolute paths, its own report folder."""
    argv = [_kvconform(), "run", "--backend", backend]
    for key in ADAPTER_OPTIONS:
        value = getattr(args, key)
        flag = option_flag(key)
        if key == "backend_arg":
            argv += [f"{flag}={v}" for v in value]
        elif value:
            argv += [flag, os.path.abspath(value) if key in ("engine_dir", "engine_config", "capabilities")
                     else value]
    name = reproducer.stem
    if args.profile:
        argv += ["--profile", args.profile]
    argv += ["--timeout", f"{args.timeout:g}", "--case", str(reproducer.resolve()),
             "--report", str((Path(args.report) / "reruns" / name).resolve()), "--force"]
    return f"cd {shlex.quote(os.getcwd())} && {shlex.join(argv)}"


def _kvconform() -> str:
    entry = Path(sys.argv[0])
    return str(entry.resolve()) if entry.name == "kvconform" and entry.exists() else "kvconform"


def _one_torch_thread() -> None:
    """Run the in-process backend's CPU ops on one thread unless OMP_NUM_THREADS says otherwise.

    The kit's engines are tiny: each torch op is microseconds of work, below what intra-op
    threads repay, and when another process holds a core the OpenMP workers wait for it.
    Measured on 2 shared cores (benchmarks/README.md, item 4): the default run took 194 s with
    torch's default 2 threads and 62 s with one.
    """
    if os.environ.get("OMP_NUM_THREADS"):
        return
    import torch
    torch.set_num_threads(1)


# Options that decide what a run does; `--resume` takes them from the interrupted run's report.
RESUMED = ("case", "keyword", "exclude", "section", "rule", "slow", "shard", "no_generated", "generated_only", "families",
           "examples", "budget_seconds", "seed", "max_steps", "min_batches", "save_regressions", "backend", "device", "timeout",
           "executable", "engine_dir", "engine_config", "build_command", "capabilities", "backend_arg", "profile")


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


def _adapter_spec(args, backend: str):
    from ..executors.units import AdapterSpec
    return AdapterSpec.of(backend, device=args.device, timeout=args.timeout, executable=args.executable,
                          engine_dir=args.engine_dir, engine_config=args.engine_config,
                          build_command=args.build_command, capabilities=args.capabilities,
                          extra_args=args.backend_arg)


def _ray_pool(args, backend: str, plan):
    """The Ray cluster joined (or started) and every node checked, before the report folder is
    claimed: a cluster that cannot run the plan is bad input (exit 2), not a report."""
    from ..executors.units import kit_fingerprint, plan_files
    pool = executors.make_pool(args, args.device, backend, args.jobs)
    try:
        pool.check_nodes(_adapter_spec(args, backend).files() + plan_files(plan.cases), kit_fingerprint())
    except BaseException:
        pool.close()
        raise
    print(f"kvconform run: on Ray ({pool.describe()['nodes']} node(s), {pool.slots} worker(s))", file=sys.stderr)
    return pool


def _execute_on_ray(args, backend: str, plan, adapter, report: Report, pool) -> None:
    """The plan as Ray tasks (conformance/executors/distributed.py): the same report as locally."""
    from ..executors.distributed import execute_distributed
    try:
        execute_distributed(plan, _adapter_spec(args, backend), adapter, pool, report, progress=not args.no_progress,
                            rerun=lambda path: rerun_command(args, backend, path))
    finally:
        pool.close()


def _refuse_server_options(args) -> None:
    """An option of `--backend openai` without `--base-url` or `--backend`: the run would drive the
    bundled backend, which takes none of them; and a peer profile names a server's runtime."""
    given = [k for k in ("api_key_env", "model", "tokenizer") if getattr(args, k, None)]
    if given and args.backend is None:
        flag = option_flag(given[0])
        raise KvconformError(f"{flag} applies to --backend openai, which judges an OpenAI-compatible server at "
                             f"--base-url URL; without them the run drives the bundled backend, which takes no {flag}")
    from ..peers import PEER_PROFILES
    if args.profile in PEER_PROFILES:
        raise KvconformError(f"--profile {args.profile}: a peer profile, for an OpenAI-compatible server (--backend "
                             f"openai --base-url URL); this backend runs request files and is judged against a "
                             f"semantics profile ({', '.join(oracle.PROFILE_NAMES)})")


def resolve_profile(requested: str | None, manifest: dict | None) -> str:
    """The semantics profile of a run (spec/profiles.md): `--profile`, which the backend must
    implement, else the first profile its capability manifest declares."""
    declared = (manifest or {}).get("semantics_profile", oracle.DEFAULT_PROFILE)
    if declared == "any":                     # no manifest given: the backend is taken to be what is asked
        return requested or oracle.DEFAULT_PROFILE
    offered = declared if isinstance(declared, list) else [declared]
    if requested is None:
        if offered[0] not in oracle.PROFILE_NAMES:
            raise KvconformError(f"the backend's capability manifest declares the semantics profile {offered[0]!r}, "
                                 f"which this kit does not know (one of {', '.join(oracle.PROFILE_NAMES)})")
        return offered[0]
    if manifest is not None and requested not in offered:
        raise KvconformError(f"--profile {requested}: the backend implements {', '.join(offered)} only "
                             "(semantics_profile in its capability manifest)")
    return requested


def main(args) -> int:
    if args.backend == "openai" or (args.backend is None and (args.base_url or args.peer_setting)):
        from ..peers.runner import main as run_peers        # the peer suite (conformance/peers)
        return run_peers(args)
    _refuse_server_options(args)
    if args.fail_fast and args.executor == "ray":
        raise KvconformError("--fail-fast stops at the first failure of a run in this process, not with --executor ray")
    executors.check(args)
    resumed = _resume_options(args) if args.resume else None
    backend = choose_backend(args.backend, {k: getattr(args, k) for k in ADAPTER_OPTIONS})
    shard = parse_shard(args.shard)
    if args.profile is not None and args.profile not in oracle.PROFILE_NAMES:
        raise KvconformError(f"--profile {args.profile}: unknown semantics profile (one of "
                             f"{', '.join(oracle.PROFILE_NAMES)})")

    def planned(profile: str):
        return make_plan(args.case, args.keyword, args.section, args.rule, args.slow, exclude=args.exclude,
                         generated=not args.no_generated, curated=not args.generated_only,
                         families=args.families.split(",") if args.families else None, shard=shard,
                         examples=args.examples, budget_s=args.budget_seconds, seed=args.seed,
                         max_steps=args.max_steps, min_batches=args.min_batches,
                         save_regressions=args.save_regressions, profile=profile)
    plan = planned(args.profile or oracle.DEFAULT_PROFILE)
    if args.list:
        for case in plan.cases:
            print(f"{case.id}\t{case.section}\t{case.source()}")
        for family in plan.families:
            print(f"generated/{family}\tgenerated")
        return 0
    pool = _ray_pool(args, backend, plan) if args.executor == "ray" else None
    try:                           # a Ray pool this run started is shut down on any early error
        claim_report_folder(Path(args.report), args.force, resume=args.resume)
        try:
            adapter = make_adapter(backend, device=args.device, timeout=args.timeout, executable=args.executable,
                                   engine_dir=args.engine_dir, engine_config=args.engine_config,
                                   build_command=args.build_command, capabilities=args.capabilities,
                                   extra_args=args.backend_arg)
        except AdapterError as e:
            raise KvconformError(f"cannot start the {backend} adapter: {e}") from None
        if backend == "inprocess":
            _one_torch_thread()
        try:
            manifest = adapter.capabilities()
        except Exception:
            manifest = None
        try:
            profile = resolve_profile(args.profile, manifest)
        except KvconformError:
            adapter.close()
            raise
        if profile != plan.profile:
            plan = planned(profile)
        options = {k: v for k, v in vars(args).items() if k not in ("func",) and not callable(v)}
        self_check = backend in SELF_CHECKS
        report = Report(Path(args.report), backend, manifest, adapter.describe(), options, args.shard,
                        plan=plan.identity, self_check=self_check, profile=profile)
    except BaseException:
        if pool is not None:
            pool.close()
        raise
    if resumed is not None:
        done = report.resume(resumed)
        plan.cases = [c for c in plan.cases if c.id not in done]
        plan.families = [f for f in plan.families if f"generated/{f}" not in done]
        print(f"kvconform run: resuming {report.folder}: {len(done)} case(s) already finished", file=sys.stderr)
    start = time.monotonic()
    print(f"kvconform run: backend {backend}, profile {profile}, {len(plan.cases)} case(s)"
          + (f", generated {','.join(plan.families)} (seed {args.seed}, {args.budget_seconds:g} s)" if plan.families else "")
          + (f", shard {args.shard}" if shard else "")
          + ("; SELF-CHECK: the oracle runs in place of a backend, no backend is tested" if self_check else ""),
          file=sys.stderr)
    try:
        if args.executor == "ray":
            _execute_on_ray(args, backend, plan, adapter, report, pool)
        else:
            execute(plan, adapter, report, progress=not args.no_progress, jobs=args.jobs,
                    rerun=lambda path: rerun_command(args, backend, path), fail_fast=args.fail_fast)
        if args.timing and not self_check and "timing/reuse-is-real" not in {r.id for r in report.results}:
            from ..judge.reuse_timing import timing_verdict                       # "reuse is real", optional
            report.add(timing_verdict(adapter, manifest, fraction=args.timing_fraction))
    except KeyboardInterrupt as e:
        return stop_interrupted(report, e, hint="; continue it with --resume")
    finally:
        adapter.close()
    results = report.results
    doc = report.finish()
    if print_verdicts(report):
        print_explanation(results)             # the oracle's steps that decided the first mismatch
        first = next((r for r in results if r.rerun), None)
        if first:
            print(f"\nre-run a reproducer against the same backend, e.g. {first.id}:\n  {first.rerun}")
    summary = doc["summary"]
    note = "; ".join([f"profile {profile}"] + headline_clauses(summary))
    checked = (f", {summary['reference_checked']} greedy request(s) checked against the numerical reference"
               if summary.get("reference_checked") else "")
    print(f"\n{summary['headline']} ({note}): {judged_line(summary, len(results))}{checked} "
          f"in {time.monotonic() - start:.0f} s; {report_files(report)}")
    return exit_code(summary)
