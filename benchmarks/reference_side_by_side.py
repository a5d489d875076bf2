"""The float64 numerical reference of two checkouts of the kit, side by side in one run.

The reference scores each greedy request the runner judges (numerical_reference/scoring.py:
`score`, a forward with keys and values rounded to the engine's KV dtype and one with them
exact). A change meant to make it faster is measured against the tree before it, on the same
requests, in the same minutes: runs of the two trees alternate (old, new, old, new, ...), each a
fresh process pinned to one core with one BLAS thread, and the table gives each tree's median
CPU time per request shape and their ratio. Both trees must score every generated token alike
(log-probabilities and KV-rounding shifts within 1e-9 nats, the same top tokens), so a speed-up
that moves a scored value fails the benchmark instead of being recorded.

The requests have the shapes the fixed-engine tests judge at P = 128 (tests/conformance/
test_fixed_engine.py): 1,280-token prompts with one generated token (the birthday case's 256
requests of ten pages) and 3,072-token prompts with eight, on the bundled backend's default
two-layer attention engine.

    git worktree add /tmp/kit-before <commit>
    .venv/bin/python -m benchmarks.reference_side_by_side --old /tmp/kit-before --new . \\
        --reps 5 --json benchmarks/results/reference-side-by-side.json

Each tree runs with the same interpreter (this one) and its own source first on PYTHONPATH.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import code_provenance, loadavg, machine, median, one_core, revision, side_by_side_parser

SHAPES = {"1280+1": (1280, 1, 12), "3072+8": (3072, 8, 4)}     # name: (prompt tokens, generated, requests)
TOLERANCE = 1e-9                                                # nats

# Run in each tree's own process: scores the requests of one shape and prints the CPU time and
# what was scored (the same code for both trees: only `numerical_reference` is theirs).
WORKER = r"""
import json, sys, time
import numpy as np
from numerical_reference.layout import load_weights
from numerical_reference.scoring import Inputs, score
engine, n, m, count, seed = sys.argv[1], *map(int, sys.argv[2:6])
weights = load_weights(engine)
mask = np.zeros(weights.cfg["vocab_size"], dtype=bool)
mask[:128] = True                                  # bytes-v1: bytes below 0x80 and <|eos|>
mask[weights.cfg["eos_token_id"]] = True
rng = np.random.default_rng(seed)
requests = [Inputs([int(t) for t in rng.integers(0, 256, n)], [], None, {}, [int(t) for t in rng.integers(0, 128, m)])
            for _ in range(count)]
started = time.process_time()
scored = [score(weights, r, mask) for r in requests]
cpu = time.process_time() - started
import numerical_reference
print(json.dumps({"source": numerical_reference.__file__, "cpu_s": cpu, "steps": [[[s.token, s.logprob, s.top, s.kv_shift] for s in r.steps] for r in scored]}))
"""


def _build_engine(folder: str) -> None:
    """The default two-layer attention engine at P = 128 (what the P = 128 fixed engines build)."""
    subprocess.run([sys.executable, "-m", "gpu_backend", "build", "--engineDir", folder, "--maxKVPoolPages", "0",
                    "--tokensPerPage", "128", "--maxInputLen", "3072", "--maxKVCacheCapacity", "4096"],
                   check=True, stdout=subprocess.DEVNULL)


def _score(tree: Path, engine: str, shape: tuple) -> dict:
    """One process of `tree`, in a folder of neither tree (`python -c` puts its working folder
    first on sys.path, ahead of PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    n, m, count = shape
    out = subprocess.run(one_core() + [sys.executable, "-c", WORKER, engine, str(n), str(m), str(count), "0"],
                         check=True, env=env, capture_output=True, text=True, cwd=os.path.dirname(engine))
    return json.loads(out.stdout)


def _difference(old: list, new: list) -> str | None:
    """Where the two trees' scored steps differ beyond the tolerance, or None."""
    for r, (a, b) in enumerate(zip(old, new)):
        for s, (x, y) in enumerate(zip(a, b)):
            if x[0] != y[0] or [t for t, _ in x[2]] != [t for t, _ in y[2]]:
                return f"request {r} step {s}: tokens {x[0]} {x[2]} vs {y[0]} {y[2]}"
            values = [(x[1], y[1]), (x[3], y[3])] + [(p, q) for (_, p), (_, q) in zip(x[2], y[2])]
            if any(abs(p - q) > TOLERANCE for p, q in values):
                return f"request {r} step {s}: {x} vs {y}"
    return None if [len(a) for a in old] == [len(b) for b in new] else "different numbers of steps"


def run(old: Path, new: Path, *, reps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="kvconform-reference-side-by-side-") as tmp:
        engine = os.path.join(tmp, "engine")
        _build_engine(engine)
        cpu = {shape: {"old": [], "new": []} for shape in SHAPES}
        steps = {}
        for rep in range(reps):
            for shape, dims in SHAPES.items():
                for name, tree in (("old", old), ("new", new)):
                    got = _score(tree, engine, dims)
                    if not Path(got["source"]).resolve().is_relative_to(tree.resolve()):
                        raise SystemExit(f"reference_side_by_side: the {name} run imported {got['source']}")
                    cpu[shape][name].append(got["cpu_s"])
                    steps[shape, name] = got["steps"]
                print(f"rep {rep + 1} {shape}: old {cpu[shape]['old'][-1]:.2f} s, new {cpu[shape]['new'][-1]:.2f} s",
                      file=sys.stderr)
        for shape in SHAPES:
            where = _difference(steps[shape, "old"], steps[shape, "new"])
            if where:
                raise SystemExit(f"reference_side_by_side: {shape} is scored differently by the two trees: not a "
                                 f"speed-up ({where})")
    rows = {}
    for shape, (n, m, count) in SHAPES.items():
        per = {name: median(cpu[shape][name]) / count for name in ("old", "new")}
        rows[shape] = {"prompt_tokens": n, "generated": m, "requests": count, "cpu_seconds": cpu[shape],
                       "old_s_per_request": per["old"], "new_s_per_request": per["new"],
                       "cpu_speedup": per["old"] / per["new"]}
    return {"reps": reps, "pinned": bool(one_core()), "tolerance_nats": TOLERANCE,
            "old": {"tree": str(old), "revision": revision(old)}, "new": {"tree": str(new), "revision": revision(new)},
            "shapes": rows, "machine": machine(), "loadavg": loadavg(), "code": code_provenance()}


def table(r: dict) -> str:
    lines = [f"The float64 reference (`score`: both forwards) of {r['old']['revision']} (old) and "
             f"{r['new']['revision']} (new), {r['reps']} alternating runs each, one core:", "",
             "| prompt + generated tokens | requests | old CPU / request | new CPU / request | new / old speed |",
             "|---|---|---|---|---|"]
    for shape, row in r["shapes"].items():
        lines.append(f"| {row['prompt_tokens']:,} + {row['generated']} | {row['requests']} "
                     f"| {row['old_s_per_request'] * 1e3:.0f} ms | {row['new_s_per_request'] * 1e3:.0f} ms "
                     f"| {row['cpu_speedup']:.2f}x |")
    lines.append(f"\nEvery scored step equal within {r['tolerance_nats']:g} nats.")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = side_by_side_parser(__doc__)
    a = ap.parse_args(argv)
    r = run(a.old, a.new, reps=a.reps)
    print(table(r))
    if a.json:
        a.json.write_text(json.dumps(r, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
