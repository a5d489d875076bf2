"""Run streams through a runtime's driver and the oracle side by side; shrink and classify what
disagrees (docs/crosscheck.md).

    result = crosscheck(driver, "sglang", range(10_000))
    result.findings             # class label -> Finding (count, minimal stream, both sides on it)

The first disagreeing streams of each class are shrunk to minimal streams of the same class
(conformance/crosscheck/classify.py), and the smallest is kept.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import classify, hypotheses, oracle_side, shrink, streams
from .compare import Difference, first_difference


@dataclass
class Finding:
    """A class of disagreement: how many streams showed it (and their requests), the smallest
    minimal stream its first streams shrank to, the stream that one came from (`example`), and
    both sides' observations of it."""
    label: str
    streams: int = 0
    requests: int = 0
    example: str = ""
    minimal: dict | None = None
    difference: Difference | None = None
    runtime: list = field(default_factory=list)
    oracle: list = field(default_factory=list)


@dataclass
class Result:
    runtime: str
    version: str
    streams: int = 0
    requests: int = 0
    agree: int = 0
    agree_requests: int = 0
    undefined: int = 0
    passed_over: int = 0
    """Streams generated but not run: the oracle observes the same with the focused cause switched."""
    findings: dict = field(default_factory=dict)
    seconds: float = 0.0
    driven: str | None = None
    """The runtime's class the driver drove, where it names one (SGLang: RadixCache, UnifiedRadixCache)."""

    def classes(self) -> str:
        if not self.findings:
            return "none"
        return "; ".join(f"{f.label}: {f.streams}" for f in sorted(self.findings.values(), key=lambda f: -f.streams))


def compared(stream: dict, ours: list, theirs: list) -> int:
    """The requests both sides observed: a stream stops where the profile defines nothing."""
    steps = stream["steps"][:max(len(ours), len(theirs))]
    return sum(1 for step in steps if "prompt" in step)


def check(driver, stream: dict):
    """(difference or None, the runtime's observations, the oracle's)."""
    ours = driver.observe(stream)
    theirs = oracle_side.observe(stream)
    return first_difference(ours, theirs), ours, theirs


def crosscheck(driver, runtime: str, seeds, max_requests: int = 20, shrink_budget: int = 400,
               progress=None, seed_streams=None, until_requests: int | None = None, focus: str | None = None,
               max_streams: int | None = None) -> Result:
    """Every seed's stream through both sides (`seed_streams`: streams to use instead), stopping
    once `until_requests` requests were compared or `max_streams` streams generated. `focus` (a
    cause of hypotheses.CAUSES) runs only the streams on which switching that cause changes the
    oracle's observations: a search for a rare cause."""
    result = Result(runtime, driver.version, driven=getattr(driver, "header", {}).get("class"))
    start = time.perf_counter()
    source = seed_streams if seed_streams is not None else streams.streams(runtime, seeds, max_requests)
    generated = 0
    for s in source:
        generated += 1
        _name_the_release(s, driver.version)
        if max_streams is not None and generated > max_streams:
            break
        if focus is not None and first_difference(hypotheses.observe(s, (focus,)), oracle_side.observe(s)) is None:
            result.passed_over += 1
            continue
        difference, ours, theirs = check(driver, s)
        n = compared(s, ours, theirs)
        result.streams += 1
        result.requests += n
        if any("undefined" in o for o in ours):
            result.undefined += 1
        if difference is None:
            result.agree += 1
            result.agree_requests += n
        else:
            label = classify.classify(s, difference, ours)
            finding = result.findings.setdefault(label, Finding(label))
            finding.streams += 1
            finding.requests += n
            if finding.streams <= SHRUNK_PER_CLASS:
                _shrink_into(finding, driver, s, label, shrink_budget)
        if progress is not None:
            progress(result)
        if until_requests is not None and result.requests >= until_requests:
            break
    result.seconds = time.perf_counter() - start
    return result


def _name_the_release(stream: dict, version) -> None:
    """A vLLM stream is judged under the rules of the release the driver runs (`vllm_version`,
    PEER-VLLM-10): its settings name it, so a minimal stream carries it into its parity entry."""
    if stream.get("runtime") == "vllm" and isinstance(version, str) and version[:1].isdigit():
        stream.setdefault("settings", {}).setdefault("vllm_version", version)


SHRUNK_PER_CLASS = 3
"""How many of a class's first streams are shrunk; the smallest result is kept (a shrink stops in
a local minimum, and another stream often leads to a smaller one)."""


def size(stream: dict) -> tuple:
    requests = [s for s in stream["steps"] if "prompt" in s]
    return len(requests), len(stream["steps"]), sum(len(s["prompt"]) + len(s.get("sampled") or []) for s in requests)


def _shrink_into(finding: Finding, driver, stream: dict, label: str, budget: int) -> None:
    def still(candidate: dict) -> bool:
        difference, ours, _ = check(driver, candidate)
        return difference is not None and classify.classify(candidate, difference, ours) == label
    minimal = shrink.shrink(stream, still, budget)
    minimal["id"] = f"{stream['id']}-minimal"
    if finding.minimal is not None and size(finding.minimal) <= size(minimal):
        return
    finding.minimal, finding.example = minimal, stream["id"]
    finding.difference, finding.runtime, finding.oracle = check(driver, minimal)
