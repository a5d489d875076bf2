"""What a planner decides for one sequence, and the counters the context cache keeps.

A `Plan` is the whole output of planning (CR-PLAN): which cached pages the sequence keeps,
where its prefill starts, how many private pages it needs, and for a checkpoint or EAGLE hit
the record it restores or pairs with. Planning only reads the cache; acquisition then pins
what the plan names (CR-CAP-3).
"""
from dataclasses import dataclass, field


@dataclass
class Plan:
    """What one sequence reuses (CR-PLAN, CR-MEDIA-3..5, CR-HYB-5, CR-SPEC-1..2)."""
    kind: str                   # standard | no_reusable_prefix | full_input_rewind
    matched: int
    reused: int                 # prefill starts here
    kept: list                  # pages pinned from the cache (stay pinned after a media trim)
    demand: int                 # private pages to allocate
    bypass: bool = False
    forced_cold: bool = False
    record: object = None       # the checkpoint of a hybrid hit, the pairing record of an EAGLE hit
    draft_kept: list | None = None  # a paired plan: the record's draft pages it pins (None: not paired)
    draft_demand: int = 0           # a paired plan: private draft pages to allocate
    draft_pages: list | None = None  # after acquisition: the sequence's draft page table
    replayed: bool = False          # a paired hit: its last matched pair is recomputed (CR-SPEC-2)

    @property
    def reuses_state(self) -> bool:
        return self.kind != "no_reusable_prefix"

    @property
    def paired(self) -> bool:
        return self.draft_kept is not None

    @property
    def restores(self) -> bool:
        """A checkpoint hit: the sequence starts from a record's snapshots (CR-HYB-6)."""
        return self.record is not None and not self.paired


def cold_plan(total: int, **flags) -> Plan:
    """The plan that reuses nothing and allocates all `total` pages privately."""
    return Plan("no_reusable_prefix", 0, 0, [], total, **flags)


@dataclass
class Metrics:
    """Cumulative counters of the profile's context_cache section (CR-MET-1..11)."""
    admitted: int = 0
    hits: int = 0
    media_aware: int = 0
    lookup_bypass: int = 0
    forced_cold: int = 0
    matched_tokens: int = 0
    reused_tokens: int = 0
    plans: dict = field(default_factory=lambda: {"standard": 0, "no_reusable_prefix": 0, "full_input_rewind": 0})
    attempts: int = 0
    committed: int = 0
    existing: int = 0
    evicted: int = 0
    restores: int = 0
    pressure_skips: int = 0
    capture_syncs: int = 0
    planning_ns: int = 0
    page_replays: int = 0
    pair_publications: int = 0

    def count_admission(self, plan: Plan, media_aware: bool) -> None:
        """CR-MET-1..6 (and CR-SPEC-3's replays) from the final plan of an admitted sequence."""
        self.admitted += 1
        self.hits += plan.matched > 0
        self.media_aware += media_aware
        self.lookup_bypass += plan.bypass
        self.forced_cold += plan.forced_cold
        self.matched_tokens += plan.matched
        self.reused_tokens += plan.reused
        self.plans[plan.kind] += 1
        self.restores += plan.restores
        self.page_replays += plan.replayed
