"""The runtime's own cache manager and the oracle timed on one stream, side by side.

The stream (conformance/crosscheck/streams.py `speed_stream`): 10,000 requests of about 1,000
tokens, each opening with one of 8 shared prefixes of 512 tokens, 16 sampled tokens each, block
(page) size 16, a pool of 4,000 blocks (SGLang: 64,000 token slots), one request at a time. The
runtime's side is timed inside its driver process (the manager's calls only: the stream is read
before the clock starts), the oracle's in this process (`oracle_side.play`); repetitions
alternate runtime and oracle, and each side's figure is the median.
"""
from __future__ import annotations

import statistics
import time

from . import oracle_side
from .streams import requests_in, speed_stream


def measure(driver, runtime: str, reps: int = 3, requests: int = 10_000, progress=None) -> dict:
    stream = speed_stream(runtime, requests=requests)
    n = requests_in(stream)
    runtime_s, oracle_s = [], []
    for rep in range(reps):
        runtime_s.append(driver.time(stream))
        start = time.perf_counter()
        oracle_side.play(stream)
        oracle_s.append(time.perf_counter() - start)
        if progress is not None:
            progress(rep, runtime_s[-1], oracle_s[-1])
    r, o = statistics.median(runtime_s), statistics.median(oracle_s)
    return {
        "runtime": runtime, "version": driver.version, "requests": n,
        "tokens": sum(len(s["prompt"]) + len(s["sampled"]) for s in stream["steps"]),
        "settings": stream["settings"], "reps": reps,
        "runtime_seconds": runtime_s, "oracle_seconds": oracle_s,
        "runtime_requests_per_s": n / r, "oracle_requests_per_s": n / o,
        "oracle_over_runtime": (n / o) / (n / r),
    }


def line(m: dict) -> str:
    return (f"{m['runtime']} {m['version']}: {m['requests']:,} requests; runtime manager {m['runtime_requests_per_s']:,.0f} "
            f"requests/s ({statistics.median(m['runtime_seconds']):.2f} s), oracle {m['oracle_requests_per_s']:,.0f} "
            f"requests/s ({statistics.median(m['oracle_seconds']):.2f} s): the oracle runs at "
            f"{m['oracle_over_runtime']:.2f}x the runtime's speed")
