"""Capacity defects: records, recency and eviction (CR-CAP).

Subclasses of the context cache (`gpu_backend.prefix_cache.ContextCache`) or of its store of
pools, index and records (`gpu_backend.cache_store.CacheStore`) whose bookkeeping differs from
the bundled one in the lines marked `# DEFECT`.
"""
from __future__ import annotations

from gpu_backend.cache_pools import PAGES, Record
from gpu_backend.cache_store import CacheStore
from gpu_backend.prefix_cache import ContextCache

from .registry import variant


@variant("hit-touches-record", "capacity")
class HitTouchesRecord(ContextCache):
    """A vanilla page hit moves the records holding the hit pages to most-recently-used, so the
    eviction order follows use, not publication.

    Bug class: LRU recency on hit. Violates: CR-CAP-5, CR-CAP-4.
    Mirrors: the vLLM / SGLang block-level LRU (a hit refreshes `last_access_time`), which the
    Edge-LLM 0.10 record store does not do (edge-llm-0.10-semantics.md section 6: "vanilla
    block hits neither touch nor protect records").
    """

    def _acquire(self, plan):
        got = super()._acquire(plan)
        if got is not None and plan.kept and plan.record is None:
            last = plan.kept[-1]
            for key in [k for k, rec in self.records.items() if last in rec.pages]:
                self.records.move_to_end(key)                                       # DEFECT
        return got


@variant("evicts-mru", "capacity")
class EvictsMRU(CacheStore):
    """The eviction planner walks records from most to least recently used.

    Bug class: eviction order inverted. Violates: CR-CAP-4.
    Mirrors: the evictable-accounting class (SGLang #35270: eviction bookkeeping that disagrees
    with the policy it implements); the Edge-LLM planner walks records LRU to MRU
    (edge-llm-0.10-semantics.md section 6).
    """

    def _eviction_order(self, protect):
        order = [r for r in reversed(self.records.values()) if r is not protect]    # DEFECT: MRU first
        if protect is not None and protect.key in self.records:
            order.append(protect)
        return order


@variant("record-limit-off-by-one", "capacity")
class RecordLimitOffByOne(CacheStore):
    """The record limit admits one record too many: the least recently used record is evicted
    only when the store already holds more than M records.

    Bug class: off-by-one in a capacity check. Violates: CR-CAP-6, CR-MET-8.
    Mirrors: SGLang #35270 (`evictable_size()` miscounts, the memory check misfires); Edge-LLM
    `--contextCacheMaxRecords` evicts before inserting the (M+1)-th record.
    """

    def insert(self, rec: Record, staged=()) -> None:
        victim = None
        if self.max_records > 0 and len(self.records) > self.max_records:          # DEFECT: > not >=
            victim = next(iter(self.records.values()))
        for p, ids in rec.holdings():
            for i in ids:
                self.pools[p].add_cache(i)
        for p, i in staged:
            self.pools[p].unpin(i)
        self.records[rec.key] = rec
        if rec.key[0] == "ckpt":
            self.ckpt_lengths[rec.key[2]] = self.ckpt_lengths.get(rec.key[2], 0) + 1
        if self.max_records == 0:
            self._evict(rec)
        elif victim is not None:
            self._evict(victim)


@variant("stale-index-after-evict", "capacity")
class StaleIndexAfterEvict(CacheStore):
    """An evicted page stays in the page index: a later lookup finds its key and serves
    whatever the (freed, possibly reallocated) page holds now.

    Bug class: stale-index-after-evict. Violates: CR-CAP-2, CR-PLAN-1, CR-OUT-3.
    Mirrors: vLLM PR #4761 (block manager v2: an evicted block stayed in the cached-block map and
    was served after reallocation) and kvcached #362 (`block_hash` not reset on free).
    """

    def _unindex(self, page: int) -> None:
        pass                          # DEFECT: the index keeps the key of a page whose cache count reached 0


@variant("pinned-pages-evicted", "capacity")
class PinnedPagesEvicted(CacheStore):
    """Evicting a record frees its pages when their cache count reaches 0, even when a live
    sequence still holds them: the page goes back to the free list while in use and is handed
    out again.

    Bug class: dedup-use-after-free. Violates: CR-CAP-2, CR-CAP-4, CR-OUT-3.
    Mirrors: sgl-project/mini-sglang PR #142 (duplicate prefix pages freed while the request's
    page table still points to them) and ROCm ATOM PR #1358 (a later request reuses freed KV).
    """

    def _evict(self, rec: Record) -> None:
        pages = self.pools[PAGES]
        in_use = [i for i in rec.pages if pages.cache[i] == 1 and pages.active[i] > 0]
        super()._evict(rec)
        for i in in_use:                                                           # DEFECT
            pages.free.append(i)
            pages.reclaimed += 1
