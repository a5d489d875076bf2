"""Items 2-5 on an NVIDIA GPU: bigger shapes, CUDA-event timing, under 8 minutes.

    benchmarks/gpu.sh                     # or: python -m benchmarks.gpu [--smoke] [--limit 450]

Shapes: one Llama-3.1-8B decoder-layer shape (hidden 4096, SwiGLU 14336, 32 heads, 8 KV heads,
head dim 128), 4 layers, float32 compute with an FP16 KV pool (the backend's contract), and the
tiny default engine (where launch overhead, not math, dominates). Measurements:
  2. TTFT warm / cold / 64-token suffix alone for L in 1024, 4096, 8192 (CUDA events around
     each `Runtime.infer`, the probes synchronise around the gather and the forward)
  3. decode tokens/s paged vs contiguous, batch 1, 8 and 32, context 4096
  4. `kvconform run --device cuda`: generated scenarios per minute
  5. peak CUDA memory allocated vs weights + pool
Every section checks the time left before it starts (--limit, default 450 s from start), and the
JSON is rewritten after each section, so a cut run keeps what it finished; a section that raises
is reported (`failed` in the JSON, its traceback's tail printed) and the next one runs. Results:
benchmarks/results/gpu.{json,png,md}. Nothing here has been run on a GPU yet.

L stops at 8192. On CUDA the backend runs attention in FP16 (gpu_backend/layers.py), so SDPA's
flash / memory-efficient kernels apply; in float32 with grouped KV heads it would take the math
path, which materialises [heads, T, S] scores: 8.7 GB per buffer at 8k, 35 GB at 16k.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from . import report, runner
from .backend_util import TINY
from .common import RESULTS, log

LLAMA_8B_LAYER = {"hiddenSize": 4096, "intermediateSize": 14336, "numHeads": 32, "numKVHeads": 8, "headDim": 128}


def config(smoke: bool) -> dict:
    if smoke:   # the same code path on tiny shapes, any device: for tests and a dry run on CPU
        return {"engine": {"layers": 2, "max_input": 1100, "capacity": 1280, "pages": 100, "batch": 8},
                "reuse": {"shapes": {"tiny": TINY}, "lengths": (256, 1024), "reps": 1, "pairs": 1, "min_seconds": 5},
                "paged": {"shapes": {"tiny": TINY}, "batches": (1, 8), "n0": 256, "steps": 4, "reps": 1,
                          "min_seconds": 5},
                "memory": {"shape": ("tiny", TINY), "prefix": 1024, "min_seconds": 5},
                "suite": {"families": ("text",), "examples": 5, "default_run": False, "profile": None,
                          "min_seconds": 10}}
    return {"engine": {"layers": 4, "max_input": 8400, "capacity": 8448, "pages": 2200, "batch": 32},
            "reuse": {"shapes": {"llama-8b-layer": LLAMA_8B_LAYER, "tiny": TINY}, "lengths": (1024, 4096, 8192),
                      "reps": 3, "pairs": 5, "min_seconds": 60},
            "paged": {"shapes": {"llama-8b-layer": LLAMA_8B_LAYER, "tiny": TINY}, "batches": (1, 8, 32),
                      "n0": 4096, "steps": 64, "reps": 5, "min_seconds": 60},
            "memory": {"shape": ("llama-8b-layer", LLAMA_8B_LAYER), "prefix": 8192, "min_seconds": 20},
            "suite": {"families": ("text", "vision", "hybrid"), "examples": 50, "default_run": False,
                      "profile": None, "min_seconds": 90}}


def main(argv=None) -> int:
    t0 = time.time()
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes (a dry run of the code path)")
    ap.add_argument("--device", default="cuda", help="cuda (default); cpu only with --smoke")
    ap.add_argument("--limit", type=float, default=450, help="seconds from start after which no section starts")
    ap.add_argument("--only", default="reuse,paged,memory,suite")
    ap.add_argument("--name", help="results name (default gpu, or gpu-smoke)")
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("benchmarks.gpu: no CUDA device (torch.cuda.is_available() is False); "
              "use a CUDA build of torch on a machine with an NVIDIA GPU", file=sys.stderr)
        return 2
    if a.device != "cuda" and not a.smoke:
        ap.error("--device cpu needs --smoke (the full shapes are sized for a GPU)")
    if a.device == "cuda":
        log(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    name = a.name or ("gpu-smoke" if a.smoke else "gpu")
    res = runner.run(config(a.smoke), device=a.device, only=a.only.split(","), name=name, out_dir=a.out,
                     threads=torch.get_num_threads(), quick=a.smoke, deadline=t0 + a.limit,
                     primary="tiny" if a.smoke else "llama-8b-layer")
    print(report.markdown(res, png=name + ".png"))
    for section, why in (res.get("failed") or {}).items():       # the other sections ran anyway
        print(f"section {section} FAILED: {why['error']}\n  " + "\n  ".join(why["traceback"]))
    return 1 if res.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
