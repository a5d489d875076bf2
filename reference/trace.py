"""The decision trace: a rule-tagged step wherever the oracle decides a predicted value
(spec/RUNNING.md section 7).

A step says which rule decided which value, the value it decided (and, where it changed one,
the value before), why in the request's own terms, what it refers to where a reader of the
trace needs it (`refs`: the request that published a page or record, the page boundaries a
media trim gave back) and which earlier steps it followed from (its causes):

    CR-PLAN-1   request 2 matched_tokens 8: pages 0-1 (positions 0-7) are in the page index ...
    CR-MEDIA-3  request 2 reused_tokens 8 -> 4: image #1 at positions 6-9 straddles the boundary at 8
    CR-CAP-4    records: the record of request 0 (2 pages) evicted: least recently used, for ...

Each section module records its own steps, at the line that decides, with the reason composed
from the values at hand there (as the WebAssembly reference interpreter returns a trap's reason
from the arm that decides it): planning.py the match and the rewind, media.py the trim,
capacity.py evictions, publication.py publications and their status, and so on. A deciding
function takes the sequence's `Steps` (None while not tracing: then it records nothing and
composes no text). What explanations need beside the cache (where a page came from, why a key
left the index, the same ids under another identity) is kept by the cache itself while tracing
(reference/capacity.py). This module holds only the containers, the chain and the cause lookup.

Steps belong to a request (by its ordinal on the runtime instance: a second request file's
first request comes after the first file's last) or to the file (evictions, pages leaving the
index, failed batches, warmup runs, what is left unspecified). The runner explains a mismatch
by the step that decided the value that differs, and shows the chain of its causes; nothing
outside the oracle works out a rule again. Tracing is optional (`Simulator(..., trace=True)`):
the counts never depend on it.
"""

from bisect import bisect_right

UNSET = object()
MAX_CAUSES = 4
"""Causes kept per step: a hit names where its pages came from and the latest evictions they
survived, not every eviction of a long run."""


class Step:
    """One decision: `rule` decided `value` (a per-request fact such as "reused_tokens", a
    publication "publications[0]", or a file fact such as "records") to be `to`."""
    __slots__ = ("rule", "value", "to", "before", "why", "refs", "causes", "owner", "order")

    def __init__(self, rule, value, to, why, before=UNSET, refs=None, causes=()):
        self.rule, self.value, self.to, self.why, self.before = rule, value, to, why, before
        self.refs, self.causes = refs, tuple(c for c in causes if c is not None)[:MAX_CAUSES]
        self.owner, self.order = None, 0

    @property
    def changed(self) -> bool:
        """Whether the step changed the value it decided (a step without `before` set it)."""
        return self.before is UNSET or self.before != self.to

    @property
    def by(self):
        """Who took the step, where it says so (`refs["by"]`: a publication's publisher)."""
        return self.refs.get("by") if self.refs else None


def deciding(steps):
    """The step that decided a value, of the steps recorded for it: the last that changed it
    (a later step that checked it and left it as it was explains nothing new)."""
    return next((s for s in reversed(steps) if s.changed), steps[-1]) if steps else None


def chain(steps) -> list:
    """The steps and, transitively, their causes, in the order they were taken (each once)."""
    seen, todo = {}, list(steps)
    while todo:
        s = todo.pop()
        if id(s) not in seen:
            seen[id(s)] = s
            todo.extend(s.causes)
    return sorted(seen.values(), key=lambda s: s.order)


# --- the words steps are written in ------------------------------------------------------------
def pages_of(lo: int, hi: int) -> str:
    """`page 3` or `pages 0-2` for the pages lo .. hi - 1."""
    return f"page {lo}" if hi - lo == 1 else f"pages {lo}-{hi - 1}"


def positions_of(lo: int, hi: int) -> str:
    return f"position {lo}" if hi - lo == 1 else f"positions {lo}-{hi - 1}"


def items_in(spans, lo: int, hi: int) -> list:
    """(ordinal from 1, span) of the media items with positions in [lo, hi)."""
    return [(k, s) for k, s in enumerate(spans, 1) if s.start < hi and s.end > lo]


def item_name(k: int, span) -> str:
    return f"{span.modality} #{k} at {positions_of(span.start, span.end)}"


def adapter_name(lora) -> str:
    return f"adapter {lora!r}" if lora is not None else "no adapter"


def sequence_name(ordinal: int, warmup: int = 0) -> str:
    return f"warmup run {warmup} of request {ordinal}" if warmup else f"request {ordinal}"


# --- the containers ----------------------------------------------------------------------------
class Trace:
    """The steps of one runtime instance: per request (by ordinal) and of the file."""

    def __init__(self, page_size: int | None = None):
        self.P = page_size
        self.requests: dict[int, list] = {}
        self.file: list = []
        self.evictions: list = []          # the file's eviction steps (value "records"), in order
        self._order = 0
        self.actor = None
        """The `Steps` of the sequence whose admission, growth or publication runs: what an
        eviction names as the one it made room for."""

    def add(self, owner, rule, value, to, why, before=UNSET, refs=None, causes=()) -> Step:
        """Record a step of request `owner` (an ordinal), or of the file when `owner` is None."""
        step = Step(rule, value, to, why, before, refs, causes)
        steps = self.file if owner is None else self.requests.setdefault(owner, [])
        step.owner, step.order = owner, self._order
        self._order += 1
        steps.append(step)
        if value == "records":
            self.evictions.append(step)
        return step

    @property
    def now(self) -> int:
        """The order the next step will have: when something happened, relative to the steps."""
        return self._order

    def steps_of(self, owner, value: str) -> list:
        return [s for s in self.requests.get(owner, ()) if s.value == value]

    def last(self, owner, value: str):
        """The latest step of `owner` (the file's when None) that decided `value`, or None."""
        steps = self.file if owner is None else self.requests.get(owner, ())
        return next((s for s in reversed(steps) if s.value == value), None)

    def since(self, origin) -> tuple:
        """A hit's causes: the publication its pages came from, and the latest evictions (of
        other records) they survived since."""
        if origin is None:
            return ()
        evictions = self.evictions
        first = bisect_right(evictions, origin.order, key=lambda s: s.order)
        return (origin, *evictions[max(first, len(evictions) - (MAX_CAUSES - 1)):])

    def unspecified(self, ordinal: int):
        """The step that leaves request `ordinal`'s counts open (reference/media.py `OpenCounts`),
        or None."""
        return next((s for s in self.requests.get(ordinal, ()) if s.value == "counts"), None)

    def aggregates_unspecified(self):
        return next((s for s in self.file if s.value == "aggregates"), None)


class Steps:
    """The recorder of one sequence (a request, or a warmup run of one: `Sequence.steps`),
    handed to the section modules that decide its values: `steps(rule, value, to, why, ...)`
    records a step of it.

    `cache` is the cache it runs against, whose explanation state its reasons read; `missing(k)`
    says why its page k is not in the page index at its lookup ((rule, phrase, causes)), set by
    the batch it runs in (reference/batching.py `BatchRunner._missing`)."""
    __slots__ = ("trace", "seq", "owner", "name", "cache", "missing")

    def __init__(self, trace: Trace, seq, cache):
        self.trace, self.seq, self.cache, self.missing = trace, seq, cache, None
        self.owner = None if seq.warmup else seq.ordinal
        self.name = sequence_name(seq.ordinal, seq.warmup)

    def __call__(self, rule, value, to, why, before=UNSET, refs=None, causes=()) -> Step:
        return self.trace.add(self.owner, rule, value, to, why, before, refs, causes)
