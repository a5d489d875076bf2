"""The report folder (spec/RUNNING.md section 7): report.json, junit.xml, summary.md, report.html,
reproducers/.

report.json is rewritten atomically (temporary file, fsync, rename) after every case with
`"complete": false`, so an interrupted or killed run still leaves a valid report of the cases
finished so far that says so, which `kvconform run --resume` continues; the final write sets it
to true. A report folder that exists is never replaced without `--force`.
"""
from __future__ import annotations

import copy
import datetime
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from xml.etree import ElementTree as ET

from tabulate import tabulate

import reference
import reference.semantics

from .. import KIT_VERSION, RUNNING_VERSION
from ..cases.case import ROOT, SECTIONS
from ..judge.compare import TOLERANCES
from ..judge.numerical_judge import TOLERANCES as REFERENCE_TOLERANCES
from .. import KvconformError
from .html import write_html
from ..cases.schemas import schema_errors
from ..adapters.secrets import mask
from ..judge.verdicts import CaseResult, Verdict, headline_note, judged_line, summarize

SHORT = {"PASS": "PASS", "NOT_SUPPORTED": "N/S", "UNSPECIFIED": "UNSPEC", "QUALITY_WARNING": "QW",
         "TIMEOUT": "TIMEOUT", "FAIL": "FAIL", "ERROR": "ERROR"}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def environment() -> dict:
    """Where the run happened: enough to reproduce it (VK-CTS's info record)."""
    env = {"python": platform.python_version(), "platform": platform.platform(),
           "kvconform_env": {k: v for k, v in os.environ.items() if k.startswith("KVCONFORM_")}}
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = torch.__version__
        env["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    try:
        env["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                           text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        env["git_commit"] = None
    return env


OUTPUTS = ("report.json", "junit.xml", "summary.md", "report.html", "reproducers", "materialized")


def make_folder(folder: Path) -> None:
    """Create a folder the kit writes into; an unusable path is bad input, not a traceback."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise KvconformError(f"cannot create the folder: {e.strerror or e}", str(folder)) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise KvconformError("the folder is not writable", str(folder))


CREATED: list[Path] = []
"""Report folders this process created (with the parents it created), newest last: a run that
ends with bad input before writing anything removes them again (`remove_created_folders`)."""


def remove_created_folders() -> None:
    """Remove the folders this process created that are still empty: an exit-2 run leaves nothing
    behind. A folder something was written into is kept."""
    while CREATED:
        folder = CREATED.pop()
        try:
            folder.rmdir()
        except OSError:
            pass


def claim_report_folder(folder: Path, force: bool,
                        hint: str = "pass --force to replace it or --resume to continue an interrupted run") -> None:
    """A report folder is never overwritten by accident: one that exists and is not empty is
    refused unless `force`, which removes the previous run's files (and only those)."""
    if folder.exists() and not folder.is_dir():
        raise KvconformError("exists and is not a folder", str(folder))
    if not folder.exists():
        missing = [p for p in [folder, *folder.parents] if not p.exists()]
        make_folder(folder)          # checked now, before any case runs
        CREATED.extend(reversed(missing))
        return
    if not any(folder.iterdir()):
        make_folder(folder)
        return
    if not force:
        raise KvconformError(f"the report folder exists; {hint}", str(folder))
    for name in OUTPUTS:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    for stale in folder.glob(".report.json.*.tmp"):
        stale.unlink()


class Report:
    """Accumulates case results and writes the report folder."""
    VERSIONS = {"kit_version": KIT_VERSION, "spec_version": reference.SPEC_VERSION, "running_version": RUNNING_VERSION}

    def __init__(self, folder: Path, adapter_name: str, manifest: dict | None, settings: dict, options: dict,
                 shard: str | None = None, plan: dict | None = None, self_check: bool = False,
                 profile: str = reference.semantics.DEFAULT):
        self.folder = Path(folder)
        make_folder(self.folder)
        self.results: list[CaseResult] = []
        self.self_check = self_check
        self.doc = {
            "format": "kvconform-report-v1", "kit_version": KIT_VERSION,
            "spec_version": reference.SPEC_VERSION, "running_version": RUNNING_VERSION,
            "semantics_profile": profile, "started": now(), "finished": None, "complete": False,
            "shard": shard, "backend": {"adapter": adapter_name, "settings": settings, "self_check": self_check},
            "environment": environment(), "tolerances": {**TOLERANCES, **REFERENCE_TOLERANCES}, "options": options,
        }
        if plan is not None:
            self.doc["plan"] = plan
        if manifest is not None:
            self.doc["backend"]["capabilities"] = manifest

    def resume(self, previous: dict) -> set[str]:
        """Continue an interrupted report: its finished cases and its start time are kept.
        Returns the ids already finished."""
        self.results = [CaseResult.from_json(c) for c in previous["cases"]]
        self.doc["started"] = previous.get("started") or self.doc["started"]
        self.doc["options"] = dict(self.doc["options"], resumed=list((previous.get("options") or {})
                                                                      .get("resumed", [])) + [now()])
        for stale in self.folder.glob(".report.json.*.tmp"):   # a write cut short by a kill -9
            stale.unlink()
        return {r.id for r in self.results}

    def add(self, result: CaseResult) -> None:
        self.results.append(result)
        self.write(complete=False)

    def stopped_early(self, at: str, not_run: int) -> None:
        """The run stopped at its first failure (--fail-fast): `not_run` items of the plan were
        not run. The summary and the headline say so; such a run is never CONFORMANT."""
        self.doc["stopped_early"] = {"at": at, "not_run": not_run}

    def interrupted(self) -> None:
        """The partial report, complete: false, with its junit.xml and summary.md."""
        doc = self.json(False)
        write_json_atomic(self.folder / "report.json", doc)
        write_outputs(self.folder, doc, self.results)

    def json(self, complete: bool) -> dict:
        return dict(self.doc, complete=complete, finished=now() if complete else None,
                    summary=summarize(self.results, complete, self.self_check, group=_group, order=_group_order,
                                      selection=(self.doc.get("plan") or {}).get("selection"),
                                      stopped=self.doc.get("stopped_early")),
                    cases=[r.to_json() for r in self.results])

    def write(self, complete: bool) -> None:
        """The report so far. The partial report of a running run is rewritten after every case,
        so it is written compact (json's C encoder: a fifth of the indented form's time, which
        grew with every case); the finished report is indented for people to read."""
        write_json_atomic(self.folder / "report.json", self.json(complete), compact=not complete)

    def finish(self) -> dict:
        doc = self.json(True)
        write_json_atomic(self.folder / "report.json", doc)
        write_outputs(self.folder, doc, self.results)
        return doc


def write_json_atomic(path: Path, doc: dict, *, compact: bool = False) -> None:
    """Write a temporary file in the same folder, flush it to disk, then rename it over `path`:
    a reader, a kill -9 or a power cut sees the old file or the new one, never half of one."""
    write_text_atomic(path, json.dumps(doc, indent=None if compact else 1, default=str) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Every file of the report folder goes through here: the secrets the kit knows are masked
    (conformance/adapters/secrets.py)."""
    text = mask(text)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_outputs(folder: Path, doc: dict, results: list[CaseResult]) -> None:
    write_text_atomic(folder / "junit.xml", junit(doc, results))
    write_text_atomic(folder / "summary.md", summary_markdown(doc, results))
    write_html(folder, doc)


def check_report(doc: dict) -> list[tuple[str, str]]:
    return schema_errors(doc, "report")


# --- tables --------------------------------------------------------------------------------------

def verdict_table(results: list[CaseResult], fmt: str = "simple") -> str:
    """One row per spec section (plus generated), one column per verdict, and a total row."""
    columns = [v for v in Verdict]
    rows, totals = [], {v: 0 for v in columns}
    groups: dict[str, list[CaseResult]] = {}
    for r in results:
        groups.setdefault(_group(r), []).append(r)
    for name in sorted(groups, key=_group_order):
        counts = {v: sum(1 for r in groups[name] if r.verdict == v) for v in columns}
        for v in columns:
            totals[v] += counts[v]
        rows.append([name] + [counts[v] or "" for v in columns] + [len(groups[name])])
    rows.append(["total"] + [totals[v] for v in columns] + [len(results)])
    headers = ["section"] + [SHORT[str(v)] for v in columns] + ["cases"]
    return tabulate(rows, headers=headers, tablefmt=fmt)


def section_of(r: CaseResult) -> str:
    """The row of a result in the verdict table: its spec section, or `generated`."""
    return _group(r)


def section_order(name: str):
    return _group_order(name)


def _group(r: CaseResult) -> str:
    if r.id.startswith("generated/"):
        return "generated"
    return SECTIONS.get(r.section or "", r.section or "?")


def _group_order(name: str):
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
        repro = str(Path(folder) / r.reproducer) if r.reproducer and folder else r.reproducer or ""
        rows.append([r.id, str(r.verdict), _clip(detail, 140), repro])
    if not rows:
        return ""
    more = f"\n... and {len(rows) - limit} more (see report.json)" if len(rows) > limit else ""
    return tabulate(rows[:limit], headers=["case", "verdict", "first problem", "reproducer"], tablefmt=fmt) + more


def _clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3] + "..."


# --- junit.xml and summary.md ---------------------------------------------------------------------

def junit(doc: dict, results: list[CaseResult]) -> str:
    suites = ET.Element("testsuites", name="kvconform")
    by_group: dict[str, list[CaseResult]] = {}
    for r in results:
        by_group.setdefault(_group(r), []).append(r)
    for name in sorted(by_group, key=_group_order):
        members = by_group[name]
        suite = ET.SubElement(suites, "testsuite", name=name, tests=str(len(members)),
                              failures=str(sum(r.verdict == Verdict.FAIL for r in members)),
                              errors=str(sum(r.verdict in (Verdict.ERROR, Verdict.TIMEOUT) for r in members)),
                              skipped=str(sum(r.verdict == Verdict.NOT_SUPPORTED for r in members)),
                              time=f"{sum(r.duration_s for r in members):.3f}")
        props = ET.SubElement(suite, "properties")
        for key in ("kit_version", "spec_version", "running_version", "semantics_profile"):
            ET.SubElement(props, "property", name=key, value=str(doc[key]))
        ET.SubElement(props, "property", name="adapter", value=doc["backend"]["adapter"])
        for r in members:
            tc = ET.SubElement(suite, "testcase", classname=f"kvconform.{r.section or 'generated'}",
                               name=r.id, time=f"{r.duration_s:.3f}")
            cp = ET.SubElement(tc, "properties")
            ET.SubElement(cp, "property", name="verdict", value=str(r.verdict))
            ET.SubElement(cp, "property", name="rules", value=" ".join(r.rules))
            ET.SubElement(cp, "property", name="mandatory", value=str(r.mandatory).lower())
            text = "\n".join([r.reason] + [f.line() for f in r.failures] +
                             ([f"reproducer: {r.reproducer}"] if r.reproducer else []) +
                             ([r.stderr_tail] if r.stderr_tail else [])).strip()
            message = _clip((r.first_failure().line() if r.first_failure() else r.reason) or str(r.verdict), 300)
            if r.verdict == Verdict.FAIL:
                ET.SubElement(tc, "failure", message=message, type="FAIL").text = text
            elif r.verdict in (Verdict.ERROR, Verdict.TIMEOUT):
                ET.SubElement(tc, "error", message=message, type=str(r.verdict)).text = text
            elif r.verdict == Verdict.NOT_SUPPORTED:
                ET.SubElement(tc, "skipped", message=_clip(r.reason, 300))
            elif text:
                ET.SubElement(tc, "system-out").text = f"{r.verdict}: {text}"
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


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
                     + "; ".join(f"{e['what']} not judged: {_clip(e['reason'], 200)}" for e in judged["not_judged"]))
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


# --- reproducers -----------------------------------------------------------------------------------

def write_reproducer(doc: dict, base_dir: str, folder: Path, name: str) -> Path:
    """Write a standalone case file: media copied beside it under media/, paths made relative.

    The file runs alone with `kvconform run --case FILE` and fails the same way.
    """
    folder.mkdir(parents=True, exist_ok=True)
    out = copy.deepcopy(doc)
    for request in out.get("requests", []) if isinstance(out.get("requests"), list) else []:
        for message in request.get("messages", []) if isinstance(request, dict) else []:
            content = message.get("content") if isinstance(message, dict) else None
            for item in content if isinstance(content, list) else []:
                kind = item.get("type") if isinstance(item, dict) else None
                if kind in ("image", "audio") and isinstance(item.get(kind), str) and item[kind]:
                    src = Path(item[kind]) if os.path.isabs(item[kind]) else Path(base_dir) / item[kind]
                    if src.is_file():
                        data = src.read_bytes()
                        target = folder / "media" / f"{hashlib.sha256(data).hexdigest()[:10]}-{src.name}"
                        target.parent.mkdir(exist_ok=True)
                        if not target.exists():
                            shutil.copyfile(src, target)
                        item[kind] = f"media/{target.name}"
    path = folder / f"{_safe(name)}.json"
    path.write_text(mask(json.dumps(out, indent=1) + "\n"))
    return path


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


EVIDENCE_SUFFIX = ".files"
"""A reproducer `NAME.json` keeps its failing invocations' files in the folder `NAME.files/`."""


def write_evidence(invocations: list, folder: Path) -> None:
    """Keep what each backend invocation of a failing case saw and wrote: the request file, the
    output and profile files (byte for byte when the backend wrote files, else as JSON), the
    tail of stderr, and a summary with the outcome, exit code and command line.

    Files are numbered in invocation order: `1-run.request.json`, `2-bypass-replay.output.json`...
    """
    folder.mkdir(parents=True, exist_ok=True)
    for k, (label, got) in enumerate(invocations, 1):
        stem = folder / f"{k}-{_safe(label.replace(' ', '-'))}"
        copied = set()
        for role, path in got.files.items():
            suffix = ".txt" if role == "stderr" else ".json"
            if role != "command" and os.path.isfile(path):
                shutil.copyfile(path, f"{stem}.{role}{suffix}")
                copied.add(role)
        written = {"request": got.request, "output": None if got.responses is None else {"responses": got.responses},
                   "profile": got.profile}
        for role, doc in written.items():
            if role not in copied and doc is not None:
                Path(f"{stem}.{role}.json").write_text(mask(json.dumps(doc, indent=1, default=str) + "\n"))
        if "stderr" not in copied and got.stderr_tail:
            Path(f"{stem}.stderr.txt").write_text(mask(got.stderr_tail + "\n"))
        summary = {"invocation": label, "outcome": got.outcome, "exit_code": got.exit_code,
                   "message": got.message, "command": got.files.get("command")}
        Path(f"{stem}.summary.json").write_text(mask(json.dumps(summary, indent=1) + "\n"))

