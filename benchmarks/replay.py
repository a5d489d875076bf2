"""Item 8: trace replay (`kvconform simulate --trace`) throughput, one core.

The trace is Mooncake's conversation trace as a model (`write_conversation_trace`, seeded): 12,031
requests in Mooncake's hash-id format, conversations whose turns resend their earlier context,
mean input ~11,900 tokens (143M tokens), mean output ~330, ~36% of prompt tokens reusable with an
unbounded cache, and a hit-ratio curve like the real trace's (a 3M-token cache reaches about half
of that). `--trace FILE` measures a real trace instead (Mooncake's FAST'25 traces, docs/simulate.md).

1. Tokens/s per profile, side by side: every profile replays the same first `side_requests`
   requests at one capacity (10^7 tokens; llama.cpp-server: its one slot), each replay in a
   fresh process pinned to one core (benchmarks/replay_worker.py), the profiles taking turns
   repetition by repetition; the median of the replay's own wall time (the trace read and keyed
   before it is not counted), with its CPU time beside it.
2. vllm-apc's pool as it is against the replay's (`--plain-vllm`): the same pair alternating on a
   prefix and a pool (10^6 tokens) small enough for the list free queue.
3. Whole sweeps: `kvconform simulate --trace` itself over the whole trace, 10 capacities
   (10^5 .. 10^9 tokens and unbounded), process start to exit on one core, per sweep profile.
4. Where the time goes: each side-by-side profile's first replay under cProfile, self time by module.

    python -m benchmarks.replay [--trace FILE] [--requests N] [--side-requests N] [--reps R] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import time

from .common import child_env, loadavg, log, machine, median, one_core, recorded_command, run_json, trace_label

SIDE_PROFILES = ("kvconform-1", "edge-llm-0.10", "vllm-apc", "vllm-apc:block_size=512", "sglang-radix",
                 "trtllm-kv-reuse", "llama.cpp-server")
SIDE_CAPACITY = "1e7"
PLAIN_CAPACITY = "1e6"
SWEEP_PROFILES = ("kvconform-1", "vllm-apc", "vllm-apc:block_size=512")
SWEEP_CAPACITIES = "1e5:1e9:9,inf"
TARGET_TOKENS_PER_S = 20e6
TARGET_SWEEP_S = 60.0


def write_conversation_trace(path: str, requests: int = 12031, seed: int = 0, block: int = 512) -> dict:
    """A seeded model of Mooncake's conversation trace, in its format. Each request either starts
    a conversation (block 0 is id 0, a prompt every conversation shares, as in the real trace;
    then a context of lognormal length, median 6,000 tokens) or continues one of the last 4,000
    (half the time one of the last 300): its prompt is the conversation's last prompt, that
    request's output and a new message, so its full blocks repeat the conversation's ids and the
    rest are new. Returns the trace's statistics."""
    rng = random.Random(seed)
    next_id, sessions, stats = 1, [], {"requests": requests, "prompt_tokens": 0, "sampled_tokens": 0}
    with open(path, "w") as f:
        for i in range(requests):
            live = sessions[-4000:]
            if live and rng.random() < 0.35:
                s = rng.choice(live[-300:]) if rng.random() < 0.5 else rng.choice(live)
                full, length, extra = s[0], s[1], s[2] + int(rng.lognormvariate(math.log(300), 1.0))
            else:
                s, full, length = None, [0], block
                extra = int(min(120000, max(64, rng.lognormvariate(math.log(6000), 1.1))))
            n = min(126000, length + extra)
            ids = full[:min(len(full), length // block)]
            while len(ids) < -(-n // block):
                ids.append(next_id)
                next_id += 1
            g = int(min(2000, max(1, rng.lognormvariate(math.log(210), 1.0))))
            f.write(json.dumps({"timestamp": i * 3_600_000 // requests, "input_length": n, "output_length": g,
                                "hash_ids": ids}) + "\n")
            state = [ids[:n // block], n, g]
            if s is None:
                sessions.append(state)
            else:
                s[:] = state
            stats["prompt_tokens"] += n
            stats["sampled_tokens"] += g
    return stats


def _worker(trace: str, profile: str, capacity: str, limit: int | None, plain: bool = False,
            cprofile: bool = False) -> dict:
    cmd = one_core() + [sys.executable, "-m", "benchmarks.replay_worker", trace, "--profile", profile,
                        "--capacity", capacity] + (["--limit", str(limit)] if limit else []) \
        + (["--plain-vllm"] if plain else []) + (["--cprofile"] if cprofile else [])
    return run_json(cmd, env=child_env())


def side_by_side(trace: str, limit: int, reps: int, profiles=SIDE_PROFILES) -> list:
    """Item 8.1 (and 8.4 from each profile's first repetition)."""
    rows = {p: [] for p in profiles}
    for rep in range(reps):
        order = list(profiles[rep % len(profiles):]) + list(profiles[:rep % len(profiles)])
        for p in order:
            cap = "inf" if p.startswith("llama.cpp-server") else SIDE_CAPACITY
            rows[p].append(_worker(trace, p, cap, limit)["runs"][0])
        log(f"replay: side by side, repetition {rep + 1}/{reps}: " + ", ".join(
            f"{p} {rows[p][-1]['prompt_tokens'] / rows[p][-1]['seconds'] / 1e6:.1f}M" for p in profiles))
    out = []
    for p in profiles:
        runs = rows[p]
        tokens = runs[0]["prompt_tokens"]
        secs = [r["seconds"] for r in runs]
        cpus = [r["cpu_seconds"] for r in runs]
        out.append({"profile": p, "capacity": "inf" if p.startswith("llama.cpp-server") else SIDE_CAPACITY,
                    "requests": runs[0]["requests"], "prompt_tokens": tokens, "seconds": secs, "cpu_seconds": cpus,
                    "median_s": median(secs), "tokens_per_s": tokens / median(secs),
                    "cpu_tokens_per_s": tokens / median(cpus), "hit_ratio_tokens": runs[0]["hit_ratio_tokens"]})
    return out


def where_time_goes(trace: str, limit: int, profiles=SIDE_PROFILES) -> dict:
    """Item 8.4: one profiled replay per profile (cProfile inflates the times; the shares are the point)."""
    out = {}
    for p in profiles:
        cap = "inf" if p.startswith("llama.cpp-server") else SIDE_CAPACITY
        r = _worker(trace, p, cap, limit, cprofile=True)["runs"][0]
        out[p] = {"self_time_share": r["self_time_share"], "top_functions": r["top_functions"]}
    return out


def plain_against_queued(trace: str, limit: int, reps: int, profile: str = "vllm-apc") -> dict:
    """Item 8.2: vllm-apc's own pool (list free queue, decode token by token) against the replay's."""
    runs = {"plain": [], "queued": []}
    for _ in range(reps):
        for name in ("plain", "queued"):
            runs[name].append(_worker(trace, profile, PLAIN_CAPACITY, limit, plain=name == "plain")["runs"][0])
    if runs["plain"][0]["reused_tokens"] != runs["queued"][0]["reused_tokens"]:
        raise RuntimeError("the queued vllm-apc pool saved other tokens than the pool itself: not a speed-up")
    tokens = runs["plain"][0]["prompt_tokens"]
    med = {k: median([r["seconds"] for r in v]) for k, v in runs.items()}
    return {"profile": profile, "capacity": PLAIN_CAPACITY, "requests": runs["plain"][0]["requests"],
            "prompt_tokens": tokens, "seconds": {k: [r["seconds"] for r in v] for k, v in runs.items()},
            "tokens_per_s": {k: tokens / s for k, s in med.items()}, "speedup": med["plain"] / med["queued"],
            "reused_tokens_equal": True}


def sweep(trace: str, profile: str, capacities: str, tmp: str) -> dict:
    """Item 8.3: `kvconform simulate --trace` over the whole trace, process start to exit, one core."""
    out = os.path.join(tmp, "sweep.json")
    cmd = one_core() + [sys.executable, "-m", "conformance.cli", "simulate", "--trace", trace, "--profile", profile,
                        "--capacity", capacities, "--json", out]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(out) as f:
        doc = json.load(f)
    tokens = doc["trace"]["prompt_tokens"]
    return {"profile": profile, "capacities": len(doc["runs"]), "requests": doc["trace"]["requests"],
            "prompt_tokens": tokens, "wall_s": wall, "cpu_s": cpu, "replay_s": sum(r["seconds"] for r in doc["runs"]),
            "tokens_per_s": tokens * len(doc["runs"]) / wall,
            "curve": [(r["capacity"], r["hit_ratio_tokens"]) for r in doc["runs"]]}


def run(tmp: str, *, requests: int = 12031, side_requests: int = 500, reps: int = 3, plain_requests: int = 40,
        sweep_profiles=SWEEP_PROFILES, trace: str | None = None, profile_time: bool = True,
        sweep_capacities: str = SWEEP_CAPACITIES) -> dict:
    if trace is None:
        trace = os.path.join(tmp, "conversation-model.jsonl")
        t0 = time.perf_counter()
        stats = write_conversation_trace(trace, requests)
        log(f"replay: model of the conversation trace, {requests:,} requests, {stats['prompt_tokens'] / 1e6:.1f}M "
            f"prompt tokens ({time.perf_counter() - t0:.1f} s to write)")
        source = "model"
    else:
        stats, source = {}, trace_label(trace)
    out = {"trace": {"source": source, **stats}, "side_by_side": side_by_side(trace, side_requests, reps)}
    out["plain_vllm"] = plain_against_queued(trace, plain_requests, max(2, reps - 1))
    log(f"replay: vllm-apc's own pool {out['plain_vllm']['tokens_per_s']['plain'] / 1e6:.2f}M tokens/s, the replay's "
        f"{out['plain_vllm']['tokens_per_s']['queued'] / 1e6:.2f}M ({out['plain_vllm']['speedup']:.0f}x)")
    if profile_time:
        out["where_time_goes"] = where_time_goes(trace, side_requests)
    out["sweeps"] = []
    for p in sweep_profiles:
        s = sweep(trace, p, sweep_capacities, tmp)
        out["sweeps"].append(s)
        log(f"replay: sweep of {p}, {s['capacities']} capacities over {s['prompt_tokens'] / 1e6:.0f}M tokens: "
            f"{s['wall_s']:.1f} s wall, {s['cpu_s']:.1f} s CPU")
    return out


def target_rows(r: dict) -> list:
    """The rows item 8 adds to the targets table (benchmarks/report.py)."""
    rows = []
    for s in r["sweeps"]:
        rows.append(("8", f"`kvconform simulate --trace`, whole sweep of {s['profile']} ({s['requests']:,} requests, "
                          f"{s['prompt_tokens'] / 1e6:.0f}M tokens, {s['capacities']} capacities), one core",
                     "< 1 min (CPU)", f"{s['cpu_s']:.1f} s CPU, {s['wall_s']:.1f} s wall "
                     f"({s['prompt_tokens'] * s['capacities'] / s['cpu_s'] / 1e6:.1f}M tokens/s over the sweep)",
                     s["cpu_s"] < TARGET_SWEEP_S))
    for row in r["side_by_side"]:
        edge_or_vllm = row["profile"].startswith(("kvconform-1", "edge-llm-0.10", "vllm-apc"))
        rows.append(("8", f"replay CPU tokens/s, {row['profile']} at {row['capacity']} tokens "
                          f"({row['requests']:,} requests, {row['prompt_tokens'] / 1e6:.1f}M tokens)",
                     ">= 20M tokens/s" if edge_or_vllm else "measure",
                     f"{row['cpu_tokens_per_s'] / 1e6:.1f}M tokens/s (wall {row['tokens_per_s'] / 1e6:.1f}M)",
                     row["cpu_tokens_per_s"] >= TARGET_TOKENS_PER_S if edge_or_vllm else None))
    p = r.get("plain_vllm")
    if p:
        rows.append(("8", f"vllm-apc: the replay's pool (reference/replay_vllm.py) / VllmBlockPool as it is "
                          f"({p['requests']} requests)", "measure",
                     f"{p['speedup']:.0f}x ({p['tokens_per_s']['queued'] / 1e6:.2f}M vs "
                     f"{p['tokens_per_s']['plain'] / 1e6:.3f}M tokens/s, equal counts)", None))
    return rows


def markdown(r: dict) -> list:
    out = ["", f"Trace replay (`kvconform simulate --trace`), side by side on the first "
               f"{r['side_by_side'][0]['requests']:,} requests of the trace ({r['trace']['source']}), one core, "
               "median seconds of the replay:", "",
           "| profile | capacity | replay s | tokens/s | CPU tokens/s | hit ratio | where the time goes (self time) |",
           "|---|---|---|---|---|---|---|"]
    for row in r["side_by_side"]:
        shares = r.get("where_time_goes", {}).get(row["profile"], {}).get("self_time_share", {})
        top = ", ".join(f"{k.split(' (')[0]} {v:.0%}" for k, v in list(shares.items())[:3] if v >= 0.05)
        out.append(f"| {row['profile']} | {row['capacity']} | {row['median_s']:.2f} | {row['tokens_per_s'] / 1e6:.1f}M | "
                   f"{row['cpu_tokens_per_s'] / 1e6:.1f}M | {row['hit_ratio_tokens']:.4f} | {top} |")
    if r.get("sweeps"):
        out += ["", "| sweep | capacities | requests | tokens | process wall | process CPU | replays | curve (capacity: hit ratio) |",
                "|---|---|---|---|---|---|---|---|"]
        for s in r["sweeps"]:
            curve = ", ".join(f"{'inf' if c is None else f'{c:.0e}'}: {h:.3f}" for c, h in s["curve"])
            out.append(f"| {s['profile']} | {s['capacities']} | {s['requests']:,} | {s['prompt_tokens'] / 1e6:.0f}M | "
                       f"{s['wall_s']:.1f} s | {s['cpu_s']:.1f} s | {s['replay_s']:.1f} s | {curve} |")
    return out


def render(r: dict) -> str:
    """The Markdown of one result: the machine, the rows of item 8 and the tables."""
    m = r.get("machine", {})
    load = r.get("load") or {}
    loads = [x[0] for x in (load.get("before"), load.get("after"), r.get("loadavg")) if x]
    out = [f"Machine: {m.get('cpu', '?')}, {m.get('cpus')} CPUs, Python {m.get('python')}; 1-minute load average "
           f"{min(loads):.1f}-{max(loads):.1f} (a shared machine: the wall times wait for the core, the CPU times do "
           f"not). Run `{r.get('command', 'python -m benchmarks.replay')}`, {r.get('started', '?')}, "
           f"commit {str((m.get('code') or {}).get('commit', '?'))[:7]}." if loads else "", "",
           "| item | measure | target | measured | status |", "|---|---|---|---|---|"]
    for item, measure, target, measured, met in target_rows(r):
        out.append(f"| {item} | {measure} | {target} | {measured} | {'n/a' if met is None else 'met' if met else 'MISSED'} |")
    return "\n".join(out + markdown(r)) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", help="a hash-id trace to measure (default: the seeded model, written to a temp folder)")
    ap.add_argument("--requests", type=int, default=12031)
    ap.add_argument("--side-requests", type=int, default=500)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", help="write the result here, and its Markdown beside it (.md)")
    ap.add_argument("--render", metavar="JSON", help="only write the Markdown of an earlier result")
    a = ap.parse_args(argv)
    if a.render:
        with open(a.render) as f:
            r = json.load(f)
        out = a.render
    else:
        import tempfile
        with tempfile.TemporaryDirectory(prefix="kvconform-replay-") as tmp:
            started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            load = loadavg()
            r = run(tmp, requests=a.requests, side_requests=a.side_requests, reps=a.reps, trace=a.trace)
        r.update(started=started, machine=machine(), load={"before": load, "after": loadavg()},
                 command=recorded_command("python -m benchmarks.replay", argv if argv is not None else sys.argv[1:]))
        out = a.json
        if out:
            with open(out, "w") as f:
                json.dump(r, f, indent=1)
                f.write("\n")
    text = render(r)
    print(text)
    if out:
        with open(out[:-5] + ".md" if out.endswith(".json") else out + ".md", "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
