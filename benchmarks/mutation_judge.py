"""What a mutant of the campaign costs (docs/mutation.md section 3), before and after the cuts, side by side.

    .venv/bin/python -m benchmarks.mutation_judge [--store kvconform-mutation/peers.sqlite] [--repeats 2]

Two comparisons, each on the same mutants and the same cases, alternating repetition by
repetition, wall time per mutant including the judging host's start (results/mutation-judge.json
and .md):

- **peer**: 12 comparison-operator mutants of gpu_backend/peer_cache/sglang.py judged by the
  `sglang-radix` deployment. Before: batches of 6, the server's model loaded by each mutant's
  child. After: batches of 12, the model loaded once per host before the forks.
- **edge**: 8 mutants of gpu_backend/prefix_cache.py (lines 60-100, every third) judged by
  `kvconform-1` over the golden, plan, cap, pol and hyb cases (112). Before: batches of 6, cheapest
  case first. After: batches of 8, the cases that killed most of the module's mutants in the
  store first (`Campaign.likely_killers`: needs a store with earlier edge kills; without one the
  two sides are the same run).

Both sides must reach the same verdict per mutant (killed or survived); the run says so.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def judge(items: list, judge_name: str, settings: dict, batch: int) -> tuple[float, list]:
    from conformance.mutation.host import judge_batch
    started, out = time.monotonic(), []
    for k in range(0, len(items), batch):
        out += judge_batch(str(ROOT), judge_name, settings, items[k:k + batch])
    return time.monotonic() - started, [(r["id"], r["status"]) for r in out]


def peer_sides(store) -> tuple[list, dict]:
    from conformance.mutation.campaign import engines
    from conformance.mutation.operators import mutants_of
    built = engines(store, ROOT)
    mutants = [m for m in mutants_of(ROOT, "gpu_backend/peer_cache/sglang.py")
               if m.operator.startswith("ReplaceComparison")][:12]
    items = [{"mutant": m.to_json(), "selection": {"sglang-radix": ["sglang-radix"]}} for m in mutants]
    base = {"deadline_s": 600, "timeout": 60, "engines": built}
    return items, {"before: batch 6, model loaded by each mutant": ("peer", dict(base, reuse_engines=False), 6, items),
                   "after: batch 12, model loaded once per host": ("peer", base, 12, items)}


def edge_sides(store) -> tuple[list, dict]:
    from conformance.mutation.campaign import Campaign
    from conformance.mutation.operators import mutants_of
    cases = sorted(str(ROOT / p) for d in ("golden", "sections/plan", "sections/cap", "sections/pol", "sections/hyb")
                   for p in glob.glob(str(ROOT / "cases" / d / "*.json")))
    selection = {"kvconform-1": cases}
    mutants = [m for m in mutants_of(ROOT, "gpu_backend/prefix_cache.py") if 60 <= m.line <= 100][::3][:8]
    first = Campaign(store, None, ROOT).likely_killers("gpu_backend/prefix_cache.py", selection)
    plain = [{"mutant": m.to_json(), "selection": selection} for m in mutants]
    ordered = [dict(item, first=first) for item in plain]
    base = {"deadline_s": 600, "timeout": 60}
    return plain, {"before: batch 6, cheapest case first": ("edge", base, 6, plain),
                   "after: batch 8, likeliest killers first": ("edge", base, 8, ordered)}


def main(argv: list[str] | None = None) -> int:
    from conformance.mutation.store import Store
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mutation_judge")
    parser.add_argument("--store", default=str(ROOT / "kvconform-mutation" / "peers.sqlite"),
                        help="a campaign store: its folder keeps the server's engines, its kills order the edge cases")
    parser.add_argument("--edge-store", default=str(ROOT / "kvconform-mutation" / "store.sqlite"))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "mutation-judge"))
    args = parser.parse_args(argv)
    doc = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "comparisons": {}}
    for name, make, store in (("peer", peer_sides, Store(Path(args.store))),
                              ("edge", edge_sides, Store(Path(args.edge_store)))):
        items, sides = make(store)
        runs = {side: [] for side in sides}
        verdicts = {}
        for _ in range(args.repeats):
            for side, (judge_name, settings, batch, side_items) in sides.items():
                load = os.getloadavg()[0]
                wall, got = judge(side_items, judge_name, settings, batch)
                runs[side].append({"wall_s": round(wall, 2), "per_mutant_s": round(wall / len(items), 2), "load": load})
                verdicts.setdefault(side, got)
                print(f"{name} {side}: {wall / len(items):.2f} s per mutant (load {load:.1f})", flush=True)
        same = len({tuple(v) for v in verdicts.values()}) == 1
        doc["comparisons"][name] = {"mutants": len(items), "runs": runs, "same_verdicts": same,
                                    "verdicts": next(iter(verdicts.values()))}
        print(f"{name}: the same verdict per mutant on both sides: {same}", flush=True)
    Path(args.out + ".json").write_text(json.dumps(doc, indent=1))
    lines = ["| judge | side | mutants | s per mutant (each repetition) | same verdicts |", "|---|---|---|---|---|"]
    for name, c in doc["comparisons"].items():
        for side, runs in c["runs"].items():
            lines.append(f"| {name} | {side} | {c['mutants']} | {', '.join(str(r['per_mutant_s']) for r in runs)} "
                         f"(load {', '.join(format(r['load'], '.1f') for r in runs)}) | {c['same_verdicts']} |")
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
