"""`kvconform simulate --trace FILE`: replay recorded traffic through any profile's cache at
every capacity of a sweep (docs/simulate.md, spec/trace-replay.md).

    kvconform simulate --trace conversation_trace.jsonl --profile vllm-apc:block_size=16 \\
        --capacity 1e5:1e9:9,inf [--capacity-unit tokens|pages] [--json OUT.json] [--per-request]
        [--plot OUT.png] [--html OUT.html] [--ignore-outputs] [--limit N]
        [--trace-format hash-ids|chat|requests] [--block-size 512] [--tokenizer DIR]

Prints the summary table (per profile and capacity: hit ratio by tokens and by requests,
prefill tokens saved, requests not admitted, evictions) and progress lines on stderr. Exit codes:
0 done, 2 bad input or usage (one line naming the file and the line, or the option).
"""
from __future__ import annotations

import os
import sys

from .. import KvconformError
from ..judge import traffic as oracle
from . import formats, options, outputs


def add_arguments(parser) -> None:
    g = parser.add_argument_group("trace replay (--trace; docs/simulate.md)")
    g.add_argument("--trace", metavar="FILE", help="replay this trace: Mooncake hash-id JSONL, a request file, "
                   "or an OpenAI-style chat log (JSONL of messages)")
    g.add_argument("--trace-format", choices=formats.FORMATS, help="the trace's format (default: told from the file)")
    g.add_argument("--block-size", type=_block_size, default=512, metavar="B",
                   help="tokens per hash id of a hash-id trace (default 512, Mooncake's)")
    g.add_argument("--tokenizer", metavar="DIR", help="chat logs and request files: an hf tokenizer folder "
                   "(tokenizer.json + tokenizer_config.json; default: the bytes-v1 tokenizer)")
    g.add_argument("--tokenizer-loader", choices=("transformers-auto", "tokenizers-raw"),
                   help="how --tokenizer is read (default transformers-auto, as vLLM and SGLang read it)")
    g.add_argument("--profile", action="append", type=options.profile_spec, metavar="NAME[:KEY=VALUE,...]",
                   help="a semantics or peer profile with its settings, e.g. vllm-apc:block_size=16 or "
                        "kvconform-1:tokens_per_page=128,max_records=4096; repeat for several (default kvconform-1)")
    g.add_argument("--capacity", type=options.capacities, metavar="LIST",
                   help="capacities to sweep: counts (4096, 1e6, 3M), inf, ranges LOW:HIGH:N (log-spaced), "
                        "comma-separated (default inf)")
    g.add_argument("--capacity-unit", choices=("tokens", "pages"), default="tokens",
                   help="tokens (default) or the profile's own pages/blocks")
    g.add_argument("--ignore-outputs", action="store_true",
                   help="every request samples one token: only prompts take room in the cache")
    g.add_argument("--limit", type=_positive, metavar="N", help="replay only the first N requests (replay order)")
    g.add_argument("--json", metavar="FILE", help="write the summaries (and with --per-request each request's "
                   "count) as JSON; - for stdout")
    g.add_argument("--per-request", action="store_true", help="with --json: every request's count in every run")
    g.add_argument("--plot", metavar="PNG", help="write the hit ratio against capacity (needs matplotlib)")
    g.add_argument("--html", metavar="FILE", help="write a page with the plot and the table (needs matplotlib)")


def _positive(text: str) -> int:
    import argparse
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _block_size(text: str) -> int:
    import argparse
    value = _positive(text)
    if value > formats.MAX_BLOCK_SIZE:
        raise argparse.ArgumentTypeError(f"must be <= {formats.MAX_BLOCK_SIZE}, got {value}")
    return value


def _check_outputs(args) -> None:
    """Before anything is read: an output is never a folder, the trace, or another output."""
    outs = [(flag, getattr(args, flag)) for flag in ("json", "plot", "html") if getattr(args, flag) not in (None, "-")]
    for flag, path in outs:
        if os.path.isdir(path):
            raise KvconformError("is a directory, expected a file to write", path)
        if _same(path, args.trace):
            raise KvconformError(f"--{flag} names the trace itself: refusing to overwrite an input", path)
    for i, (flag, path) in enumerate(outs):
        for other, path2 in outs[i + 1:]:
            if _same(path, path2):
                raise KvconformError(f"--{flag} and --{other} name the same file", path)
    if args.per_request and not args.json:
        raise KvconformError("--per-request writes into the --json document: give --json FILE (or -)")


def _same(a: str, b: str) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b) or os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def traffic_of(trace, args) -> list:
    """The oracle's requests of a read trace, in replay order (spec/trace-replay.md SIM-ORDER-1)."""
    if trace.format == formats.HASH_IDS:
        if args.tokenizer or args.tokenizer_loader:
            raise KvconformError("--tokenizer reads chat logs and request files; a hash-id trace has no text",
                                 args.trace)
        return oracle.hash_id_traffic(trace.entries, trace.block_size, args.ignore_outputs, args.limit)
    if trace.format == formats.CHAT:
        return oracle.chat_traffic(trace.file, trace.entries, args.tokenizer, args.tokenizer_loader,
                                   args.ignore_outputs, args.limit)
    return oracle.request_file_traffic(trace.file, trace.document, args.tokenizer, args.tokenizer_loader,
                                       args.ignore_outputs, args.limit)


def main(args) -> int:
    _check_outputs(args)
    specs = args.profile or [options.profile_spec("kvconform-1")]
    capacities = args.capacity or [None]
    runs = oracle.plan(specs, capacities, args.capacity_unit)             # usage errors before the trace is read
    trace = formats.read_trace(args.trace, args.trace_format, args.block_size)
    requests = traffic_of(trace, args)
    tokens = sum(r.n for r in requests)
    print(f"kvconform: {args.trace}: {len(requests):,} requests, {tokens:,} prompt tokens "
          f"({trace.format}); {len(runs)} run(s)", file=sys.stderr)

    def progress(r: dict) -> None:
        print(f"kvconform: {r['label']} at {outputs.capacity_text(r['capacity'], args.capacity_unit)}: "
              f"hit ratio {r['hit_ratio_tokens']:.4f} by tokens, {r['hit_ratio_requests']:.4f} by requests "
              f"({r['seconds']:.1f} s)", file=sys.stderr)
    results = oracle.replay_all(requests, runs, per_request=args.per_request, progress=progress)
    doc = outputs.document(trace, requests, results, unit=args.capacity_unit, ignore_outputs=args.ignore_outputs,
                           per_request=args.per_request)
    text = outputs.table(results, args.capacity_unit)
    if args.plot or args.html:
        png = outputs.plot_png(results, args.capacity_unit, f"{os.path.basename(args.trace)}: {len(requests):,} "
                               f"requests, {tokens / 1e6:,.1f}M prompt tokens")
        if args.plot:
            outputs.write_file(args.plot, png)
        if args.html:
            outputs.write_file(args.html, outputs.html_page(doc, png, results))
    if args.json == "-":
        sys.stdout.write(outputs.json_text(doc))
    else:
        if args.json:
            outputs.write_file(args.json, outputs.json_text(doc))
        print(text)
    return 0
