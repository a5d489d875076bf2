"""The content-addressed context cache: the one object the scheduler admits, grows, publishes
and releases sequences through.

It is the bookkeeping half of context reuse (the KV bytes live in `kv_pool.KVPool`, the
snapshot bytes in `snapshots.SnapshotStore`, addressed by the ids handed out here), and is
three planners over one shared store (cache_store.py: pools, page index, records, eviction):

    vanilla     page_planner.PagePlanner             whole pages (CR-PLAN, CR-MEDIA-3..5, CR-PUB-4..6)
    checkpoint  checkpoint_planner.CheckpointPlanner  recurrent / hybrid exact lengths (CR-HYB)
    paired      paired_planner.PairedPlanner         EAGLE base + draft pages (CR-SPEC)

`kind` is the deployment kind: "vanilla" (attention only), "recurrent" (no attention) or
"hybrid"; `paired` is set per batch (the batch decodes speculatively, CR-SPEC-7). With
`enabled=False` the same pools serve plain private pages and nothing is looked up or published
(CR-POL-6). Planning never mutates anything (CR-PLAN); acquisition pins, evicts and allocates
(CR-CAP-3).
"""
import math
import time

from .cache_invariants import CacheInvariantError, check_invariants  # noqa: F401 (raised through this module)
from .cache_plan import Plan, cold_plan
from .cache_pools import DRAFT, PAGES, PARTIAL, RECURRENT
from .cache_store import CacheStore
from .checkpoint_planner import CheckpointPlanner
from .page_planner import PagePlanner
from .paired_planner import PairedPlanner


class ContextCache:
    """Admission, growth, publication and release of one runtime instance's sequences, over
    its store and planners. With `enabled=False` (reuse off) every plan is cold and nothing is
    published: the same pools serve plain private pages (CR-POL-6)."""

    # The parts, as class attributes so a subclass can substitute one (faulty_backends/ does).
    store_class = CacheStore
    page_planner_class = PagePlanner
    checkpoint_planner_class = CheckpointPlanner
    paired_planner_class = PairedPlanner

    def __init__(self, *, P: int, kind: str, num_pages: int, rec_slots: int, pkv_slots: int,
                 max_records: int, enabled: bool, on_page_allocate=None, on_slot_free=None,
                 trim_checkpoint_hits: bool = False, draft_pages: int = 0, on_draft_allocate=None):
        self.P, self.kind, self.enabled = P, kind, enabled
        self.store = self.store_class(P=P, num_pages=num_pages, rec_slots=rec_slots, pkv_slots=pkv_slots,
                                      draft_pages=draft_pages, max_records=max_records,
                                      on_page_allocate=on_page_allocate, on_slot_free=on_slot_free,
                                      on_draft_allocate=on_draft_allocate)
        self.pages_planner = self.page_planner_class(self.store)
        self.checkpoints = self.checkpoint_planner_class(self.store, kind, trim_checkpoint_hits)
        self.pairs = self.paired_planner_class(self.store, self.pages_planner)
        self.paired = False     # the batch being admitted decodes speculatively (CR-SPEC-7)

    # the store's state, as the runtime's tests and benchmarks read it
    pools = property(lambda self: self.store.pools)
    pages = property(lambda self: self.store.pages)
    records = property(lambda self: self.store.records)
    index = property(lambda self: self.store.index)
    metrics = property(lambda self: self.store.metrics)
    max_records = property(lambda self: self.store.max_records)

    # ------------------------------------------------------------------ planning (no effects)

    def plan(self, ident, n: int, *, bypass: bool, splits_media) -> Plan:
        """The plan of one sequence; `splits_media(a, b)` says whether a reuse boundary between
        positions a and b would split media the trim gives back (CR-MEDIA-3: one item; under
        edge-llm-0.10 any two media positions). Planning changes no reference count and no
        recency (CR-PLAN)."""
        t0 = time.perf_counter_ns()
        total = math.ceil(n / self.P) if self.kind != "recurrent" else 0
        if bypass or not self.enabled:
            plan = cold_plan(total, bypass=True)
        elif self.paired:
            plan = self.pairs.plan(ident, n, total, splits_media)
        elif self.kind == "vanilla":
            plan = self.pages_planner.plan(ident, n, total, splits_media)
        else:
            plan = self.checkpoints.plan(ident, n, total)
        self.metrics.planning_ns += time.perf_counter_ns() - t0
        return plan

    # ------------------------------------------------------------------ admission

    def _acquire(self, plan: Plan):
        """CR-CAP-3: pin what the plan keeps, evict for its demand (its own record walked last),
        allocate; None, with every pin undone, when the pools cannot hold it."""
        pools = self.pools
        slots = [(p, ids[0]) for p, ids in plan.record.holdings() if p != PAGES] if plan.restores else []
        pins = [(PAGES, p) for p in plan.kept] + slots + [(DRAFT, d) for d in plan.draft_kept or ()]
        for p, i in pins:
            pools[p].pin(i)
        if not self.store.make_room((plan.demand, 0, 0, plan.draft_demand), protect=plan.record):
            for p, i in pins:
                pools[p].unpin(i)
            return None
        if plan.record is not None and plan.record.key in self.records:
            self.store.touch(plan.record.key)              # a hybrid or EAGLE hit touches its record
        if plan.paired:                                    # CR-SPEC-6: the draft page table
            plan.draft_pages = list(plan.draft_kept) + pools[DRAFT].allocate(plan.draft_demand)
        return plan.kept + self.pages.allocate(plan.demand), slots

    def admit(self, ident, n: int, *, bypass: bool, media_aware: bool, splits_media):
        """Plan and acquire one sequence (CR-CAP-3, CR-CAP-7) and count it (CR-MET-1..6).

        Returns (plan, page table, snapshot pins) or None when it cannot be admitted.
        """
        plan = self.plan(ident, n, bypass=bypass, splits_media=splits_media)
        got = self._acquire(plan)
        if got is None and not plan.bypass:               # CR-CAP-7: any use_cache plan
            plan = self.plan(ident, n, bypass=True, splits_media=splits_media)
            plan.forced_cold = True
            got = self._acquire(plan)
        if got is None:
            return None
        plan = self.checkpoints.trim(ident, n, plan, splits_media)   # edge-llm-0.10: after acquisition
        self.metrics.count_admission(plan, media_aware)
        return plan, got[0], got[1]

    def grow(self, page_table: list, target: int, draft_table: list | None = None) -> bool:
        """Extend a live sequence's pages to `target` (CR-CAP-9), and a paired sequence's draft
        pages with them (CR-SPEC-6); False if infeasible."""
        need = target - len(page_table)
        draft_need = target - len(draft_table) if draft_table is not None else 0
        if need <= 0 and draft_need <= 0:
            return True
        if not self.store.make_room((max(need, 0), 0, 0, max(draft_need, 0))):
            return False
        page_table.extend(self.pages.allocate(max(need, 0)))
        if draft_table is not None:
            draft_table.extend(self.pools[DRAFT].allocate(max(draft_need, 0)))
        return True

    def release(self, page_table: list, slot_pins=(), draft_table=()) -> None:
        """Drop a sequence's active references (CR-CAP-10)."""
        for p in page_table:
            self.pages.unpin(p)
        for pool, i in slot_pins:
            self.pools[pool].unpin(i)
        for d in draft_table or ():
            self.pools[DRAFT].unpin(d)

    # ------------------------------------------------------------------ publication

    def publish_pages(self, ident, page_table: list, k: int) -> str:
        """CR-PUB-4..6: the first k pages of a history as a record (page_planner.py)."""
        return self.pages_planner.publish(ident, page_table, k)

    def publish_pairs(self, ident, page_table: list, draft_table: list, k: int) -> str:
        """CR-SPEC-4: the first k pages of a paired sequence with its draft pages (paired_planner.py)."""
        return self.pairs.publish(ident, page_table, draft_table, k)

    def reserve_capture(self, need_partial: bool):
        """CR-HYB-4: the slots of one checkpoint capture, or None for a pressure skip."""
        return self.checkpoints.reserve_capture(need_partial)

    def publish_checkpoint(self, ident, page_table: list, L: int, slots) -> str:
        """CR-HYB-4: a staged capture at exact length L (checkpoint_planner.py)."""
        return self.checkpoints.publish(ident, page_table, L, slots)

    # ------------------------------------------------------------------ reporting and checks

    def profile(self) -> dict:
        """The profile's context_cache section (CR-MET-1..11)."""
        m, pools = self.metrics, self.pools
        pool = lambda p: {"free": p.num_free, "capacity": p.capacity}
        return {
            "admitted_sequences": m.admitted, "hit_sequences": m.hits,
            "media_aware_sequences": m.media_aware, "lookup_bypass_sequences": m.lookup_bypass,
            "forced_cold_sequences": m.forced_cold, "matched_tokens": m.matched_tokens,
            "reused_tokens": m.reused_tokens, "plans": dict(m.plans),
            "publications": {"attempts": m.attempts, "committed": m.committed, "existing": m.existing,
                             "successful_endpoints": m.committed + m.existing},
            "hybrid": {"restores": m.restores, "snapshot_pressure_skips": m.pressure_skips,
                       "capture_synchronizations": m.capture_syncs},
            "speculative": {"full_page_replays": m.page_replays, "pair_publications": m.pair_publications},
            "planning_nanoseconds": m.planning_ns,
            "records": {"current": len(self.records), "evicted": m.evicted},
            "resource_pools": {"base_kv_pages": pool(pools[PAGES]), "draft_kv_pages": pool(pools[DRAFT]),
                               "recurrent_snapshots": pool(pools[RECURRENT]),
                               "partial_kv_snapshots": pool(pools[PARTIAL])},
            "reclaimed_resources": {"base_kv_pages": pools[PAGES].reclaimed, "draft_kv_pages": pools[DRAFT].reclaimed,
                                    "recurrent_snapshots": pools[RECURRENT].reclaimed,
                                    "partial_kv_snapshots": pools[PARTIAL].reclaimed},
        }

    def check_invariants(self, live_tables=(), live_slot_pins=(), live_draft_tables=()) -> None:
        """Raise CacheInvariantError unless every reference count equals the references held
        (cache_invariants.py)."""
        check_invariants(self.store, live_tables, live_slot_pins, live_draft_tables)
