"""One replay measurement in a fresh process (benchmarks/replay.py starts it, pinned to one core).

    python -m benchmarks.replay_worker TRACE --profile SPEC [--capacity LIST] [--limit N]
        [--plain-vllm] [--cprofile]

Reads a hash-id trace as `kvconform simulate --trace` does (conformance/traffic/), then replays it
through the profile at each capacity, timing each replay alone (wall and CPU seconds), and
prints one JSON line. `--plain-vllm`: vllm-apc on the oracle's `VllmBlockPool` as it is (its
free queue, `commit` token by token) instead of the replay's pool (reference/replay_vllm.py), to
measure what the replay's layout saves. `--cprofile`: also the self time of the first replay grouped by
module, C calls counted with their caller (where the time goes).
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import sys
import time

from conformance.judge import traffic as oracle_traffic
from conformance.traffic import formats, options
from reference import replay as reference_replay
from reference.peer_vllm import VllmBlockPool
from reference.replay_adapters import KeyedPeerRequest, peer_request

GROUPS = (("trace tokens and keys (reference/traffic.py)", ("/reference/traffic.py",)),
          ("replay and its adapters (reference/replay.py, replay_adapters.py)",
           ("/reference/replay.py", "/reference/replay_adapters.py")),
          ("vLLM replay pool (replay_vllm.py)", ("/reference/replay_vllm.py",)),
          ("vLLM pool (peer_vllm.py)", ("/reference/peer_vllm.py",)),
          ("peer requests (peer_common.py: computed sequence, common prefix)", ("/reference/peer_common.py",)),
          ("Edge-LLM batches (batching.py, sequence.py, metrics.py)",
           ("/reference/batching.py", "/reference/sequence.py", "/reference/metrics.py")),
          ("Edge-LLM plan + publish (planning.py, publication.py, media.py, policy.py)",
           ("/reference/planning.py", "/reference/publication.py", "/reference/media.py", "/reference/policy.py")),
          ("Edge-LLM pools + records (capacity.py)", ("/reference/capacity.py",)),
          ("SGLang tree (peer_sglang.py)", ("/reference/peer_sglang.py",)),
          ("TensorRT-LLM tree (peer_trtllm.py)", ("/reference/peer_trtllm.py",)),
          ("llama.cpp slots (peer_llama.py)", ("/reference/peer_llama.py",)))


class PlainVllmReplayer(reference_replay.VllmReplayer):
    """vllm-apc on the oracle's pool as it is: its free queue, decode grown one token at a time,
    a hash-id request's keys through the hook in `vllm_block_keys`."""

    def __init__(self, profile, units):
        super().__init__(profile, units)
        s = profile.settings
        self.plain = VllmBlockPool(self.B, units, s["enable_prefix_caching"], s["eagle"])
        self.evicted = 0

    def run(self, request):
        n, g, B, pool = request.n, request.output, self.B, self.plain
        if self.K is not None and -(-(n + g - 1) // B) > self.K:
            return None
        if request.keyed:
            peer, sampled = KeyedPeerRequest(range(n), traffic=request, prompt_keys=request.page_keys(B)), range(g)
        else:
            peer, sampled = peer_request(request), request.sampled_tokens()
        before, hits = len(pool.block_key), pool.hit_blocks(peer)
        pool.commit(peer, sampled)
        if pool.caching:
            self.evicted += before + max(0, (n + g - 1) // B - hits) - len(pool.block_key)
        return B * hits

    def evictions(self):
        return self.evicted, self.evicted * self.B


def self_time_share(prof: cProfile.Profile) -> tuple[dict, list]:
    stats = pstats.Stats(prof)

    def group(file: str) -> str:
        return next((g for g, frags in GROUPS if any(f in file for f in frags)), "other")

    groups, total, top = {}, 0.0, []
    for (file, line, fn), (cc, nc, tt, ct, callers) in stats.stats.items():
        total += tt
        top.append((tt, f"{os.path.basename(file)}:{line}({fn})", nc))
        if file != "~" or not callers:
            groups[group(file)] = groups.get(group(file), 0.0) + tt
            continue
        weight = sum(v[3] for v in callers.values()) or 1.0
        for (cfile, _, _), v in callers.items():
            groups[group(cfile)] = groups.get(group(cfile), 0.0) + tt * v[3] / weight
    top.sort(reverse=True)
    return ({k: v / total for k, v in sorted(groups.items(), key=lambda kv: -kv[1])},
            [{"function": f, "self_s": round(t, 3), "calls": n} for t, f, n in top[:12]])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--profile", required=True, type=options.profile_spec)
    ap.add_argument("--capacity", type=options.capacities, default=[None])
    ap.add_argument("--limit", type=int)
    ap.add_argument("--plain-vllm", action="store_true")
    ap.add_argument("--cprofile", action="store_true")
    a = ap.parse_args(argv)
    if a.plain_vllm:
        reference_replay.VllmReplayer = PlainVllmReplayer
    t0 = time.perf_counter()
    trace = formats.read_trace(a.trace)
    requests = oracle_traffic.hash_id_traffic(trace.entries, trace.block_size, limit=a.limit)
    read_s = time.perf_counter() - t0
    out = {"profile": a.profile[2], "plain_vllm": a.plain_vllm, "requests": len(requests),
           "prompt_tokens": sum(r.n for r in requests), "read_s": read_s, "runs": []}
    gc.disable()            # as `kvconform simulate` runs: no container here is in a cycle
    for i, run in enumerate(oracle_traffic.plan([a.profile], a.capacity, "tokens")):
        prof = cProfile.Profile() if a.cprofile and i == 0 else None
        w0, c0 = time.perf_counter(), time.process_time()
        if prof:
            prof.enable()
        summary, _ = reference_replay.replay(requests, run.profile.replayer(run.units, requests))
        if prof:
            prof.disable()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        row = {"capacity": run.capacity, "seconds": wall, "cpu_seconds": cpu, **summary.as_dict()}
        row["seconds"] = wall
        if prof:
            row["self_time_share"], row["top_functions"] = self_time_share(prof)
        out["runs"].append(row)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
