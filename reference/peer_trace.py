"""The peer oracles' decision trace: a rule-tagged step wherever a peer cache decides a count or
what a request leaves behind (spec/peer-profiles.md; the steps are `reference.trace.Step`, as
the Edge-LLM oracle's, spec/RUNNING.md section 7). Stdlib only.

A peer cache made with a `PeerTrace` records; made without one (`trace=None`, the default) it
records nothing and formats nothing: every recording site sits behind `if trace is not None`,
and builds its reason only there, so the counts never depend on tracing and an untraced cache
pays one comparison per decision.

    trace = PeerTrace()
    sim = simulator("vllm-apc", settings, trace=trace)
    trace.begin(0)                                  # the steps that follow are request 0's
    sim.predict(request); sim.commit(request, sampled)
    steps = trace.steps_of(0, "cached_tokens")     # deciding(steps), chain(steps)

A step belongs to the request the caller began (its ordinal in the case); steps taken before
any `begin` (a reset, a unit test driving the pool directly) belong to the cache (`owner`
None). A count's step names the steps it follows from (`causes`): the lookup that matched, the
request that left the matched entries, the eviction or partial reuse that took the rest away.
"""
from __future__ import annotations

from collections import deque

from .trace import Step, chain, deciding

LATEST = 2
"""Removals a lookup cites when no removal is tied to its miss: the latest evictions it survived."""


class PeerTrace:
    """The steps of one peer cache, per request, and the latest removals from it."""

    def __init__(self):
        self.requests: dict[int, list] = {}
        self.cache: list = []
        self.owner: int | None = None
        self._order = 0
        self.removals: deque = deque(maxlen=LATEST)
        self.start: Step | None = None

    def started(self, rule: str, why: str) -> Step:
        """How the case's cache started (emptied by a reset, or a salt no earlier request
        carried): a lookup that finds nothing cites it."""
        owner, self.owner = self.owner, None
        self.start = self.add(rule, "start", "empty", why)
        self.owner = owner
        return self.start

    def begin(self, request: int) -> None:
        """The steps recorded from now on are request `request`'s."""
        self.owner = request

    def add(self, rule: str, value: str, to, why: str, before=None, causes=()) -> Step:
        """Record a step of the current request: `rule` decided `value` to be `to` (`before`,
        where given, is what it was until then)."""
        step = Step(rule, value, to, why, causes=causes) if before is None else \
            Step(rule, value, to, why, before=before, causes=causes)
        step.owner, step.order = self.owner, self._order
        self._order += 1
        (self.cache if self.owner is None else self.requests.setdefault(self.owner, [])).append(step)
        return step

    def removed(self, step: Step) -> Step:
        """Note a step that took something out of the cache (an eviction, a partial reuse that
        takes a block out of the tree): a later lookup cites the latest ones."""
        self.removals.append(step)
        return step

    def latest_removals(self) -> tuple:
        return tuple(reversed(self.removals))

    def background(self, found: bool) -> tuple:
        """What a lookup cites besides its own causes: the latest removals, and when it found
        nothing, how the case's cache started."""
        return self.latest_removals() + ((self.start,) if not found and self.start is not None else ())

    def who(self, step: Step | None) -> str:
        """'request 3' for a step of request 3 ('an earlier request' for one of the cache)."""
        if step is None or step.owner is None:
            return "an earlier request"
        return f"request {step.owner}"

    def steps_of(self, owner: int, value: str) -> list:
        return [s for s in self.requests.get(owner, ()) if s.value == value]

    def explained(self, owner: int, value: str = "cached_tokens") -> tuple[Step | None, list]:
        """(the step that decided the value, the chain of it and its causes, oldest first)."""
        steps = self.steps_of(owner, value)
        return deciding(steps), chain(steps)


def span(lo: int, hi: int, what: str = "block") -> str:
    """`block 3` or `blocks 0-2` for the units lo .. hi - 1."""
    return f"{what} {lo}" if hi - lo == 1 else f"{what}s {lo}-{hi - 1}"


def keyed(request) -> str:
    """' (keyed by salt 's1', adapter 'alpha')' for what keys a request's entries, or ''."""
    parts = [f"{name} {value!r}" for name, value in (("salt", request.salt), ("adapter", request.lora),
                                                      ("extra_key", request.extra_key)) if value is not None]
    return f" (keyed by {', '.join(parts)})" if parts else ""
