"""`kvconform simulate` of two checkouts of the kit, side by side in one run.

A change meant to make the command faster is measured against the tree before it, on the same
trace, in the same minutes: runs of the two trees alternate (old, new, old, new, ...), each a
fresh process pinned to one core, and the table gives each tree's median wall time and tokens/s
and their ratio, and the median CPU time (user + system) of each run beside them: on a machine
shared with other work a run waits for its core, which the wall time counts and the CPU time
does not. Both trees' outputs must be equal as JSON, so a speed-up that changes a
prediction fails the benchmark instead of being recorded.

    git worktree add /tmp/kit-before <commit>
    .venv/bin/python -m benchmarks.simulate_side_by_side --old /tmp/kit-before --new . \
        --requests 10000 --reps 7 --json benchmarks/results/simulate-side-by-side.json

Each tree runs with the same interpreter (this one) and its own source first on PYTHONPATH.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import code_provenance, loadavg, machine, median, one_core, revision, side_by_side_parser
from .oracle import simulate_args, write_engine
from .trace import TraceModel, write_trace


def _simulate(tree: Path, engine: str, trace: str, out_dir: str, records: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the child) of one run."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    cmd = one_core() + [sys.executable, "-m", "conformance.cli"] + simulate_args(engine, trace, out_dir, records)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=out_dir, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _first_difference(a, b, path="$") -> str:
    if type(a) is not type(b) or not isinstance(a, (dict, list)):
        return f"{path}: {str(a)[:80]} vs {str(b)[:80]}"
    keys = sorted(set(a) | set(b)) if isinstance(a, dict) else range(max(len(a), len(b)))
    for k in keys:
        x = a.get(k) if isinstance(a, dict) else (a[k] if k < len(a) else None)
        y = b.get(k) if isinstance(b, dict) else (b[k] if k < len(b) else None)
        if x != y:
            return _first_difference(x, y, f"{path}[{k!r}]")
    return path


def run(old: Path, new: Path, *, requests: int, reps: int, seed: int = 0, records: int = 1024,
        pages: int = 4096) -> dict:
    with tempfile.TemporaryDirectory(prefix="kvconform-side-by-side-") as tmp:
        model = TraceModel(seed)
        engine = os.path.join(tmp, "engine.json")
        write_engine(engine, model, pages)
        trace = os.path.join(tmp, "trace.json")
        stats = write_trace(trace, requests, seed=seed)
        dirs = {"old": os.path.join(tmp, "old"), "new": os.path.join(tmp, "new")}
        for d in dirs.values():
            os.mkdir(d)
        seconds = {"old": [], "new": []}
        cpu = {"old": [], "new": []}
        for rep in range(reps):
            for name, tree in (("old", old), ("new", new)):
                wall, used = _simulate(tree, engine, trace, dirs[name], records)
                seconds[name].append(wall)
                cpu[name].append(used)
            print(f"rep {rep + 1}: old {seconds['old'][-1]:.2f} s, new {seconds['new'][-1]:.2f} s", file=sys.stderr)
        for f in ("predictions.json", "profile.json"):
            old_doc, new_doc = (json.loads(Path(dirs[k], f).read_text()) for k in ("old", "new"))
            if old_doc != new_doc:
                raise SystemExit(f"simulate_side_by_side: {f} differs between the two trees: not a speed-up "
                                 f"({_first_difference(old_doc, new_doc)})")
    tokens = stats["prompt_tokens"]
    row = lambda name, tree: {"tree": str(tree), "revision": revision(tree), "seconds": seconds[name],
                              "median_s": median(seconds[name]), "tokens_per_s": tokens / median(seconds[name]),
                              "cpu_seconds": cpu[name], "median_cpu_s": median(cpu[name])}
    result = {"requests": requests, "prompt_tokens": tokens, "reps": reps, "pinned": bool(one_core()),
              "old": row("old", old), "new": row("new", new), "machine": machine(), "loadavg": loadavg(),
              "code": code_provenance()}
    result["speedup"] = result["old"]["median_s"] / result["new"]["median_s"]
    result["cpu_speedup"] = result["old"]["median_cpu_s"] / result["new"]["median_cpu_s"]
    return result


def table(r: dict) -> str:
    lines = [f"`kvconform simulate`, {r['requests']:,} requests ({r['prompt_tokens'] / 1e6:.1f}M tokens), "
             f"{r['reps']} alternating runs each, one core:", "",
             "| tree | revision | median wall | CLI tokens/s | median CPU |", "|---|---|---|---|---|"]
    for name in ("old", "new"):
        t = r[name]
        lines.append(f"| {name} | {t['revision']} | {t['median_s']:.2f} s | {t['tokens_per_s'] / 1e6:.1f}M "
                     f"| {t['median_cpu_s']:.2f} s |")
    lines.append(f"\nnew / old speed: {r['speedup']:.2f}x wall, {r['cpu_speedup']:.2f}x CPU (outputs equal as JSON)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = side_by_side_parser(__doc__)
    ap.add_argument("--requests", type=int, default=10000)
    a = ap.parse_args(argv)
    r = run(a.old, a.new, requests=a.requests, reps=a.reps)
    print(table(r))
    if a.json:
        a.json.write_text(json.dumps(r, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
