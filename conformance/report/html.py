"""report.html: the report folder as one self-contained page (spec/RUNNING.md section 7).

Written next to report.json by every `run`, `merge` and `campaign`, and by `kvconform report
DIR`, from report.json alone: the headline with its notes, the verdict table with a bar per
section, generated-family and campaign statistics, every case (grouped by section, the ones that
need attention open) with its failures, reproducer and re-run command, and a page map per
request drawn from the case's `details.page_map` (conformance/report/pagemap.py), the facts the oracle
decided.

One file, no network: the CSS and the drawing script (conformance/report/html_assets/) are inlined, a
Content-Security-Policy forbids every fetch, and all text is escaped. Large reports stay light:
page maps travel as JSON and are drawn only when their case is opened.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from ..judge.verdicts import headline_clauses, judged_line
from .folder import write_text_atomic

ASSETS = Path(__file__).with_name("html_assets")
ORDER = ("PASS", "QUALITY_WARNING", "UNSPECIFIED", "NOT_SUPPORTED", "TIMEOUT", "FAIL", "ERROR")
SHORT = {"PASS": "PASS", "NOT_SUPPORTED": "N/S", "UNSPECIFIED": "UNSPEC", "QUALITY_WARNING": "QW",
         "TIMEOUT": "TIMEOUT", "FAIL": "FAIL", "ERROR": "ERROR"}
QUIET = ("PASS", "NOT_SUPPORTED")
OPEN_CASES = 25
"""Cases that need attention shown open at load; the others open on a click."""
MAX_FAILURES = 40
KNOWN_SUMMARY = {"verdicts", "judged", "conformant", "headline", "reference_checked", "outputs_judged_against",
                 "not_judged", "sections", "thin_sections", "partly_judged", "selection", "stopped_early"}
"""Summary fields the headline shows in words (`headline_clauses`, `judged_line`); any other is shown as it is."""
SHOWN_DETAILS = {"page_map", "steps", "materialized", "reference", "examples", "shrink_steps", "batches_checked",
                 "batches_required", "examples_after_budget", "longest_example_s", "seed", "max_examples", "budget_s", "reproduced",
                 "reproducer_verdict", "reproducer_requests"}
CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


def render(doc: dict) -> str:
    """The page for one report.json document."""
    cases = doc.get("cases") or []
    maps = {str(k): c["details"]["page_map"] for k, c in enumerate(cases)
            if isinstance((c.get("details") or {}).get("page_map"), dict)}
    summary = doc.get("summary") or {}
    title = f"kvconform report: {summary.get('headline', '?')}"
    body = [_headline(doc), _nav(doc), _verdicts(cases), _generated(cases), _campaign(doc.get("campaign")),
            _peer(doc.get("peer")), _cases(cases), _environment(doc)]
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)}</title><style>{(ASSETS / 'report.css').read_text()}</style></head>\n<body>\n"
            + "\n".join(part for part in body if part)
            + f'\n<script type="application/json" id="kv-pagemaps">{_json(maps)}</script>'
            f"\n<script>{(ASSETS / 'pagemap.js').read_text()}</script>\n</body></html>\n")


def write_html(folder: Path, doc: dict) -> Path:
    path = Path(folder) / "report.html"
    write_text_atomic(path, render(doc))
    return path


# --- the parts of the page -----------------------------------------------------------------------

def _headline(doc: dict) -> str:
    s = doc.get("summary") or {}
    headline = s.get("headline", "?")
    backend = doc.get("backend") or {}
    caps = backend.get("capabilities") or {}
    peer = doc.get("peer") or {}
    profile = peer.get("profile") or doc.get("semantics_profile")
    what = f"{caps.get('backend', '')} {caps.get('version', '')}".strip()
    facts = [f"{'peer' if peer else 'semantics'} profile <code>{_e(profile)}</code>",
             f"backend <code>{_e(backend.get('adapter'))}</code>" + (f" ({_e(what)})" if what else ""),
             _e(judged_line(dict(s, judged=s.get("judged", 0)), len(doc.get("cases") or [])))]
    if s.get("reference_checked"):
        facts.append(f"{_e(s['reference_checked'])} greedy request(s) checked against the numerical reference")
    notes = [_e(c) for c in headline_clauses(s)]
    if backend.get("self_check"):
        notes.insert(0, "<b>No backend was tested</b>: the oracle ran against itself (a check of the kit).")
    if not doc.get("complete"):
        notes.append("The run did not finish: this report holds the cases finished so far (complete: false).")
    options = doc.get("options") or {}
    if options.get("merged_from"):
        notes.append(f"Merged from shards {_e(', '.join(str(x) for x in options['merged_from']))}"
                     + (f"; missing {_e(', '.join(options['missing_shards']))}" if options.get("missing_shards") else "")
                     + (f"; interrupted {_e(', '.join(options['interrupted_shards']))}"
                        if options.get("interrupted_shards") else ""))
    if doc.get("shard"):
        notes.append(f"Shard {_e(doc['shard'])} of a sharded run (kvconform merge joins the shards).")
    notes += _extra_notes(s)
    counts = " ".join(f'<span class="badge {v}">{SHORT[v]} {n}</span>'
                      for v in ORDER if (n := (s.get("verdicts") or {}).get(v)))
    return (f'<header id="headline" class="headline h-{_slug(headline)}"><h1>'
            f'<span class="verdict-word">{_e(headline)}</span></h1>'
            f'<p class="facts">{" · ".join(facts)}</p><p class="counts">{counts}</p>'
            + (f'<ul class="notes">{"".join(f"<li>{n}</li>" for n in notes)}</ul>' if notes else "")
            + "</header>")


def _extra_notes(summary: dict) -> list[str]:
    """Summary fields this page does not know by name (selection and coverage notes, judged
    counts per section...): shown as they are rather than dropped."""
    out = []
    for key, value in summary.items():
        if key in KNOWN_SUMMARY:
            continue
        if isinstance(value, str):
            out.append(f"{_e(key.replace('_', ' '))}: {_e(value)}")
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            out += [f"{_e(key.replace('_', ' '))}: {_e(v)}" for v in value]
        elif value not in (None, [], {}):
            out.append(f"{_e(key.replace('_', ' '))}: <code>{_e(_clip(json.dumps(value, default=str), 600))}</code>")
    return out


def _nav(doc: dict) -> str:
    links = [("verdicts", "Verdicts"), ("cases", "Cases"), ("environment", "Environment")]
    if any(str(c.get("id", "")).startswith("generated/") for c in doc.get("cases") or []):
        links.insert(1, ("generated", "Generated families"))
    if doc.get("campaign"):
        links.insert(1, ("campaign", "Campaign"))
    if doc.get("peer"):
        links.insert(1, ("peer", "Peer server"))
    return '<nav>' + " ".join(f'<a href="#{k}">{v}</a>' for k, v in links) + "</nav>"


def _verdicts(cases: list) -> str:
    groups = _groups(cases)
    head = "".join(f"<th>{SHORT[v]}</th>" for v in ORDER)
    rows = []
    totals = {v: 0 for v in ORDER}
    for name, members in groups:
        counts = {v: sum(1 for c in members if c.get("verdict") == v) for v in ORDER}
        for v in ORDER:
            totals[v] += counts[v]
        rows.append(_verdict_row(name, counts, len(members)))
    rows.append(_verdict_row("total", totals, len(cases), total=True))
    return (f'<section id="verdicts"><h2>Verdicts per section</h2><table class="verdicts"><thead><tr>'
            f'<th>section</th>{head}<th>cases</th><th>judged / not supported / failed</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></section>')


def _verdict_row(name: str, counts: dict, count: int, total: bool = False) -> str:
    cells = "".join(f'<td class="n {v}">{counts[v] or ""}</td>' for v in ORDER)
    return (f'<tr class="{"total" if total else ""}"><th>{_e(name)}</th>{cells}<td class="n">{count}</td>'
            f"<td>{bar_chart(counts)}</td></tr>")


def bar_chart(counts: dict, width: int = 220) -> str:
    """A stacked bar: each verdict's share of the section's cases, and judged / total beside it."""
    total = sum(counts.values())
    if not total:
        return ""
    parts, x = [], 0.0
    for v in ORDER:
        if counts.get(v):
            w = width * counts[v] / total
            parts.append(f'<rect class="seg {v}" x="{x:.2f}" y="0" width="{w:.2f}" height="12">'
                         f"<title>{SHORT[v]}: {counts[v]}</title></rect>")
            x += w
    judged = total - counts.get("NOT_SUPPORTED", 0)
    failed = sum(counts.get(v, 0) for v in ("TIMEOUT", "FAIL", "ERROR"))
    label = f"{judged} / {counts.get('NOT_SUPPORTED', 0)} / {failed}"
    return (f'<svg class="bar" width="{width + 90}" height="12" role="img" aria-label="{_e(label)}">'
            f'{"".join(parts)}<text x="{width + 6}" y="10">{_e(label)}</text></svg>')


def _generated(cases: list) -> str:
    families = [c for c in cases if str(c.get("id", "")).startswith("generated/")]
    if not families:
        return ""
    rows = []
    for c in families:
        d = c.get("details") or {}
        repro = _link(c.get("reproducer")) if c.get("reproducer") else ""
        shrunk = (f"{_e(d.get('reproducer_requests'))} request(s), "
                  + ("fails the same way alone" if d.get("reproduced") else f"alone: {_e(d.get('reproducer_verdict'))}")
                  if "reproduced" in d else "")
        rows.append(f'<tr><td><code>{_e(c["id"])}</code></td><td><span class="badge {_e(c.get("verdict"))}">'
                    f'{_e(SHORT.get(c.get("verdict"), c.get("verdict")))}</span></td>'
                    f'<td class="n">{_e(d.get("examples", ""))}</td>'
                    f'<td class="n">{_e(d.get("batches_checked", ""))}'
                    + (f' / {_e(d["batches_required"])}' if "batches_required" in d else "")
                    + f'</td><td class="n">{_e(d.get("shrink_steps", ""))}</td><td class="n">{_e(d.get("seed", ""))}</td>'
                    f"<td>{repro} {shrunk}</td></tr>")
    return ('<section id="generated"><h2>Generated families</h2><table class="plain"><thead><tr><th>family</th>'
            '<th>verdict</th><th>examples</th><th>batches judged / required</th><th>shrink steps</th><th>seed</th>'
            f'<th>shrunk reproducer</th></tr></thead><tbody>{"".join(rows)}</tbody></table></section>')


def _campaign(state: dict | None) -> str:
    if not state:
        return ""
    facts = (f"{_e(state.get('hours'))} h asked, {_e(state.get('wall_s', 0))} s run, {_e(state.get('units', 0))} "
             f"unit(s), seeds from {_e(state.get('first_seed'))}; {_e(state.get('scenarios', 0))} scenarios "
             f"({_e(state.get('scenarios_per_minute', 0))}/min, {_e(state.get('scenarios_per_minute_per_worker', 0))}"
             f"/min per worker), {_e(state.get('batches', 0))} batches judged, {_e(state.get('shrink_steps', 0))} "
             f"shrink steps")
    tables = [f"<p>{facts}</p>"]
    for title, key, name_ in (("Families", "families", "family"), ("Workers", "workers", "worker")):
        rows = [f'<tr><td><code>{_e(name)}</code></td><td class="n">{_e(t.get("units", ""))}</td>'
                f'<td class="n">{_e(t.get("scenarios", ""))}</td><td class="n">{_e(t.get("batches", ""))}</td>'
                f'<td class="n">{_e(t.get("shrink_steps", ""))}</td><td class="n">{_e(t.get("busy_s", ""))}</td>'
                f'<td class="n">{_e(t.get("scenarios_per_busy_minute", ""))}</td></tr>'
                for name, t in (state.get(key) or {}).items()]
        tables.append(f'<h3>{title}</h3><table class="plain"><thead><tr><th>{name_}</th><th>units</th>'
                      f'<th>scenarios</th><th>batches</th><th>shrink steps</th><th>busy s</th>'
                      f'<th>scenarios / busy min</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')
    distinct = state.get("distinct_failures") or []
    rows = [f'<tr><td><code>{_e(d.get("id"))}</code></td><td>{_e(d.get("verdict"))}</td><td>{_e(d.get("rule", ""))}</td>'
            f'<td><code>{_e(d.get("observable", ""))}</code></td><td class="n">{_e(d.get("occurrences"))}</td>'
            f'<td>{_link(d.get("reproducer")) if d.get("reproducer") else ""}</td></tr>' for d in distinct]
    tables.append(f"<h3>Distinct failures: {len(distinct)}</h3>" + (
        '<table class="plain"><thead><tr><th>failure</th><th>verdict</th><th>rule</th><th>observable</th>'
        f'<th>found</th><th>reproducer</th></tr></thead><tbody>{"".join(rows)}</tbody></table>' if rows else ""))
    return f'<section id="campaign"><h2>Campaign</h2>{"".join(tables)}</section>'


def _peer(peer: dict | None) -> str:
    if not peer:
        return ""
    token = peer.get("token_source") or {}
    return (f'<section id="peer"><h2>Peer server</h2><p>profile <code>{_e(peer.get("profile"))}</code> '
            f'{_e(peer.get("version", ""))} ({_e(peer.get("spec", ""))}), settings '
            f'<code>{_e(json.dumps(peer.get("settings"), default=str))}</code>; prompt ids: '
            f'{_e(token.get("kit_tokenizer") or "the server tokenization")}'
            + (f', cross-checked with <code>{_e(token["server_crosscheck"])}</code>' if token.get("server_crosscheck")
               else "") + "</p></section>")


def _cases(cases: list) -> str:
    out = ['<section id="cases"><h2>Cases</h2><p class="filters"><label><input type="checkbox" id="only-problems"> '
           'only the cases that need attention</label> <button type="button" id="open-all">open every section'
           '</button></p>']
    index = {id(c): k for k, c in enumerate(cases)}
    opened = 0
    for name, members in _groups(cases):
        bad = [c for c in members if c.get("verdict") not in QUIET]
        counts = ", ".join(f"{n} {SHORT[v]}" for v in ORDER
                           if (n := sum(1 for c in members if c.get("verdict") == v)))
        out.append(f'<details class="section"{" open" if bad else ""}><summary><b>{_e(name)}</b>: '
                   f"{len(members)} case(s): {_e(counts)}</summary>")
        for c in members:
            show = c.get("verdict") not in QUIET and opened < OPEN_CASES
            opened += show
            out.append(_case(index[id(c)], c, show))
        out.append("</details>")
    out.append("</section>")
    return "\n".join(out)


def _case(k: int, c: dict, open_: bool) -> str:
    verdict = str(c.get("verdict"))
    failures = c.get("failures") or []
    first = next((f for f in failures if f.get("verdict", "FAIL") == verdict), None)
    line = _failure_line(first) if first else c.get("reason") or ""
    rules = " ".join(c.get("rules") or [])
    body = []
    if c.get("reason"):
        body.append(f'<p class="reason">{_e(c["reason"])}</p>')
    if failures:
        rows = "".join(
            f'<tr class="{_e(f.get("verdict", "FAIL"))}"><td>{_e(f.get("verdict", "FAIL"))}</td><td>{_e(f.get("rule") or "")}</td>'
            f'<td class="n">{"" if f.get("request") is None else _e(f["request"])}</td><td><code>{_e(f.get("what"))}</code></td>'
            f'<td><code>{_e(_value(f.get("expected")))}</code></td><td><code>{_e(_value(f.get("observed")))}</code></td>'
            f'<td>{_e(f.get("why"))}</td></tr>' for f in failures[:MAX_FAILURES])
        more = (f'<p class="more">... {len(failures) - MAX_FAILURES} more in report.json</p>'
                if len(failures) > MAX_FAILURES else "")
        body.append('<table class="failures"><thead><tr><th>verdict</th><th>rule</th><th>request</th><th>observable'
                    '</th><th>expected</th><th>observed</th><th>why</th></tr></thead>'
                    f"<tbody>{rows}</tbody></table>{more}")
    links = []
    if c.get("source"):
        links.append(f"source <code>{_e(c['source'])}</code>")
    if c.get("reproducer"):
        links.append(f"reproducer {_link(c['reproducer'])}")
    if c.get("evidence"):
        links.append(f"the failing invocations' files {_link(c['evidence'])}")
    materialized = ((c.get("details") or {}).get("materialized") or {})
    if materialized.get("file"):
        links.append(f"as laid out for the engine {_link(materialized['file'])}")
    if c.get("engine"):
        links.append(f"engine <code>{_e(c['engine'])}</code>")
    links.append(f"{_e(c.get('duration_s', 0))} s")
    body.append(f'<p class="links">{" · ".join(links)}</p>')
    if materialized.get("adaptations"):
        body.append(f'<p class="note">materialized: {_e("; ".join(map(str, materialized["adaptations"])))}</p>')
    if c.get("rerun"):
        body.append(f'<p>Re-run it against the same backend:</p><pre class="rerun">{_e(c["rerun"])}</pre>')
    if c.get("stderr_tail"):
        body.append(f'<details class="stderr"><summary>stderr</summary><pre>{_e(c["stderr_tail"][-4000:])}</pre>'
                    "</details>")
    extra = {key: v for key, v in (c.get("details") or {}).items() if key not in SHOWN_DETAILS}
    if extra:
        body.append('<table class="kv">' + "".join(f"<tr><th>{_e(key)}</th><td><code>{_e(_clip(json.dumps(v, default=str), 400))}"
                                                  f"</code></td></tr>" for key, v in extra.items()) + "</table>")
    has_map = isinstance((c.get("details") or {}).get("page_map"), dict)
    body.append(f'<div class="pagemap" data-case="{k}"><noscript>The page map is drawn by a script; its numbers '
                f"are in report.json, cases[{k}].details.page_map.</noscript></div>" if has_map else
                '<p class="note">No page map in report.json: the case ended before the oracle predicted a '
                "request file (a refusal, a negative case, an error), ran several request files, or an older kit "
                "wrote the report.</p>")
    return (f'<details class="case v-{_e(verdict)}" id="case-{k}" data-case="{k}" data-verdict="{_e(verdict)}"'
            f'{" open" if open_ else ""}><summary><span class="badge {_e(verdict)}">{_e(SHORT.get(verdict, verdict))}'
            f'</span> <code class="cid">{_e(c.get("id"))}</code> <span class="rules">{_e(rules)}</span>'
            + (f' <span class="first">{_e(_clip(line, 180))}</span>' if line and verdict not in QUIET else "")
            + f'</summary><div class="case-body">{"".join(body)}</div></details>')


def _environment(doc: dict) -> str:
    env = dict(doc.get("environment") or {})
    rows = [("kit", doc.get("kit_version")), ("spec", doc.get("spec_version")), ("RUNNING", doc.get("running_version")),
            ("semantics profile", doc.get("semantics_profile")), ("started", doc.get("started")),
            ("finished", doc.get("finished")), ("complete", doc.get("complete")),
            ("backend settings", json.dumps((doc.get("backend") or {}).get("settings"), default=str))]
    rows += [(k, v if isinstance(v, (str, int, float, bool)) or v is None else json.dumps(v, default=str))
             for k, v in env.items()]
    if doc.get("executor"):
        rows.append(("executor", json.dumps(doc["executor"], default=str)))
    rows.append(("tolerances", json.dumps(doc.get("tolerances"), default=str)))
    options = {k: v for k, v in (doc.get("options") or {}).items() if v not in (None, False, [], "")}
    rows.append(("options", json.dumps(options, default=str)))
    table = "".join(f"<tr><th>{_e(k)}</th><td><code>{_e(_clip(str(v), 2000))}</code></td></tr>" for k, v in rows)
    return (f'<section id="environment"><h2>Environment</h2><details><summary>versions, machine, tolerances and '
            f'options of the run</summary><table class="kv">{table}</table></details></section>')


# --- helpers -------------------------------------------------------------------------------------

def _groups(cases: list) -> list[tuple[str, list]]:
    """Cases by spec section (the generated families last), as the verdict table orders them."""
    from ..cases.case import SECTIONS
    order = list(SECTIONS.values())
    groups: dict[str, list] = {}
    for c in cases:
        name = ("generated" if str(c.get("id", "")).startswith("generated/")
                else SECTIONS.get(c.get("section") or "", c.get("section") or "?"))
        groups.setdefault(name, []).append(c)
    return sorted(groups.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0]))


def _failure_line(f: dict) -> str:
    where = f"request {f['request']}: " if f.get("request") is not None else ""
    rule = f"[{f['rule']}] " if f.get("rule") else ""
    return (f"{rule}{where}{f.get('what')}: expected {_value(f.get('expected'))}, observed {_value(f.get('observed'))}; "
            f"{f.get('why')}")


def _link(path) -> str:
    """A link to a file of the report folder (relative paths only: the page travels with the folder)."""
    text = str(path)
    if text.startswith("/") or "://" in text or text.startswith(".."):
        return f"<code>{_e(text)}</code>"
    return f'<a href="{_e(text)}"><code>{_e(text)}</code></a>'


def _value(v) -> str:
    return _clip(json.dumps(v, default=str) if not isinstance(v, str) else repr(v), 200)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 3] + "..."


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in str(text).lower())


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _json(value) -> str:
    """JSON safe inside a <script> element: no `<`, `>` or `&` that could end it."""
    return (json.dumps(value, separators=(",", ":"), default=str)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
