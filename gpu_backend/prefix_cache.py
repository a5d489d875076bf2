"""The content-addressed context cache: resource pools, page index, records, eviction.

This is the bookkeeping half of context reuse; the KV bytes live in `kv_pool.KVPool` and the
snapshot bytes in `snapshots.SnapshotStore`, addressed by the ids handed out here.

- A `ResourcePool` is a fixed set of ids (KV pages, recurrent snapshot slots, partial-KV
  snapshot slots) with two reference counts each: *active* (live sequences using it) and
  *cache* (records holding it). An id is free exactly when both are 0 (CR-CAP-2).
- The *page index* maps a page key to its canonical page; it holds only pages with cache
  references, and a page leaves it when its cache count reaches 0 (CR-CAP-2). It is flat: a
  lookup walks an input's chained keys from page 0 and stops at the first miss (CR-PLAN-1).
- A *record* is one published endpoint (CR-PUB-4): the ordered pages of a prefix from page 0,
  plus the snapshot slots of a checkpoint (CR-HYB-4). Records are kept in LRU order; they
  share pages by reference (CR-PUB-6).
- The *eviction planner* walks records from least to most recently used until evicting the
  walked prefix would free enough of every pool (CR-CAP-4).
- On an attention-only EAGLE deployment a fourth pool holds *draft pages* (CR-SPEC-5). A
  record may carry a draft path beside its base pages; a *paired* sequence (set per batch with
  `paired`) reuses a base page only together with the draft page of one record's path, and
  always recomputes the last pair it matched (CR-SPEC-1, CR-SPEC-2). Draft pages are not
  indexed: two records over the same base pages may hold different draft KV.

Planning never mutates anything (CR-PLAN); acquisition pins, evicts and allocates (CR-CAP-3).
"""
import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

PAGES, RECURRENT, PARTIAL, DRAFT = 0, 1, 2, 3
POOL_NAMES = ("base_kv_pages", "recurrent_snapshots", "partial_kv_snapshots", "draft_kv_pages")


class ResourcePool:
    """Ids 0..capacity-1 with active/cache reference counts and a FIFO free list."""

    def __init__(self, capacity: int, on_allocate=None, on_free=None):
        self.capacity = capacity
        self.active = [0] * capacity
        self.cache = [0] * capacity
        self.free = deque(range(capacity))
        self.on_allocate, self.on_free = on_allocate, on_free
        self.reclaimed = 0  # ids freed by record eviction (CR-MET-10)

    @property
    def num_free(self) -> int:
        return len(self.free)

    def allocate(self, k: int) -> list[int]:
        assert k <= len(self.free), "allocation beyond the free list"
        ids = [self.free.popleft() for _ in range(k)]
        for i in ids:
            self.active[i] = 1
        if ids and self.on_allocate:
            self.on_allocate(ids)
        return ids

    def _maybe_free(self, i: int) -> bool:
        if self.active[i] == 0 and self.cache[i] == 0:
            self.free.append(i)
            if self.on_free:
                self.on_free(i)
            return True
        return False

    def pin(self, i: int) -> None:
        self.active[i] += 1

    def unpin(self, i: int) -> bool:
        assert self.active[i] > 0, f"unpin of an id with no active reference ({i})"
        self.active[i] -= 1
        return self._maybe_free(i)

    def add_cache(self, i: int) -> None:
        self.cache[i] += 1

    def drop_cache(self, i: int) -> bool:
        assert self.cache[i] > 0
        self.cache[i] -= 1
        return self._maybe_free(i)


@dataclass(eq=False)
class Record:
    """One endpoint. key: ("pages", last page key, page count) or ("ckpt", exact key, L)."""
    key: tuple
    pages: list
    rec_slot: int | None = None
    pkv_slot: int | None = None
    draft: list | None = None       # the draft path of an EAGLE record (CR-SPEC-4)

    def holdings(self):
        yield PAGES, self.pages
        if self.rec_slot is not None:
            yield RECURRENT, (self.rec_slot,)
        if self.pkv_slot is not None:
            yield PARTIAL, (self.pkv_slot,)
        if self.draft is not None:
            yield DRAFT, self.draft


@dataclass
class Plan:
    """What one sequence reuses (CR-PLAN, CR-MEDIA-3..5, CR-HYB-5)."""
    kind: str                   # standard | no_reusable_prefix | full_input_rewind
    matched: int
    reused: int                 # prefill starts here
    kept: list                  # pages pinned from the cache (stay pinned after a media trim)
    demand: int                 # private pages to allocate
    bypass: bool = False
    forced_cold: bool = False
    record: Record | None = None  # the checkpoint of a hybrid hit, the pairing record of an EAGLE hit
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


class CacheInvariantError(AssertionError):
    pass


class ContextCache:
    """Index, records, reference counts and the eviction planner of one runtime instance.

    `kind` is the deployment kind: "vanilla" (attention only), "recurrent" (no attention) or
    "hybrid". With `enabled=False` the same pools serve plain private pages and nothing is
    looked up or published (CR-POL-6).
    """

    def __init__(self, *, P: int, kind: str, num_pages: int, rec_slots: int, pkv_slots: int,
                 max_records: int, enabled: bool, on_page_allocate=None, on_slot_free=None,
                 trim_checkpoint_hits: bool = False, draft_pages: int = 0, on_draft_allocate=None):
        self.P, self.kind, self.enabled, self.max_records = P, kind, enabled, max_records
        self.trim_checkpoint_hits = trim_checkpoint_hits  # the edge-llm-0.10 semantics (semantics.py)
        self.pools = (ResourcePool(num_pages, on_allocate=on_page_allocate),
                      ResourcePool(rec_slots, on_free=(lambda i: on_slot_free(RECURRENT, i)) if on_slot_free else None),
                      ResourcePool(pkv_slots, on_free=(lambda i: on_slot_free(PARTIAL, i)) if on_slot_free else None),
                      ResourcePool(draft_pages, on_allocate=on_draft_allocate))
        self.paired = False     # the batch being admitted decodes speculatively (CR-SPEC-7)
        self.index: dict[bytes, int] = {}
        self.page_key: dict[int, bytes] = {}
        self.records: OrderedDict = OrderedDict()  # LRU first
        self.ckpt_lengths: dict[int, int] = {}       # checkpoint length -> number of records
        self.metrics = Metrics()

    @property
    def pages(self) -> ResourcePool:
        return self.pools[PAGES]

    # ------------------------------------------------------------------ planning (no effects)

    def plan(self, ident, n: int, *, bypass: bool, splits_media) -> Plan:
        """The plan of one sequence; `splits_media(a, b)` says whether a reuse boundary between
        positions a and b would split media the trim gives back (CR-MEDIA-3: one item; under
        edge-llm-0.10 any two media positions). Planning changes no reference count and no
        recency (CR-PLAN)."""
        t0 = time.perf_counter_ns()
        total = math.ceil(n / self.P) if self.kind != "recurrent" else 0
        if bypass or not self.enabled:
            plan = Plan("no_reusable_prefix", 0, 0, [], total, bypass=True)
        elif self.paired:
            plan = self._plan_paired(ident, n, total, splits_media)
        elif self.kind == "vanilla":
            plan = self._plan_vanilla(ident, n, total, splits_media)
        else:
            plan = self._plan_checkpoint(ident, n, total)
        self.metrics.planning_ns += time.perf_counter_ns() - t0
        return plan

    def _trim_checkpoint(self, ident, n, plan, splits_media) -> Plan:
        """Edge-LLM 0.10 runs its media trim on checkpoint hits too: the reuse floored to whole
        pages, then given back while the boundary is a media one. A hit trimmed to 0 becomes a
        cold plan that keeps what it pinned (recomputed in place, as CR-MEDIA-5); a hit trimmed
        to another length keeps its exact length here, since no state exists at the floor (0.10
        would restore at L and compute from the floor: its outputs are undefined there)."""
        r = plan.reused - plan.reused % self.P
        while 0 < r < n and splits_media(r - 1, r):
            r -= self.P
        if r == 0:
            return Plan("no_reusable_prefix", 0, 0, plan.kept, plan.demand, forced_cold=plan.forced_cold)
        return plan

    def _plan_vanilla(self, ident, n, total, splits_media) -> Plan:
        kept = self._lookup(ident, n // self.P)
        matched = len(kept) * self.P
        r, kind = self._rewind(kept, n)
        demand = total - len(kept)                        # CR-PLAN-5
        r, matched, kind = self._trim_media(ident, r, matched, kind, splits_media)
        return Plan(kind, matched, r, kept, demand)       # CR-MEDIA-5: kept/demand unchanged

    def _rewind(self, kept: list, n: int) -> tuple[int, str]:
        """CR-PLAN-2: when every page of an aligned input matched, the last page is given back
        (popped from `kept`) and recomputed, so the prefill has a token to compute; returns
        (reused tokens, plan kind)."""
        m = len(kept)
        if m and n % self.P == 0 and m == n // self.P:
            kept.pop()
            return (m - 1) * self.P, "full_input_rewind"
        return m * self.P, "standard" if m else "no_reusable_prefix"

    def _plan_paired(self, ident, n, total, splits_media) -> Plan:
        """CR-SPEC-1: the base match, paired with the longest prefix one record's draft path
        covers (the most recently used record of those pairing as many); base-only pages are
        not reused. CR-SPEC-2: keep all but the last pair, which is recomputed. CR-SPEC-6: the
        draft demand mirrors the base demand. CR-SPEC-8: the media trim applies after that."""
        base = self._lookup(ident, n // self.P)
        record, k = None, 0
        for rec in reversed(self.records.values()):
            if not rec.draft:
                continue
            j = min(len(rec.draft), len(rec.pages), len(base))
            while j > k and rec.pages[j - 1] != base[j - 1]:
                j -= 1
            if j > k:
                record, k = rec, j
        if k == 0:
            return Plan("no_reusable_prefix", 0, 0, [], total, draft_kept=[], draft_demand=total)
        kept = base[:k - 1]
        kind = "full_input_rewind" if k * self.P == n else ("standard" if kept else "no_reusable_prefix")
        r, matched, kind = self._trim_media(ident, len(kept) * self.P, k * self.P, kind, splits_media)
        return Plan(kind, matched, r, kept, total - len(kept), record=record, draft_kept=record.draft[:k - 1],
                    draft_demand=total - len(kept), replayed=True)

    def _lookup(self, ident, full: int) -> list:
        """CR-PLAN-1: the pages of the longest run of indexed page keys from page 0."""
        kept = []
        for key in ident.page_keys(full):
            page = self.index.get(key)
            if page is None:
                break
            kept.append(page)
        return kept

    def _trim_media(self, ident, r: int, matched: int, kind: str, splits_media):
        """CR-MEDIA-3/4: a media-aware plan reusing r > 0 gives back pages while the boundary
        splits media (`splits_media`), then is restated (matched := r, kind by r); returns (r,
        matched, kind)."""
        if r > 0 and ident.spans:
            while r > 0 and splits_media(r - 1, r):
                r -= self.P
            matched, kind = r, ("standard" if r > 0 else "no_reusable_prefix")
        return r, matched, kind

    def _plan_checkpoint(self, ident, n, total) -> Plan:
        """CR-HYB-5: the longest checkpoint L < n whose exact identity equals [0, L)."""
        for L in sorted((L for L in self.ckpt_lengths if L < n), reverse=True):
            rec = self.records.get(("ckpt", ident.exact_key(L), L))
            if rec is not None:
                return Plan("standard", L, L, list(rec.pages), total - len(rec.pages), record=rec)
        return Plan("no_reusable_prefix", 0, 0, [], total)

    # ------------------------------------------------------------------ eviction

    def _plan_eviction(self, need: tuple, protect: Record | None = None):
        """Victims, LRU first, whose eviction meets `need` in every pool; None if infeasible.
        A victim may free nothing (shared or pinned resources); it is taken all the same."""
        need = tuple(need) + (0,) * (len(self.pools) - len(need))
        short = [max(0, k - pool.num_free) for k, pool in zip(need, self.pools)]
        if not any(short):
            return []
        gained = [0] * len(self.pools)
        drops = tuple({} for _ in self.pools)
        order = [r for r in self.records.values() if r is not protect]
        if protect is not None and protect.key in self.records:
            order.append(protect)                          # a hybrid or EAGLE hit is walked last (CR-HYB-6)
        for n_victims, rec in enumerate(order, 1):
            for p, ids in rec.holdings():
                pool, d = self.pools[p], drops[p]
                for i in ids:
                    d[i] = d.get(i, 0) + 1
                    if pool.cache[i] == d[i] and pool.active[i] == 0:
                        gained[p] += 1
            if all(g >= s for g, s in zip(gained, short)):
                return order[:n_victims]
        return None

    def _evict(self, rec: Record) -> None:
        del self.records[rec.key]
        if rec.key[0] == "ckpt":
            L = rec.key[2]
            self.ckpt_lengths[L] -= 1
            if not self.ckpt_lengths[L]:
                del self.ckpt_lengths[L]
        for p, ids in rec.holdings():
            pool = self.pools[p]
            for i in ids:
                freed = pool.drop_cache(i)
                if p == PAGES and pool.cache[i] == 0:
                    self._unindex(i)
                if freed:
                    pool.reclaimed += 1
        self.metrics.evicted += 1

    def _unindex(self, page: int) -> None:
        """CR-CAP-2: a page no record holds any more leaves the page index: its key finds nothing."""
        del self.index[self.page_key.pop(page)]

    def _make_room(self, need: tuple, protect=None) -> bool:
        victims = self._plan_eviction(need, protect)
        if victims is None:
            return False
        for v in victims:
            self._evict(v)
        return True

    # ------------------------------------------------------------------ admission

    def _acquire(self, plan: Plan):
        pages, slots = self.pools[PAGES], []
        for p in plan.kept:
            pages.pin(p)
        if plan.record is not None and not plan.paired:
            slots = [(p, ids[0]) for p, ids in plan.record.holdings() if p != PAGES]
        for p, i in slots + [(DRAFT, d) for d in plan.draft_kept or ()]:
            self.pools[p].pin(i)
        if not self._make_room((plan.demand, 0, 0, plan.draft_demand), protect=plan.record):
            for p in plan.kept:
                pages.unpin(p)
            for p, i in slots + [(DRAFT, d) for d in plan.draft_kept or ()]:
                self.pools[p].unpin(i)
            return None
        if plan.record is not None and plan.record.key in self.records:
            self.records.move_to_end(plan.record.key)      # a hybrid or EAGLE hit touches its record
        if plan.paired:                                    # CR-SPEC-6: the draft page table
            plan.draft_pages = list(plan.draft_kept) + self.pools[DRAFT].allocate(plan.draft_demand)
        return plan.kept + pages.allocate(plan.demand), slots

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
        if self.trim_checkpoint_hits and plan.record is not None and not plan.paired and ident.spans:
            plan = self._trim_checkpoint(ident, n, plan, splits_media)   # hybrid hits, after acquisition, as 0.10
        m = self.metrics
        m.admitted += 1
        m.hits += plan.matched > 0
        m.media_aware += media_aware
        m.lookup_bypass += plan.bypass
        m.forced_cold += plan.forced_cold
        m.matched_tokens += plan.matched
        m.reused_tokens += plan.reused
        m.plans[plan.kind] += 1
        m.restores += plan.record is not None and not plan.paired
        m.page_replays += plan.replayed                    # CR-SPEC-3
        return plan, got[0], got[1]

    def grow(self, page_table: list, target: int, draft_table: list | None = None) -> bool:
        """Extend a live sequence's pages to `target` (CR-CAP-9), and a paired sequence's draft
        pages with them (CR-SPEC-6); False if infeasible."""
        need = target - len(page_table)
        draft_need = target - len(draft_table) if draft_table is not None else 0
        if need <= 0 and draft_need <= 0:
            return True
        if not self._make_room((max(need, 0), 0, 0, max(draft_need, 0))):
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

    def _canonical_path(self, keys, page_table) -> list:
        """CR-PUB-5: the indexed page of each key, else the publisher's own (then indexed)."""
        path = []
        for key, own in zip(keys, page_table):
            page = self.index.get(key)
            if page is None:
                page = own
                self.index[key] = page
                self.page_key[page] = key
            path.append(page)
        return path

    def _insert(self, rec: Record, staged=()) -> None:
        """Insert a new record as most recently used under the record limit (CR-CAP-6).

        `staged` are the (pool, id) reservations of a capture: they pass to the record on
        insertion (CR-HYB-4), before a limit eviction, so a record evicted at once returns
        them to the free pool (and they count as reclaimed, CR-MET-10)."""
        victim = None
        if self.max_records > 0 and len(self.records) >= self.max_records:
            victim = next(iter(self.records.values()))     # chosen before the insertion
        for p, ids in rec.holdings():
            for i in ids:
                self.pools[p].add_cache(i)
        for p, i in staged:
            self.pools[p].unpin(i)                         # staging reference -> record only
        self.records[rec.key] = rec
        if rec.key[0] == "ckpt":
            self.ckpt_lengths[rec.key[2]] = self.ckpt_lengths.get(rec.key[2], 0) + 1
        if self.max_records == 0:
            self._evict(rec)
        elif victim is not None:
            self._evict(victim)

    def publish_pages(self, ident, page_table: list, k: int) -> str:
        """Publish the first k pages of a sequence's history as a record (CR-PUB-4..6)."""
        keys = ident.page_keys(k)
        key = ("pages", keys[-1], k)
        self.metrics.attempts += 1
        if key in self.records:
            self.records.move_to_end(key)
            self.metrics.existing += 1
            return "existing"
        self._insert(Record(key, self._canonical_path(keys, page_table)))
        self.metrics.committed += 1
        return "committed"

    def publish_pairs(self, ident, page_table: list, draft_table: list, k: int) -> str:
        """CR-SPEC-4: publish the first k pages of a paired sequence with its draft pages. A new
        endpoint is a new record (committed); a base-only one is upgraded with the draft path and
        touched (committed); a paired one is touched (existing). Both commits are pair publications."""
        keys = ident.page_keys(k)
        key = ("pages", keys[-1], k)
        self.metrics.attempts += 1
        rec = self.records.get(key)
        if rec is not None and rec.draft is not None:
            self.records.move_to_end(key)
            self.metrics.existing += 1
            return "existing"
        self.metrics.committed += 1
        self.metrics.pair_publications += 1
        if rec is not None:
            rec.draft = list(draft_table[:k])
            for d in rec.draft:
                self.pools[DRAFT].add_cache(d)
            self.records.move_to_end(key)
            return "committed"
        self._insert(Record(key, self._canonical_path(keys, page_table), draft=list(draft_table[:k])))
        return "committed"

    def reserve_capture(self, need_partial: bool):
        """Reserve the slots of one checkpoint capture, evicting if needed (CR-HYB-4).
        Returns (recurrent slot, partial-KV slot or None), or None for a pressure skip."""
        if not self._make_room((0, 1, int(need_partial))):
            self.metrics.pressure_skips += 1
            return None
        rec = self.pools[RECURRENT].allocate(1)[0]
        pkv = self.pools[PARTIAL].allocate(1)[0] if need_partial else None
        return rec, pkv

    def publish_checkpoint(self, ident, page_table: list, L: int, slots) -> str:
        """Publish a staged capture at exact length L (CR-HYB-4)."""
        rec_slot, pkv_slot = slots
        key = ("ckpt", ident.exact_key(L), L)
        self.metrics.attempts += 1
        if key in self.records:
            self.records.move_to_end(key)
            self.metrics.existing += 1
            self.pools[RECURRENT].unpin(rec_slot)
            if pkv_slot is not None:
                self.pools[PARTIAL].unpin(pkv_slot)
            return "existing"
        full = L // self.P if self.kind == "hybrid" else 0
        rec = Record(key, self._canonical_path(ident.page_keys(full), page_table), rec_slot, pkv_slot)
        self._insert(rec, staged=[(p, i) for p, i in ((RECURRENT, rec_slot), (PARTIAL, pkv_slot)) if i is not None])
        self.metrics.committed += 1
        return "committed"

    # ------------------------------------------------------------------ reporting and checks

    def profile(self) -> dict:
        m = self.metrics
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
            "resource_pools": {"base_kv_pages": pool(self.pools[PAGES]), "draft_kv_pages": pool(self.pools[DRAFT]),
                               "recurrent_snapshots": pool(self.pools[RECURRENT]),
                               "partial_kv_snapshots": pool(self.pools[PARTIAL])},
            "reclaimed_resources": {"base_kv_pages": self.pools[PAGES].reclaimed,
                                    "draft_kv_pages": self.pools[DRAFT].reclaimed,
                                    "recurrent_snapshots": self.pools[RECURRENT].reclaimed,
                                    "partial_kv_snapshots": self.pools[PARTIAL].reclaimed},
        }

    def check_invariants(self, live_tables=(), live_slot_pins=(), live_draft_tables=()) -> None:
        """Raise CacheInvariantError unless every reference count equals the references
        actually held by records and live sequences, and the free lists and index agree."""
        def fail(msg):
            raise CacheInvariantError(msg)
        active = [[0] * p.capacity for p in self.pools]
        cache = [[0] * p.capacity for p in self.pools]
        for table in live_tables:
            for i in table:
                active[PAGES][i] += 1
        for p, i in live_slot_pins:
            active[p][i] += 1
        for table in live_draft_tables:
            for i in table:
                active[DRAFT][i] += 1
        lengths: dict = {}
        for key, rec in self.records.items():
            if rec.key != key:
                fail(f"record stored under a foreign key {key!r}")
            if key[0] == "ckpt":
                lengths[key[2]] = lengths.get(key[2], 0) + 1
            for p, ids in rec.holdings():
                for i in ids:
                    cache[p][i] += 1
        if lengths != self.ckpt_lengths:
            fail(f"checkpoint length table {self.ckpt_lengths} != records {lengths}")
        if self.max_records == 0 and self.records or len(self.records) > max(self.max_records, 0):
            fail(f"{len(self.records)} records exceed the limit {self.max_records}")
        for p, pool in enumerate(self.pools):
            if pool.active != active[p]:
                bad = next(i for i in range(pool.capacity) if pool.active[i] != active[p][i])
                fail(f"{POOL_NAMES[p]}[{bad}]: active count {pool.active[bad]} != {active[p][bad]} held")
            if pool.cache != cache[p]:
                bad = next(i for i in range(pool.capacity) if pool.cache[i] != cache[p][i])
                fail(f"{POOL_NAMES[p]}[{bad}]: cache count {pool.cache[bad]} != {cache[p][bad]} held by records")
            free = set(pool.free)
            if len(free) != len(pool.free):
                fail(f"{POOL_NAMES[p]}: an id is twice on the free list")
            idle = {i for i in range(pool.capacity) if active[p][i] == 0 and cache[p][i] == 0}
            if free != idle:
                fail(f"{POOL_NAMES[p]}: free list != ids with no reference ({sorted(free ^ idle)[:8]})")
        for key, page in self.index.items():
            if self.pages.cache[page] == 0 or self.page_key.get(page) != key:
                fail(f"index maps a key to page {page}, which has no cache reference or another key")
        cached = {i for i in range(self.pages.capacity) if self.pages.cache[i] > 0}
        if cached != set(self.page_key) or len(self.page_key) != len(self.index):
            fail("pages with cache references and indexed pages differ")
