"""Verdicts, failures and case results (spec/RUNNING.md section 6).

A case collects Failures, each with its own verdict; the case's verdict is the worst of them
(VK-CTS's result collector), PASS when there are none. A run is conformant when no mandatory
case ends TIMEOUT, FAIL or ERROR.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Verdict(enum.IntEnum):
    """In severity order: a higher value wins when a case observes several problems."""
    PASS = 0
    NOT_SUPPORTED = 1
    UNSPECIFIED = 2
    QUALITY_WARNING = 3
    TIMEOUT = 4
    FAIL = 5
    ERROR = 6

    def __str__(self) -> str:
        return self.name


NONCONFORMANT = frozenset({Verdict.TIMEOUT, Verdict.FAIL, Verdict.ERROR})


@dataclass
class Failure:
    """One observed disagreement: which rule, which request, what, expected vs observed, why.

    `what` names the observable the way a runtime engineer finds it in the files, e.g.
    `profile.context_cache.hit_sequences` or `responses[3].context_cache.reused_tokens`.
    """
    rule: str | None
    what: str
    expected: Any
    observed: Any
    why: str
    request: int | None = None
    verdict: Verdict = Verdict.FAIL
    chain: list = field(default_factory=list)
    """The oracle's steps that decided the expected value, oldest first (conformance/judge/explain.py):
    each {rule, value, why[, request]}; `rule` and `why` are those of the step that produced it."""

    def to_json(self) -> dict:
        out = {"rule": self.rule, "request": self.request, "what": self.what,
               "expected": self.expected, "observed": self.observed, "why": self.why,
               "verdict": str(self.verdict)}
        if self.chain:
            out["chain"] = self.chain
        return out

    @classmethod
    def from_json(cls, d: dict) -> "Failure":
        return cls(d.get("rule"), d["what"], d.get("expected"), d.get("observed"), d["why"],
                   d.get("request"), Verdict[d.get("verdict", "FAIL")], list(d.get("chain") or []))

    def rules(self) -> list:
        """The rules the failure names: its own, then those of its chain."""
        out = [self.rule] if self.rule else []
        return out + [r for r in dict.fromkeys(s.get("rule") for s in self.chain) if r and r not in out]

    def signature(self) -> tuple:
        """What "fails the same way" compares: the rule, the observable and the request."""
        return (self.rule, self.what, self.request)

    def chain_lines(self) -> list:
        """The chain as the reports print it under the failure: one step a line, oldest first."""
        return [f"{s.get('rule') or 'input'}" + (f" (request {s['request']})" if s.get("request") is not None else "")
                + f" {s.get('value')}: {s.get('why')}" for s in self.chain]

    def line(self) -> str:
        where = f"request {self.request}: " if self.request is not None else ""
        rule = f"[{self.rule}] " if self.rule else ""
        steps = [s.get("rule") or "input" for s in self.chain]
        decided = f" (the oracle's steps: {' -> '.join(steps)})" if len(steps) > 1 else ""
        return (f"{self.verdict} {rule}{where}{self.what}: expected {_short(self.expected)}, "
                f"observed {_short(self.observed)}; {self.why}{decided}")


@dataclass
class CaseResult:
    """The outcome of one case, as report.json records it."""
    id: str
    rules: list[str]
    mandatory: bool = True
    source: str | None = None
    section: str | None = None
    verdict: Verdict = Verdict.PASS
    reason: str = ""
    failures: list[Failure] = field(default_factory=list)
    duration_s: float = 0.0
    reproducer: str | None = None
    engine: str | None = None
    stderr_tail: str = ""
    details: dict = field(default_factory=dict)
    rerun: str | None = None
    """The command line that re-runs the reproducer against the same backend."""
    evidence: str | None = None
    """The folder holding the failing invocations' files (request, output, profile, stderr)."""
    materialized: dict | None = field(default=None, repr=False)
    """The case file as laid out for a fixed engine (written into the report, not into report.json)."""
    invocations: list = field(default_factory=list, repr=False)
    """(label, Invocation) of every backend invocation of the case; not written to report.json."""

    def add(self, failure: Failure) -> None:
        self.failures.append(failure)
        self.verdict = max(self.verdict, failure.verdict)

    def settle(self, verdict: Verdict, reason: str) -> "CaseResult":
        """Set a verdict decided without a Failure (NOT_SUPPORTED, ERROR of the run itself)."""
        self.verdict = max(self.verdict, verdict)
        self.reason = reason
        return self

    @property
    def conformant(self) -> bool:
        return not (self.mandatory and self.verdict in NONCONFORMANT)

    def first_failure(self) -> Failure | None:
        worst = [f for f in self.failures if f.verdict == self.verdict]
        return worst[0] if worst else None

    def to_json(self) -> dict:
        out = {"id": self.id, "source": self.source, "section": self.section, "rules": self.rules,
               "verdict": str(self.verdict), "mandatory": self.mandatory,
               "duration_s": round(self.duration_s, 3), "reason": self.reason,
               "failures": [f.to_json() for f in self.failures], "reproducer": self.reproducer}
        if self.engine:
            out["engine"] = self.engine
        if self.stderr_tail:
            out["stderr_tail"] = self.stderr_tail
        if self.details:
            out["details"] = self.details
        for key in ("rerun", "evidence"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return {k: v for k, v in out.items() if v is not None or k == "reproducer"}

    @classmethod
    def from_json(cls, d: dict) -> "CaseResult":
        r = cls(d["id"], list(d["rules"]), d["mandatory"], d.get("source"), d.get("section"),
                Verdict[d["verdict"]], d.get("reason", ""),
                [Failure.from_json(f) for f in d.get("failures", [])], d.get("duration_s", 0.0),
                d.get("reproducer"), d.get("engine"), d.get("stderr_tail", ""), d.get("details", {}),
                d.get("rerun"), d.get("evidence"))
        return r


HEADLINES = ("CONFORMANT", "NOT CONFORMANT", "INCOMPLETE", "NOTHING JUDGED", "SELF-CHECK PASSED",
             "SELF-CHECK FAILED")
PASSING_HEADLINES = frozenset({"CONFORMANT", "SELF-CHECK PASSED"})


JUDGED = frozenset({Verdict.PASS, Verdict.UNSPECIFIED, Verdict.QUALITY_WARNING, Verdict.FAIL})
"""Verdicts on the backend: a case ending so compared something the backend did with the spec.
NOT_SUPPORTED, TIMEOUT and ERROR cases judged nothing and are counted apart."""
THIN = 0.5
"""A section where fewer than this share of the cases were judged is named in the headline."""


def summarize(results: list[CaseResult], complete: bool = True, self_check: bool = False,
              group=None, selection: dict | None = None, order=None, stopped: dict | None = None) -> dict:
    """The verdict counts, how many cases were judged, and the run's one-word headline.

    CONFORMANT needs evidence: a complete run in which at least one case was judged (ended PASS,
    UNSPECIFIED, QUALITY_WARNING or FAIL) and no mandatory case ended TIMEOUT, FAIL or ERROR. A run
    of the oracle against itself (`self_check`) tests no backend, so it is never CONFORMANT: it
    passes or fails as a self-check of the kit. `group(result)` names a result's section (the
    per-section coverage, in `order`, and the sections judged thinly); `selection` says whether
    the plan was a narrowed selection (spec/RUNNING.md section 6). `stopped`: the run stopped at
    its first failure (--fail-fast, {"at": case id, "not_run": items left}); it is never
    CONFORMANT, and the summary says so.
    """
    counts = {str(v): 0 for v in Verdict}
    for r in results:
        counts[str(r.verdict)] += 1
    judged = sum(1 for r in results if r.verdict in JUDGED)
    clean = all(r.conformant for r in results)
    if not complete:
        headline = "INCOMPLETE"
    elif stopped is not None and clean:     # a stop needs a failure: a run that says it stopped without one
        headline = "INCOMPLETE"             # judged less than it was asked to, and is never CONFORMANT
    elif not clean:
        headline = "SELF-CHECK FAILED" if self_check else "NOT CONFORMANT"
    elif judged == 0:
        headline = "NOTHING JUDGED"
    else:
        headline = "SELF-CHECK PASSED" if self_check else "CONFORMANT"
    out = {"verdicts": counts, "judged": judged, "conformant": headline == "CONFORMANT", "headline": headline,
           "not_judged": {k: counts[k] for k in ("NOT_SUPPORTED", "TIMEOUT", "ERROR")}}
    if stopped is not None:
        out["stopped_early"] = dict(stopped)
    # Outputs are judged against the numerical reference where the backend declares one
    # (spec/RUNNING.md section 5); a run that checked none says so beside its headline.
    checked = sum(int(((r.details or {}).get("reference") or {}).get("requests", 0)) for r in results)
    out["reference_checked"] = checked
    if not self_check:
        out["outputs_judged_against"] = ("numerical reference and bypass replay" if checked
                                         else "bypass replay only")
    partly = [r for r in results if r.verdict in JUDGED and ((r.details or {}).get("judged") or {}).get("not_judged")]
    if partly:
        out["partly_judged"] = {"cases": len(partly), "values_not_judged": sum(
            int(e.get("values") or 0) for r in partly for e in r.details["judged"]["not_judged"])}
    if group is not None:
        sections: dict[str, list] = {}
        for r in results:
            sections.setdefault(group(r), [0, 0])
            sections[group(r)][0] += r.verdict in JUDGED
            sections[group(r)][1] += 1
        out["sections"] = [{"section": name, "judged": sections[name][0], "cases": sections[name][1]}
                           for name in sorted(sections, key=order)]
        out["thin_sections"] = [x["section"] for x in out["sections"] if x["judged"] < THIN * x["cases"]]
    if selection and selection.get("narrowed"):
        out["selection"] = selection
    return out


def headline_clauses(summary: dict) -> list[str]:
    """What the headline does not say by itself: whether a backend was judged at all, whether the
    run was a selection, which sections were judged thinly, what was judged only in part, and how
    its outputs were judged."""
    out = {"NOTHING JUDGED": ["every case NOT_SUPPORTED, TIMEOUT or ERROR: nothing was judged"],
           "SELF-CHECK PASSED": ["no backend was tested: the oracle ran against itself"],
           "SELF-CHECK FAILED": ["no backend was tested: the oracle ran against itself"]}.get(summary.get("headline"), [])
    stop = summary.get("stopped_early")
    if stop:
        out = [f"stopped early at the first failure, {stop['at']} (--fail-fast): {stop['not_run']} item(s) "
               "not run"] + out
    selection = summary.get("selection")
    if selection:
        by = f" ({_first(selection['filters'], 2)})" if selection.get("filters") else ""
        out.append(f"a selection: {selection['selected']} of {selection['available']} cases and families{by}")
    thin = [x for x in summary.get("sections", []) if x["section"] in summary.get("thin_sections", [])]
    if thin and summary.get("judged"):
        out.append("thin coverage: " + _first([f"{x['section']} {x['judged']} of {x['cases']} judged" for x in thin],
                                              2, "section(s), in summary.md"))
    partly = summary.get("partly_judged")
    if partly:
        out.append(f"{partly['cases']} case(s) judged in part: {partly['values_not_judged']} value(s) NOT_SUPPORTED, "
                   "each with its reason in report.json")
    out += _output_clause(summary)
    return out


def _first(items: list, shown: int, rest: str = "") -> str:
    """The headline is one line a person reads: `a, b and 7 more` rather than every item."""
    more = len(items) - shown
    head = ", ".join(str(i) for i in items[:shown])
    return head if more <= 0 else f"{head} and {more} more{' ' + rest if rest else ''}"


def _output_clause(summary: dict) -> list[str]:
    if summary.get("outputs_judged_against") == "bypass replay only" and summary.get("judged"):
        return ["outputs compared with the bypass replay only: no numerical reference checked them"]
    return []


def headline_note(summary: dict) -> str:
    """The clauses of `headline_clauses` past the first word, as a parenthesis after the headline."""
    clauses = [c for c in headline_clauses(summary) if not c.startswith(("every case", "no backend"))]
    return f" ({'; '.join(clauses)})" if clauses else ""


def judged_line(summary: dict, cases: int) -> str:
    """`N of M case(s) judged`, with what was not: a case that ended NOT_SUPPORTED, TIMEOUT or
    ERROR produced no verdict on the backend."""
    apart = [f"{n} {k}" for k, n in (summary.get("not_judged") or {}).items() if n]
    return f"{summary['judged']} of {cases} case(s) judged" + (f" (not judged: {', '.join(apart)})" if apart else "")


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def counter_verdict(trace) -> Verdict:
    """The verdict of a counter that differs: UNSPECIFIED where the oracle's trace says the
    counters add up counts the spec leaves open (CR-MEDIA-6: an audio request), else FAIL."""
    return Verdict.UNSPECIFIED if trace is not None and trace.aggregates_unspecified() else Verdict.FAIL


def request_verdict(trace, i: int) -> Verdict:
    """The verdict of a per-request fact of request i that differs: UNSPECIFIED where the trace
    marks its counts open (CR-MEDIA-6: its audio input, a page it shares with an audio request,
    evictions after one), else FAIL."""
    return Verdict.UNSPECIFIED if trace is not None and trace.unspecified(i) else Verdict.FAIL
