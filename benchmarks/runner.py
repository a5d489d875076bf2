"""The section loop shared by `python -m benchmarks` (CPU) and benchmarks/gpu.py (CUDA).

Results are written after every section, so a run cut short (a time limit) still leaves its
finished sections in NAME.json.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import traceback

import torch

from . import memory, oracle, paged, replay, report, reuse, suite
from .backend_util import ensure_engine
from .common import loadavg, log, machine

SECTIONS = ("oracle", "reuse", "paged", "memory", "suite", "replay")


def engine_for(root: str, name: str, shape: dict, e: dict) -> str:
    """One engine per shape serves items 2, 3 and 5 (`e`: layers, max_input, capacity, pages, batch)."""
    return ensure_engine(root, f"{name}-{e['layers']}l", shape, layers=e["layers"], max_input=e["max_input"],
                         capacity=e["capacity"], pages=e["pages"], batch=e["batch"])


def write(res: dict, out_dir: str, name: str, final: bool) -> str:
    res["targets"] = report.targets(res)
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, name)
    with open(base + ".json", "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    if final:
        try:
            report.plot(res, base + ".png")
            png = os.path.basename(base) + ".png"
        except ImportError as e:                    # matplotlib is in the `bench` extra
            log(f"no plot: {e}")
            png = None
        with open(base + ".md", "w") as f:
            f.write(report.markdown(res, png=png))
        if os.path.abspath(out_dir) == os.path.abspath(report.RESULTS_DIR) and name in ("cpu", "gpu"):
            report.update_readme(res, name)        # benchmarks/README.md and docs/benchmarks.md show the latest run
            report.update_readme(res, name, report.DOCS_PAGE, "../benchmarks/results")
    return base


def run(cfg: dict, *, device: str, only, name: str, out_dir: str, threads: int, quick: bool,
        engines_dir: str | None = None, deadline: float | None = None, primary: str | None = None,
        update: bool = False) -> dict:
    import gpu_backend
    if device == "cpu":
        torch.set_num_threads(threads)
    tmp = tempfile.mkdtemp(prefix="kvconform-bench-")
    engines = engines_dir or os.path.join(tmp, "engines")
    os.makedirs(engines, exist_ok=True)
    started = time.time()
    res = {"format": "kvconform-bench-v1", "name": name, "quick": quick, "device": device,
           "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(),
           "threads": torch.get_num_threads(), "primary_shape": primary, "sections": {}, "load": {},
           "skipped": {}}
    previous = os.path.join(out_dir, name + ".json")
    if update and os.path.exists(previous):           # keep the sections this run does not redo
        with open(previous) as f:
            old = json.load(f)
        res["sections"], res["load"] = old.get("sections", {}), old.get("load", {})
        for section, out in res["sections"].items():
            out.setdefault("measured_at", old.get("started"))
            out.setdefault("code", old.get("machine", {}).get("code"))
    try:
        for section in only:
            left = None if deadline is None else deadline - time.time()
            need = cfg[section].get("min_seconds", 0)
            if left is not None and left < need:
                res["skipped"][section] = f"{left:.0f} s left of the time limit, the section needs ~{need} s"
                log(f"== {section}: skipped ({res['skipped'][section]})")
                continue
            t0 = time.time()
            res["load"][section] = {"before": loadavg()}
            log(f"== {section}")
            try:
                c = cfg[section]
                if section == "oracle":
                    out = oracle.run(tmp, sizes=c["sizes"], reps=c["reps"])
                elif section == "replay":
                    out = replay.run(tmp, **c)
                elif section in ("reuse", "paged"):
                    out = {"shapes": {}}
                    for shape_name, shape in c["shapes"].items():
                        d = engine_for(engines, shape_name, shape, cfg["engine"])
                        rt = gpu_backend.Runtime(d, enable_context_reuse=True, device=device, dump_profile=True)
                        desc = {"build_args": json.load(open(os.path.join(d, "bench-args.json"))),
                                "pool": memory.pool_check(rt)}
                        if section == "reuse":
                            r = reuse.run(rt, lengths=c["lengths"], reps=c["reps"], pairs=c["pairs"],
                                          suffix=c.get("suffix", 64))
                        else:
                            p = c.get("per_shape", {}).get(shape_name, {})
                            r = paged.run(rt, batches=p.get("batches", c["batches"]), n0=p.get("n0", c["n0"]),
                                          steps=p.get("steps", c["steps"]), reps=p.get("reps", c["reps"]))
                        out["shapes"][shape_name] = {**desc, **r}
                        del rt
                        if device == "cuda":
                            torch.cuda.empty_cache()
                elif section == "memory":
                    shape_name, shape = c["shape"]
                    d = engine_for(engines, shape_name, shape, cfg["engine"])
                    if device == "cuda":
                        out = memory.run_cuda(d, prefix=c["prefix"])
                    else:
                        out = memory.run(tmp, d, prefix=c["prefix"], threads=threads)
                    out["shape"] = shape_name
                else:
                    out = suite.run(tmp, families=c["families"], examples=c["examples"], default_run=c["default_run"],
                                    profile=c["profile"], profile_examples=c.get("profile_examples", 100),
                                    device=device)
            except Exception as e:                  # a failing section is reported; the next one runs
                tail = traceback.format_exc().strip().splitlines()[-6:]
                res.setdefault("failed", {})[section] = {"error": f"{type(e).__name__}: {e}", "traceback": tail,
                                                         "section_seconds": time.time() - t0}
                log(f"== {section}: FAILED after {time.time() - t0:.0f} s: {type(e).__name__}: {e}")
                if device == "cuda":
                    torch.cuda.empty_cache()
                write(res, out_dir, name, final=False)
                continue
            out["section_seconds"] = time.time() - t0
            out["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t0))
            out["code"] = res["machine"].get("code")
            res["sections"][section] = out
            res["load"][section]["after"] = loadavg()
            res["total_seconds"] = time.time() - started
            write(res, out_dir, name, final=False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)          # traces, reports; --keep-engines keeps engines elsewhere
    if update:
        res["total_seconds"] = sum(s.get("section_seconds", 0) for s in res["sections"].values())
    else:
        res["total_seconds"] = time.time() - started
    base = write(res, out_dir, name, final=True)
    log(f"wrote {base}.json, .png, .md in {res['total_seconds']:.0f} s")
    return res
