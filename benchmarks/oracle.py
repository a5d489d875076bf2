"""Item 1: `kvconform simulate` throughput on synthetic traces, one core.

For each size the trace (benchmarks/trace.py) is written into a temporary folder, then,
repetition after repetition with the sizes interleaved:
    cli     `kvconform simulate` as a user runs it (process start to exit, pinned to one core
            with taskset where available): the headline tokens/s
    phases  benchmarks/oracle_worker.py in a fresh process: the same steps timed one by one
            (read JSON, request schema check, reference parse + tokenize, reference simulate,
            write the outputs), plus its peak resident memory
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from gpu_backend.engine_build import make_config

from .common import child_env, log, median, one_core, run_json
from .trace import TraceModel, oracle_engine_args, write_trace

PHASES = ("imports", "read", "schema", "parse", "simulate", "write")


def _kvconform() -> list:
    exe = os.path.join(os.path.dirname(sys.executable), "kvconform")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "conformance.cli"]


def simulate_args(engine: str, trace: str, out_dir: str, records: int) -> list:
    """The arguments of `kvconform simulate` on a benchmark trace, outputs into out_dir."""
    return ["simulate", "--engineConfig", engine, "--inputFile", trace, "--profileOutputFile",
            os.path.join(out_dir, "profile.json"), "--outputFile", os.path.join(out_dir, "predictions.json"),
            "--enableContextReuse", "--contextCacheMaxRecords", str(records), "--dumpProfile"]


def write_engine(path: str, model: TraceModel, pages: int) -> None:
    """The engine description the benchmark traces run on (P = 128, a pool of `pages`)."""
    with open(path, "w") as f:
        json.dump(make_config(oracle_engine_args(model.max_tokens, pool_pages=pages)), f)


def run(tmp: str, *, sizes=(1000, 10000, 100000), reps=None, seed: int = 0, records: int = 1024,
        pages: int = 4096) -> dict:
    reps = reps or {n: (5 if n <= 10000 else 2) for n in sizes}
    model = TraceModel(seed)
    engine = os.path.join(tmp, "oracle-engine.json")
    write_engine(engine, model, pages)
    traces, stats = {}, {}
    for n in sizes:
        traces[n] = os.path.join(tmp, f"trace-{n}.json")
        t0 = time.perf_counter()
        stats[n] = write_trace(traces[n], n, seed=seed)
        stats[n]["file_bytes"] = os.path.getsize(traces[n])
        log(f"oracle: trace of {n} requests, {stats[n]['prompt_tokens'] / 1e6:.1f}M tokens "
            f"({time.perf_counter() - t0:.1f} s to write)")
    env = child_env()
    cli = {n: [] for n in sizes}
    phases = {n: [] for n in sizes}
    for rep in range(max(reps.values())):
        for n in sizes:
            if rep >= reps[n]:
                continue
            prof = os.path.join(tmp, "profile.json")
            cmd = one_core() + _kvconform() + simulate_args(engine, traces[n], tmp, records)
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, env=env, cwd=tmp)
            cli[n].append(time.perf_counter() - t0)
            with open(prof) as f:
                p = json.load(f)
            tokens = p["prefill"]["reused_tokens"] + p["prefill"]["computed_tokens"]
            assert tokens == stats[n]["prompt_tokens"], (tokens, stats[n]["prompt_tokens"])
            stats[n]["hit_sequences"] = p["context_cache"]["hit_sequences"]
            stats[n]["reused_tokens"] = p["prefill"]["reused_tokens"]
            stats[n]["records_evicted"] = p["context_cache"]["records"]["evicted"]
            w = run_json(one_core() + [sys.executable, "-m", "benchmarks.oracle_worker", "--engineConfig", engine,
                                   "--inputFile", traces[n], "--maxRecords", str(records)], env=env, cwd=tmp)
            phases[n].append(w)
            log(f"oracle rep {rep + 1} n={n}: cli {cli[n][-1]:.2f} s = "
                f"{stats[n]['prompt_tokens'] / cli[n][-1] / 1e6:.1f}M tok/s; simulate phase "
                f"{w['seconds']['simulate']:.2f} s")
    for n in sizes:
        os.unlink(traces[n])
    rows = []
    for n in sizes:
        tok = stats[n]["prompt_tokens"]
        ph = {k: median([w["seconds"][k] for w in phases[n]]) for k in PHASES}
        core = ph["parse"] + ph["simulate"]
        rows.append({
            "requests": n, "trace": stats[n], "reps": len(cli[n]),
            "cli_seconds": median(cli[n]), "cli_seconds_reps": cli[n],
            "cli_tokens_per_s": tok / median(cli[n]),
            "phase_seconds": ph,
            "oracle_tokens_per_s": tok / core,                   # reference parse + simulate
            "simulate_tokens_per_s": tok / ph["simulate"],
            "us_per_1k_tokens_cli": median(cli[n]) / tok * 1e9,
            "us_per_1k_tokens_oracle": core / tok * 1e9,
            "peak_rss_mib": max(w["peak_rss_mib"] for w in phases[n]),
        })
    base = rows[0]
    for r in rows:                                  # linearity: cost per token relative to the smallest
        r["cost_per_token_vs_smallest_cli"] = r["us_per_1k_tokens_cli"] / base["us_per_1k_tokens_cli"]
        r["cost_per_token_vs_smallest_oracle"] = r["us_per_1k_tokens_oracle"] / base["us_per_1k_tokens_oracle"]
    return {"engine": {"tokens_per_page": 128, "kv_pool_pages": pages, "max_records": records,
                       "max_input_len": model.max_tokens + 1},
            "trace_model": {k: v for k, v in model.p.items()}, "pinned": bool(one_core()), "rows": rows}
