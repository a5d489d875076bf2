"""Item 2: time to first token with a cached prefix, against cold and against the suffix alone.

For each prefix length L a prefix of L tokens is published once (a request of exactly L tokens,
L a multiple of P, publishes L/P pages at prefill end). Then, interleaved, repetition after
repetition:
    warm    the prefix + a 64-token suffix, use_cache: reuses L tokens, computes 64
    cold    the same request with lookup bypass: computes L + 64
    suffix  the 64-token suffix alone, bypass: the physical limit of reuse (no prefix at all)
Each is one `Runtime.infer` with max_generate_length 1 (prefill + first token), timed wall to
wall. warm/suffix is taken over adjacent pairs (`pairs` per repetition, so machine noise hits
both sides alike), cold/warm as each cold run over its repetition's median warm; the figures
reported are medians.
"""
from __future__ import annotations

import random

from .backend_util import Probe, request, text, timed_infer
from .common import log, median, spread


def run(rt, *, lengths=(256, 1024, 4096), suffix: int = 64, reps: int = 3, pairs: int = 3,
        seed: int = 0) -> dict:
    rng = random.Random(seed)
    probe = Probe(rt)
    suffix_text = text(rng, suffix)
    cases = {}
    for L in lengths:
        prefix = text(rng, L)
        rt.infer(request([prefix]), ".")                                 # publish L / P pages
        cases[L] = {"warm": request([prefix + suffix_text]),
                    "cold": request([prefix + suffix_text], bypass=True),
                    "suffix": request([suffix_text], bypass=True)}
    for L in lengths:                                                   # untimed first runs
        for kind in ("warm", "suffix"):
            rt.infer(cases[L][kind], ".")
    times = {L: {"warm": [], "cold": [], "suffix": []} for L in lengths}
    shares = {L: [] for L in lengths}
    warm_over_suffix = {L: [] for L in lengths}
    cold_over_warm = {L: [] for L in lengths}

    def measure(L, kind):
        secs, out = timed_infer(rt, cases[L][kind], probe)
        facts = out["responses"][0]["context_cache"]
        expect = L if kind == "warm" else 0
        if facts["reused_tokens"] != expect:
            raise RuntimeError(f"L={L} {kind}: reused {facts['reused_tokens']} tokens, expected {expect}")
        times[L][kind].append(secs)
        if kind == "warm":
            lookup, gather = probe.lookup(), probe.gather
            compute = probe.forward - gather
            shares[L].append({"lookup": lookup, "gather": gather, "compute": compute,
                              "other": secs - lookup - gather - compute})
        return secs

    for rep in range(reps):
        for L in lengths:
            warms = []
            for _ in range(pairs):                   # adjacent pairs: noise hits both alike
                warms.append(measure(L, "warm"))
                warm_over_suffix[L].append(warms[-1] / measure(L, "suffix"))
            cold_over_warm[L].append(measure(L, "cold") / median(warms))
            log(f"reuse rep {rep + 1}/{reps} L={L}: warm {median(warms) * 1e3:.0f} ms, "
                f"cold {times[L]['cold'][-1] * 1e3:.0f} ms, suffix {median(times[L]['suffix'][-pairs:]) * 1e3:.0f} ms")
    rows = []
    for L in lengths:
        t = times[L]
        parts = {k: median([s[k] for s in shares[L]]) for k in ("lookup", "gather", "compute", "other")}
        warm_med = median(t["warm"])
        rows.append({
            "prefix_tokens": L, "suffix_tokens": suffix,
            "ttft_ms": {k: median(v) * 1e3 for k, v in t.items()},
            "ttft_ms_range": {k: [x * 1e3 for x in spread(v)] for k, v in t.items()},
            "cold_over_warm": median(cold_over_warm[L]), "warm_over_suffix": median(warm_over_suffix[L]),
            "cold_over_warm_reps": cold_over_warm[L], "warm_over_suffix_reps": warm_over_suffix[L],
            "warm_breakdown_ms": {k: v * 1e3 for k, v in parts.items()},
            "warm_breakdown_share": {k: v / warm_med for k, v in parts.items()},
        })
    return {"reps": reps, "pairs_per_rep": pairs, "rows": rows}
