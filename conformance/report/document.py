"""report.json (spec/RUNNING.md section 7), and the other files of the report folder written from it:
junit.xml (`junit`), summary.md (`summary`), report.html (`html`).

report.json is rewritten atomically (temporary file, fsync, rename) after every case with
`"complete": false`, so an interrupted or killed run still leaves a valid report of the cases
finished so far that says so, which `kvconform run --resume` continues; the final write sets it
to true. A report folder that exists is never replaced without `--force`.
"""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

from .. import KIT_VERSION, RUNNING_VERSION
from ..cases.case import ROOT
from ..cases.schemas import schema_errors
from ..judge import oracle
from ..judge.compare import TOLERANCES
from ..judge.numerical_judge import TOLERANCES as REFERENCE_TOLERANCES
from ..judge.verdicts import CaseResult, summarize
from .folder import make_folder, write_json_atomic, write_text_atomic
from .html import write_html
from .junit import junit
from .summary import summary_markdown
from .tables import section_of, section_order

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


class Report:
    """Accumulates case results and writes the report folder. A runner whose summary.md reads
    otherwise (the peer suite's) gives its own `summary_markdown`; everything else is shared."""
    VERSIONS = {"kit_version": KIT_VERSION, "spec_version": oracle.SPEC_VERSION, "running_version": RUNNING_VERSION}

    def __init__(self, folder: Path, adapter_name: str, manifest: dict | None, settings: dict, options: dict,
                 shard: str | None = None, plan: dict | None = None, self_check: bool = False,
                 profile: str = oracle.DEFAULT_PROFILE):
        self.folder = Path(folder)
        make_folder(self.folder)
        self.results: list[CaseResult] = []
        self.self_check = self_check
        self.doc = {
            "format": "kvconform-report-v1", "kit_version": KIT_VERSION,
            "spec_version": oracle.SPEC_VERSION, "running_version": RUNNING_VERSION,
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
        write_outputs(self.folder, doc, self.results, self.summary_markdown)

    def json(self, complete: bool) -> dict:
        return dict(self.doc, complete=complete, finished=now() if complete else None,
                    summary=summarize(self.results, complete, self.self_check, group=section_of, order=section_order,
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
        write_outputs(self.folder, doc, self.results, self.summary_markdown)
        return doc

    summary_markdown = staticmethod(summary_markdown)


def write_outputs(folder: Path, doc: dict, results: list[CaseResult], summary=summary_markdown) -> None:
    """junit.xml, summary.md (written by `summary`) and report.html, from report.json's contents."""
    write_text_atomic(folder / "junit.xml", junit(doc, results))
    write_text_atomic(folder / "summary.md", summary(doc, results))
    write_html(folder, doc)


def check_report(doc: dict) -> list[tuple[str, str]]:
    return schema_errors(doc, "report")
