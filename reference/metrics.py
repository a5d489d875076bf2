"""Metrics (spec/context-reuse.md section 10, CR-MET-1 .. CR-MET-13).

Admission counters move when a sequence is admitted, publication counters when a publication is
attempted; pools and records are snapshots taken when the profile is written. Counters are
cumulative over the runtime instance, warmup included.
"""

from dataclasses import dataclass, field

from .capacity import DRAFT, PAGES, PARTIAL_KV, RECURRENT
from .planning import FULL_INPUT_REWIND, NO_REUSABLE_PREFIX, STANDARD
from .publication import COMMITTED


@dataclass
class Metrics:
    admitted: int = 0
    hits: int = 0
    media_aware: int = 0
    lookup_bypass: int = 0
    forced_cold: int = 0
    matched_tokens: int = 0
    reused_tokens: int = 0
    plans: dict = field(default_factory=lambda: {STANDARD: 0, NO_REUSABLE_PREFIX: 0, FULL_INPUT_REWIND: 0})
    attempts: int = 0
    committed: int = 0
    existing: int = 0
    restores: int = 0
    pressure_skips: int = 0
    capture_synchronizations: int = 0
    full_page_replays: int = 0
    pair_publications: int = 0

    def admitted_sequence(self, seq) -> None:
        """Count one admitted sequence from its final plan: admitted (CR-MET-1), hits (CR-MET-2),
        media-aware (CR-MET-3), lookup bypass and forced cold (CR-MET-4), matched and reused
        tokens (CR-MET-5), plan kinds (CR-MET-6), hybrid restores (CR-MET-11), full-page replays
        of EAGLE hits (CR-SPEC-3)."""
        plan = seq.plan
        self.admitted += 1
        self.hits += plan.hit
        self.media_aware += seq.history.media_aware
        self.lookup_bypass += seq.lookup_bypass
        self.forced_cold += seq.forced_cold
        self.matched_tokens += plan.matched
        self.reused_tokens += plan.reused
        self.plans[plan.kind] += 1
        self.restores += seq.hybrid_restore
        self.full_page_replays += plan.replay

    def published(self, publication: dict, paired: bool = False) -> None:
        """CR-MET-7: one attempt, committed or existing (CR-PUB-8); CR-SPEC-3: `paired` when it
        committed a draft path (a new paired record or an upgrade)."""
        self.attempts += 1
        self.pair_publications += paired
        if publication["status"] == COMMITTED:
            self.committed += 1
        else:
            self.existing += 1

    def context_cache(self, cache) -> dict:
        """The profile's `context_cache` section (spec/schemas/common.schema.json#/$defs/contextCache).
        CR-MET-8 records, CR-MET-9 pools ({free, capacity}), CR-MET-10 reclaimed resources,
        CR-MET-11 hybrid and speculative (CR-SPEC-3); planning time is not modelled."""
        pools = cache.pools
        return {
            "admitted_sequences": self.admitted,
            "hit_sequences": self.hits,
            "media_aware_sequences": self.media_aware,
            "lookup_bypass_sequences": self.lookup_bypass,
            "forced_cold_sequences": self.forced_cold,
            "matched_tokens": self.matched_tokens,
            "reused_tokens": self.reused_tokens,
            "plans": dict(self.plans),
            "publications": {"attempts": self.attempts, "committed": self.committed,
                             "existing": self.existing,
                             "successful_endpoints": self.committed + self.existing},
            "hybrid": {"restores": self.restores, "snapshot_pressure_skips": self.pressure_skips,
                       "capture_synchronizations": self.capture_synchronizations},
            "speculative": {"full_page_replays": self.full_page_replays,
                            "pair_publications": self.pair_publications},
            "planning_nanoseconds": 0,
            "records": {"current": len(cache.records), "evicted": cache.evicted},
            "resource_pools": {
                "base_kv_pages": _pool(pools[PAGES]),
                "draft_kv_pages": _pool(pools[DRAFT]),
                "recurrent_snapshots": _pool(pools[RECURRENT]),
                "partial_kv_snapshots": _pool(pools[PARTIAL_KV]),
            },
            "reclaimed_resources": {
                "base_kv_pages": cache.reclaimed[PAGES],
                "draft_kv_pages": cache.reclaimed[DRAFT],
                "recurrent_snapshots": cache.reclaimed[RECURRENT],
                "partial_kv_snapshots": cache.reclaimed[PARTIAL_KV],
            },
        }


def _pool(pool) -> dict:
    return {"free": pool.free, "capacity": pool.capacity}


@dataclass
class PrefillStats:
    """CR-MET-12: batches whose prefill ran (warmup excluded), reused and computed tokens."""
    total_runs: int = 0
    reused_tokens: int = 0
    computed_tokens: int = 0

    def ran(self, sequences) -> None:
        self.total_runs += 1
        for n, reused in sequences:
            self.reused_tokens += reused
            self.computed_tokens += n - reused

    def section(self) -> dict:
        return {"total_runs": self.total_runs, "reused_tokens": self.reused_tokens,
                "computed_tokens": self.computed_tokens}
