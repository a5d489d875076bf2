"""Trace replay (`kvconform simulate --trace`) of two checkouts of the kit, side by side in one run.

A change meant to make the replay faster is measured against the tree before it, on the same
trace, in the same minutes: for each profile and capacity, replays of the two trees alternate
(old, new, old, new, ...), each in a fresh process pinned to one core (benchmarks/replay_worker.py
of that tree, its own source first on the path), and the table gives each tree's median CPU
tokens/s and the median wall time beside it (on a shared machine a run waits for its core: the
wall time counts that, the CPU time does not), and their ratio. Every run's summary (reused
tokens, hit requests, evictions, requests not admitted) must be the same in both trees, so a
speed-up that changes a count fails the benchmark instead of being recorded.

    git worktree add /tmp/kit-before <commit>
    .venv/bin/python -m benchmarks.replay_side_by_side --old /tmp/kit-before --new . \\
        --reps 5 --json benchmarks/results/replay-side-by-side.json

The trace is the seeded model of Mooncake's conversation trace (benchmarks/replay.py), its first
`--requests` requests (500: 5.8M prompt tokens), unless `--trace FILE` names another.

`--sweep PROFILE` measures a whole capacity sweep instead (item 8's target: under a minute on one
core): each tree's `kvconform simulate --trace` over the whole trace at `--capacity` (default the
10 capacities 1e5:1e9:9,inf), process start to exit, its CPU time from the child's rusage, every
capacity's summary required equal.

    .venv/bin/python -m benchmarks.replay_side_by_side --old /tmp/kit-before --new . --reps 2 \\
        --sweep vllm-apc --json benchmarks/results/replay-sweep-side-by-side.json
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

from .common import (loadavg, machine, median, one_core, recorded_command, revision, run_json, side_by_side_parser,
                     trace_label)
from .replay import SWEEP_CAPACITIES, write_conversation_trace

RUNS = (("vllm-apc", "1e7"), ("vllm-apc", "1e6"), ("vllm-apc:block_size=512", "1e7"),
        ("edge-llm-0.10", "1e7"), ("kvconform-1", "1e7"))
"""(profile, capacity in tokens): vllm-apc at its default block size without eviction (the
benchmark's capacity) and evicting, at Mooncake's block size, and the Edge-LLM profiles."""
SAME = ("requests", "not_admitted", "prompt_tokens", "reused_tokens", "hit_requests", "evictions", "evicted_tokens")


def _replay(tree: Path, trace: str, profile: str, capacity: str, limit: int) -> dict:
    """One replay in `tree`: its summary, wall and CPU seconds (the replay alone, not the read)."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    cmd = one_core() + [sys.executable, "-m", "benchmarks.replay_worker", trace, "--profile", profile,
                        "--capacity", capacity, "--limit", str(limit)]
    return run_json(cmd, env=env, cwd=str(tree.resolve()))["runs"][0]


def run(old: Path, new: Path, *, reps: int, requests: int, trace: str | None = None, runs=RUNS) -> dict:
    with tempfile.TemporaryDirectory(prefix="kvconform-replay-side-") as tmp:
        if trace is None:
            trace = os.path.join(tmp, "conversation-model.jsonl")
            write_conversation_trace(trace)
            source = "model (benchmarks/replay.py write_conversation_trace, seed 0)"
        else:
            source = trace_label(trace)
        rows = []
        for profile, capacity in runs:
            got = {"old": [], "new": []}
            for rep in range(reps):
                for name, tree in (("old", old), ("new", new)):
                    got[name].append(_replay(tree, trace, profile, capacity, requests))
                print(f"[{time.strftime('%H:%M:%S')}] {profile} at {capacity}, rep {rep + 1}: "
                      f"old {got['old'][-1]['cpu_seconds']:.3f} s CPU, new {got['new'][-1]['cpu_seconds']:.3f} s CPU",
                      file=sys.stderr, flush=True)
            for o, n in zip(got["old"], got["new"]):
                differ = [k for k in SAME if o.get(k) != n.get(k)]
                if differ:
                    raise SystemExit(f"replay_side_by_side: {profile} at {capacity}: the trees' summaries differ in "
                                     f"{', '.join(differ)} ({[o.get(k) for k in differ]} vs {[n.get(k) for k in differ]}): "
                                     "not a speed-up")
            tokens = got["old"][0]["prompt_tokens"]
            row = {"profile": profile, "capacity": capacity, "requests": got["old"][0]["requests"],
                   "prompt_tokens": tokens, "reused_tokens": got["old"][0]["reused_tokens"],
                   "evictions": got["old"][0]["evictions"]}
            for name in ("old", "new"):
                cpu = [r["cpu_seconds"] for r in got[name]]
                wall = [r["seconds"] for r in got[name]]
                row[name] = {"cpu_seconds": cpu, "seconds": wall, "cpu_tokens_per_s": tokens / median(cpu),
                             "tokens_per_s": tokens / median(wall)}
            row["cpu_speedup"] = median(row["old"]["cpu_seconds"]) / median(row["new"]["cpu_seconds"])
            row["wall_speedup"] = median(row["old"]["seconds"]) / median(row["new"]["seconds"])
            rows.append(row)
    return {"trace": source, "requests": requests, "reps": reps, "pinned": bool(one_core()),
            "old": {"tree": "a worktree at the old revision", "revision": revision(old)},
            "new": {"tree": "this checkout", "revision": revision(new)},
            "rows": rows, "loadavg": loadavg()}


def _sweep(tree: Path, trace: str, profile: str, capacities: str, out: str) -> dict:
    """`kvconform simulate --trace` of `tree` over the whole trace, process start to exit, one core:
    its summaries, wall and CPU seconds (the child's user + system time)."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    cmd = one_core() + [sys.executable, "-m", "conformance.cli", "simulate", "--trace", trace, "--profile", profile,
                        "--capacity", capacities, "--json", out]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=str(tree.resolve()), stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out) as f:
        doc = json.load(f)
    return {"runs": doc["runs"], "requests": doc["trace"]["requests"], "prompt_tokens": doc["trace"]["prompt_tokens"],
            "seconds": wall, "cpu_seconds": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


def run_sweep(old: Path, new: Path, *, reps: int, profile: str, capacities: str = SWEEP_CAPACITIES,
              trace: str | None = None) -> dict:
    """Whole sweeps of `profile`, the two trees alternating, every capacity's summary equal."""
    with tempfile.TemporaryDirectory(prefix="kvconform-replay-sweep-") as tmp:
        if trace is None:
            trace = os.path.join(tmp, "conversation-model.jsonl")
            write_conversation_trace(trace)
            source = "model (benchmarks/replay.py write_conversation_trace, seed 0)"
        else:
            source = trace_label(trace)
        got = {"old": [], "new": []}
        for rep in range(reps):
            for name, tree in (("old", old), ("new", new)):
                got[name].append(_sweep(tree, trace, profile, capacities, os.path.join(tmp, f"{name}.json")))
            print(f"[{time.strftime('%H:%M:%S')}] sweep of {profile}, rep {rep + 1}: old "
                  f"{got['old'][-1]['cpu_seconds']:.1f} s CPU, new {got['new'][-1]['cpu_seconds']:.1f} s CPU",
                  file=sys.stderr, flush=True)
    first = got["old"][0]
    for o, n in zip(got["old"], got["new"]):
        for a, b in zip(o["runs"], n["runs"]):
            differ = [k for k in SAME if a.get(k) != b.get(k)]
            if differ or len(o["runs"]) != len(n["runs"]):
                raise SystemExit(f"replay_side_by_side: sweep of {profile} at {a.get('capacity')}: the trees' "
                                 f"summaries differ in {', '.join(differ) or 'their capacities'}: not a speed-up")
    row = {"profile": profile, "capacities": capacities, "runs": len(first["runs"]), "requests": first["requests"],
           "prompt_tokens": first["prompt_tokens"],
           "summaries": [{k: x.get(k) for k in ("capacity",) + SAME} for x in first["runs"]]}
    for name in ("old", "new"):
        row[name] = {"cpu_seconds": [r["cpu_seconds"] for r in got[name]], "seconds": [r["seconds"] for r in got[name]],
                     "replay_seconds": [[x["seconds"] for x in r["runs"]] for r in got[name]]}
    row["cpu_speedup"] = median(row["old"]["cpu_seconds"]) / median(row["new"]["cpu_seconds"])
    row["wall_speedup"] = median(row["old"]["seconds"]) / median(row["new"]["seconds"])
    return {"trace": source, "reps": reps, "pinned": bool(one_core()), "sweep": row,
            "old": {"tree": "a worktree at the old revision", "revision": revision(old)},
            "new": {"tree": "this checkout", "revision": revision(new)}, "loadavg": loadavg()}


def sweep_table(r: dict) -> str:
    s = r["sweep"]
    cpu = {k: median(s[k]["cpu_seconds"]) for k in ("old", "new")}
    wall = {k: median(s[k]["seconds"]) for k in ("old", "new")}
    tokens = s["prompt_tokens"] * s["runs"]
    return "\n".join([
        f"Whole capacity sweep of {s['profile']} ({s['runs']} capacities, {s['capacities']}), old "
        f"{r['old']['revision']} against new {r['new']['revision']}, the whole trace ({r['trace']}: "
        f"{s['requests']:,} requests, {s['prompt_tokens'] / 1e6:.1f}M prompt tokens), `kvconform simulate --trace` "
        f"process start to exit on one core, {r['reps']} alternating runs each, medians (equal summaries at every "
        "capacity in both trees):", "",
        "| tree | CPU s | wall s | CPU tokens/s over the sweep | each run's CPU s |", "|---|---|---|---|---|",
        *(f"| {k} ({r[k]['revision']}) | {cpu[k]:.1f} | {wall[k]:.1f} | {tokens / cpu[k] / 1e6:.1f}M | "
          f"{', '.join(f'{x:.1f}' for x in s[k]['cpu_seconds'])} |" for k in ("old", "new")),
        "", f"CPU ratio {s['cpu_speedup']:.2f}x (wall {s['wall_speedup']:.2f}x)."])


def table(r: dict) -> str:
    lines = [f"Trace replay, old {r['old']['revision']} against new {r['new']['revision']}, the first "
             f"{r['requests']:,} requests of the trace ({r['trace']}), {r['reps']} alternating runs each, one core, "
             "medians (equal summaries in both trees):", "",
             "| profile | capacity | tokens | old CPU tokens/s | new CPU tokens/s | CPU ratio | old wall tokens/s | "
             "new wall tokens/s |", "|---|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        lines.append(f"| {row['profile']} | {row['capacity']} | {row['prompt_tokens'] / 1e6:.1f}M | "
                     f"{row['old']['cpu_tokens_per_s'] / 1e6:.1f}M | {row['new']['cpu_tokens_per_s'] / 1e6:.1f}M | "
                     f"{row['cpu_speedup']:.2f}x | {row['old']['tokens_per_s'] / 1e6:.1f}M | "
                     f"{row['new']['tokens_per_s'] / 1e6:.1f}M |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = side_by_side_parser(__doc__)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--trace", help="a hash-id trace (default: the seeded model of the conversation trace)")
    ap.add_argument("--sweep", metavar="PROFILE", help="a whole capacity sweep of this profile over the whole trace")
    ap.add_argument("--capacity", default=SWEEP_CAPACITIES, help=f"the sweep's capacities (default {SWEEP_CAPACITIES})")
    a = ap.parse_args(argv)
    started, before = time.strftime("%Y-%m-%dT%H:%M:%S%z"), loadavg()
    if a.sweep:
        r = run_sweep(a.old, a.new, reps=a.reps, profile=a.sweep, capacities=a.capacity, trace=a.trace)
        render = sweep_table
    else:
        r = run(a.old, a.new, reps=a.reps, requests=a.requests, trace=a.trace)
        render = table
    r.update(started=started, machine=machine(), load={"before": before, "after": loadavg()},
             command=recorded_command("python -m benchmarks.replay_side_by_side", argv if argv is not None else sys.argv[1:],
                                      {"--old": f"<a worktree at {r['old']['revision']}>"}))
    print(render(r))
    if a.json:
        a.json.write_text(json.dumps(r, indent=1) + "\n")
        a.json.with_suffix(".md").write_text(render(r) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
