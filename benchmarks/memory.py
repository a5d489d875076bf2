"""Item 5: the KV pool's size, and the peak resident memory of a backend run.

- Pool bytes: `KVPool.nbytes` of each benchmark engine against
  pages x attention layers x 2 x kv_heads x P x head_dim x 2 bytes (FP16). The pool tensor holds
  one page more than the cache can use: the all-zero scratch page that padding positions of a
  batch read (kv_pool.py); it is reported separately.
- Peak RSS: `python -m gpu_backend infer` (the CLI a user runs) on the realistic engine with
  a request file that publishes a 4,096-token prefix, reuses it, and runs a cold 4,160-token
  prompt (the largest prefill activations), measured by the child itself (VmHWM). The
  budget is 1.5 x (weights + pool + fixed overhead), the fixed overhead being the peak RSS of
  a process that imports gpu_backend and runs one small torch op (interpreter, torch, numpy,
  safetensors, thread pools).
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

from .backend_util import request, text
from .common import child_env, log


def pool_formula(cfg: dict) -> int:
    layers = cfg["layer_kinds"].count("attention")
    return cfg["kv_pool_pages"] * layers * 2 * cfg["num_kv_heads"] * cfg["tokens_per_page"] * cfg["head_dim"] * 2


def pool_check(rt) -> dict:
    cfg = rt.cfg
    formula = pool_formula(cfg)
    page = formula // cfg["kv_pool_pages"]
    return {"pages": cfg["kv_pool_pages"], "formula_bytes": formula, "pool_tensor_bytes": rt.kv.nbytes,
            "scratch_page_bytes": page, "usable_bytes_equal_formula": rt.kv.nbytes - page == formula}


def _peak_rss_mib(args, env, tmp) -> float:
    """Peak RSS of `python ARGS` (a module and its arguments, or -c CODE), measured by the child
    itself (benchmarks/peak_rss.py): wait4()'s ru_maxrss would include the RSS of this process
    at fork, which is large after the other sections."""
    out = os.path.join(tmp, "peak-rss.txt")
    cmd = [sys.executable, "-m", "benchmarks.peak_rss", out] + args
    proc = subprocess.run(cmd, env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise RuntimeError(f"{args[:3]}... exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    with open(out) as f:
        return int(f.read()) / 1024


def run(tmp: str, engine_dir: str, *, prefix: int = 4096, suffix: int = 64, threads: int = 1) -> dict:
    with open(os.path.join(engine_dir, "config.json")) as f:
        cfg = json.load(f)
    rng = random.Random(7)
    pre, cold = text(rng, prefix), text(rng, prefix + suffix)
    doc = request([pre, pre + text(rng, suffix), cold], max_generate_length=4)
    doc["logit_bias"] = {"257": -100}
    req = os.path.join(tmp, "memory-requests.json")
    with open(req, "w") as f:
        json.dump(doc, f)
    env = child_env(OMP_NUM_THREADS=str(threads))
    fixed = _peak_rss_mib(["-c", "import torch, gpu_backend, gpu_backend.cli; "
                           "torch.ones(64, 64) @ torch.ones(64, 64)"], env, tmp)
    peak = _peak_rss_mib(["gpu_backend", "infer", "--engineDir", engine_dir, "--inputFile", req, "--outputFile",
                          os.path.join(tmp, "memory-out.json"), "--enableContextReuse", "--device", "cpu"], env, tmp)
    weights = os.path.getsize(os.path.join(engine_dir, "model.safetensors")) / 2 ** 20
    layers = cfg["layer_kinds"].count("attention")
    pool = (cfg["kv_pool_pages"] + 1) * layers * 2 * cfg["num_kv_heads"] * cfg["tokens_per_page"] * cfg["head_dim"] * 2
    pool /= 2 ** 20
    budget = 1.5 * (weights + pool + fixed)
    log(f"memory: peak {peak:.0f} MiB vs budget {budget:.0f} MiB (weights {weights:.0f} + pool {pool:.0f} + "
        f"fixed {fixed:.0f}, x1.5)")
    return {"workload": f"publish {prefix}, warm {prefix}+{suffix}, cold {prefix + suffix} tokens; 4 tokens each",
            "weights_mib": weights, "pool_mib": pool, "fixed_overhead_mib": fixed, "peak_rss_mib": peak,
            "budget_mib": budget, "peak_over_components": peak / (weights + pool + fixed)}


def run_cuda(engine_dir: str, *, prefix: int = 4096, suffix: int = 64) -> dict:
    """GPU variant: peak bytes allocated by torch's CUDA allocator over the same workload,
    against weights + pool (the CUDA context and cuBLAS workspaces are outside the allocator)."""
    import torch

    import gpu_backend
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    rt = gpu_backend.Runtime(engine_dir, enable_context_reuse=True, device="cuda")
    weights = sum(t.numel() * t.element_size() for t in rt.model.w.values()) / 2 ** 20
    pool = rt.kv.nbytes / 2 ** 20
    rng = random.Random(7)
    pre, cold = text(rng, prefix), text(rng, prefix + suffix)
    doc = request([pre, pre + text(rng, suffix), cold], max_generate_length=4)
    doc["logit_bias"] = {"257": -100}
    rt.infer(doc, ".")
    peak = (torch.cuda.max_memory_allocated() - base) / 2 ** 20
    del rt
    torch.cuda.empty_cache()
    return {"workload": f"publish {prefix}, warm {prefix}+{suffix}, cold {prefix + suffix} tokens; 4 tokens each",
            "weights_mib": weights, "pool_mib": pool, "peak_allocated_mib": peak,
            "peak_over_components": peak / (weights + pool)}
