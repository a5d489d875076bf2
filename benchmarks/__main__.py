"""`python -m benchmarks`: every CPU measurement in one run, then JSON + PNG + table.

    python -m benchmarks [--quick] [--only oracle,reuse,paged,memory,suite,replay] [--name NAME]
                         [--threads N] [--keep-engines DIR]

Writes benchmarks/results/NAME.json (every figure, the machine, the load), NAME.png (the plot)
and NAME.md (the table the README shows). --quick: tiny shapes and small traces, < 1 minute,
a smoke test of every code path (its figures are not the published ones). The GPU script is
benchmarks/gpu.py (benchmarks/gpu.sh).
"""
from __future__ import annotations

import argparse
import sys

from . import report, runner
from .backend_util import LLAMA_1B_LAYER, TINY
from .common import RESULTS

ENGINE = {"layers": 2, "max_input": 4200, "capacity": 4352, "pages": 320, "batch": 8}


def config(quick: bool) -> dict:
    if quick:
        return {"engine": ENGINE,
                "oracle": {"sizes": (300, 3000), "reps": {300: 1, 3000: 1}},
                "reuse": {"shapes": {"tiny": TINY}, "lengths": (256, 1024), "reps": 1, "pairs": 2},
                "paged": {"shapes": {"tiny": TINY}, "batches": (1, 8), "n0": 256, "steps": 8, "reps": 2},
                "memory": {"shape": ("tiny", TINY), "prefix": 1024},
                "suite": {"families": ("text",), "examples": 10, "default_run": False, "profile": None},
                "replay": {"requests": 300, "side_requests": 60, "reps": 1, "plain_requests": 5,
                           "sweep_capacities": "1e5,1e7,inf"}}
    return {"engine": ENGINE,
            "oracle": {"sizes": (1000, 10000, 100000), "reps": {1000: 5, 10000: 5, 100000: 2}},
            "reuse": {"shapes": {"llama-1b-layer": LLAMA_1B_LAYER, "tiny": TINY}, "lengths": (256, 1024, 4096),
                      "reps": 3, "pairs": 3},
            "paged": {"shapes": {"llama-1b-layer": LLAMA_1B_LAYER, "tiny": TINY}, "batches": (1, 8), "n0": 1024,
                      "steps": 16, "reps": 5, "per_shape": {"tiny": {"steps": 64, "reps": 7}}},
            "memory": {"shape": ("llama-1b-layer", LLAMA_1B_LAYER), "prefix": 4096},
            "suite": {"families": ("text", "vision", "hybrid"), "examples": 100, "default_run": True,
                      "profile": "vision", "profile_examples": 100},
            "replay": {"requests": 12031, "side_requests": 500, "reps": 3, "plain_requests": 40}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny shapes, small traces: a smoke run (< 1 min)")
    ap.add_argument("--only", help="comma-separated sections: " + ",".join(runner.SECTIONS))
    ap.add_argument("--name", help="results/NAME.{json,png,md} (default: cpu, or quick with --quick)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1: ratios are stable on a shared machine)")
    ap.add_argument("--keep-engines", metavar="DIR", help="build engines here and keep them (default: a temp dir)")
    ap.add_argument("--out", default=str(RESULTS), help="results folder (default benchmarks/results)")
    ap.add_argument("--update", action="store_true",
                    help="keep the other sections of an existing NAME.json (each section records when and on "
                         "which code it was measured)")
    a = ap.parse_args(argv)
    only = a.only.split(",") if a.only else list(runner.SECTIONS)
    bad = set(only) - set(runner.SECTIONS)
    if bad:
        ap.error(f"unknown sections {sorted(bad)}")
    name = a.name or ("quick" if a.quick else "cpu")
    res = runner.run(config(a.quick), device="cpu", only=only, name=name, out_dir=a.out, threads=a.threads,
                     quick=a.quick, engines_dir=a.keep_engines, primary="llama-1b-layer", update=a.update)
    print(report.markdown(res, png=name + ".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
