"""`kvconform selftest`: does the suite catch real bugs?

Runs the default suite (the curated cases of `kvconform run`, then its generated families)
against:

- the bundled backend (`inprocess`): must be conformant;
- the oracle posing as a backend (`reference`): must PASS every case;
- the `broken` adapter (every call raises): must end ERROR everywhere;
- every faulty variant of `faulty_backends/` (the bundled backend with exactly one
  defect): each must be caught, i.e. some case must end FAIL, ERROR or TIMEOUT. A variant's run
  stops at its first such case; curated cases run cheapest first, the generated families last.

It prints the kill matrix (variant, bug class, rule, the first case that caught it, which kind
of check that is and which observable disagreed), the kill rate and the baselines, and writes
`selftest.json` and `kill-matrix.md` into the report folder (default
`kvconform-report-selftest/`). Exit code 0 when every variant is
caught and every baseline is as required, 1 otherwise, 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from tabulate import tabulate

from .. import KvconformError
from ..report.folder import claim_report_folder, marked_by, write_text_atomic
from .run import positive_int, seconds

SELFTEST_OUTPUTS = ("selftest.json", "kill-matrix.md", "reproducers")

BASELINES = {
    "inprocess": "conformant: no mandatory case TIMEOUT, FAIL or ERROR",
    "reference": "every case PASS",
    "broken": "every case ERROR",
    "broken-judging": "ERROR wherever log-probabilities are judged: every case that compares them, every "
                      "generated family",
}
CHECK_KINDS = {"golden/": "golden case", "generated/": "generated set", "regressions/": "regression case"}
# A variant that dies of one of these did not get caught: its own code is broken (say, an
# overridden method whose signature changed in gpu_backend), and the gate says so.
HARNESS_ERRORS = re.compile(r"\b(TypeError|AttributeError|NameError|ImportError|ModuleNotFoundError|SyntaxError)\b")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variant", action="append", metavar="NAME",
                        help="run only these variants (repeatable; default: the whole catalogue)")
    parser.add_argument("--no-baselines", action="store_true",
                        help="skip the bundled, reference and broken baselines (variants only)")
    parser.add_argument("--baseline", action="append", choices=list(BASELINES), metavar="NAME",
                        help="run only these baselines (repeatable; default: all four: "
                             + ", ".join(BASELINES) + ")")
    parser.add_argument("--jobs", type=positive_int, default=min(2, os.cpu_count() or 1), metavar="N",
                        help="targets run at once, one process each (default: 2, or 1 on one core)")
    parser.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"),
                        help="device of the bundled backend and its variants (default cpu)")
    parser.add_argument("--timeout", type=seconds, default=120.0, metavar="S", help="seconds per invocation")
    parser.add_argument("--examples", type=positive_int, default=300, metavar="N",
                        help="generated examples per family at most (default 300, as kvconform run)")
    parser.add_argument("--budget-seconds", type=seconds, default=180.0, metavar="S",
                        help="cap on the generated families of one target (default 180, as kvconform run)")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    parser.add_argument("--max-steps", type=positive_int, default=6, metavar="N", help="batches per generated example")
    parser.add_argument("--shrink", action="store_true",
                        help="shrink a variant's failing generated example (default: the first one is enough)")
    parser.add_argument("--generated-only", action="store_true",
                        help="variants: run only the generated families, every family (evidence that the "
                             "generator alone catches a defect); the gate is the default mode")
    parser.add_argument("--report", default="kvconform-report-selftest", metavar="DIR",
                        help="folder for selftest.json, kill-matrix.md and reproducers "
                             "(default kvconform-report-selftest)")
    parser.add_argument("--fixed-engines", action="store_true",
                        help="judge every variant through fixed engines (P = 16: attention with vision and LoRA, "
                             "hybrid with LoRA, FP8; P = 128 with Phi-3-vision's real tokenizer and two image "
                             "counters), each case materialized for them, as a real deployment is judged; "
                             "baselines must hold on each")
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    parser.add_argument("--no-progress", action="store_true", help="no line per finished target")
    from ..mutation.command import add_arguments as mutation_arguments
    mutation_arguments(parser)


# --- one target, in a worker process ---------------------------------------------------------------

def compares_logprobs(case) -> bool:
    """Whether running this case compares log-probabilities: greedy outputs compared with the
    bypass replay, log-probabilities asked for, and a run that must produce responses."""
    from ..judge import oracle
    from ..adapters.base import is_greedy
    doc = case.doc
    asked = doc.get("num_logprobs", 0) or any(r.get("num_logprobs", 0) for r in doc.get("requests", []))
    if not (asked and case.compare_outputs and is_greedy(doc)) or case.negative:
        return False
    try:
        engine = oracle.derive_engine(case.engine_args)
        if case.meta.get("description_edits"):      # the runtime is handed an edited description
            engine = oracle.engine_of({**engine.to_config(), **case.meta["description_edits"]})
    except oracle.InputError:
        return False              # a refused build runs nothing
    return oracle.rejection(engine, oracle.flags_of(case.runtime)) is None


def observable_of(failure, verdict: str, reason: str) -> str:
    """Which observable disagreed: counter, per-request, output, rejection, exit status, crash."""
    if failure is None:
        return "crash" if verdict == "ERROR" else "timeout" if verdict == "TIMEOUT" else "-"
    what, rule = failure.what, failure.rule or ""
    if what.startswith("profile"):
        return "counter"
    if rule.startswith("CR-OUT") or ".output_ids" in what or ".output_text" in what or ".logprobs" in what:
        return "output"
    if what.startswith("responses"):
        return "per-request"
    if what in ("deployment", "rejection message"):
        return "rejection"
    if what in ("exit code", "failed_batches"):
        return "exit status"
    if failure.verdict.name == "ERROR":
        return "crash"
    return what.split(".")[0].split("[")[0]


def check_of(case_id: str) -> str:
    return next((kind for prefix, kind in CHECK_KINDS.items() if case_id.startswith(prefix)), "curated case")


def summarize_result(r) -> dict:
    first = r.first_failure()
    kinds = sorted({observable_of(f, r.verdict.name, r.reason) for f in r.failures if f.verdict >= r.verdict}
                   or {observable_of(None, r.verdict.name, r.reason)})
    return {"case": r.id, "verdict": r.verdict.name, "check": check_of(r.id),
            "observable": observable_of(first, r.verdict.name, r.reason), "observables": kinds,
            "rule": first.rule if first and first.rule else (r.rules[0] if r.rules else None),
            "failure": first.line() if first else r.reason, "reproducer": r.reproducer,
            "duration_s": round(r.duration_s, 3)}


def run_target(kind: str, name: str, opts: dict, part: str | None = None) -> dict:
    """Run the default suite, or one `part` of it ("curated" or a generated family), against one
    target. Variants stop at the first case that catches them (except with --generated-only)."""
    import torch
    torch.set_num_threads(1)   # tiny tensors: one thread is fastest, and workers must not oversubscribe
    from ..run.suite import case_cost, make_plan

    started = time.monotonic()
    profile = _variant_profile(name) if kind == "variant" else None
    plan = make_plan(None, None, None, None, False, generated=True, curated=True, families=None, shard=None,
                     **({"profile": profile} if profile else {}))
    only_generated = kind == "variant" and opts.get("generated_only")
    cases = sorted(plan.cases, key=case_cost) if part in (None, "curated") and not only_generated else []
    families = [f for f in plan.families if part in (None, f)]
    stop = kind == "variant" and not only_generated
    # Through fixed engines a variant is judged on each engine in turn until one catches it; a
    # baseline must hold on every engine. The oracle and the broken adapter build no engines.
    engines = opts.get("fixed_engines") or [None]
    if name in ("reference", "broken"):
        engines = [None]
    results, killer, engine_of_kill = [], None, None
    for engine_dir in engines:
        adapter = _adapter(kind, name, opts, engine_dir)
        got, killer = _run_parts(adapter, kind, name, opts, plan, cases, families, stop, only_generated)
        results += got
        if killer is not None:
            engine_of_kill = engine_dir
            break
    confirmed = _bundled_passes(killer, cases, opts, engine_of_kill) if profile and killer is not None else None
    out = {"kind": kind, "name": name, "part": part, "duration_s": round(time.monotonic() - started, 2),
           "cases_run": len(results), "verdicts": {}}
    if profile:
        out["profile"] = profile
    for r in results:
        out["verdicts"][r.verdict.name] = out["verdicts"].get(r.verdict.name, 0) + 1
    out = _target_result(out, kind, name, results, killer, engine_of_kill, cases, families, only_generated)
    if confirmed is not None and not confirmed[0]:
        out["killed"] = False
        out["invalid"] = confirmed[1]
    return out


def _variant_profile(name: str) -> str | None:
    from faulty_backends import CATALOGUE
    return CATALOGUE[name].profile


def _bundled_passes(killer, cases, opts: dict, engine_dir) -> tuple[bool, str]:
    """A variant judged under a profile the baselines do not run: the case that caught it must
    pass the bundled backend under that profile, else the kill is no evidence of the defect."""
    from ..run.execute import run_case
    case = next((c for c in cases if c.id == killer.id), None)
    if case is None:                     # a generated family: its reproducer was confirmed already
        return True, ""
    adapter = _adapter("baseline", "inprocess", opts, engine_dir)
    try:
        got = run_case(case, adapter, adapter.capabilities())
    finally:
        adapter.close()
    if got.conformant:
        return True, ""
    return False, (f"the bundled backend also fails {case.id} under {case.runtime.get('semanticsProfile')}: "
                   + (got.first_failure().line() if got.first_failure() else got.reason)[:300])


def _adapter(kind: str, name: str, opts: dict, engine_dir: str | None):
    from ..adapters import make_adapter
    if kind == "variant":
        from ..adapters.faulty import FaultyAdapter
        return FaultyAdapter(name, device=opts["device"], timeout=opts["timeout"], engine_dir=engine_dir)
    if name == "inprocess":
        return make_adapter("inprocess", device=opts["device"], timeout=opts["timeout"], engine_dir=engine_dir)
    if name == "broken-judging":
        from ..adapters.broken import BrokenJudgingAdapter
        return BrokenJudgingAdapter(device=opts["device"], timeout=opts["timeout"], engine_dir=engine_dir)
    return make_adapter(name)


def _run_parts(adapter, kind: str, name: str, opts: dict, plan, cases, families, stop: bool,
               only_generated: bool):
    """The curated cases, then the generated families, against one adapter; (results, killer)."""
    import shutil
    import tempfile
    from ..run.execute import run_case
    from ..generate import run_generated
    from ..run.suite import stops_a_fail_fast_run
    try:
        manifest, manifest_error = adapter.capabilities(), ""
    except Exception as e:  # the broken adapter
        manifest, manifest_error = None, f"{type(e).__name__}: {e}"
    results, killer = [], None
    for case in cases:
        r = run_case(case, adapter, manifest, manifest_error)
        results.append(r)
        if stop and stops_a_fail_fast_run(r):          # the screening of `kvconform run --fail-fast`
            killer = r
            break
    if killer is None:
        workdir = Path(tempfile.mkdtemp(prefix="kvconform-selftest-"))
        reproducers = Path(opts["report"]) / "reproducers" / name.replace(":", "-")
        try:
            for family in families:
                r = run_generated(family, adapter, manifest, workdir=workdir, examples=opts["examples"],
                                  budget_s=opts["budget_s"] / max(1, len(plan.families)), seed=opts["seed"],
                                  max_steps=opts["max_steps"], reproducer_dir=reproducers, profile=plan.profile,
                                  run_case_fn=lambda c: run_case(c, adapter, manifest, manifest_error),
                                  shrink=opts["shrink"] or kind != "variant" and name != "broken-judging")
                results.append(r)
                if kind == "variant" and stops_a_fail_fast_run(r):
                    killer = killer or r
                    if stop:
                        break
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    adapter.close()
    return results, killer


def _target_result(out: dict, kind: str, name: str, results, killer, engine_dir, cases, families,
                   only_generated: bool) -> dict:
    from ..judge.verdicts import CaseResult, Verdict
    if kind == "variant":
        broken = killer is not None and killer.verdict == Verdict.ERROR and \
            HARNESS_ERRORS.search(f"{killer.reason}\n{killer.stderr_tail}")
        out["killed"] = killer is not None and not broken
        out["kill"] = summarize_result(killer) if killer else None
        if out["kill"] and engine_dir:
            out["kill"]["engine"] = Path(engine_dir).name
        if broken:
            out["invalid"] = f"the variant itself is broken: {killer.reason[:300]}"
        if only_generated:
            out["families"] = {r.id.split("/")[1]: r.verdict.name for r in results}
    else:
        if name == "inprocess":
            bad = [r for r in results if not r.conformant]
        elif name == "reference":
            bad = [r for r in results if r.verdict != Verdict.PASS]
        elif name == "broken-judging":
            judged = {c.id for c in cases if compares_logprobs(c)} | {f"generated/{f}" for f in families}
            bad = [r for r in results if r.id in judged and r.verdict not in (Verdict.ERROR, Verdict.NOT_SUPPORTED)]
            if not any(r.id in judged for r in results):
                bad = results or [CaseResult("(nothing)", []).settle(Verdict.PASS, "no case compared log-probabilities")]
        else:
            bad = [r for r in results if r.verdict != Verdict.ERROR]
        out["ok"] = not bad
        out["problems"] = [f"{r.id}: {r.verdict.name} "
                           + (r.first_failure().line() if r.first_failure() else r.reason)[:200] for r in bad[:10]]
    return out


# --- the command -------------------------------------------------------------------------------------

def _catalogue():
    try:
        from faulty_backends import CATALOGUE
    except ImportError as e:
        raise KvconformError(f"the faulty backends need the bundled backend and torch: {e}") from None
    return CATALOGUE


def kill_table(variants: list[dict], catalogue, fmt: str = "simple") -> str:
    rows = []
    for v in variants:
        meta = catalogue[v["name"]]
        k = v.get("kill") or {}
        caught = k.get("case", "SURVIVED") if not v.get("invalid") else "INVALID"
        if v.get("profile"):
            caught += f" [{v['profile']}]"
        rows.append([v["name"], meta.group, meta.bug_class, ", ".join(meta.rules[:2]),
                     caught + (f" ({k['engine']})" if k.get("engine") else ""), k.get("rule", "") or "",
                     k.get("check", ""), k.get("observable", ""), k.get("verdict", "")])
    return tabulate(rows, headers=["variant", "group", "bug class", "violates", "caught by (first case)",
                                   "failing rule", "check", "observable", "verdict"], tablefmt=fmt)


def kill_markdown(doc: dict, catalogue) -> str:
    lines = [f"Kill rate: **{doc['kill_rate']['killed']}/{doc['kill_rate']['total']}** "
             f"({doc['kill_rate']['percent']:.0f}%), selftest wall time {doc['wall_s']:.0f} s "
             f"(`--jobs {doc['settings']['jobs']}`, {os.cpu_count()} cores).", "",
             "| variant | bug class | violates | mirrors | caught by | failing rule | check | observable |",
             "|---|---|---|---|---|---|---|---|"]
    for v in doc["variants"]:
        meta = catalogue[v["name"]]
        k = v.get("kill") or {}
        lines.append(f"| `{v['name']}` | {meta.bug_class} | {', '.join(meta.rules)} | {meta.mirrors} | "
                     f"{'`' + k['case'] + '`' if k else '**SURVIVED**'}"
                     f"{' (profile ' + v['profile'] + ')' if v.get('profile') else ''} | {k.get('rule') or ''} | "
                     f"{k.get('check', '')} | {k.get('observable', '')} |")
    return "\n".join(lines) + "\n"


def main(args) -> int:
    if args.mutate is not None:          # the mutation campaign (conformance/mutation/)
        from ..mutation.command import main as mutation_main
        return mutation_main(args)
    for option in ("check", "rejudge", "table"):
        if getattr(args, option):
            raise KvconformError(f"--{option} applies to --mutate")
    catalogue = _catalogue()
    if args.list:
        for v in catalogue.values():
            print(f"{v.name}\t{v.group}\t{','.join(v.rules)}\t{v.bug_class}")
        return 0
    names = args.variant or list(catalogue)
    unknown = [n for n in names if n not in catalogue]
    if unknown:
        raise KvconformError(f"unknown variant(s) {', '.join(unknown)} (kvconform selftest --list)")
    folder = Path(args.report)
    # a folder an earlier selftest wrote is rewritten (its own files only); any other that holds
    # something is refused (conformance/report/folder.py)
    claim_report_folder(folder, marked_by(folder) == "selftest", command="selftest", outputs=SELFTEST_OUTPUTS,
                        hint="kvconform selftest writes into an empty folder or one an earlier selftest wrote; "
                             "choose another --report")
    opts = {"device": args.device, "timeout": args.timeout, "examples": args.examples,
            "budget_s": args.budget_seconds, "seed": args.seed, "max_steps": args.max_steps,
            "shrink": args.shrink, "generated_only": args.generated_only, "report": str(folder),
            "fixed_engines": fixed_engines(args.device) if args.fixed_engines else None}
    from ..generate.draw import FAMILIES
    parts = ["curated", *FAMILIES]           # a baseline runs as parts, so that workers share it
    chosen = [] if args.no_baselines else [b for b in BASELINES if not args.baseline or b in args.baseline]
    targets = [("baseline", b, part) for b in chosen for part in parts]
    targets += [("variant", n, None) for n in names]
    started = time.monotonic()
    _prebuild(args.device)
    print(f"kvconform selftest: {len(names)} variant(s)" + (f" + {len(chosen)} baselines" if chosen else "")
          + f", --jobs {args.jobs}", file=sys.stderr)
    results: dict = {}
    finished = []

    def done(res: dict) -> None:
        finished.append(res)
        key = (res["kind"], res["name"])
        if key in results:                   # another part of a baseline
            merged = results[key]
            for k, n in res["verdicts"].items():
                merged["verdicts"][k] = merged["verdicts"].get(k, 0) + n
            merged["cases_run"] += res["cases_run"]
            merged["duration_s"] = round(merged["duration_s"] + res["duration_s"], 2)
            merged["ok"] = merged["ok"] and res["ok"]
            merged["problems"] += res["problems"]
        else:
            results[key] = dict(res, verdicts=dict(res["verdicts"]), problems=list(res.get("problems", [])))
        if args.no_progress:
            return
        if res["kind"] == "variant":
            k = res.get("kill")
            note = f"caught by {k['case']} ({k['verdict']}, {k['observable']})" if k else "SURVIVED"
            if res.get("invalid"):
                note = "INVALID: " + res["invalid"]
            if res.get("families"):
                note += " [" + ", ".join(f"{f} {v}" for f, v in res["families"].items()) + "]"
        else:
            note = "as required" if res["ok"] else "NOT as required: " + "; ".join(res["problems"][:2])
        what = res["name"] + (f" ({res['part']})" if res.get("part") else "")
        print(f"  [{len(finished)}/{len(targets)}] {what}: {note} ({res['duration_s']:.1f} s)", file=sys.stderr)

    if args.jobs == 1:
        for kind, name, part in targets:
            done(run_target(kind, name, opts, part))
    else:
        ctx = multiprocessing.get_context("spawn")   # no fork after torch has started threads
        with ProcessPoolExecutor(args.jobs, mp_context=ctx, initializer=_worker_init) as pool:
            futures = [pool.submit(run_target, kind, name, opts, part) for kind, name, part in targets]
            for f in as_completed(futures):
                done(f.result())
    wall = time.monotonic() - started
    variants = [results[("variant", n)] for n in names]
    baselines = {b: results[("baseline", b)] for b in BASELINES if ("baseline", b) in results}
    killed = sum(1 for v in variants if v["killed"])
    doc = {"format": "kvconform-selftest-v1", "wall_s": round(wall, 1),
           "settings": dict(opts, jobs=args.jobs, cores=os.cpu_count(), baselines=chosen),
           "kill_rate": {"killed": killed, "total": len(variants), "percent": 100.0 * killed / max(1, len(variants))},
           "baselines": {b: dict(r, expected=BASELINES[b]) for b, r in baselines.items()},
           "variants": [dict(v, group=catalogue[v["name"]].group, bug_class=catalogue[v["name"]].bug_class,
                             rules=list(catalogue[v["name"]].rules), mirrors=catalogue[v["name"]].mirrors,
                             summary=catalogue[v["name"]].summary, component=catalogue[v["name"]].component)
                        for v in variants]}
    write_text_atomic(folder / "selftest.json", json.dumps(doc, indent=1) + "\n")
    write_text_atomic(folder / "kill-matrix.md", kill_markdown(doc, catalogue))
    print()
    print(kill_table(variants, catalogue))
    if baselines:
        print()
        print(tabulate([[b, BASELINES[b], r["cases_run"],
                         ", ".join(f"{k} {n}" for k, n in sorted(r["verdicts"].items())),
                         "yes" if r["ok"] else "NO"] for b, r in baselines.items()],
                       headers=["baseline", "required", "cases", "verdicts", "ok"]))
        for b, r in baselines.items():
            for p in r["problems"]:
                print(f"  {b}: {p}")
    ok = killed == len(variants) and all(r["ok"] for r in baselines.values())
    survivors = [v["name"] + (" (invalid)" if v.get("invalid") else "") for v in variants if not v["killed"]]
    print(f"\nkill rate {killed}/{len(variants)} ({doc['kill_rate']['percent']:.0f}%)"
          + (f"; SURVIVED: {', '.join(survivors)}" if survivors else "")
          + f"; {wall:.0f} s; {folder}/selftest.json, {folder}/kill-matrix.md")
    print(("SELFTEST PASSED" if ok else "SELFTEST FAILED") + narrowed(len(names), len(catalogue), chosen))
    return 0 if ok else 1


def narrowed(variants: int, catalogue: int, baselines: list[str]) -> str:
    """What a selftest of less than the whole gate judged, for its headline ('' for the whole
    gate): a PASSED over two variants and no baselines is not the kit's gate passing."""
    parts = [f"{variants} of {catalogue} variants"] if variants < catalogue else []
    if len(baselines) < len(BASELINES):
        parts.append("baselines: " + (", ".join(baselines) if baselines else "none"))
    return f" (a selection: {'; '.join(parts)})" if parts else ""


TOKENIZERS = Path(__file__).resolve().parents[2] / "spec" / "tokenizers"
_PHI3_VISION = {"maxInputLen": 2048, "maxKVCacheCapacity": 2304, "maxKVPoolPages": 0, "tokensPerPage": 128,
                "maxBatchSize": 3, "vision": True, "tokenizer": str(TOKENIZERS / "phi-3-vision"),
                "tokenizerLoader": "transformers-auto"}
FIXED_ENGINES = {   # the engines a selftest judges variants through (--fixed-engines)
    "p16-attention-vision-lora": {"maxInputLen": 512, "maxKVCacheCapacity": 640, "maxKVPoolPages": 0,
                                  "tokensPerPage": 16, "maxBatchSize": 3, "vision": True, "loraAdapters": ["a", "b"]},
    "p16-hybrid-lora": {"maxInputLen": 512, "maxKVCacheCapacity": 640, "maxKVPoolPages": 0, "tokensPerPage": 16,
                        "maxBatchSize": 3, "model": "hybrid", "loraAdapters": ["a", "b"]},
    "p16-fp8": {"maxInputLen": 512, "maxKVCacheCapacity": 640, "maxKVPoolPages": 0, "tokensPerPage": 16,
                "kvCacheDtype": "fp8"},
    # Phi-3-vision's real tokenizer at Edge-LLM's page size, with the two runtimes' counters whose
    # rounding the sections/tok cases pin down (the same settings, so those cases keep their images)
    "p128-phi3-vision-lora-edge-llm-qwen-vl": dict(_PHI3_VISION, loraAdapters=["a", "b"],
                                                   imageCounter="edge-llm/qwen-vl",
                                                   imageCounterSettings={"min_image_tokens": 1,
                                                                         "max_image_tokens": 256}),
    "p128-phi3-vision-hf-internvl": dict(_PHI3_VISION, imageCounter="hf/internvl",
                                         imageCounterSettings={"min_patches": 1, "max_patches": 4, "tile": 448}),
}


def fixed_engines(device: str) -> list[str]:
    """The folders of FIXED_ENGINES, built once into the kit's engine cache."""
    import torch
    torch.set_num_threads(1)
    from ..adapters import make_adapter
    adapter = make_adapter("inprocess", device=device)
    return [adapter.engine_for(args).directory for args in FIXED_ENGINES.values()]


def _worker_init() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _prebuild(device: str) -> None:
    """Build every engine of the default suite once, before the workers start (they share the
    engine cache; a build is a few seconds in all)."""
    import torch
    torch.set_num_threads(1)
    from ..adapters import make_adapter
    from ..run.suite import make_plan, prebuild
    plan = make_plan(None, None, None, None, False, generated=False, curated=True, families=None, shard=None)
    prebuild(make_adapter("inprocess", device=device), plan.cases, progress=False)
