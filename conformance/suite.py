"""A conformance run: select cases, run them and the generated families, fill the report.

Shared by `kvconform run` and the pytest entry point, so both judge a backend the same way.
"""
from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from .adapters.base import Adapter
from .cases import CASES_DIR, Case, discover, in_shard, select
from .execute import run_case
from .generate import run_generated
from .generate.draw import FAMILIES
from .report import Report, write_reproducer
from .verdicts import CaseResult, Verdict

REGRESSIONS_DIR = CASES_DIR / "regressions"


@dataclass
class Plan:
    """What a run does: the curated cases and the generated families, after selection and sharding."""
    cases: list[Case]
    families: list[str]
    examples: int = 300
    budget_s: float = 180.0
    seed: int = 0
    max_steps: int = 6
    save_regressions: bool = False
    skipped: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.cases) + len(self.families)


def make_plan(paths: list[str] | None, keywords: list[str] | None, sections: list[str] | None,
              rules: list[str] | None, slow: bool, generated: bool, curated: bool, families: list[str] | None,
              shard: tuple[int, int] | None, **generation) -> Plan:
    cases = select(discover(paths), keywords, sections, rules, slow) if curated else []
    fams = [f for f in (families or list(FAMILIES)) if f in FAMILIES] if generated else []
    if keywords:
        fams = [f for f in fams if any(k in f"generated/{f}" for k in keywords)]
    if (sections or rules or paths) and not families:
        fams = []  # a narrowed selection of cases runs the generated families only when named
    items = [("case", c.id, c) for c in cases] + [("family", f"generated/{f}", f) for f in fams]
    items.sort(key=lambda t: t[1])
    mine = [t for k, t in enumerate(items) if in_shard(k, shard)]
    return Plan([t[2] for t in mine if t[0] == "case"], [t[2] for t in mine if t[0] == "family"], **generation)


def prebuild(adapter: Adapter, cases: list[Case], progress: bool) -> None:
    """Build every distinct engine once, up front, so case timings exclude builds."""
    distinct = {}
    for c in cases:
        distinct.setdefault(repr(sorted(c.engine_args.items())), c.engine_args)
    for args in tqdm(list(distinct.values()), desc="engines", unit="engine", disable=not progress,
                     file=sys.stderr, leave=False):
        try:
            adapter.engine_for(args)
        except Exception:  # reported by the case that needs it
            pass


def execute(plan: Plan, adapter: Adapter, report: Report, progress: bool = True, jobs: int = 1) -> list[CaseResult]:
    """Run the plan; each result goes to the report as soon as it exists."""
    try:
        manifest, manifest_error = adapter.capabilities(), ""
    except Exception as e:  # a broken adapter: every case becomes an ERROR, none escapes
        manifest, manifest_error = None, f"{type(e).__name__}: {e}"
    if manifest is not None:
        prebuild(adapter, plan.cases, progress)
    reproducers = report.folder / "reproducers"
    bar = tqdm(total=plan.size, desc="cases", unit="case", disable=not progress, file=sys.stderr, mininterval=0.5)
    results = []
    def one(case: Case) -> CaseResult:
        result = run_case(case, adapter, manifest, manifest_error)
        if result.verdict >= Verdict.TIMEOUT:
            result.reproducer = _rel(write_reproducer(case.doc, case.base_dir, reproducers, case.id), report.folder)
        return result

    try:
        if jobs > 1:  # worth it for process-based adapters: the invocations overlap
            with ThreadPoolExecutor(jobs) as pool:
                for result in pool.map(one, plan.cases):
                    report.add(result)
                    results.append(result)
                    bar.update()
        else:
            for case in plan.cases:
                bar.set_postfix_str(case.id[-40:])
                result = one(case)
                report.add(result)
                results.append(result)
                bar.update()
        workdir = Path(tempfile.mkdtemp(prefix="kvconform-generated-"))
        try:
            for family in plan.families:
                bar.set_postfix_str(f"generated/{family}")
                budget = plan.budget_s / max(1, len(plan.families))
                result = run_generated(
                    family, adapter, manifest, workdir=workdir, examples=plan.examples, budget_s=budget,
                    seed=plan.seed, max_steps=plan.max_steps, reproducer_dir=reproducers,
                    regressions_dir=REGRESSIONS_DIR if plan.save_regressions else None,
                    run_case_fn=lambda c: run_case(c, adapter, manifest, manifest_error))
                if result.reproducer:
                    result.reproducer = _rel(Path(result.reproducer), report.folder)
                report.add(result)
                results.append(result)
                bar.update()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    finally:
        bar.close()
    return results


def _rel(path: Path, folder: Path) -> str:
    """Reproducer paths in report.json are relative to the report folder."""
    try:
        return str(Path(path).resolve().relative_to(Path(folder).resolve()))
    except ValueError:
        return str(path)

