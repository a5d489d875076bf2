"""What `kvconform simulate --trace` writes: the summary table (for people), the JSON document
(for machines), the plot of the hit ratio against capacity (PNG, one line per profile) and an
HTML page that embeds it with the table, as self-contained as report.html (no network: inline
CSS, the PNG as a data URL, a Content-Security-Policy that forbids every fetch).
"""
from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import tempfile

from tabulate import tabulate

from .. import KvconformError
from ..report.folder import readable_by_umask
from ..report.html import ASSETS, CSP

FORMAT = "kvconform-trace-replay-v1"
ASSUMPTIONS = {
    "order": "SIM-ORDER-1: one request at a time, in timestamp order (ties and untimed traces in file order), "
             "each to its end before the next",
    "hash_ids": "SIM-KEY-1, SIM-KEY-2: each hash id is its own run of block_size tokens; pages keyed by their prefix",
    "sampled": "SIM-GEN-1: a request samples output_length new tokens (1 with --ignore-outputs) that no prompt repeats",
    "capacity": "SIM-CAP-1, SIM-CAP-2: capacity is the profile's KV pool; a request the whole pool cannot hold is "
                "not run (not_admitted)",
    "counts": "SIM-SUM-1, SIM-SUM-2: each request's count is the profile's own (whole pages or blocks, never the "
              "last prompt token)",
}


def document(trace, requests: list, results: list, *, unit: str, ignore_outputs: bool, per_request: bool) -> dict:
    """The JSON document: the trace, the assumptions, one entry per run, and with `per_request`
    every request with its count in each run (null: not admitted)."""
    doc = {"format": FORMAT, "trace": {
        "file": os.path.abspath(trace.file), "format": trace.format,
        "block_size": trace.block_size if trace.format == "hash-ids" else None,
        "requests": len(requests), "prompt_tokens": sum(r.n for r in requests),
        "sampled_tokens": sum(r.output for r in requests), "outputs": "ignored" if ignore_outputs else "trace"},
        "capacity_unit": unit, "assumptions": ASSUMPTIONS,
        "runs": [{k: v for k, v in r.items() if k != "counts"} for r in results]}
    if per_request:
        doc["requests"] = [{"source": q.source, "timestamp": q.timestamp, "input_length": q.n, "output_length": q.output,
                            "reused": [r["counts"][i] for r in results]} for i, q in enumerate(requests)]
    return doc


def capacity_text(capacity, unit: str = "tokens") -> str:
    return "inf" if capacity is None else f"{capacity:,}" + ("" if unit == "tokens" else f" {unit}")


HEADERS = ("profile", "capacity ({unit})", "pool", "hit ratio (tokens)", "hit ratio (requests)",
           "prefill tokens saved", "not admitted", "evictions", "seconds", "M tokens/s")


def rows(results: list, unit: str = "tokens") -> list[list[str]]:
    """One row per profile and capacity (SIM-SUM-1), as text: the table and the page show these."""
    out = []
    for r in results:
        evictions = "-" if r["evictions"] is None else f"{r['evictions']:,} {r['eviction_unit']}"
        pool = "unbounded" if r["pool"]["units"] is None else f"{r['pool']['units']:,} {r['pool']['unit']}"
        rate = r["prompt_tokens"] / r["seconds"] / 1e6 if r["seconds"] else float("nan")
        out.append([r["label"], capacity_text(r["capacity"], unit), pool, f"{r['hit_ratio_tokens']:.4f}",
                    f"{r['hit_ratio_requests']:.4f}", f"{r['reused_tokens']:,}", f"{r['not_admitted']:,}", evictions,
                    f"{r['seconds']:.2f}", f"{rate:.1f}"])
    return out


def table(results: list, unit: str = "tokens") -> str:
    return tabulate(rows(results, unit), headers=[h.format(unit=unit) for h in HEADERS], disable_numparse=True,
                    colalign=("left",) + ("right",) * (len(HEADERS) - 1))


def plot_png(results: list, unit: str, title: str) -> bytes:
    """The hit ratio by tokens against capacity in tokens (log scale), one line per profile; an
    unbounded capacity is drawn at the right edge, past a break, marked `inf`."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise KvconformError("--plot and --html need matplotlib (pip install 'kvconform[bench]')") from None
    finite = [r["capacity_tokens"] for r in results if r["capacity"] is not None and r["capacity_tokens"] > 0]
    top = max(finite) if finite else 1
    inf_x = top * 10 if finite else 1
    fig, ax = plt.subplots(figsize=(8, 4.8), layout="constrained")
    for k, label in enumerate(dict.fromkeys(r["label"] for r in results)):
        mine = [r for r in results if r["label"] == label]
        # markers and dashes differ per profile, every other one hollow: profiles that agree stay visible
        style = {"marker": "os^Dv<>p"[k % 8], "linestyle": ("-", "--", "-.", ":")[k % 4], "markersize": 7 - k % 3,
                 "markerfacecolor": "none" if k % 2 else None}
        pts = sorted((r["capacity_tokens"], r["hit_ratio_tokens"]) for r in mine
                     if r["capacity"] is not None and r["capacity_tokens"] > 0)
        line = ax.plot([x for x, _ in pts], [y for _, y in pts], label=label, **style)[0] if pts else None
        for r in mine:
            if r["capacity"] is None:
                kw = {"color": line.get_color()} if line is not None else {"label": label}
                ax.plot([inf_x], [r["hit_ratio_tokens"]], **{**style, "linestyle": "none"}, **kw)
    if finite:
        ax.set_xscale("log")
        ticks = [t for t in ax.get_xticks() if min(finite) / 10 <= t <= top * 1.01]
        ax.set_xticks(ticks + [inf_x], [f"$10^{{{round(math.log10(t))}}}$" for t in ticks] + ["inf"])
        ax.set_xlim(min(finite) / 2, inf_x * 2)
        if any(r["capacity"] is None for r in results):
            ax.axvline(top * 3.2, color="#999", lw=0.8, ls=":")
    else:
        ax.set_xticks([inf_x], ["inf"])
    ax.set_ylim(0, max(0.05, max(r["hit_ratio_tokens"] for r in results) * 1.12))
    ax.set_xlabel("cache capacity (tokens)")
    ax.set_ylabel("hit ratio (prefill tokens saved / prompt tokens)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def html_page(doc: dict, png: bytes, results: list) -> str:
    """The page: what was replayed, the assumptions, the plot and the table."""
    t = doc["trace"]
    e = html.escape
    facts = (f"{e(t['file'])}: {t['requests']:,} requests, {t['prompt_tokens']:,} prompt tokens, format "
             f"<code>{e(t['format'])}</code>" + (f", block size {t['block_size']}" if t["block_size"] else "")
             + f", outputs {e(t['outputs'])}")
    assumptions = "".join(f"<li>{e(v)}</li>" for v in doc["assumptions"].values())
    image = base64.b64encode(png).decode("ascii")
    unit = doc["capacity_unit"]
    head = "".join(f"<th>{e(h.format(unit=unit))}</th>" for h in HEADERS)
    body = "".join("<tr>" + "".join(f'<td{"" if i == 0 else " class=n"}>{e(c)}</td>' for i, c in enumerate(row))
                   + "</tr>" for row in rows(results, unit))
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>kvconform simulate --trace: {e(os.path.basename(t['file']))}</title>"
            f"<style>{(ASSETS / 'report.css').read_text()}</style></head>\n<body>\n"
            f'<div class="headline"><h1>Trace replay</h1><p class="facts">{facts}</p>'
            f'<ul class="notes">{assumptions}</ul></div>\n'
            f'<h2>Hit ratio against capacity</h2>\n<p><img alt="hit ratio against capacity, one line per profile" '
            f'src="data:image/png;base64,{image}" style="max-width:100%"></p>\n'
            f"<h2>Summary per profile and capacity</h2>\n<table class=plain><thead><tr>{head}</tr></thead><tbody>{body}"
            "</tbody></table>\n</body></html>\n")


def write_file(path: str, data) -> None:
    """Write atomically: a temporary file in the same folder, then rename over `path`."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".kvconform-", dir=folder)
        readable_by_umask(fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise KvconformError(f"cannot write: {e.strerror}", path) from None


def json_text(doc: dict) -> str:
    return json.dumps(doc, indent=1) + "\n"
