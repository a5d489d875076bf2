"""The campaign's table: per module, mutants, killed, equivalent, survivors and the kill rate.

The kill rate counts what could be caught: killed / (mutants - equivalent - invalid), where a
survivor or a mutant no case executes counts against it until the triage calls it equivalent.
"""
from __future__ import annotations

from tabulate import tabulate

from .triage import changed_line, explains

HEADERS = ["module", "judge", "mutants", "killed", "timeout", "survived", "not covered", "equivalent", "invalid",
           "pending", "kill rate"]


def module_rows(rows: list[dict], triage: dict) -> list[dict]:
    out: dict[str, dict] = {}
    for r in rows:
        m = out.setdefault(r["path"], {"module": r["path"], "judge": r["judge"], "mutants": 0, "killed": 0,
                                       "timeout": 0, "survived": 0, "not covered": 0, "equivalent": 0, "invalid": 0,
                                       "pending": 0})
        m["mutants"] += 1
        status = r["status"]
        if status in ("survived", "not_covered") and explains(triage, r):
            m["equivalent"] += 1
        elif status == "killed":
            m["killed"] += 1
            m["timeout"] += r.get("verdict") == "TIMEOUT"
        elif status == "not_covered":
            m["not covered"] += 1
        elif status in m:
            m[status] += 1
        else:
            m["pending"] += 1
    for m in out.values():
        m["kill rate"] = rate(m)
    return list(out.values())


def rate(m: dict) -> float | None:
    judged = m["killed"] + m["survived"] + m["not covered"]
    return None if not judged else 100.0 * m["killed"] / judged


def total_of(modules: list[dict], name: str = "all") -> dict:
    t = {"module": name, "judge": ""}
    for key in HEADERS[2:-1]:
        t[key] = sum(m[key] for m in modules)
    t["kill rate"] = rate(t)
    return t


def table(modules: list[dict], fmt: str = "simple") -> str:
    def cell(m, key):
        if key == "kill rate":
            return "-" if m[key] is None else f"{m[key]:.1f}%"
        return m[key]
    return tabulate([[cell(m, k) for k in HEADERS] for m in modules], headers=HEADERS, tablefmt=fmt)


def survivors(rows: list[dict], triage: dict) -> list[str]:
    """One line per unexplained survivor: its triage key (what an entry is keyed by), where it is
    now, and its change."""
    return [f"{r['key'] or r['id']}  (line {r['line']}{', no case executes it' if r['status'] == 'not_covered' else ''})"
            f"  {changed_line(r['diff'])}"
            for r in rows if r["status"] in ("survived", "not_covered") and not explains(triage, r)]
