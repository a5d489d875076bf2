"""The optional "reuse is real" timing verdict (spec/RUNNING.md section 5, `kvconform run --timing`).

A runtime can report `reused_tokens` and still recompute every position: the counters are right,
the outputs are right, only the time is wrong. No counter can see that; a clock can. With a long
reusable prefix, the warm request (which reuses it) must take less than `fraction` of the time
of the cold one (which computed and published it), measured within one runtime instance as a
ratio, repeated over `reps` distinct prefixes, median taken:

    cold  = time of  prefix + suffix_a   (empty cache: computes the prefix and publishes it)
    warm  = time of  prefix + suffix_b   (reuses the published pages, computes the suffix)
    ratio = warm / cold ;  PASS when median(ratio) < fraction, else QUALITY_WARNING

Wall-clock time is noisy on a shared machine, so the verdict is never FAIL and the check is off
by default; a warm request that does not report reusing the prefix makes it NOT_SUPPORTED (there
is nothing whose speed could be judged). It needs an adapter whose runtime instance outlives one
request file (`sessions`): with one process per file, start-up would dominate both times.
"""
from __future__ import annotations

import random
import statistics
import string
import time

from .verdicts import CaseResult, Failure, Verdict

CASE_ID = "timing/reuse-is-real"
PREFIX = 3072            # tokens of the reusable prefix (bytes-v1: one character, one token)
SUFFIX = 16
FRACTION = 0.5           # the warm request must take less than half of the cold one's time
REPS = 5
ENGINE = {"maxInputLen": PREFIX + 2 * SUFFIX, "maxKVCacheCapacity": PREFIX + 4 * SUFFIX, "maxKVPoolPages": 0,
          "tokensPerPage": 16}


def _doc(text: str) -> dict:
    return {"apply_chat_template": False, "temperature": 0, "top_k": 1, "max_generate_length": 1,
            "requests": [{"messages": [{"role": "user", "content": text}]}]}


def _reused(result) -> int | None:
    try:
        return int(result.responses[0]["context_cache"]["reused_tokens"])
    except (TypeError, KeyError, IndexError, ValueError):
        return None


def timing_verdict(adapter, manifest: dict | None, fraction: float = FRACTION, reps: int = REPS,
                   prefix: int = PREFIX, base_dir: str = ".") -> CaseResult:
    """Run the measurement on `adapter` and return its (non-mandatory) CaseResult."""
    result = CaseResult(CASE_ID, [], mandatory=False, source="conformance/judge/reuse_timing.py", section="timing")
    started = time.monotonic()
    if not getattr(adapter, "sessions", False):
        result.duration_s = time.monotonic() - started
        return result.settle(Verdict.NOT_SUPPORTED, "the timing verdict needs a runtime instance that serves several "
                                                    "request files (one process per file times its start-up)")
    engine_args = dict(ENGINE, maxInputLen=prefix + 2 * SUFFIX, maxKVCacheCapacity=prefix + 4 * SUFFIX)
    rng = random.Random(0)
    ratios, rows = [], []
    try:
        engine = adapter.engine_for(engine_args)
        for rep in range(reps + 1):                   # rep 0 warms the process up and is not counted
            text = "".join(rng.choice(string.ascii_lowercase + " ") for _ in range(prefix))
            session = adapter.start(engine, {"enableContextReuse": True})
            try:
                t0 = time.perf_counter()
                cold = session.run(_doc(text + "A" * SUFFIX), base_dir)
                t1 = time.perf_counter()
                warm = session.run(_doc(text + "B" * SUFFIX), base_dir)
                t2 = time.perf_counter()
            finally:
                session.close()
            if cold.outcome != "ok" or warm.outcome != "ok":
                bad = cold if cold.outcome != "ok" else warm
                return _settle(result, started, Verdict.NOT_SUPPORTED,
                               f"the timing request did not run ({bad.outcome}: {bad.message[:200]})")
            reused = _reused(warm)
            if reused is None or reused < prefix // 2:
                return _settle(result, started, Verdict.NOT_SUPPORTED,
                               f"the warm request reports reusing {reused} of its {prefix}-token prefix: no reuse "
                               f"to time")
            if rep:
                ratios.append((t2 - t1) / (t1 - t0))
                rows.append({"cold_s": round(t1 - t0, 6), "warm_s": round(t2 - t1, 6), "reused_tokens": reused})
    except Exception as e:                            # the check is optional: it never breaks a run
        return _settle(result, started, Verdict.NOT_SUPPORTED, f"the timing check could not run: "
                                                               f"{type(e).__name__}: {e}")
    median = statistics.median(ratios)
    result.details["timing"] = {"prefix_tokens": prefix, "suffix_tokens": SUFFIX, "fraction": fraction,
                                "median_warm_over_cold": round(median, 4), "repetitions": rows}
    if not median < fraction:
        result.add(Failure(None, "prefill time", f"warm < {fraction:g} x cold", f"{median:.3f} x cold",
                           f"a request reusing {rows[0]['reused_tokens']} of {prefix} tokens took {median:.2f} of the "
                           f"time of computing them (median of {reps}): the reported reuse may be recomputed",
                           verdict=Verdict.QUALITY_WARNING))
    result.duration_s = time.monotonic() - started
    return result


def _settle(result: CaseResult, started: float, verdict: Verdict, why: str) -> CaseResult:
    result.duration_s = time.monotonic() - started
    return result.settle(verdict, why)
