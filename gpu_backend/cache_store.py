"""The state every planner of the context cache shares: pools, page index, records, eviction.

- The *page index* maps a page key to its canonical page; it holds only pages with cache
  references, and a page leaves it when its cache count reaches 0 (CR-CAP-2). It is flat: a
  lookup walks an input's chained keys from page 0 and stops at the first miss (CR-PLAN-1).
- Records are kept in LRU order under a record limit (CR-CAP-6); a new one is inserted as most
  recently used, over the canonical pages of its path (CR-PUB-5).
- The *eviction planner* walks records from least to most recently used until evicting the
  walked prefix would free enough of every pool (CR-CAP-4).

The three planners (page_planner.py, checkpoint_planner.py, paired_planner.py) read and publish
through this one store, so a page published by one is found by another and every pool has one
free list and one eviction order.
"""
from collections import OrderedDict

from .cache_plan import Metrics
from .cache_pools import DRAFT, PAGES, PARTIAL, RECURRENT, Record, ResourcePool


class CacheStore:
    def __init__(self, *, P: int, num_pages: int, rec_slots: int, pkv_slots: int, draft_pages: int,
                 max_records: int, on_page_allocate=None, on_slot_free=None, on_draft_allocate=None):
        self.P, self.max_records = P, max_records
        self.pools = (ResourcePool(num_pages, on_allocate=on_page_allocate),
                      ResourcePool(rec_slots, on_free=(lambda i: on_slot_free(RECURRENT, i)) if on_slot_free else None),
                      ResourcePool(pkv_slots, on_free=(lambda i: on_slot_free(PARTIAL, i)) if on_slot_free else None),
                      ResourcePool(draft_pages, on_allocate=on_draft_allocate))
        self.index: dict[bytes, int] = {}
        self.page_key: dict[int, bytes] = {}
        self.records: OrderedDict = OrderedDict()  # LRU first
        self.ckpt_lengths: dict[int, int] = {}       # checkpoint length -> number of records
        self.metrics = Metrics()

    @property
    def pages(self) -> ResourcePool:
        return self.pools[PAGES]

    # ------------------------------------------------------------------ lookup

    def lookup(self, ident, full: int) -> list:
        """CR-PLAN-1: the pages of the longest run of indexed page keys from page 0."""
        kept = []
        for key in ident.page_keys(full):
            page = self.index.get(key)
            if page is None:
                break
            kept.append(page)
        return kept

    def touch(self, key) -> None:
        """Make a record the most recently used (a hit on it, or a publication that found it)."""
        self.records.move_to_end(key)

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
        order = self._eviction_order(protect)
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

    def _eviction_order(self, protect: Record | None) -> list:
        """The records in the order eviction walks them: least recently used first (CR-CAP-4),
        a hybrid or EAGLE hit being served last (CR-HYB-6)."""
        order = [r for r in self.records.values() if r is not protect]
        if protect is not None and protect.key in self.records:
            order.append(protect)
        return order

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

    def make_room(self, need: tuple, protect=None) -> bool:
        """Evict the planned victims so every pool has `need` free ids (CR-CAP-4); False, and
        nothing evicted, when even evicting every record would not do."""
        victims = self._plan_eviction(need, protect)
        if victims is None:
            return False
        for v in victims:
            self._evict(v)
        return True

    # ------------------------------------------------------------------ insertion

    def canonical_path(self, keys, page_table) -> list:
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

    def insert(self, rec: Record, staged=()) -> None:
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

    def add_draft_path(self, rec: Record, draft: list) -> None:
        """Upgrade a base-only record with a draft path (CR-SPEC-4) and touch it."""
        rec.draft = list(draft)
        for d in rec.draft:
            self.pools[DRAFT].add_cache(d)
        self.touch(rec.key)
