"""Item 4: conformance-suite throughput through the `inprocess` adapter.

- Generated scenarios per minute, per family: `kvconform run --generated-only --families F
  --examples N` (one Hypothesis example = one scenario: a fresh pair of sessions, 1-6 request
  files each run with use_cache and with bypass and checked against the oracle); the rate is
  examples / the family's own duration from report.json.
- The default `kvconform run` (curated cases + the three generated families): wall time from
  process start to exit, and where it goes (report.json durations).
- A profile: one family under cProfile, self time grouped by package (gpu_backend, reference,
  conformance, hypothesis, torch internals, other), to say what dominates.
"""
from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time

from .common import ROOT, child_env, log

GROUPS = (("gpu_backend", ("/gpu_backend/",)), ("reference", ("/reference/",)), ("conformance", ("/conformance/",)),
          ("hypothesis", ("/hypothesis/",)), ("torch (python side)", ("/torch/",)), ("jsonschema", ("/jsonschema/",)),
          ("python imports", ("<frozen importlib", "_imp.", "marshal.loads", "builtins.compile")),
          ("media and weight files (PIL, safetensors, numpy)", ("/PIL/", "/safetensors/", "/numpy/", "safe_open")))


def available() -> str | None:
    """None when `kvconform run` and the inprocess adapter exist here, else why not."""
    try:
        import conformance.commands.run  # noqa: F401
        import conformance.adapters.inprocess  # noqa: F401
    except Exception as e:                      # the runner is being finished by its owner
        return f"kvconform run is not available: {type(e).__name__}: {e}"
    return None


def _kvconform(args, tmp, env) -> tuple[float, dict]:
    report = os.path.join(tmp, f"report-{time.monotonic_ns()}")
    cmd = [sys.executable, "-m", "conformance.cli", "run", "--no-progress", "--report", report] + args
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode not in (0, 1):
        raise RuntimeError(f"kvconform run {' '.join(args)} exited {out.returncode}: {out.stderr[-800:]}")
    with open(os.path.join(report, "report.json")) as f:
        return wall, json.load(f)


def _family_rate(doc) -> dict:
    out = {}
    for c in doc["cases"]:
        if c["id"].startswith("generated/"):
            # examples run in the generate phase only: shrink steps re-run a failing example and
            # are not scenarios of the family (they once inflated this rate)
            n = c["details"]["examples"]
            out[c["id"].split("/", 1)[1]] = {"examples": n, "shrink_steps": c["details"].get("shrink_steps", 0),
                                             "seconds": c["duration_s"],
                                             "scenarios_per_min": 60 * n / c["duration_s"],
                                             "batches_checked": c["details"].get("batches_checked"),
                                             "verdict": c["verdict"]}
    return out


def profile_family(family: str, examples: int, tmp: str, device: str = "cpu") -> dict:
    """Self time of one generated family under cProfile, grouped by package."""
    from conformance.cli import main as kvconform_main
    prof = cProfile.Profile()
    args = ["run", "--device", device, "--generated-only", "--families", family, "--examples", str(examples), "--no-progress",
            "--report", os.path.join(tmp, "report-profile")]
    stdout = sys.stdout
    sys.stdout = io.StringIO()
    try:
        prof.enable()
        kvconform_main(args)
        prof.disable()
    finally:
        sys.stdout = stdout
    stats = pstats.Stats(prof)

    def group(file, fn=""):
        where = file + " " + fn
        return next((g for g, frags in GROUPS if any(f in where for f in frags)), "other (stdlib)")

    # Self time by package. Built-in (C) functions have no file: their time goes to the package
    # of their callers, in proportion to what each caller spent in them (torch ops called from
    # gpu_backend count as gpu_backend: they are the backend's compute).
    groups, total, top = {}, 0.0, []
    for (file, line, fn), (cc, nc, tt, ct, callers) in stats.stats.items():
        total += tt
        top.append((tt, f"{os.path.relpath(file, ROOT) if file.startswith(str(ROOT)) else file}:{line}({fn})", nc))
        own = group(file, fn)
        if file != "~" or not callers or own != "other (stdlib)":
            groups[own] = groups.get(own, 0.0) + tt
            continue
        weight = sum(v[3] for v in callers.values()) or 1.0
        for (cfile, _, _), v in callers.items():
            g = group(cfile)
            groups[g] = groups.get(g, 0.0) + tt * v[3] / weight
    top.sort(reverse=True)
    return {"family": family, "examples": examples, "profiled_seconds": total,
            "self_time_share": {k: v / total for k, v in sorted(groups.items(), key=lambda kv: -kv[1])},
            "top_functions": [{"function": f, "self_s": round(t, 3), "calls": n} for t, f, n in top[:15]]}


def run(tmp: str, *, families=("text", "vision", "hybrid"), examples: int = 100, default_run: bool = True,
        profile: str | None = "vision", profile_examples: int = 100, device: str = "cpu") -> dict:
    why = available()
    if why:
        log(f"suite: skipped ({why})")
        return {"skipped": why}
    env = child_env()
    rates = {}
    for fam in families:
        wall, doc = _kvconform(["--device", device, "--generated-only", "--families", fam, "--examples",
                                str(examples)], tmp, env)
        rates.update(_family_rate(doc))
        r = rates[fam]
        log(f"suite: generated/{fam}: {r['examples']} scenarios in {r['seconds']:.1f} s = "
            f"{r['scenarios_per_min']:.0f}/min (process {wall:.1f} s)")
    out = {"examples_per_family": examples, "generated": rates}
    if default_run:
        wall, doc = _kvconform(["--device", device], tmp, env)
        curated = [c for c in doc["cases"] if not c["id"].startswith("generated/")]
        out["default_run"] = {
            "wall_seconds": wall, "cases": len(doc["cases"]), "conformant": doc["summary"]["conformant"],
            "curated_cases": len(curated), "curated_seconds": sum(c["duration_s"] for c in curated),
            "generated": _family_rate(doc),
            "slowest_curated": sorted(((c["duration_s"], c["id"]) for c in curated), reverse=True)[:3]}
        g = out["default_run"]["generated"]
        log(f"suite: default kvconform run {wall:.0f} s wall: curated {out['default_run']['curated_seconds']:.1f} s, "
            + ", ".join(f"{k} {v['seconds']:.0f} s" for k, v in g.items()))
    if profile:
        out["profile"] = profile_family(profile, profile_examples, tmp, device)
        log("suite: profile of generated/" + profile + ": " + ", ".join(
            f"{k} {v:.0%}" for k, v in list(out["profile"]["self_time_share"].items())[:5]))
    return out
