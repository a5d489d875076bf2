"""The report folder of a peer run: the kit's report, with a summary in the peer suite's terms.

report.json, junit.xml and the headline are the kit's own (conformance/report/document.py,
conformance/judge/verdicts.py: no verdict without evidence). Two things differ from an Edge-LLM run:
the summary carries no numerical-reference fields (a peer run judges cached-token counts, not
outputs), and summary.md names the server, the peer profile and its settings, and lists every
judged request as predicted against reported, so a reader can check each count by hand.
"""
from __future__ import annotations

import os

from ..report.document import Report
from ..report.tables import problems_table, verdict_table
from ..judge.peer_oracle import PEER_PROFILES
from ..judge.verdicts import JUDGED, Verdict
from .judge import USAGE

NOT_FOR_PEERS = ("outputs_judged_against", "reference_checked")


class PeerReport(Report):
    """A Report whose summary is in the peer suite's terms (`json`) and whose summary.md is
    `peer_summary_markdown`; the folder, report.json, junit.xml and report.html are the kit's."""

    def json(self, complete: bool) -> dict:
        doc = super().json(complete)
        summary = doc["summary"]
        for key in NOT_FOR_PEERS:
            summary.pop(key, None)
        judged = [r for r in self.results if r.verdict != Verdict.NOT_SUPPORTED]
        summary["counts_above_zero"] = sum(int((r.details or {}).get("judged_above_zero", 0)) for r in judged)
        if summary["headline"] == "CONFORMANT" and summary["counts_above_zero"] == 0:
            # a server that reports 0 for every request would have passed: no evidence of reuse
            summary["headline"], summary["conformant"] = "NOTHING JUDGED", False
        rows = [row for r in self.results for row in (r.details or {}).get("steps", [])]
        if rows and all(row.get("count_missing") for row in rows):
            # not one answer carried a count: the deployment, not its cache, is what failed
            profile = PEER_PROFILES.get((doc.get("peer") or {}).get("profile"))
            summary["no_count_reported"] = {"responses": len(rows),
                                            "hint": profile.report_hint if profile is not None else ""}
            if summary["headline"] == "NOT CONFORMANT" and all(
                    r.verdict in (Verdict.ERROR, Verdict.NOT_SUPPORTED) for r in self.results):
                summary["headline"], summary["conformant"] = "NOTHING JUDGED", False
        vision = (doc.get("peer") or {}).get("vision")
        if vision:
            images = [r for r in self.results if r.id.startswith("images/")]
            if not any(r.verdict in JUDGED for r in images):
                why = vision.get("images_not_judged") or next(
                    (r.reason for r in images if r.reason), "no image case ran (a selection without them)")
                summary["vision_text_only"] = {"processor": vision.get("processor"), "why": why}
        token = (doc.get("peer") or {}).get("token_source") or {}
        summary["prompt_ids_from"] = "kit tokenizer" if token.get("kit_tokenizer") else "server tokenization"
        return doc

    @staticmethod
    def summary_markdown(doc: dict, results: list) -> str:
        return peer_summary_markdown(doc, results)


def peer_clauses(summary: dict) -> list:
    """What a peer run's headline does not say by itself."""
    out = []
    missing = summary.get("no_count_reported")
    if missing:
        hint = f": {missing['hint']}" if missing.get("hint") else ""
        out.append(f"the server reported no cached-token count ({USAGE}) in any of its {missing['responses']} "
                   f"answers{hint}")
    elif summary.get("headline") == "NOTHING JUDGED":
        out.append("every case NOT_SUPPORTED or no judged count predicted above 0: a server that caches "
                   "nothing would have passed" if summary.get("judged") else "every case NOT_SUPPORTED: "
                   "nothing was judged")
    text_only = summary.get("vision_text_only")
    if text_only:
        out.append(f"a vision model ({text_only['processor']}) judged on text only: {text_only['why']}")
    if summary.get("prompt_ids_from") == "server tokenization" and summary.get("judged"):
        out.append("prompt ids from the server's own tokenization: PEER-TOK-1 checked nothing (pass --tokenizer)")
    return out


def peer_note(summary: dict) -> str:
    clauses = peer_clauses(summary)
    return f" ({'; '.join(clauses)})" if clauses else ""


def _shown_path(path: str | None) -> str | None:
    """A folder inside the directory the run started in is shown relative to it: summary.md is
    read on other machines (CI artifacts, committed examples), where this machine's path means
    nothing; report.json keeps the path as --tokenizer gave it."""
    if not path or not os.path.isabs(path):
        return path
    here = os.getcwd()
    return os.path.relpath(path, here) if os.path.commonpath([path, here]) == here else path


def peer_summary_markdown(doc: dict, results: list) -> str:
    s, peer, backend = doc["summary"], doc.get("peer") or {}, doc["backend"].get("settings") or {}
    token = peer.get("token_source") or {}
    kit_tok = _shown_path(token.get("kit_tokenizer"))
    said = peer.get("settings_said") or []
    lines = [f"# kvconform report: {s['headline']} (peer profile {peer.get('profile')}){peer_note(s)}", "",
             f"- {s['judged']} of {len(results)} case(s) judged (the rest NOT_SUPPORTED)",
             f"- server: `{backend.get('base_url')}`" + (f", model `{backend['model']}`" if backend.get("model") else ""),
             f"- peer profile `{peer.get('profile')}` {peer.get('version')} ({peer.get('spec')}), settings "
             f"`{peer.get('settings')}`:", *[f"  - {line}" for line in said],
             f"- {s.get('counts_above_zero', 0)} judged count(s) predicted above 0",
             "- prompt ids: " + (f"the kit's tokenizer `{kit_tok}` ({token.get('loader')})" if kit_tok
                                 else "the server's own tokenization (no kit tokenizer given)")
             + (f", cross-checked with the server's `{token['server_crosscheck']}` endpoint(s) (PEER-TOK-1)"
                if token.get("server_crosscheck") else ", not cross-checked: the server offers no endpoint"),
             f"- kit {doc['kit_version']}, started {doc['started']}, finished {doc['finished']}, "
             f"complete: {doc['complete']}", "",
             "## Verdicts per section", "", verdict_table(results, "github"), "",
             "## Every request: cached tokens predicted by the oracle and reported by the server", "",
             "| case | request | prompt tokens N | predicted | reported | verdict |",
             "|---|---|---|---|---|---|"]
    for r in results:
        for step in (r.details or {}).get("steps", []):
            reported = step.get("reported")
            lines.append(f"| `{r.id}` | {step['request']} | {step['prompt_tokens']} | "
                         f"{'-' if step.get('predicted') is None else step['predicted']} | "
                         f"{'-' if reported is None else reported} | {r.verdict} |")
    lines.append("")
    bad = [r for r in results if r.verdict not in (Verdict.PASS, Verdict.NOT_SUPPORTED)]
    if bad:
        lines += ["## Cases that need attention", "", problems_table(bad, "github"), ""]
        for r in bad:
            lines += [f"### `{r.id}`: {r.verdict}", ""]
            if r.reason:
                lines += [r.reason, ""]
            for f in r.failures[:12]:
                lines.append(f"- {f.line()}")
                lines += [f"  - {step}" for step in f.chain_lines()]   # the oracle's steps that decided it
            if r.evidence:
                lines += ["", f"Every request and response of the case: `{r.evidence}/transcript.json`"]
            if r.rerun:
                lines += ["", "Re-run it against the same server, from the folder the run was started in:", "", "```", r.rerun, "```"]
            lines.append("")
    unsupported = [r for r in results if r.verdict == Verdict.NOT_SUPPORTED]
    if unsupported:
        lines += ["## Not supported", ""] + [f"- `{r.id}`: {r.reason}" for r in unsupported] + [""]
    return "\n".join(lines)
