"""A run's plan on a worker pool (`kvconform run --executor ray`): the same report as a local run.

Every curated case and every generated family becomes one unit (a family runs at the plan's
seed, so it draws the examples a local run draws; its budget is an even share of
`--budget-seconds`, the least a local run gives it). Results stream into the report folder as
units finish, each write atomic as in a local run, so `--resume` continues an interrupted
distributed run like any other. When the run ends the cases are put back in plan order, so
report.json, junit.xml and summary.md list them as a local run does.

A unit retried after its worker died says so in its `details.attempts` and `details.retried`,
and the report lists the retried units under `executor.retried`. A unit that never came back ends
ERROR with the reason (a case keeps its case file as the reproducer). Ctrl-C, SIGTERM or SIGHUP:
the units that finished are written, the rest are cancelled, and the interruption goes on up to
`kvconform run`, which writes the resumable partial report.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Callable

from tqdm import tqdm

from ..generate import cannot_run
from ..judge.verdicts import CaseResult
from ..report.document import Report
from ..report.folder import write_reproducer
from ..run.suite import REGRESSIONS_DIR, Plan, with_rerun
from .local import TaskFailed
from .units import AdapterSpec, CaseUnit, FamilyUnit, failed_unit, run_unit, unpack


def units_of(plan: Plan, runnable: list[str] | None = None) -> list:
    """The plan's curated cases, then its families, as units (paths absolute: workers have their
    own working directory). The budget is shared by the families that can run here (`runnable`,
    default all)."""
    cases = [CaseUnit(dataclasses.replace(c, path=c.path.resolve())) for c in plan.cases]
    share = plan.budget_s / max(1, len(plan.families if runnable is None else runnable))
    return cases + [FamilyUnit(f, share, plan.seed) for f in plan.families]


def execute_distributed(plan: Plan, spec: AdapterSpec, adapter, pool, report: Report, progress: bool = True,
                        rerun: Callable[[Path], str] | None = None) -> list[CaseResult]:
    """Run every unit of `plan` on `pool`; `adapter` is the driver's own, asked only for the
    capability manifest (the one the report records and every worker judges with)."""
    try:
        manifest, manifest_error = adapter.capabilities(), ""
    except Exception as e:  # a broken adapter: every unit ends ERROR on the workers, as locally
        manifest, manifest_error = None, f"{type(e).__name__}: {e}"
    settings = dataclasses.replace(plan, cases=[], families=[])
    units = units_of(plan, [f for f in plan.families if not cannot_run(f, adapter, manifest)])
    order = {u.key: k for k, u in enumerate(units)}
    report.doc["executor"] = dict(pool.describe(), retried=[])
    first_new = len(report.results)
    bar = tqdm(total=len(units), desc="units", unit="unit", disable=not progress, file=sys.stderr, mininterval=0.5)
    by_key = {u.key: u for u in units}
    pending = [pool.submit(u.key, run_unit, spec, manifest, manifest_error, settings, u) for u in units]
    results, kept = [], set()

    def keep(ticket, write: bool) -> None:
        if ticket.key in kept:
            return
        result = with_rerun(_collect(pool, ticket, by_key[ticket.key], report, plan.save_regressions),
                            report.folder, rerun)
        report.results.append(result)
        kept.add(ticket.key)
        results.append(result)
        bar.update()
        if write:
            report.write(complete=False)

    try:
        while pending:
            for ticket in pool.wait(pending, timeout=1.0):
                keep(ticket, write=True)
                pending.remove(ticket)
    except KeyboardInterrupt:
        for ticket in pool.wait(pending, timeout=0) if pending else []:   # finished meanwhile: keep them
            keep(ticket, write=False)          # the interrupted report is written next, by the caller
        raise
    finally:
        pool.cancel([t for t in pending if t.key not in kept])
        bar.close()
        # in plan order, as a local run lists them (an interrupted run's too, so a resumed one does)
        report.results[first_new:] = sorted(report.results[first_new:], key=lambda r: order.get(r.id, len(order)))
    return results


def _collect(pool, ticket, unit, report: Report, save_regressions: bool) -> CaseResult:
    """A finished unit's result, its files unpacked into the report folder."""
    try:
        outcome = pool.result(ticket)
    except TaskFailed as e:
        result = failed_unit(unit, e.reason, e.attempts)
        if isinstance(unit, CaseUnit):     # the case file itself reproduces it
            path = write_reproducer(unit.case.doc, unit.case.base_dir, report.folder / "reproducers", unit.case.id)
            result.reproducer = str(path.relative_to(report.folder))
        return result
    result = unpack(outcome, report.folder)
    attempts = pool.attempts(ticket)
    if len(attempts) > 1:
        result.details["attempts"] = len(attempts)
        result.details["retried"] = (f"attempt(s) on {', '.join(attempts[:-1])} did not finish (the worker died); "
                                     f"Ray ran it again on {attempts[-1]}")
        report.doc["executor"]["retried"].append(result.id)
    if isinstance(unit, FamilyUnit) and result.reproducer and save_regressions:
        _save_regression(report.folder / result.reproducer)
    return result


def _save_regression(path: Path) -> None:
    """`--save-regressions`: the driver keeps a generated reproducer under cases/regressions
    (the worker that found it wrote it only into the report)."""
    from ..cases.schemas import read_json
    write_reproducer(read_json(path), str(path.parent), REGRESSIONS_DIR, path.stem)
