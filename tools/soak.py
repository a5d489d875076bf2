#!/usr/bin/env python3
"""Soak test of the bundled backend: many generated requests on long-lived runtimes, with the
cache invariant check after every batch, watching for leaks.

    .venv/bin/python tools/soak.py [--requests 100000] [--seed 0] [--json OUT] [--device cpu]

Two runtime instances live for the whole run, one on an attention engine (vision, two LoRA
adapters, a pool 24 pages above the minimum so records are kept and evicted) and one on a hybrid
engine (12 recurrent and 4 partial-KV snapshot slots, so checkpoints are restored and evicted). Request files
of 1-3 batches are drawn from a seeded generator: shared system prompts and earlier prompts
replayed or extended (hits, full-input rewinds), images, adapters, both lookup and commit
policies, greedy and sampled decoding, and on purpose some batches that fail (an input longer
than max_input_len, n + max_generate_length above the capacity: CR-BATCH-5).

After every batch the runtime checks its own invariants (`check_invariants=True`: reference
counts equal the references held, free lists and index agree). After every request file this
tool checks, with no sequence alive, that every pool's free count is exactly its capacity minus
the ids held by records, and that the record count respects the limit. RSS is sampled every
`--every` requests; the run fails if RSS after the first tenth grows by more than `--rss-slack-mb`.

Exit 0 when everything held; 1 with the first violation. `--json` writes the measurements.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MEDIA = ROOT / "cases" / "media"
IMAGES = ["img_a_16x16.png", "img_b_16x16.png", "img_c_16x16.png", "img_a_16x16.ppm", "img_t_16x32.png"]
ENGINES = {
    "attention": {"maxInputLen": 40, "maxKVCacheCapacity": 48, "maxKVPoolPages": 4 * 12 + 24, "tokensPerPage": 4,
                  "maxBatchSize": 4, "vision": True, "loraAdapters": ["a", "b"]},
    "hybrid": {"maxInputLen": 40, "maxKVCacheCapacity": 48, "maxKVPoolPages": 2 * 12 + 16, "tokensPerPage": 4,
               "maxBatchSize": 2, "model": "hybrid", "numLayers": 2},
}
WORDS = ["alpha ", "beta ", "gamma ", "delta ", "kv ", "page ", "cache ", "reuse ", "x", "yz", "!"]


def rss_bytes() -> int:
    try:
        import psutil
        return psutil.Process().memory_info().rss
    except ImportError:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Generator:
    """Seeded request files that revisit earlier prompts, so the cache is hit, shared and evicted."""

    def __init__(self, seed: int, kind: str, max_batch: int):
        self.rng, self.kind, self.max_batch = random.Random(seed), kind, max_batch
        self.systems = ["".join(self.rng.choice(WORDS) for _ in range(8))[:self.rng.randint(3, 24)] for _ in range(12)]
        self.seen: list = []

    def text(self, lo: int, hi: int) -> str:
        out = ""
        while len(out) < lo:
            out += self.rng.choice(WORDS)
        return out[:self.rng.randint(lo, hi)] or "q"

    def request(self, lora: str | None) -> dict:
        r = self.rng.random()
        if self.seen and r < 0.3:
            content = self.rng.choice(self.seen)                                    # exact replay
        elif self.seen and r < 0.5:                                                 # continuation
            short = [s for s in self.seen[-20:] if len(s) <= 28] or [self.rng.choice(self.systems)]
            content = self.rng.choice(short) + self.text(1, 9)
        elif r < 0.55:
            content = self.text(41, 60)                                             # too long: batch fails
        else:
            content = self.rng.choice(self.systems) + self.text(0, 14)
        if self.kind == "attention" and self.rng.random() < 0.2:
            cut = self.rng.randint(0, min(len(content), 8))
            parts = [{"type": "text", "text": content[:cut]},
                     {"type": "image", "image": str(MEDIA / self.rng.choice(IMAGES))},
                     {"type": "text", "text": content[cut:]}]
        else:
            parts = content
            if len(self.seen) < 200:
                self.seen.append(content)
            else:
                self.seen[self.rng.randrange(200)] = content
        out = {"messages": [{"role": "user", "content": parts}]}
        if lora:
            out["lora_name"] = lora
        return out

    def file(self) -> dict:
        bs = self.rng.randint(1, self.max_batch)
        batches = self.rng.randint(1, 3)
        requests = []
        for _ in range(batches):
            lora = self.rng.choice([None, None, "a", "b"]) if self.kind == "attention" else None
            requests += [self.request(lora) for _ in range(bs)]
        doc = {"apply_chat_template": self.rng.random() < 0.5, "batch_size": bs,
               "max_generate_length": self.rng.choice([1, 2, 3, 5, 8, 12]),
               "requests": requests}
        if self.rng.random() < 0.7:
            doc["temperature"] = 0
        else:
            doc.update(temperature=self.rng.choice([0.5, 1.0, 1.5]), top_k=self.rng.choice([0, 5, 50]),
                       top_p=self.rng.choice([0.5, 0.9, 1.0]))
        if self.kind == "attention":
            doc["available_lora_weights"] = {"a": "lora/a.safetensors", "b": "lora/b.safetensors"}
        if self.rng.random() < 0.1:
            doc["context_cache_lookup_policy"] = "bypass"
        if self.rng.random() < 0.2:
            doc["context_cache_commit_policy"] = "prefill_state_only"
        if self.rng.random() < 0.03:                    # n + max_generate_length > capacity: batch fails
            doc["max_generate_length"] = 40
        return doc


def check_pools(rt) -> str | None:
    """With no live sequence: free = capacity - ids held by records, in every pool."""
    cache = rt.cache
    for p, pool in enumerate(cache.pools):
        held = {i for i in range(pool.capacity) if pool.cache[i] > 0}
        if any(pool.active):
            return f"pool {p}: active references with no live sequence: {[i for i, a in enumerate(pool.active) if a][:8]}"
        if pool.num_free != pool.capacity - len(held):
            return f"pool {p}: {pool.num_free} free, expected {pool.capacity} - {len(held)} held by records"
    if len(cache.records) > max(cache.max_records, 0):
        return f"{len(cache.records)} records above the limit {cache.max_records}"
    return None


def soak(requests: int, seed: int, every: int, device: str, rss_slack_mb: float, progress: bool = True) -> dict:
    import torch
    from gpu_backend import Runtime, build_engine
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="kvconform-soak-"))
    runtimes, gens = {}, {}
    for kind, args in ENGINES.items():
        build_engine(work / kind, args)
        runtimes[kind] = Runtime(work / kind, enable_context_reuse=True, max_records=40, device=device,
                                 recurrent_snapshot_bytes=12 * 5120, partial_kv_snapshot_bytes=4 * 512,
                                 check_invariants=True, seed=seed)
        gens[kind] = Generator(seed + len(gens), kind, args["maxBatchSize"])
    stats = {"requests": 0, "files": 0, "batches": 0, "failed_batches": 0, "samples": []}
    start = time.monotonic()
    next_sample = 0
    while stats["requests"] < requests:
        kind = "attention" if stats["files"] % 5 else "hybrid"
        rt, doc = runtimes[kind], gens[kind].file()
        doc["requests"] = doc["requests"][:requests - stats["requests"]] or doc["requests"][:1]
        result = rt.infer(doc, str(work / kind))
        bs = doc["batch_size"]
        stats["requests"] += len(doc["requests"])
        stats["files"] += 1
        stats["batches"] += -(-len(doc["requests"]) // bs)
        stats["failed_batches"] += result["failed_batches"]
        problem = check_pools(rt)
        if problem:
            stats["violation"] = f"after request {stats['requests']} ({kind}): {problem}"
            break
        if stats["requests"] >= next_sample:
            sample = {"requests": stats["requests"], "seconds": round(time.monotonic() - start, 1),
                      "rss_mb": round(rss_bytes() / 2 ** 20, 1),
                      "free_pages": {k: r.cache.pages.num_free for k, r in runtimes.items()},
                      "records": {k: len(r.cache.records) for k, r in runtimes.items()}}
            stats["samples"].append(sample)
            if progress:
                print(json.dumps(sample), file=sys.stderr, flush=True)
            next_sample += every
    stats["seconds"] = round(time.monotonic() - start, 1)
    stats["final"] = {k: {"free_pages": r.cache.pages.num_free, "capacity": r.cache.pages.capacity,
                          "held_by_records": sum(1 for c in r.cache.pages.cache if c > 0),
                          "records": len(r.cache.records),
                          **{k: r.cache.profile()[k] for k in ("admitted_sequences", "hit_sequences", "records",
                                                               "publications", "hybrid")}}
                      for k, r in runtimes.items()}
    samples = stats["samples"]
    if "violation" not in stats and len(samples) >= 3:
        base = samples[max(1, len(samples) // 10)]["rss_mb"]
        peak = max(s["rss_mb"] for s in samples[len(samples) // 10:])
        stats["rss_growth_mb"] = round(peak - base, 1)
        if peak - base > rss_slack_mb:
            stats["violation"] = f"RSS grew by {peak - base:.1f} MB after warm-up (slack {rss_slack_mb} MB)"
    return stats


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--every", type=int, default=5000, help="requests between RSS samples")
    p.add_argument("--device", default="cpu")
    p.add_argument("--rss-slack-mb", type=float, default=64.0)
    p.add_argument("--json", help="write the measurements here")
    a = p.parse_args(argv)
    stats = soak(a.requests, a.seed, a.every, a.device, a.rss_slack_mb)
    if a.json:
        Path(a.json).write_text(json.dumps(stats, indent=1) + "\n")
    summary = {k: v for k, v in stats.items() if k != "samples"}
    print(json.dumps(summary, indent=1))
    return 1 if "violation" in stats else 0


if __name__ == "__main__":
    sys.exit(main())
