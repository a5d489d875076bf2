"""The verdict tables printed at the end of a run and written into summary.md: one row per spec
section (the generated families last), and the cases that need attention."""
from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from ..cases.case import SECTIONS
from ..judge.verdicts import CaseResult, Verdict

SHORT = {"PASS": "PASS", "NOT_SUPPORTED": "N/S", "UNSPECIFIED": "UNSPEC", "QUALITY_WARNING": "QW",
         "TIMEOUT": "TIMEOUT", "FAIL": "FAIL", "ERROR": "ERROR"}


def verdict_table(results: list[CaseResult], fmt: str = "simple") -> str:
    """One row per spec section (plus generated), one column per verdict, and a total row."""
    columns = [v for v in Verdict]
    rows, totals = [], {v: 0 for v in columns}
    groups: dict[str, list[CaseResult]] = {}
    for r in results:
        groups.setdefault(section_of(r), []).append(r)
    for name in sorted(groups, key=section_order):
        counts = {v: sum(1 for r in groups[name] if r.verdict == v) for v in columns}
        for v in columns:
            totals[v] += counts[v]
        rows.append([name] + [counts[v] or "" for v in columns] + [len(groups[name])])
    rows.append(["total"] + [totals[v] for v in columns] + [len(results)])
    headers = ["section"] + [SHORT[str(v)] for v in columns] + ["cases"]
    return tabulate(rows, headers=headers, tablefmt=fmt)


def section_of(r: CaseResult) -> str:
    """The row of a result in the verdict table: its spec section, or `generated`."""
    if r.id.startswith("generated/"):
        return "generated"
    return SECTIONS.get(r.section or "", r.section or "?")


def section_order(name: str):
    """The sort key of a verdict-table row: spec sections in the spec's order, then the rest."""
    order = list(SECTIONS.values())
    return (order.index(name) if name in order else len(order), name)


def problems_table(results: list[CaseResult], fmt: str = "simple", limit: int = 40, folder: str = "") -> str:
    """The non-passing cases with their first problem and reproducer (paths prefixed with `folder`)."""
    rows = []
    for r in results:
        if r.verdict in (Verdict.PASS, Verdict.NOT_SUPPORTED):
            continue
        f = r.first_failure()
        detail = f.line() if f else r.reason
        # a peer case has no request file to re-run: its reproducer is the transcript of what was sent
        shown = r.reproducer or (f"{r.evidence}/transcript.json" if r.evidence and r.rerun else None)
        repro = str(Path(folder) / shown) if shown and folder else shown or ""
        rows.append([r.id, str(r.verdict), clip(detail, 140), repro])
    if not rows:
        return ""
    more = f"\n... and {len(rows) - limit} more (see report.json)" if len(rows) > limit else ""
    return tabulate(rows[:limit], headers=["case", "verdict", "first problem", "reproducer"], tablefmt=fmt) + more


def clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3] + "..."
