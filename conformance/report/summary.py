"""summary.md: the headline, the verdicts per section, the cases judged in part and every case
that needs attention with the oracle's steps that decided it, for a person to read."""
from __future__ import annotations

from ..judge.compare import TOLERANCES
from ..judge.numerical_judge import TOLERANCES as REFERENCE_TOLERANCES
from ..judge.verdicts import CaseResult, Verdict, headline_note, judged_line
from .tables import clip, verdict_table

def _judged_in_part(results: list[CaseResult], limit: int = 40) -> list[str]:
    """The cases some of whose counts were NOT_SUPPORTED, each with what was not judged and why."""
    partly = [r for r in results if r.verdict not in (Verdict.NOT_SUPPORTED, Verdict.TIMEOUT, Verdict.ERROR)
              and ((r.details or {}).get("judged") or {}).get("not_judged")]
    if not partly:
        return []
    lines = ["## Cases judged in part", "", "Counts the oracle could not predict are NOT_SUPPORTED by themselves "
             "(spec/RUNNING.md section 6); the rest of each case was judged.", ""]
    for r in partly[:limit]:
        judged = r.details["judged"]
        lines.append(f"- `{r.id}` ({r.verdict}, {judged.get('counts', 0)} value(s) judged): "
                     + "; ".join(f"{e['what']} not judged: {clip(e['reason'], 200)}" for e in judged["not_judged"]))
    if len(partly) > limit:
        lines.append(f"- ... and {len(partly) - limit} more in report.json")
    return lines + [""]


def summary_markdown(doc: dict, results: list[CaseResult]) -> str:
    s = doc["summary"]
    caps = doc["backend"].get("capabilities") or {}
    lines = [f"# kvconform report: {s['headline']} (semantics profile {doc['semantics_profile']})"
             f"{headline_note(s)}", ""]
    if doc["backend"].get("self_check"):
        lines += ["**No backend was tested**: the oracle ran against itself (`--backend reference`), a check of "
                  "the kit, not of any runtime.", ""]
    stop = s.get("stopped_early")
    if stop:
        lines += [f"**Stopped early** at the first failure, `{stop['at']}` (`--fail-fast`): {stop['not_run']} "
                  "item(s) of the plan were not run, so this report says what failed, not what else would.", ""]
    if s.get("sections"):
        lines += ["judged / cases per section: " + ", ".join(
            f"{x['section']} {x['judged']}/{x['cases']}" + (" (thin)" if x["section"] in s.get("thin_sections", [])
                                                              else "") for x in s["sections"]), ""]
    lines += [
        f"- {judged_line(s, len(results))}",
        f"- {s.get('reference_checked', 0)} greedy request(s) checked against the numerical reference "
        f"(spec/RUNNING.md section 5)",
        f"- backend: `{doc['backend']['adapter']}` ({caps.get('backend', '?')} {caps.get('version', '')})".rstrip(),
        f"- kit {doc['kit_version']}, spec {doc['spec_version']}, RUNNING {doc['running_version']}, "
        f"semantics profile `{doc['semantics_profile']}`",
        f"- started {doc['started']}, finished {doc['finished']}, complete: {doc['complete']}"
        + (f", shard {doc['shard']}" if doc.get("shard") else ""),
        f"- tolerances: near-tie top-2 gap < {TOLERANCES['near_tie_top2_gap_nats']} nats, log-probability drift "
        f"from the bypass run <= {TOLERANCES['logprob_drift_nats']} nats (FAIL beyond "
        f"{TOLERANCES['logprob_fail_nats']}); against the numerical reference: noise bound "
        f"{REFERENCE_TOLERANCES['reference_noise_bound']}, tolerance {REFERENCE_TOLERANCES['reference_tolerance']}; "
        f"counters exact", "",
        "## Verdicts per spec section", "", verdict_table(results, "github"), "",
    ]
    lines += _judged_in_part(results)
    bad = [r for r in results if r.verdict not in (Verdict.PASS, Verdict.NOT_SUPPORTED)]
    if bad:
        lines += ["## Cases that need attention", ""]
        for r in bad:
            lines.append(f"### `{r.id}`: {r.verdict}" + ("" if r.mandatory else " (not mandatory)"))
            lines.append("")
            if r.reason:
                lines.append(f"{r.reason}")
                lines.append("")
            for f in r.failures[:12]:
                lines.append(f"- {f.line()}")
                lines += [f"  - {step}" for step in f.chain_lines()]   # the oracle's steps that decided it
            if len(r.failures) > 12:
                lines.append(f"- ... {len(r.failures) - 12} more in report.json")
            if r.reproducer:
                lines += ["", f"Reproducer: `{r.reproducer}`"]
            if r.evidence:
                lines += ["", f"The failing invocations' files: `{r.evidence}`"]
            if r.rerun:
                lines += ["", "Re-run it against the same backend:", "", "```", r.rerun, "```"]
            if r.stderr_tail:
                lines += ["", "```", r.stderr_tail[-2000:], "```"]
            lines.append("")
    unsupported = [r for r in results if r.verdict == Verdict.NOT_SUPPORTED]
    if unsupported:
        lines += ["## Not supported", ""] + [f"- `{r.id}`: {r.reason}" for r in unsupported] + [""]
    return "\n".join(lines)
