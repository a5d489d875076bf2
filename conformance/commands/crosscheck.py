"""`kvconform crosscheck`: drive a runtime's own cache classes and the oracle side by side.

    kvconform crosscheck --runtime vllm==0.32.0 [--requests 100000] [--report DIR] [--speed]
    kvconform crosscheck --runtime sglang==0.5.23 --speed-only
    kvconform crosscheck --update-doc          # docs/crosscheck.md's tables from examples/crosscheck/

Installs the runtime into .kvconform-cache/crosscheck/<runtime>-<version>/ first
(tools/crosscheck/install.sh; minutes, once), unless `--python` names an interpreter that has it.
Generates seeded streams until `--requests` requests were compared, compares every count,
admission, reset answer and free-queue order, shrinks each disagreement class to a minimal
stream, and writes result.json, entries.json (the minimal streams as parity-style entries) and
table.md under `--report`. `--speed` also times the runtime's manager and the oracle on one
10,000-request stream. Exit 0 when every disagreement is of a known class (docs/crosscheck.md),
1 when one is not, 2 on bad input, 3 when the runtime did not install or its driver failed.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .. import KvconformError
from ..crosscheck.install import RUNTIMES, InstallError, install, parse_runtime


def add_arguments(parser) -> None:
    parser.add_argument("--runtime", metavar="NAME==VERSION",
                        help=" or ".join(f"{n}=={v}" for n, vs in RUNTIMES.items() for v in vs))
    parser.add_argument("--update-doc", action="store_true",
                        help="rewrite docs/crosscheck.md's tables from the committed runs (examples/crosscheck/)")
    parser.add_argument("--requests", type=_positive, default=100_000, metavar="N",
                        help="generate streams until N requests were compared (default 100000)")
    parser.add_argument("--seed", type=_count, default=0, metavar="S", help="first stream seed (default 0)")
    parser.add_argument("--max-requests", type=_positive, default=20, metavar="N",
                        help="requests per stream at most (default 20)")
    parser.add_argument("--shrink-budget", type=_positive, default=400, metavar="N",
                        help="runs of both sides a shrink may take per class (default 400)")
    parser.add_argument("--focus", choices=("no_prompt_split", "whole_demand", "decode_tokens", "split_tie",
                                            "empty_salt", "empty_extra_key"),
                        help="run only the streams whose oracle observations change with this cause switched "
                        "(conformance/crosscheck/hypotheses.py): a search for a rare class")
    parser.add_argument("--max-streams", type=_positive, metavar="N", help="generate at most N streams")
    parser.add_argument("--report", metavar="DIR", help="where result.json, entries.json and table.md go "
                        "(default kvconform-crosscheck/<runtime>-<version>)")
    parser.add_argument("--python", metavar="PY", help="an interpreter that has the runtime (skips the install)")
    parser.add_argument("--eagle", action="store_true",
                        help="SGLang: every stream keyed by bigrams (the eagle setting, PEER-SGL-9), with an unbounded "
                        "pool (EAGLE's draft-token allocation is not driven)")
    parser.add_argument("--sglang-cache", choices=("radix", "unified"), default="radix",
                        help="SGLang's class to drive: RadixCache (default) or UnifiedRadixCache, the class a "
                        "0.5.23 server builds (tools/crosscheck/drive_sglang.py)")
    parser.add_argument("--speed", action="store_true", help="also time the runtime's manager and the oracle")
    parser.add_argument("--speed-only", action="store_true", help="only the timing, no streams")
    parser.add_argument("--speed-requests", type=_positive, default=10_000, metavar="N",
                        help="requests of the timed stream (default 10000)")
    parser.add_argument("--reps", type=_positive, default=3, metavar="N", help="timed repetitions per side (default 3)")


def _int(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise KvconformError(f"expected an integer, got {text!r}") from None
    if value < low:
        raise KvconformError(f"expected an integer >= {low}, got {value}")
    return value


def _count(text: str) -> int:
    return _int(text, 0)


def _positive(text: str) -> int:
    return _int(text, 1)


def main(args) -> int:
    from ..crosscheck import report, speed, streams
    if args.update_doc:
        changed = report.update_doc()
        print(f"{'updated' if changed else 'unchanged'}: {report.DOC}")
        return 0
    if not args.runtime:
        raise KvconformError("--runtime NAME==VERSION is required (or --update-doc)")
    name, version = parse_runtime(args.runtime)
    from ..crosscheck.driver import Driver, DriverError
    from ..crosscheck.run import crosscheck
    try:
        python = args.python or install(name, version)
        folder = Path(args.report or f"kvconform-crosscheck/{name}-{version}")
        folder.mkdir(parents=True, exist_ok=True)
        log = open(folder / "driver-stderr.log", "w")
        env = {"KVCONFORM_SGLANG_CACHE": args.sglang_cache} if name == "sglang" else {}
        with Driver(name, python, env=env, stderr=log) as driver:
            if driver.version != version:
                raise InstallError(f"{python} has {name} {driver.version}, not {version}")
            result = None
            if not args.speed_only:
                eagle = None
                if args.eagle:
                    if name != "sglang":
                        raise KvconformError("--eagle is an SGLang setting (PEER-SGL-9)")
                    eagle = (_eagle(s) for s in streams.streams(name, _seeds(args.seed), args.max_requests))
                result = crosscheck(driver, name, _seeds(args.seed), args.max_requests, args.shrink_budget,
                                    progress=_Progress(args.requests), until_requests=args.requests,
                                    focus=args.focus, max_streams=args.max_streams, seed_streams=eagle)
                if args.eagle:
                    result.driven = f"{result.driven or 'RadixCache'}, EAGLE bigram keys"
                if args.focus:
                    print(f"focus {args.focus}: {result.passed_over:,} generated streams passed over, "
                          f"{result.streams:,} run")
                for path in report.write(result, folder):
                    print(f"wrote {path}")
                print(report.table_header())
                print(report.table_row(result))
                for f in sorted(result.findings.values(), key=lambda f: -f.streams):
                    size = sum(1 for s in f.minimal["steps"] if "prompt" in s) if f.minimal else "?"
                    print(f"- {f.label}: {f.streams} streams; minimal stream {size} requests "
                          f"({f.difference.line() if f.difference else 'not shrunk'})")
            if args.speed or args.speed_only:
                m = speed.measure(driver, name, reps=args.reps, requests=args.speed_requests,
                                  progress=lambda rep, r, o: print(f"  rep {rep + 1}: runtime {r:.2f} s, oracle {o:.2f} s",
                                                                    file=sys.stderr))
                (folder / "speed.json").write_text(json.dumps(m, indent=1) + "\n")
                print(speed.line(m))
    except (InstallError, DriverError) as e:
        print(f"kvconform crosscheck: {e}", file=sys.stderr)
        return 3
    if result is not None and any(label.startswith("unclassified") for label in result.findings):
        print("CROSSCHECK: a disagreement of no known class (docs/crosscheck.md)")
        return 1
    return 0


def _eagle(stream: dict) -> dict:
    """The stream with the tree keyed by bigrams and an unbounded pool, on a full-attention model
    (the profile does not define EAGLE beside a sliding window or Mamba)."""
    hybrid = ("pool_tokens", "sliding_window", "swa_eviction_interval", "mamba")
    settings = {k: v for k, v in (stream.get("settings") or {}).items() if k not in hybrid}
    return dict(stream, id=f"{stream['id']}-eagle", settings={**settings, "eagle": True})


def _seeds(start: int):
    seed = start
    while True:
        yield seed
        seed += 1


class _Progress:
    """A line on stderr every 15 s."""

    def __init__(self, target: int):
        self.target, self.last, self.start = target, time.monotonic(), time.monotonic()

    def __call__(self, result) -> None:
        now = time.monotonic()
        if now - self.last >= 15:
            self.last = now
            print(f"  {result.requests:,}/{self.target:,} requests, {result.streams:,} streams, {result.agree:,} agree, "
                  f"{len(result.findings)} classes, {now - self.start:.0f} s", file=sys.stderr)
