"""Targets, the README table and the plot, all computed from one results JSON.

    python -m benchmarks.report benchmarks/results/cpu.json      # re-render NAME.md and NAME.png
"""
from __future__ import annotations

import json
import os
import sys

def _shape(res, section):
    """The primary shape of a section (the one whose figures meet or miss the targets)."""
    shapes = res["sections"].get(section, {}).get("shapes", {})
    if not shapes:
        return None, None
    primary = res.get("primary_shape")
    name = primary if primary in shapes else next(iter(shapes))
    return name, shapes[name]


def _row(item, measure, target, measured, met, note=""):
    return {"item": item, "measure": measure, "target": target, "measured": measured,
            "status": "n/a" if met is None else ("met" if met else "MISSED"), "note": note}


def targets(res) -> list:
    rows = []
    s = res["sections"]
    if "oracle" in s:
        o = s["oracle"]["rows"]
        ten = next((r for r in o if r["requests"] == 10000), o[-1])
        rows.append(_row("1", f"`kvconform simulate`, {ten['requests']:,} requests "
                              f"({ten['trace']['prompt_tokens'] / 1e6:.1f}M tokens), one core, process start to exit",
                         ">= 2M prompt tokens/s", f"{ten['cli_tokens_per_s'] / 1e6:.1f}M tokens/s",
                         ten["cli_tokens_per_s"] >= 2e6,
                         f"oracle alone (parse + simulate): {ten['oracle_tokens_per_s'] / 1e6:.0f}M tokens/s"))
        big, small = o[-1], o[0]
        if len(o) > 1:
            mid = ten if ten is not big else o[-2]
            ratio = big["us_per_1k_tokens_oracle"] / mid["us_per_1k_tokens_oracle"]
            fit = linear_fit([r["trace"]["prompt_tokens"] for r in o], [r["cli_seconds"] for r in o])
            sizes = ", ".join(f"{r['requests']:,}" for r in o)
            rows.append(_row("1", f"cost linear in tokens ({sizes} requests)",
                             "per-token cost flat (<= 1.25x)",
                             f"oracle {ratio:.2f}x per token from {mid['requests']:,} to {big['requests']:,}; "
                             f"CLI = {fit['intercept_s']:.2f} s + {fit['slope_s_per_mtoken'] * 1e3:.0f} ms/M tokens "
                             f"(R² {fit['r2']:.4f})", ratio <= 1.25 and fit["r2"] >= 0.99))
    if "reuse" in s:
        name, sh = _shape(res, "reuse")
        last = max(sh["rows"], key=lambda r: r["prefix_tokens"])
        L = last["prefix_tokens"]
        rows.append(_row("2", f"TTFT warm / suffix alone, L = {L} ({name})", "<= 1.5x",
                         f"{last['warm_over_suffix']:.2f}x", last["warm_over_suffix"] <= 1.5))
        rows.append(_row("2", f"TTFT cold / warm, L = {L} ({name})", ">= 10x", f"{last['cold_over_warm']:.1f}x",
                         last["cold_over_warm"] >= 10))
    if "paged" in s:
        for name, sh in s["paged"]["shapes"].items():
            for r in sh["rows"]:
                rows.append(_row("3", f"decode time paged / contiguous, batch {r['batch']}, context "
                                      f"{r['context_tokens']} ({name})", "<= 1.3x",
                                 f"{r['paged_over_contiguous_time']:.3f}x", r["paged_over_contiguous_time"] <= 1.3,
                                 f"{r['tokens_per_s']['paged']:.1f} vs {r['tokens_per_s']['contiguous']:.1f} tokens/s; "
                                 f"whole runtime {r['runtime_tokens_per_s']:.1f} tokens/s"))
    if "suite" in s and "skipped" not in s["suite"]:
        su = s["suite"]
        rates = ", ".join(f"{k} {v['scenarios_per_min']:.0f}/min" for k, v in su["generated"].items())
        rows.append(_row("4", f"generated scenarios per minute, inprocess ({su['examples_per_family']} per family)",
                         "measure; remove what dominates", rates, None))
        if "default_run" in su:
            d = su["default_run"]
            rows.append(_row("4", f"default `kvconform run` ({d['cases']} cases incl. 3 generated families)",
                             "measure", f"{d['wall_seconds']:.0f} s wall", None,
                             f"curated {d['curated_cases']} cases {d['curated_seconds']:.1f} s; " + ", ".join(
                                 f"{k} {v['seconds']:.0f} s" for k, v in d["generated"].items())))
    if "memory" in s and "peak_allocated_mib" in s["memory"]:
        m = s["memory"]
        rows.append(_row("5", f"peak CUDA memory allocated ({m['shape']}, {m['workload']})",
                         "<= 1.5 x (weights + pool)",
                         f"{m['peak_allocated_mib']:.0f} MiB = {m['peak_over_components']:.2f}x of "
                         f"{m['weights_mib']:.0f} + {m['pool_mib']:.0f} MiB", m["peak_over_components"] <= 1.5))
    elif "memory" in s:
        m = s["memory"]
        pools = [sh["pool"] for sec in ("reuse", "paged") for sh in s.get(sec, {}).get("shapes", {}).values()]
        if pools:
            ok = all(p["usable_bytes_equal_formula"] for p in pools)
            p = pools[0]
            rows.append(_row("5", "KV pool bytes = pages x layers x 2 x kv_heads x P x head_dim x 2", "equal",
                             f"{p['formula_bytes']:,} B for {p['pages']} pages (+ one {p['scratch_page_bytes']:,} B "
                             "zero scratch page)", ok))
        rows.append(_row("5", f"peak RSS of `gpu_backend infer` ({m['shape']}, {m['workload']})",
                         "<= 1.5 x (weights + pool + fixed)",
                         f"{m['peak_rss_mib']:.0f} MiB = {m['peak_over_components']:.2f}x of {m['weights_mib']:.0f} + "
                         f"{m['pool_mib']:.0f} + {m['fixed_overhead_mib']:.0f} MiB", m["peak_over_components"] <= 1.5,
                         "fixed = peak RSS of a process that imports gpu_backend and runs one torch op"))
    if res.get("device") == "cuda":
        rows.append(_row("6", "GPU run of items 2-4 (benchmarks/gpu.sh)", "< 8 min",
                         f"{res.get('total_seconds', 0) / 60:.1f} min", res.get("total_seconds", 1e9) < 480))
    else:
        rows.append(_row("6", "the same on an NVIDIA GPU (benchmarks/gpu.sh)", "< 8 min", "not measured yet", None,
                         "no GPU on this machine"))
    if "replay" in s:
        from .replay import target_rows
        rows += [_row(*r) for r in target_rows(s["replay"])]
    for sec, why in res.get("skipped", {}).items():
        rows.append(_row("-", f"section {sec}", "run", "skipped", False, why))
    return rows


def linear_fit(xs, ys) -> dict:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    a = my - b * mx
    ss = sum((y - my) ** 2 for y in ys)
    r2 = 1 - sum((y - a - b * x) ** 2 for x, y in zip(xs, ys)) / ss if ss else 1.0
    return {"intercept_s": a, "slope_s_per_mtoken": b * 1e6, "r2": r2}


def markdown(res, png: str | None = None) -> str:
    m = res["machine"]
    load = res.get("load", {})
    lo = [v for sec in load.values() for v in (sec.get("before"), sec.get("after")) if v]
    loads = f"{min(x[0] for x in lo):.1f}-{max(x[0] for x in lo):.1f}" if lo else "?"
    gpu = f"GPU {m['cuda']}, " if m.get("cuda") else ""
    out = [f"Machine: {gpu}{m.get('cpu', '?')}, {m.get('cpus')} CPUs ({m.get('affinity')} usable), "
           f"{m.get('memory_gib')} GiB, {m.get('platform')}, Python {m.get('python')}, torch {m.get('torch')}; "
           f"torch threads {res['threads']}; 1-minute load average {loads} during the run (a shared machine: "
           "other jobs were running). Run `" + ("benchmarks/gpu.sh" if res.get("device") == "cuda" else
                                               "python -m benchmarks --quick" if res["quick"] else "python -m benchmarks")
           + f"`, {res['total_seconds'] / 60:.1f} min, {res['started']}.", ""]
    if res["quick"]:
        out += ["**Quick run: tiny shapes and small traces, a smoke test; not the published figures.**", ""]
    out += ["| item | measure | target | measured | status |", "|---|---|---|---|---|"]
    for r in res["targets"]:
        note = f" ({r['note']})" if r["note"] else ""
        out.append(f"| {r['item']} | {r['measure']} | {r['target']} | {r['measured']}{note} | {r['status']} |")
    s = res["sections"]
    if "oracle" in s:
        out += ["", "Oracle (`kvconform simulate`, median seconds per phase, one core):", "",
                "| requests | tokens | process | read | schema | parse | simulate | write | CLI tokens/s | oracle tokens/s | peak RSS |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in s["oracle"]["rows"]:
            p = r["phase_seconds"]
            out.append(f"| {r['requests']:,} | {r['trace']['prompt_tokens'] / 1e6:.1f}M | {r['cli_seconds']:.2f} | "
                       f"{p['read']:.2f} | {p['schema']:.2f} | {p['parse']:.2f} | {p['simulate']:.2f} | {p['write']:.2f} | "
                       f"{r['cli_tokens_per_s'] / 1e6:.1f}M | {r['oracle_tokens_per_s'] / 1e6:.1f}M | {r['peak_rss_mib']:.0f} MiB |")
    if "reuse" in s:
        for name, sh in s["reuse"]["shapes"].items():
            a = sh["build_args"]
            out += ["", f"Time to first token, `{name}` (hidden {a['hiddenSize']}, intermediate {a['intermediateSize']}, "
                        f"{a['numHeads']} heads, {a['numKVHeads']} KV heads, head dim {a['headDim']}, {a['numLayers']} layers, "
                        f"P {a['tokensPerPage']}), 64-token suffix, median ms:", "",
                    "| L | warm | cold | suffix alone | cold/warm | warm/suffix | warm: lookup | gather | compute | other |",
                    "|---|---|---|---|---|---|---|---|---|---|"]
            for r in sh["rows"]:
                t, b = r["ttft_ms"], r["warm_breakdown_share"]
                out.append(f"| {r['prefix_tokens']} | {t['warm']:.1f} | {t['cold']:.1f} | {t['suffix']:.1f} | "
                           f"{r['cold_over_warm']:.1f}x | {r['warm_over_suffix']:.2f}x | {b['lookup']:.2%} | "
                           f"{b['gather']:.1%} | {b['compute']:.1%} | {b['other']:.1%} |")
    if "replay" in s:
        from .replay import markdown as replay_markdown
        out += replay_markdown(s["replay"])
    if "suite" in s and "profile" in s["suite"]:
        pr = s["suite"]["profile"]
        out += ["", f"Where a generated family's time goes (generated/{pr['family']}, {pr['examples']} scenarios, "
                    "cProfile self time by package; C calls counted with their caller): "
                + ", ".join(f"{k} {v:.0%}" for k, v in pr["self_time_share"].items() if v >= 0.005) + "."]
    if png:
        out += ["", f"![benchmarks]({png})"]
    return "\n".join(out) + "\n"


def plot(res, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    s = res["sections"]
    fig, axes = plt.subplots(2, 3, figsize=(17, 9.5), layout="constrained")
    short = lambda name: name.replace("-layer", "").replace("llama-", "Llama-")
    ax = axes[0][0]
    if "oracle" in s:
        rows = s["oracle"]["rows"]
        n = [r["requests"] for r in rows]
        ax.plot(n, [r["cli_tokens_per_s"] / 1e6 for r in rows], "o-", label="kvconform simulate (process)")
        ax.plot(n, [r["oracle_tokens_per_s"] / 1e6 for r in rows], "s-", label="oracle: parse + simulate")
        ax.axhline(2, color="red", ls="--", label="target 2M tokens/s")
        ax.set_xscale("log")
        ax.set_ylim(0, max(r["oracle_tokens_per_s"] for r in rows) / 1e6 * 1.15)
        ax.set_xlabel("requests (mean 2,048 tokens)")
        ax.set_ylabel("M prompt tokens / s (one core)")
        ax.legend(fontsize=8)
    ax.set_title("1. oracle throughput")
    name, sh = _shape(res, "reuse")
    ax = axes[0][1]
    if sh:
        L = [r["prefix_tokens"] for r in sh["rows"]]
        for k, mk in (("cold", "o-"), ("warm", "s-"), ("suffix", "^--")):
            ax.plot(L, [r["ttft_ms"][k] for r in sh["rows"]], mk, label=k if k != "suffix" else "64-token suffix alone")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("cached prefix L (tokens)")
        ax.set_ylabel("time to first token (ms)")
        ax.legend(fontsize=8)
        ax.set_title(f"2. reuse speedup ({short(name)} shape)")
        ax = axes[0][2]
        parts = ("lookup", "gather", "compute", "other")
        bottom = [0.0] * len(L)
        for p in parts:
            vals = [r["warm_breakdown_ms"][p] for r in sh["rows"]]
            ax.bar([str(x) for x in L], vals, bottom=bottom, label=p)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.plot([str(x) for x in L], [r["ttft_ms"]["suffix"] for r in sh["rows"]], "k^--", label="suffix alone")
        ax.set_xlabel("cached prefix L (tokens)")
        ax.set_ylabel("warm TTFT (ms)")
        ax.legend(fontsize=8)
        ax.set_title("2. where warm time goes")
    ax = axes[1][0]
    if "paged" in s:
        labels, vals = [], []
        for nm, shp in s["paged"]["shapes"].items():
            for r in shp["rows"]:
                labels.append(f"{short(nm)}\nB={r['batch']}")
                vals.append(r["paged_over_contiguous_time"])
        ax.bar(labels, vals)
        ax.axhline(1.3, color="red", ls="--", label="target 1.3x")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_ylabel("decode time, paged / contiguous")
        ax.legend(fontsize=8)
    ax.set_title("3. paged attention overhead")
    ax = axes[1][1]
    if "memory" in s and "peak_rss_mib" in s["memory"]:
        m = s["memory"]
        ax.bar(["budget parts"], [m["weights_mib"]], label="weights")
        ax.bar(["budget parts"], [m["pool_mib"]], bottom=[m["weights_mib"]], label="KV pool")
        ax.bar(["budget parts"], [m["fixed_overhead_mib"]], bottom=[m["weights_mib"] + m["pool_mib"]],
               label="fixed overhead")
        ax.bar(["peak RSS"], [m["peak_rss_mib"]], color="gray", label="measured peak")
        ax.axhline(m["budget_mib"], color="red", ls="--", label="1.5x budget")
        ax.set_ylabel("MiB")
        ax.legend(fontsize=8)
    ax.set_title("5. memory")
    ax = axes[1][2]
    if "suite" in s and "profile" in s["suite"]:
        sh_ = {k.split(" (")[0]: v for k, v in s["suite"]["profile"]["self_time_share"].items() if v >= 0.005}
        ax.barh(list(sh_.keys())[::-1], [v * 100 for v in list(sh_.values())[::-1]])
        ax.set_xlabel("% of profiled time")
        rates = s["suite"]["generated"]
        ax.set_title("4. suite, where generated/" + s["suite"]["profile"]["family"] + " spends its time\n("
                     + ", ".join(f"{k} {v['scenarios_per_min']:.0f}" for k, v in rates.items()) + " scenarios/min)",
                     fontsize=10)
    else:
        ax.set_title("4. suite")
    fig.suptitle(f"kvconform benchmarks ({res['name']}, {res['machine'].get('cpu', '?')}, "
                 f"{res['threads']} torch thread(s))")
    fig.savefig(path, dpi=90)
    plt.close(fig)


README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "README.md")
DOCS_PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks.md")
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def update_readme(res, name: str, readme: str = README, png_dir: str = "results") -> bool:
    """Replace the block between <!-- results:NAME --> and <!-- /results:NAME --> of the README
    with this run's table (`png_dir`: the plot's folder relative to that README). False if there
    is no such block."""
    start, end = f"<!-- results:{name} -->", f"<!-- /results:{name} -->"
    try:
        with open(readme) as f:
            text = f.read()
    except OSError:
        return False
    if start not in text or end not in text:
        return False
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    block = markdown(res, png=f"{png_dir}/{name}.png")
    with open(readme, "w") as f:
        f.write(head + start + "\n" + block + end + tail)
    return True


def main(argv=None) -> int:
    """python -m benchmarks.report results/NAME.json: re-render NAME.md, NAME.png and the README block."""
    path = (argv or sys.argv[1:])[0]
    with open(path) as f:
        res = json.load(f)
    res["targets"] = targets(res)
    base = path[:-5] if path.endswith(".json") else path
    plot(res, base + ".png")
    with open(base + ".md", "w") as f:
        f.write(markdown(res, png=os.path.basename(base) + ".png"))
    update_readme(res, os.path.basename(base))
    update_readme(res, os.path.basename(base), DOCS_PAGE, "../benchmarks/results")
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
