"""`kvconform campaign --hours H`: generated request sets, seed after seed, until time is up.

A conformance run draws each generated family at one seed. A campaign keeps drawing: the
families take turns, each unit one family at the next seed (`--examples` examples, at most
`--seed-seconds`), on local worker processes or a Ray cluster (`--executor ray`), until `--hours`
have passed. A failing example is shrunk where it was found and written as a reproducer; the
failures are collected into distinct ones (same rule, same observable, same shrunk shape:
conformance/executors/findings.py), each with every seed that found it and its smallest
reproducer. The report folder (default kvconform-campaign/) holds report.json (the report
format of `kvconform run`: one entry per family that showed no failure, one per distinct
failure, and a `campaign` block with the counts), junit.xml, summary.md with the throughput
(scenarios per minute, per worker), and reproducers/.

`--variant NAME` drives a faulty backend of the catalogue (faulty_backends) in place
of the bundled one: a check that the campaign finds what it should.

Exit code 0 when no failure was found and every family judged `--min-batches` batches, 1
otherwise, 2 on bad input, 128 + N when interrupted by signal N (the report then holds every
finished unit, `"complete": false`).
"""
from __future__ import annotations

import argparse
import math
import random
import signal
import sys
import time
from pathlib import Path

from tabulate import tabulate

from .. import KvconformError
from .. import executors
from ..adapters import SELF_CHECKS, AdapterError, choose_backend
from ..executors.findings import Findings
from ..executors.local import TaskFailed
from ..executors.units import (AdapterSpec, FamilyUnit, adapter_for, failed_unit, kit_fingerprint, run_unit,
                               unpack)
from ..generate.draw import FAMILIES
from ..report.document import Report
from ..report.folder import claim_report_folder, write_text_atomic
from ..run.interrupts import raise_pending, signum_of
from ..run.loop import exit_code
from ..run.suite import Plan
from .run import (ADAPTER_OPTIONS, add_backend_arguments, positive_int,
                  rerun_command, resolve_profile, seconds)

MAX_HOURS = 24 * 7.0
MIN_UNIT_S = 1.0
"""A unit is not started with less time left than this."""


def hours(text: str) -> float:
    """A duration in hours: finite, above 0, at most a week."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of hours, got {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= MAX_HOURS):
        raise argparse.ArgumentTypeError(f"must be a number of hours above 0 and at most {MAX_HOURS:g}, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--hours", type=hours, required=True, metavar="H",
                        help="how long to keep drawing new seeds (a fraction is fine: 0.1 is 6 minutes)")
    backend = add_backend_arguments(parser, servers=False)
    backend.add_argument("--variant", metavar="NAME",
                         help="drive this faulty variant of the bundled backend (kvconform selftest --list)")
    gen = parser.add_argument_group("generated request sets")
    gen.add_argument("--families", metavar="LIST", help="comma-separated: text,vision,hybrid (default all)")
    gen.add_argument("--seed", type=int, metavar="N", help="the first seed (default: drawn at random, and recorded)")
    gen.add_argument("--examples", type=positive_int, default=100, metavar="N",
                     help="examples per seed (default 100)")
    gen.add_argument("--seed-seconds", type=seconds, default=120.0, metavar="S",
                     help="time per seed at most, shrinking aside (default 120)")
    gen.add_argument("--max-steps", type=positive_int, default=6, metavar="N", help="batches per example at most (default 6)")
    gen.add_argument("--min-batches", type=positive_int, default=25, metavar="N",
                     help="batches a family must judge over the campaign to pass (default 25)")
    out = parser.add_argument_group("report")
    out.add_argument("--report", default="kvconform-campaign", metavar="DIR",
                     help="report folder (default kvconform-campaign)")
    out.add_argument("--force", action="store_true", help="replace the report folder if it exists")
    out.add_argument("--no-progress", action="store_true", help="no line per finished unit")
    where = parser.add_argument_group("where the work runs")
    where.add_argument("--jobs", type=positive_int, default=1, metavar="N",
                       help="local worker processes (default 1: this process), or the CPUs of a local Ray cluster")
    executors.add_arguments(parser, "--jobs worker processes", where)


def main(args) -> int:
    executors.check(args)
    backend = choose_backend(args.backend, {k: getattr(args, k) for k in ADAPTER_OPTIONS})
    families = _families(args.families)
    if args.variant:
        _check_variant(args.variant, backend)
    first_seed = args.seed if args.seed is not None else random.randrange(2 ** 31)
    spec = AdapterSpec.of(backend, variant=args.variant, device=args.device, timeout=args.timeout,
                          executable=args.executable, engine_dir=args.engine_dir, engine_config=args.engine_config,
                          build_command=args.build_command, capabilities=args.capabilities,
                          extra_args=args.backend_arg)
    pool = executors.make_pool(args, args.device, backend, args.jobs)
    try:
        if args.executor == "ray":
            pool.check_nodes(spec.files(), kit_fingerprint())
        claim_report_folder(Path(args.report), args.force, hint="pass --force to replace it", command="campaign")
        return _campaign(args, backend, spec, pool, families, first_seed)
    finally:
        pool.close()


def _families(text: str | None) -> list[str]:
    names = text.split(",") if text else list(FAMILIES)
    for name in names:
        if name not in FAMILIES:
            raise KvconformError(f"--families {name}: unknown family (one of {', '.join(FAMILIES)})")
    return list(dict.fromkeys(names))


def _check_variant(name: str, backend: str) -> None:
    if backend != "inprocess":
        raise KvconformError(f"--variant applies to the bundled backend (--backend inprocess), not to --backend {backend}")
    try:
        from faulty_backends import CATALOGUE
    except ImportError as e:
        raise KvconformError(f"the faulty backends need the bundled backend and torch: {e}") from None
    if name not in CATALOGUE:
        raise KvconformError(f"--variant {name}: unknown variant (kvconform selftest --list)")


def _campaign(args, backend: str, spec: AdapterSpec, pool, families: list[str], first_seed: int) -> int:
    try:
        adapter = adapter_for(spec)          # this process's: the manifest, and the units when run here
    except AdapterError as e:
        raise KvconformError(f"cannot start the {spec.name} adapter: {e}") from None
    try:
        manifest, manifest_error = adapter.capabilities(), ""
    except Exception as e:
        manifest, manifest_error = None, f"{type(e).__name__}: {e}"
    profile = resolve_profile(args.profile, manifest)
    plan = Plan([], families, examples=args.examples, seed=first_seed, max_steps=args.max_steps, min_batches=1,
                profile=profile)
    options = {k: v for k, v in vars(args).items() if not callable(v)}
    options["seed"] = first_seed
    report = Report(Path(args.report), spec.name, manifest, adapter.describe(), options,
                    self_check=backend in SELF_CHECKS, profile=profile)
    findings = Findings(families, args.min_batches)
    state = {"hours": args.hours, "first_seed": first_seed, "executor": pool.describe(), "units": 0,
             "examples_per_seed": args.examples}
    print(f"kvconform campaign: {spec.name}, families {','.join(families)}, seeds from {first_seed}, "
          f"{args.hours:g} h on {pool.describe()['name']} ({pool.slots} worker(s))", file=sys.stderr)
    started = time.monotonic()
    deadline = started + args.hours * 3600
    in_flight, units, k = [], {}, 0

    def refresh() -> None:
        """The report's entries and campaign block from what has finished so far."""
        report.results = findings.entries()
        for r in report.results:
            if r.reproducer and not args.variant:     # a variant is not a backend `kvconform run` drives
                r.rerun = rerun_command(args, backend, report.folder / r.reproducer)
        wall = time.monotonic() - started
        state.update(wall_s=round(wall, 1), **throughput(findings, wall, pool.slots), **findings.to_json())
        report.doc["campaign"] = state

    try:
        while True:
            raise_pending()             # a signal whose exception was dropped (conformance/run/interrupts.py)
            while len(in_flight) < pool.slots and deadline - time.monotonic() >= MIN_UNIT_S:
                family, seed = families[k % len(families)], first_seed + k // len(families)
                k += 1
                unit = FamilyUnit(family, min(args.seed_seconds, deadline - time.monotonic()), seed,
                                  key=f"generated/{family}@{seed}")
                units[unit.key] = unit
                in_flight.append(pool.submit(unit.key, run_unit, spec, manifest, manifest_error, plan, unit))
            if not in_flight:
                break
            for ticket in pool.wait(in_flight, timeout=1.0):
                in_flight.remove(ticket)
                _absorb(pool, ticket, units[ticket.key], findings, report, started, args.no_progress)
                state["units"] += 1
                refresh()
                report.write(complete=False)
    except KeyboardInterrupt as e:
        pool.cancel(in_flight)
        signum = signum_of(e)
        refresh()
        report.interrupted()
        print(f"interrupted ({signal.Signals(signum).name}): the campaign's report of {state['units']} unit(s) is in "
              f"{report.folder}/report.json (complete: false)", file=sys.stderr)
        return 128 + signum
    refresh()
    doc = report.finish()
    unfinished = _unfinished_families(report.results, state)
    _append_summary(report.folder / "summary.md", state, unfinished)
    print()
    print("\n\n".join(_tables(state)))
    distinct = len(state["distinct_failures"])
    for line in unfinished:
        print(f"\n{line}")
    also = f" and {len(unfinished)} family verdict(s) above" if unfinished else ""
    print(f"\n{doc['summary']['headline']}: {distinct} distinct failure(s){also} in {state['scenarios']} scenarios "
          f"({state['scenarios_per_minute']:g}/min, {state['scenarios_per_minute_per_worker']:g}/min per worker, "
          f"{pool.slots} worker(s), {state['wall_s']:.0f} s); report in {report.folder}/")
    return exit_code(doc["summary"])


def _absorb(pool, ticket, unit: FamilyUnit, findings: Findings, report: Report, started: float, quiet: bool) -> None:
    elapsed = time.monotonic() - started
    try:
        outcome = pool.result(ticket)
    except TaskFailed as e:
        result = failed_unit(unit, e.reason, e.attempts)
        findings.add_lost(unit.family, unit.seed, result, elapsed)
    else:
        result = unpack(outcome, report.folder)
        tries = pool.attempts(ticket)
        if len(tries) > 1:
            result.details["attempts"] = len(tries)
        findings.add(unit.family, unit.seed, result, report.folder, outcome.worker, outcome.seconds, elapsed)
    if not quiet:
        first = result.first_failure()
        note = first.line()[:160] if first and result.verdict >= result.verdict.TIMEOUT else result.reason[:160]
        print(f"  [{elapsed:6.0f} s] {unit.family} seed {unit.seed}: {result.verdict} {note}", file=sys.stderr)


def throughput(findings: Findings, wall_s: float, workers: int) -> dict:
    """Scenarios (generated examples, shrink steps apart) per minute of the campaign, and per worker."""
    scenarios = sum(t.scenarios for t in findings.families.values())
    per_minute = 60 * scenarios / wall_s if wall_s > 0 else 0.0
    return {"scenarios": scenarios, "batches": sum(t.batches for t in findings.families.values()),
            "shrink_steps": sum(t.shrink_steps for t in findings.families.values()),
            "scenarios_per_minute": round(per_minute, 1),
            "scenarios_per_minute_per_worker": round(per_minute / max(1, workers), 1)}


def _tables(state: dict) -> list[str]:
    """Per family, per worker, and the distinct failures."""
    rows = [[f, t["units"], t["scenarios"], t["batches"], t["shrink_steps"], t["scenarios_per_busy_minute"]]
            for f, t in state["families"].items()]
    out = [tabulate(rows, headers=["family", "seeds", "scenarios", "batches", "shrink steps", "scenarios/busy min"])]
    rows = [[w, t["units"], t["scenarios"], t["busy_s"], t["scenarios_per_busy_minute"]] for w, t in state["workers"].items()]
    out.append(tabulate(rows, headers=["worker", "units", "scenarios", "busy s", "scenarios/busy min"]))
    if state["distinct_failures"]:
        rows = [[d["id"], d["verdict"], d["rule"], d["observable"], d["occurrences"], d["reproducer"]]
                for d in state["distinct_failures"]]
        out.append(tabulate(rows, headers=["distinct failure", "verdict", "rule", "observable", "found", "reproducer"]))
    return out


def _unfinished_families(results: list, state: dict) -> list[str]:
    """A family that found no failure yet is no PASS (TIMEOUT: too few batches in the campaign's
    time; ERROR): one line each with its reason, since no distinct failure names it."""
    failures = {d["id"] for d in state["distinct_failures"]}
    return [f"{r.id}: {r.verdict}: {r.reason}" for r in results
            if r.id not in failures and r.verdict >= r.verdict.TIMEOUT]


def _append_summary(path: Path, state: dict, unfinished: list[str]) -> None:
    """summary.md gets the campaign's throughput and its distinct failures after the verdicts."""
    lines = ["", "## Campaign", "",
             f"- {state['hours']:g} h asked, {state['wall_s']:.0f} s run, {state['units']} unit(s) (one family at one "
             f"seed, {state['examples_per_seed']} examples at most), seeds from {state['first_seed']}",
             f"- executor: {state['executor']['name']}, {state['executor']['workers']} worker(s)",
             f"- throughput: **{state['scenarios_per_minute']:g} scenarios per minute, "
             f"{state['scenarios_per_minute_per_worker']:g} per worker** ({state['scenarios']} scenarios; "
             f"{state['batches']} batches judged; {state['shrink_steps']} shrink steps not counted)",
             f"- distinct failures: {len(state['distinct_failures'])}"]
    lines += [f"- not a failure, yet no PASS: {line}" for line in unfinished] + [""]
    for table in _tables(state):
        lines += ["```", table, "```", ""]
    write_text_atomic(path, path.read_text().rstrip("\n") + "\n" + "\n".join(lines))
