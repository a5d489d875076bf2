"""A conformance run: select cases, run them and the generated families, fill the report.

Shared by `kvconform run` and the pytest entry point, so both judge a backend the same way.
"""
from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tqdm import tqdm


from .. import KvconformError
from ..adapters.base import Adapter
from ..adapters.engines import digest
from ..cases.case import CASES_DIR, SECTIONS, Case, discover, in_shard, matches, select
from ..cases.rules import spec_rule_ids
from ..cases.validate import check_case
from ..generate import MIN_BATCHES, cannot_run, run_generated
from ..generate.draw import FAMILIES
from ..judge.oracle import DEFAULT_PROFILE
from ..judge.verdicts import CaseResult, Verdict
from ..report.document import Report
from ..report.folder import EVIDENCE_SUFFIX, write_evidence, write_reproducer
from .execute import run_case
from .interrupts import raise_pending

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
    min_batches: int = MIN_BATCHES
    save_regressions: bool = False
    profile: str = DEFAULT_PROFILE
    """The semantics profile every case and family runs under (spec/profiles.md)."""
    identity: dict = field(default_factory=dict)
    """The selection before sharding ({"digest", "items"}): shards of one plan share it, so
    `kvconform merge` can refuse reports of different runs."""

    @property
    def size(self) -> int:
        return len(self.cases) + len(self.families)


def make_plan(paths: list[str] | None, keywords: list[str] | None, sections: list[str] | None,
              rules: list[str] | None, slow: bool, generated: bool, curated: bool, families: list[str] | None,
              shard: tuple[int, int] | None, *, exclude: list[str] | None = None, **generation) -> Plan:
    """Select, check and shard. Bad input (KvconformError, exit 2) is decided here, before any
    backend starts: an unknown section, rule id or family, a case file that `kvconform validate`
    rejects, and a selection that runs nothing."""
    _check_names(sections, rules, families)
    cases = select(discover(paths), keywords, sections, rules, slow, exclude=exclude) if curated else []
    cases = [c.for_profile(generation.get("profile", DEFAULT_PROFILE)) for c in cases]
    for case in cases:
        problems = check_case(case.doc, case.base_dir, str(case.path))
        if problems:
            json_path, message = problems[0]
            raise KvconformError(message, str(case.path), json_path)
    fams = [f for f in (families or list(FAMILIES)) if f in FAMILIES] if generated else []
    if keywords:
        fams = [f for f in fams if any(k in f"generated/{f}" for k in keywords)]
    if exclude:
        fams = [f for f in fams if not matches(f"generated/{f}", exclude)]
    if (sections or rules or paths) and not families:
        fams = []  # a narrowed selection of cases runs the generated families only when named
    items = [("case", c.id, c) for c in cases] + [("family", f"generated/{f}", f) for f in fams]
    items.sort(key=lambda t: t[1])
    if not items:
        raise KvconformError("the selection runs nothing: no case or generated family matches "
                             + _describe_selection(paths, keywords, sections, rules, generated, curated, families,
                                                   exclude))
    mine = [t for k, t in enumerate(items) if in_shard(k, shard)]
    if not mine:
        raise KvconformError(f"shard {shard[0]}/{shard[1]} of {len(items)} item(s) runs nothing")
    identity = {"items": len(items), "digest": digest(
        {"items": [[kind, key, digest(c.doc) if kind == "case" else None] for kind, key, c in items],
         "generation": {k: v for k, v in generation.items() if k != "save_regressions"}})}
    identity["selection"] = _selection(len(items), paths, keywords, sections, rules, slow, generated, curated,
                                       families, cases, exclude)
    return Plan([t[2] for t in mine if t[0] == "case"], [t[2] for t in mine if t[0] == "family"],
                identity=identity, **generation)


def _selection(selected: int, paths, keywords, sections, rules, slow, generated, curated, families,
               cases: list[Case], exclude=None) -> dict:
    """Whether the plan is narrower than the default run (every case but the slow ones, every
    family), by which options, and how many items of how many: a CONFORMANT of a selection says
    so (spec/RUNNING.md section 6)."""
    filters = ([f"--case {p}" for p in paths or []] + [f"-k {k}" for k in keywords or []]
               + [f"--exclude {k}" for k in exclude or []]
               + [f"--section {x}" for x in sections or []] + [f"--rule {x}" for x in rules or []]
               + ([f"--families {','.join(families)}"] if families and generated else [])
               + (["--no-generated"] if not generated else []) + (["--generated-only"] if not curated else []))
    default = cases if curated and not (paths or keywords or sections or rules or slow or exclude) else \
        select(discover(None), None, None, None, False)
    available = len(default) + len(FAMILIES)
    narrowed = bool(filters) and selected < available
    return {"narrowed": narrowed, "selected": selected, "available": available, "filters": filters}


def _check_names(sections: list[str] | None, rules: list[str] | None, families: list[str] | None) -> None:
    """An unknown name in a filter is a typo, not an empty selection."""
    for name in sections or []:
        if name.upper() not in SECTIONS:
            raise KvconformError(f"--section {name}: unknown section (one of {', '.join(SECTIONS)})")
    known = spec_rule_ids()
    for rule in rules or []:
        if rule not in known:
            raise KvconformError(f"--rule {rule}: not a rule id of spec/context-reuse.md")
    for family in families or []:
        if family not in FAMILIES:
            raise KvconformError(f"--families {family}: unknown family (one of {', '.join(FAMILIES)})")


def _describe_selection(paths, keywords, sections, rules, generated, curated, families, exclude=None) -> str:
    parts = [f"--case {' '.join(map(str, paths))}" if paths else "",
             " ".join(f"-k {k}" for k in keywords or []), " ".join(f"--exclude {k}" for k in exclude or []), " ".join(f"--section {x}" for x in sections or []),
             " ".join(f"--rule {x}" for x in rules or []), f"--families {','.join(families)}" if families else "",
             "--no-generated" if not generated else "", "--generated-only" if not curated else ""]
    return " ".join(p for p in parts if p) or "the default selection"


def case_cost(case: Case) -> tuple:
    """Cheap first: fewer requests, smaller generation budget (a proxy for run time). A case on an
    engine with a real tokenizer comes after every bytes-v1 case: loading the tokenizer, prompts of
    hundreds of tokens and their float64 reference take 0.3 to 1.2 s where a bytes-v1 case takes
    0.05 to 0.3 s. The order of a run that stops at its first failure (--fail-fast, and each
    faulty variant of `kvconform selftest`)."""
    doc = case.doc
    n = len(doc.get("requests") or [])
    gen = (case.runtime.get("maxGenerateLength") or doc.get("max_generate_length", 256)) if doc.get("requests") else 0
    return ("tokenizer" in case.engine_args, n * min(gen, 64) + n, case.id)


def stops_a_fail_fast_run(result: CaseResult) -> bool:
    """A result that decides the verdict: a mandatory case ended TIMEOUT, FAIL or ERROR."""
    return not result.conformant


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


def execute(plan: Plan, adapter: Adapter, report: Report, progress: bool = True, jobs: int = 1,
            rerun: Callable[[Path], str] | None = None, fail_fast: bool = False) -> list[CaseResult]:
    """Run the plan; each result goes to the report as soon as it exists.

    A case that ends TIMEOUT, FAIL or ERROR gets a reproducer, the files of its failing
    invocations beside it, and (given `rerun`, which turns a reproducer path into a command
    line) the exact command that re-runs it against the same backend. `fail_fast`: the curated
    cases cheapest first, then the families, and nothing after the first result that decides
    the verdict (`stops_a_fail_fast_run`); the report records where it stopped.
    """
    try:
        manifest, manifest_error = adapter.capabilities(), ""
    except Exception as e:  # a broken adapter: every case becomes an ERROR, none escapes
        manifest, manifest_error = None, f"{type(e).__name__}: {e}"
    bar_wanted = progress and sys.stderr.isatty()       # a bar's carriage returns do not belong in a CI log
    if manifest is not None:
        prebuild(adapter, plan.cases, bar_wanted)
    bar = tqdm(total=plan.size, desc="cases", unit="case", disable=not bar_wanted, file=sys.stderr, mininterval=0.5)
    sections = SectionLog(plan.cases)
    results = []
    cases = sorted(plan.cases, key=case_cost) if fail_fast else plan.cases

    def one(case: Case) -> CaseResult:
        result = with_rerun(run_one_case(case, adapter, manifest, manifest_error, report.folder), report.folder, rerun)
        if not bar_wanted:
            sections.finished(result)
        return result

    def settled(result: CaseResult, done: int) -> bool:
        report.add(result)
        results.append(result)
        bar.update()
        raise_pending()                 # a signal whose exception was dropped (conformance/run/interrupts.py)
        if fail_fast and stops_a_fail_fast_run(result):
            report.stopped_early(result.id, plan.size - done)
            return True
        return False

    try:
        if jobs > 1:  # worth it for process-based adapters: the invocations overlap
            pool = ThreadPoolExecutor(jobs)
            try:
                for k, result in enumerate(pool.map(one, cases)):
                    if settled(result, k + 1):
                        return results
            finally:            # stopped early: the cases not yet started are not run
                pool.shutdown(wait=True, cancel_futures=True)
        else:
            for k, case in enumerate(cases):
                bar.set_postfix_str(case.id[-40:])
                if settled(one(case), k + 1):
                    return results
        workdir = Path(tempfile.mkdtemp(prefix="kvconform-generated-"))
        started = time.monotonic()
        runnable = [f for f in plan.families if not cannot_run(f, adapter, manifest)]
        share = plan.budget_s / max(1, len(runnable))
        done: set = set()
        try:
            for k, family in enumerate(plan.families):
                bar.set_postfix_str(f"generated/{family}")
                # the budget left, shared by the families left that can run here (one that cannot
                # takes none), never less than an even share (one that shrank a failure may overrun)
                ahead = sum(1 for f in runnable if f not in done)
                left = plan.budget_s - (time.monotonic() - started)
                budget = max(left / max(1, ahead), share)
                done.add(family)
                result = run_one_family(family, plan, budget, adapter, manifest, manifest_error, report.folder,
                                        workdir, REGRESSIONS_DIR if plan.save_regressions else None)
                if not bar_wanted:
                    print(f"kvconform run: {result.id}: {result.verdict} ({result.reason[:160]})", file=sys.stderr,
                          flush=True)
                if settled(with_rerun(result, report.folder, rerun), len(cases) + k + 1):
                    return results
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    finally:
        bar.close()
    return results


class SectionLog:
    """Without a progress bar (`--no-progress`, or stderr not a terminal): one line on stderr per
    finished spec section (when its last case ends) and per generated family, so that a long run
    shows where it is without a bar's carriage returns."""

    def __init__(self, cases: list[Case]):
        self.left: dict[str, int] = {}
        for c in cases:
            self.left[c.section] = self.left.get(c.section, 0) + 1
        self.done: dict[str, list] = {}
        self.started = time.monotonic()
        self.lock = threading.Lock()

    def finished(self, result: CaseResult) -> None:
        with self.lock:
            section = result.section
            self.done.setdefault(section, []).append(result)
            self.left[section] = self.left.get(section, 1) - 1
            if self.left[section] == 0:
                self.line(SECTIONS.get(section or "", section or "?"), self.done[section],
                          time.monotonic() - self.started)

    @staticmethod
    def line(name: str, results: list, seconds: float) -> None:
        counts: dict[str, int] = {}
        for r in results:
            counts[str(r.verdict)] = counts.get(str(r.verdict), 0) + 1
        tally = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: Verdict[kv[0]]))
        print(f"kvconform run: {name}: {len(results)} case(s) done ({tally}) at {seconds:.0f} s", file=sys.stderr,
              flush=True)


# --- one unit of work, writing under a report folder -------------------------------------------------
# `execute` passes the report folder itself; a remote worker (conformance/executors) passes a
# folder of its own and ships what was written there back to the report, so both write the same
# files.

def run_one_case(case: Case, adapter: Adapter, manifest: dict | None, manifest_error: str,
                 folder: Path) -> CaseResult:
    """One curated case: the file laid out for a fixed engine under `folder/materialized/`, and for a
    TIMEOUT, FAIL or ERROR its reproducer and the files of its failing invocations under
    `folder/reproducers/` (paths in the result relative to `folder`)."""
    result = run_case(case, adapter, manifest, manifest_error)
    doc = case.doc
    if result.materialized is not None:    # laid out for the fixed engine: that file is what ran
        doc = result.materialized
        path = write_reproducer(doc, case.base_dir, folder / "materialized", case.id)
        result.details["materialized"]["file"] = _rel(path, folder)
    if result.verdict >= Verdict.TIMEOUT:
        keep_reproducer(result, write_reproducer(doc, case.base_dir, folder / "reproducers", case.id), folder)
    return result


def run_one_family(family: str, plan: Plan, budget_s: float, adapter: Adapter, manifest: dict | None,
                   manifest_error: str, folder: Path, workdir: Path, regressions_dir: Path | None = None,
                   seed: int | None = None, shrink: bool = True) -> CaseResult:
    """One generated family with the plan's settings (`seed` overrides the plan's), its reproducer
    and evidence under `folder/reproducers/`."""
    result = run_generated(
        family, adapter, manifest, workdir=workdir, examples=plan.examples, budget_s=budget_s,
        seed=plan.seed if seed is None else seed, max_steps=plan.max_steps, min_batches=plan.min_batches,
        reproducer_dir=folder / "reproducers", regressions_dir=regressions_dir, shrink=shrink, profile=plan.profile,
        run_case_fn=lambda c: run_case(c, adapter, manifest, manifest_error))
    if result.reproducer:
        keep_reproducer(result, Path(result.reproducer), folder)
    return result


def keep_reproducer(result: CaseResult, path: Path, folder: Path) -> None:
    """The reproducer at `path` and its evidence files, recorded relative to `folder`."""
    result.reproducer = _rel(path, folder)
    if result.invocations:
        evidence = path.with_suffix(EVIDENCE_SUFFIX)
        write_evidence(result.invocations, evidence)
        result.evidence = _rel(evidence, folder)


def with_rerun(result: CaseResult, folder: Path, rerun: Callable[[Path], str] | None) -> CaseResult:
    """Given `rerun` (a reproducer path to a command line), the command that re-runs the result's
    reproducer against the same backend."""
    if rerun is not None and result.reproducer:
        result.rerun = rerun(Path(folder) / result.reproducer)
    return result


def _rel(path: Path, folder: Path) -> str:
    """Reproducer paths in report.json are relative to the report folder."""
    try:
        return str(Path(path).resolve().relative_to(Path(folder).resolve()))
    except ValueError:
        return str(path)

