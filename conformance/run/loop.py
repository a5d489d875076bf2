"""The end of a run, shared by every runner that writes a report folder (`kvconform run`, its
peer suite, `kvconform campaign`): what an interrupted run keeps and prints, the verdict tables
printed at the end, and the exit code of a finished run.

The loop itself adds each result to the report as soon as it exists (report.json is rewritten
with `"complete": false`) and then calls `raise_pending()` (interrupts.py), so a signal stops the
run after the unit in hand is in the report.
"""
from __future__ import annotations

import signal
import sys

from ..judge.verdicts import PASSING_HEADLINES
from ..report.document import Report
from ..report.tables import problems_table, verdict_table
from .interrupts import signum_of


def stop_interrupted(report: Report, interrupt: KeyboardInterrupt, hint: str = "") -> int:
    """The partial report of an interrupted run (`complete: false`, with its junit.xml, summary.md
    and report.html), its verdict table, one line on stderr, and the exit code 128 + the signal."""
    signum = signum_of(interrupt)
    report.interrupted()
    print(verdict_table(report.results))
    print(f"interrupted ({signal.Signals(signum).name}): partial report of {len(report.results)} case(s) in "
          f"{report.folder}/report.json (complete: false){hint}", file=sys.stderr)
    return 128 + signum


def print_verdicts(report: Report) -> str:
    """The verdict table and the table of the cases that need attention (returned, "" if none)."""
    print()
    print(verdict_table(report.results))
    problems = problems_table(report.results, folder=str(report.folder))
    if problems:
        print()
        print(problems)
    return problems


def print_explanation(results: list) -> None:
    """Under the problems: the oracle's steps that decided the first mismatch (the Edge-LLM
    oracle's or a peer oracle's decision trace, oldest step first), where it has any."""
    failed = next((r for r in results if r.first_failure() is not None and r.first_failure().chain), None)
    if failed is not None:
        print(f"\nwhy the oracle expects what {failed.id} missed (its decision trace, oldest step first):")
        print("\n".join(f"  {step}" for step in failed.first_failure().chain_lines()))


def report_files(report: Report) -> str:
    return f"report in {report.folder}/ (report.json, junit.xml, summary.md)"


def exit_code(summary: dict) -> int:
    """0 when the headline passes (CONFORMANT, SELF-CHECK PASSED), else 1."""
    return 0 if summary["headline"] in PASSING_HEADLINES else 1
