#!/usr/bin/env python3
"""Draw docs/simulate/mooncake-figure9.png: Mooncake's FAST'25 Figure 9 (hit rate against cache
capacity in tokens, one line per workload, the 3M-token local cache marked) as `kvconform
simulate --trace` reproduces it, beside the paper's published figures (docs/simulate.md).

    python tools/mooncake_figure.py [--profile vllm-apc:block_size=512] \\
        docs/simulate/mooncake-conversation.json docs/simulate/mooncake-synthetic.json

Each JSON is what `kvconform simulate --trace ... --json` wrote (the commands are in
docs/simulate.md); the paper's numbers are its Table 2 cache ratios and the "x% max" labels of
its Figure 9 at 3M tokens.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

PAPER = {  # workload: (Table 2 cache ratio, Figure 9's share of the maximum reached at 3M tokens)
    "conversation": (0.40, 0.41), "toolagent": (0.59, 0.75), "synthetic": (0.66, 0.46)}
LOCAL_CACHE = 3_000_000
OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "simulate",
                   "mooncake-figure9.png")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="JSON documents of kvconform simulate --trace, one per workload")
    ap.add_argument("--profile", default="vllm-apc:block_size=512", help="the run label to draw")
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args(argv)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.8), layout="constrained")
    for k, path in enumerate(a.results):
        with open(path) as f:
            doc = json.load(f)
        workload = os.path.basename(doc["trace"]["file"]).split("_")[0]
        runs = [r for r in doc["runs"] if r["label"] == a.profile]
        if not runs:
            raise SystemExit(f"{path}: no run labelled {a.profile}")
        top = next(r["hit_ratio_tokens"] for r in runs if r["capacity"] is None)
        pts = sorted((r["capacity_tokens"], r["hit_ratio_tokens"]) for r in runs if r["capacity"] is not None)
        line = ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", ms=4, label=f"{workload} (kvconform)")[0]
        at = dict(pts).get(LOCAL_CACHE)
        if at is not None:
            ax.annotate(f"{at / top:.0%} max", (LOCAL_CACHE, at), textcoords="offset points", xytext=(6, -12),
                        color=line.get_color(), fontsize=9)
        ax.axhline(top, color=line.get_color(), lw=0.6, ls=":")
        ratio, share = PAPER.get(workload, (None, None))
        if ratio is not None:
            ax.plot([pts[-1][0] * 1.6], [ratio], "_", ms=16, mew=2, color=line.get_color(),
                    label=f"{workload}: paper's Table 2 ratio {ratio:.0%}")
            ax.plot([LOCAL_CACHE], [ratio * share], "x", ms=8, color=line.get_color(),
                    label=f"{workload}: paper at 3M, {share:.0%} of {ratio:.0%}")
    ax.axvline(LOCAL_CACHE, color="#555", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("cache capacity (tokens)")
    ax.set_ylabel("hit ratio (prefill tokens saved / prompt tokens)")
    ax.set_title(f"Mooncake FAST'25 Figure 9, replayed: {a.profile}, outputs ignored", fontsize=10)
    ax.set_ylim(0, 0.75)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left")
    fig.savefig(a.out, dpi=110)
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
