"""Helpers shared by the backend benchmarks: engines, requests, and timing probes.

The probes wrap a runtime's KV gather and model forward (instance attributes only: nothing in
gpu_backend is modified) so one warm request's time splits into lookup (planning: page-key
hashing and the index walk, from the cache's own planning counter), page gather (index_select
through the page table + FP16 -> float32), compute (the layer stack minus the gather) and
other (request parsing and tokenization, admission bookkeeping, lm-head, sampling, publication,
response building).
"""
from __future__ import annotations

import json
import os
import random
import time

import torch

import gpu_backend
from gpu_backend.engine_build import build_engine

# The "realistic small shape": one Llama-3.2-1B decoder layer shape (hidden 2048, SwiGLU 8192,
# 32 query heads, 8 KV heads, head dim 64, GQA 4:1), 2 layers. Per-layer ratios do not depend on
# the layer count; 2 layers keep a cold 4,160-token prefill on a shared 2-core CPU near 20 s.
LLAMA_1B_LAYER = {"hiddenSize": 2048, "intermediateSize": 8192, "numHeads": 32, "numKVHeads": 8, "headDim": 64}
TINY = {"hiddenSize": 64, "intermediateSize": 128, "numHeads": 4, "numKVHeads": 2, "headDim": 16}
SHAPES = {"llama-1b-layer": LLAMA_1B_LAYER, "tiny": TINY}


def ensure_engine(root: str, name: str, shape: dict, *, layers: int, max_input: int, capacity: int,
                  pages: int, P: int = 128, batch: int = 1, seed: int = 0) -> str:
    """Build (once, into `root`) an engine of the given shape; returns its directory."""
    d = os.path.join(root, name)
    args = {"maxInputLen": max_input, "maxKVCacheCapacity": capacity, "maxKVPoolPages": pages,
            "tokensPerPage": P, "maxBatchSize": batch, "numLayers": layers, "seed": seed, **shape}
    stamp = os.path.join(d, "bench-args.json")
    if os.path.exists(stamp) and json.load(open(stamp)) == args:
        return d
    build_engine(d, args)
    json.dump(args, open(stamp, "w"))
    return d


def text(rng: random.Random, n: int) -> str:
    """n tokens of ASCII text (bytes-v1 without chat template: one character, one token)."""
    return rng.randbytes(n).translate(bytes(97 + i % 26 for i in range(256))).decode("ascii")


def request(contents, *, bypass: bool = False, max_generate_length: int = 1, batch_size: int = 1) -> dict:
    doc = {"apply_chat_template": False, "max_generate_length": max_generate_length, "temperature": 0.0,
           "batch_size": batch_size, "context_cache_commit_policy": "prefill_state_only",
           "requests": [{"messages": [{"role": "user", "content": c}]} for c in contents]}
    if bypass:
        doc["context_cache_lookup_policy"] = "bypass"
    return doc


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


class Clock:
    """Seconds between start() and stop(): wall time on CPU; CUDA events on a GPU (the time from
    the start mark to the completion of the last kernel queued before stop())."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"

    def start(self):
        if self.cuda:
            torch.cuda.synchronize()
            self._e0 = torch.cuda.Event(enable_timing=True)
            self._e0.record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> float:
        if self.cuda:
            e1 = torch.cuda.Event(enable_timing=True)
            e1.record()
            e1.synchronize()
            return self._e0.elapsed_time(e1) / 1e3
        return time.perf_counter() - self._t0


class Probe:
    """Times one runtime's gather and forward calls (synchronising on CUDA)."""

    def __init__(self, rt):
        self.rt = rt
        self.gather = self.forward = 0.0
        rt.kv.gather = self._timed(rt.kv.gather, "gather")       # instance attributes shadow the methods
        rt.model.forward = self._timed(rt.model.forward, "forward")

    def _timed(self, real, total: str):
        """`real`, adding its synchronised wall time to the attribute `total`."""
        dev = self.rt.device

        def call(*a, **k):
            sync(dev)
            t0 = time.perf_counter()
            out = real(*a, **k)
            sync(dev)
            setattr(self, total, getattr(self, total) + time.perf_counter() - t0)
            return out
        return call

    def reset(self):
        self.gather = self.forward = 0.0
        self.planning_ns = self.rt.cache.metrics.planning_ns

    def lookup(self) -> float:
        return (self.rt.cache.metrics.planning_ns - self.planning_ns) / 1e9


def timed_infer(rt, doc, probe: Probe | None = None) -> tuple[float, dict]:
    """Seconds of one Runtime.infer (time to first token when max_generate_length is 1)."""
    if probe:
        probe.reset()
    clock = Clock(rt.device)
    clock.start()
    out = rt.infer(doc, os.getcwd())
    return clock.stop(), out
