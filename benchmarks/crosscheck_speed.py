"""The oracle's peer profiles against the runtime's own cache manager, on the same stream.

The stream (conformance/crosscheck/streams.py `speed_stream`): 10,000 requests of about 1,000
tokens, each opening with one of 8 shared prefixes of 512 tokens and sampling 16 tokens, block
(page) size 16, a pool of 4,000 blocks (SGLang: 64,000 slots), one request at a time. The runtime
side is vLLM's `KVCacheManager` (get_computed_blocks, allocate_slots per prefill and decode step,
free) or SGLang's `RadixCache` with its allocators (tools/crosscheck/drive_*.py), timed inside
its driver process on the stream it already read; the oracle side is `vllm-apc` or
`sglang-radix` (`predict`, then `hold` + `release` or `commit`) in this process. Repetitions
alternate runtime and oracle; each side's figure is the median, and the ratio is the oracle's
requests/s over the runtime's (>= 1.0: the oracle is at least as fast as the runtime it models).

    .venv/bin/python -m benchmarks.crosscheck_speed --runtime vllm==0.32.0 --reps 3 \\
        --json benchmarks/results/crosscheck-speed-vllm-0.32.0.json

The runtime is installed into .kvconform-cache/crosscheck/ first when needed (`kvconform
crosscheck` installs the same venvs). The machine is shared: the JSON keeps every repetition and
the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from conformance.crosscheck.install import install, parse_runtime
from conformance.crosscheck import speed
from conformance.crosscheck.driver import Driver

from .common import code_provenance, loadavg, log, machine


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtime", required=True, help="vllm==0.32.0, vllm==0.33.0 or sglang==0.5.23")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--python", help="an interpreter that has the runtime (skips the install)")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args(argv)
    name, version = parse_runtime(args.runtime)
    python = args.python or install(name, version)
    before = loadavg()
    with Driver(name, python, stderr=open("/dev/null", "w")) as driver:
        m = speed.measure(driver, name, reps=args.reps, requests=args.requests,
                          progress=lambda rep, r, o: log(f"rep {rep + 1}: runtime {r:.2f} s, oracle {o:.2f} s"))
    m.update(machine=machine(), code=code_provenance(), loadavg_before=before, loadavg_after=loadavg())
    print(speed.line(m))
    if args.json:
        args.json.write_text(json.dumps(m, indent=1) + "\n")
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
