"""Capacity: pools, the page index, the record store and the eviction planner (CR-CAP, with
the record mechanics of CR-PUB-4 .. CR-PUB-6).

Four pools (KV pages, recurrent snapshot slots, partial-KV snapshot slots and the draft KV pages of
attention-only EAGLE, CR-SPEC-5) hold resources with
two reference counts (CR-CAP-2): `active` (sequences and staged captures using it) and `cache`
(records holding it). The page index maps a page key to its canonical page and loses the entry
exactly when the page's cache count reaches 0. Records live in an OrderedDict kept in LRU order
(first = least recently used). Counts never depend on which physical id is used (Appendix A),
so ids come from a simple recycled stack.

While tracing, the cache records its eviction steps (CR-CAP-2, CR-CAP-4 .. CR-CAP-6) and keeps
what explaining a later lookup needs, beside the state it explains: the publication step each
indexed page came from, the step that says why a key is not in the index, the evicted record
keys, the same ids held under other identities, publishers' partial last pages, page hits. None
of it is kept, and no reason composed, while not tracing; no count ever reads it.
"""

from collections import OrderedDict
from dataclasses import dataclass
from itertools import chain, repeat

from .trace import adapter_name, positions_of
from .identity import another_identity

PAGES, RECURRENT, PARTIAL_KV, DRAFT = 0, 1, 2, 3
POOL_NAMES = ("base_kv_pages", "recurrent_snapshots", "partial_kv_snapshots", "draft_kv_pages")


class Pool:
    """Resources with an active and a cache reference count; free when both are 0 (CR-CAP-2)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.active: dict[int, int] = {}
        self.cache: dict[int, int] = {}
        self._recycled: list[int] = []
        self._fresh = 0
        self.held = 0

    @property
    def free(self) -> int:
        return self.capacity - self.held

    def allocate(self) -> int:
        """Take a free resource for an active user (the caller checked `free`)."""
        return self.allocate_all(1)[0]

    def allocate_all(self, count: int) -> list[int]:
        """Take `count` free resources for active users (the caller checked `free`): recycled
        ones first, most recently freed first, then fresh ids."""
        assert self.held + count <= self.capacity, "allocation from an empty pool"
        recycled = self._recycled
        taken = [recycled.pop() for _ in range(min(count, len(recycled)))]
        if len(taken) < count:
            fresh = self._fresh + count - len(taken)
            taken += range(self._fresh, fresh)
            self._fresh = fresh
        for r in taken:
            self.active[r] = 1
        self.held += count
        return taken

    def pin(self, r: int) -> None:
        self.pin_all((r,))

    def unpin(self, r: int) -> None:
        self.unpin_all((r,))

    def pin_all(self, rs) -> None:
        """One more active reference on each of `rs` (a loop here, not a call per resource: a
        sequence pins and releases some twenty pages)."""
        active, cache = self.active, self.cache
        for r in rs:
            if r not in active and r not in cache:
                self.held += 1
            active[r] = active.get(r, 0) + 1

    def unpin_all(self, rs) -> None:
        """One active reference less on each of `rs`; a resource no user and no record holds is free."""
        self._drop(self.active, self.cache, rs)

    def add_cache(self, r: int) -> None:
        self.cache[r] = self.cache.get(r, 0) + 1

    def add_cache_all(self, rs) -> None:
        cache = self.cache
        for r in rs:
            cache[r] = cache.get(r, 0) + 1

    def drop_cache_all(self, rs) -> int:
        """Remove one cache reference from each of `rs`; return how many became free."""
        return self._drop(self.cache, self.active, rs)

    def _drop(self, counts: dict, other: dict, rs) -> int:
        """One reference less in `counts` on each of `rs`; a resource that `other` does not hold
        either is free. Returns how many became free."""
        freed = 0
        for r in rs:
            left = counts[r] - 1
            if left:
                counts[r] = left
            else:
                del counts[r]
                if r not in other:
                    self.held -= 1
                    self._recycled.append(r)
                    freed += 1
        return freed


@dataclass(eq=False)
class Record:
    """One published endpoint (CR-PUB-4): its key, its page path from page 0, its snapshot
    slots (hybrid checkpoints, CR-HYB-4) and the tokens it covers."""
    key: tuple
    pages: list
    tokens: int
    recurrent_slot: int | None = None
    partial_kv_slot: int | None = None
    truth: bytes | None = None     # the true identity of a checkpoint (see TokenHistory.truth)
    draft_pages: list | None = None    # the paired draft path of an EAGLE record (CR-SPEC-1)
    step: object = None                # while tracing: the publication step that inserted it
    touched: int = -1                  # while tracing: when it was inserted or last touched (CR-CAP-5)

    def resources(self):
        """(pool, resource) pairs this record holds a cache reference on."""
        for pool, held in self.holdings():
            for r in held:
                yield pool, r

    def holdings(self):
        """(pool, resources) for each pool this record holds cache references in, in pool order."""
        yield PAGES, self.pages
        if self.recurrent_slot is not None:
            yield RECURRENT, (self.recurrent_slot,)
        if self.partial_kv_slot is not None:
            yield PARTIAL_KV, (self.partial_kv_slot,)
        if self.draft_pages:
            yield DRAFT, self.draft_pages


class ContextCache:
    """The cache of one runtime instance (CR-ID-5): pools, page index and records."""

    def __init__(self, pages: int, recurrent_slots: int, partial_kv_slots: int, max_records: int,
                 draft_pages: int = 0, trace=None):
        self.pools = (Pool(pages), Pool(recurrent_slots), Pool(partial_kv_slots), Pool(draft_pages))
        self.index: dict[bytes, int] = {}
        self.page_key: dict[int, bytes] = {}
        self.records: OrderedDict[tuple, Record] = OrderedDict()
        self.max_records = max_records
        self.evicted = 0
        self.reclaimed = [0, 0, 0, 0]
        self.truth: dict[int, bytes] = {}       # page -> true identity (conflating profiles only)
        self.lengths: dict[int, int] = {}     # tokens covered -> number of records (CR-HYB-5)
        self.trace = trace                      # a reference.trace.Trace while tracing (no effect on counts)
        # explanation state, kept only while tracing (the module docstring):
        self.origin: dict[bytes, object] = {}    # indexed page key -> the publication step that indexed it
        self.unindexed: dict[bytes, object] = {}  # page key -> the step that took it out or withheld it
        self.gone: dict[tuple, object] = {}      # evicted record key -> its eviction step
        self.by_ids: dict[bytes, dict] = {}      # ids-only key -> {page or record key: (publisher, adapter)}
        self.tails: dict[bytes, list] = {}       # parent key -> [(ids of a partial last page, its publisher)]
        self.hits: dict[int, tuple] = {}         # page -> (when, by whom) it was last hit (CR-CAP-5)

    @property
    def pages(self) -> Pool:
        return self.pools[PAGES]

    # -- records (CR-PUB-4 .. CR-PUB-6, CR-CAP-6) ----------------------------------------------

    def canonical_pages(self, keys, own_pages, truths=None) -> list[int]:
        """CR-PUB-5, for each page of a new record: the page the index maps keys[i] to, else the
        publisher's own page own_pages[i], indexed. `truths[i]`: the page's true identity, kept
        beside the index where the profile's key conflates media (reference/semantics.py), so a
        hit can tell whether it reuses other pixels' KV (None: no true identities kept)."""
        index, page_key, truth_of = self.index, self.page_key, self.truth
        pages = []
        for key, own, truth in zip(keys, own_pages, truths if truths is not None else repeat(None)):
            page = index.get(key)
            if page is None:
                page = index[key] = own
                page_key[own] = key
                if truth is not None:
                    truth_of[own] = truth
            pages.append(page)
        return pages

    @property
    def draft(self) -> Pool:
        return self.pools[DRAFT]

    def touch(self, record: Record) -> None:
        self.records.move_to_end(record.key)
        if self.trace is not None:
            record.touched = self.trace.now

    def attach_draft(self, record: Record, draft_pages: list) -> None:
        """CR-SPEC-4: an EAGLE publication of an endpoint held as a base-only record upgrades it
        with the publisher's draft path; each draft page gets one cache reference."""
        record.draft_pages = list(draft_pages)
        for d in record.draft_pages:
            self.draft.add_cache(d)

    def insert(self, record: Record, transfer=()) -> None:
        """Insert a new record at most-recently-used; every resource it holds gets one cache
        reference (CR-PUB-6). `transfer` lists reserved snapshot slots whose active reference
        passes to the record (CR-HYB-4). CR-CAP-6: a store already holding `max_records` records
        evicts the LRU record chosen before the insertion; with a limit of 0 the new one goes
        at once."""
        victim = None
        if self.max_records and len(self.records) >= self.max_records:
            victim = next(iter(self.records.values()))
        for pool, held in record.holdings():
            self.pools[pool].add_cache_all(held)
        for pool, r in transfer:
            self.pools[pool].unpin(r)
        self.records[record.key] = record
        self.lengths[record.tokens] = self.lengths.get(record.tokens, 0) + 1
        if self.trace is not None:
            record.touched = self.trace.now
            self.gone.pop(record.key, None)
        if self.max_records == 0:
            victim = record
        if victim is not None:
            self.evict(victim, "CR-CAP-6")

    def evict(self, record: Record, rule: str = "CR-CAP-4") -> None:
        """Remove a record: drop its cache references; a page whose cache count reaches 0 leaves
        the index (CR-CAP-2); resources that become free count as reclaimed (CR-MET-10). `rule`:
        what chose it, the planner (CR-CAP-4) or the record limit (CR-CAP-6), for the trace."""
        traced = self.trace is not None
        left_index, in_use, freed = [], [], 0             # what the trace says of it (kept only when traced)
        del self.records[record.key]
        self.evicted += 1
        left = self.lengths[record.tokens] - 1
        if left:
            self.lengths[record.tokens] = left
        else:
            del self.lengths[record.tokens]
        for pool_id, held in record.holdings():
            pool = self.pools[pool_id]
            if pool_id == PAGES:
                for r in held:
                    if pool.cache[r] == 1:                       # its last record: it leaves the index
                        key = self.page_key.pop(r)
                        del self.index[key]
                        self.truth.pop(r, None)
                        if traced:
                            left_index.append(key)
                            if r in pool.active:
                                in_use.append(r)
            reclaimed = pool.drop_cache_all(held)
            self.reclaimed[pool_id] += reclaimed
            if pool_id == PAGES:
                freed = reclaimed
        if traced:
            self._evicted(record, rule, left_index, in_use, freed)

    def _evicted(self, record: Record, rule: str, left_index: list, in_use: list, freed: int) -> None:
        """The steps of an eviction: the record (CR-CAP-4 or CR-CAP-6, after a page hit that did
        not touch it, CR-CAP-5) and its pages that left the index or stay in use (CR-CAP-2)."""
        trace, origin = self.trace, record.step
        actor = trace.actor.name if trace.actor is not None else "a sequence"
        by = origin.by if origin is not None and origin.by else actor
        size = f"{len(record.pages)} page(s)" + (f", L = {record.tokens}" if record.recurrent_slot is not None else "")
        if rule == "CR-CAP-6":
            why = (f"the record of {by} ({size}) evicted by the record limit {self.max_records}: "
                   + ("every new record is evicted at once" if self.max_records == 0 else
                      f"{actor}'s new record found the store full, and this was the least recently used"))
        else:
            why = f"the record of {by} ({size}) evicted: least recently used while the planner freed room for {actor}"
        hits = [self.hits[p] for p in record.pages if self.hits.get(p, (-1,))[0] > record.touched]
        untouched = None
        if hits:
            untouched = trace.add(None, "CR-CAP-5", "recency", by, f"{max(hits)[1]} hit the pages of the record of "
                                  f"{by} after it was last touched: a page hit does not touch a record, so it stays "
                                  "where publication put it in the LRU order")
        step = self.gone[record.key] = trace.add(None, rule, "records", self.evicted, why, refs={"by": by},
                                                 causes=(origin, untouched))
        if left_index:
            left = trace.add(None, "CR-CAP-2", "pages", len(left_index),
                             f"{len(left_index)} page(s) of the record of {by} leave the page index: no record holds "
                             f"them any more (evicted by {rule})", causes=(step,))
            for key in left_index:
                self.unindexed[key] = left
                self.origin.pop(key, None)
        if in_use:
            trace.add(None, "CR-CAP-2", "pages", len(in_use),
                      f"{len(in_use)} page(s) of the evicted record stay allocated: a running sequence still uses "
                      f"them (active count > 0); {freed} freed", causes=(step,))

    # -- explanation state, while tracing -----------------------------------------------------------

    def indexed(self, step, history, count: int, lora) -> None:
        """The pages 0 .. count - 1 of `history` that publication `step` just put in the index
        came from it (a later hit names it); their ids are held under its identity (CR-ID-3/4)."""
        ids = None
        for j, key in enumerate(history.keys(count)):
            if key not in self.origin and key in self.index:
                self.origin[key] = step
                self.unindexed.pop(key, None)
                ids = ids or history.ids_keys(count)
                self.by_ids.setdefault(ids[j], {})[key] = (step.by, lora)

    def withhold(self, keys, step) -> None:
        """Pages a bypass sequence computed and never published (CR-PUB-7, `step`)."""
        for key in keys:
            if key not in self.index:
                self.unindexed.setdefault(key, step)

    def same_ids(self, ids_key: bytes, own_key, live):
        """(publisher, its adapter) of a live page or record (`live(key)`) holding the same ids as
        `ids_key` under another key, or None."""
        for key, holder in (self.by_ids.get(ids_key) or {}).items():
            if key != own_key and live(key):
                return holder
        return None

    def why_unindexed(self, history, k: int, steps) -> tuple:
        """(rule, phrase, causes) of page k of `history` not being in the page index, from what
        the cache kept: it left the index (CR-CAP-2) or its bypass sequence withheld it
        (CR-PUB-7); the same ids are held under another adapter or other media (CR-ID-3,
        CR-ID-4); an earlier request held them only in its partial last page (CR-ID-2); else no
        page of its identity was ever published (CR-ID-1)."""
        P, key = history.P, history.key(k)
        lo, hi = k * P, (k + 1) * P
        left = self.unindexed.get(key)
        if left is not None and left.value == "pages":
            root = left.causes[0] if left.causes else left
            return root.rule, f"left the page index: {left.why}", (left,)
        if left is not None:
            return left.rule, f"was computed by {left.by}, which published nothing: {left.why}", (left,)
        other = self.same_ids(history.ids_keys(k + 1)[k], key, self.index.__contains__)
        if other is not None:
            request = steps.seq.request
            rule, why = another_identity(steps.name, request.lora_name, request.spans, other, hi, "pages")
            return rule, f"is not cached: {why}", ()
        mine = history.tokens[lo:hi]
        for tail, who in self.tails.get(history.key(k - 1) if k else history.root, ()):
            if mine[:len(tail)] == tail:
                return "CR-ID-2", (f"is not cached: {who} holds {positions_of(lo, lo + len(tail))} of the same prefix "
                                   "only in its partial last page, and only complete pages have an identity"), ()
        return "CR-ID-1", (f"is not cached: its identity (the ids of positions 0-{hi - 1} under "
                           f"{adapter_name(steps.seq.request.lora_name)}, compared exactly, CR-ID-6) is that of no "
                           "page an earlier request published"), ()

    # -- eviction planner (CR-CAP-4) and acquisition (CR-CAP-3) --------------------------------

    def plan_eviction(self, demand: tuple, protected: Record | None = None) -> list | None:
        """CR-CAP-4: the shortest LRU-first prefix of records whose eviction frees `demand` (a
        count per pool, missing trailing pools 0), `protected` walked last (CR-HYB-6, CR-SPEC-1);
        [] if free resources suffice; None if even evicting every record would not. A resource counts as freed when its cache count would
        reach 0 while its active count is 0; a victim may free nothing and is still a victim."""
        demand = tuple(demand) + (0,) * (len(self.pools) - len(demand))
        short = [d - pool.free for d, pool in zip(demand, self.pools)]
        if max(short) <= 0:
            return []
        walk = (r for r in self.records.values() if r is not protected)
        if protected is not None and protected.key in self.records:
            walk = chain(walk, [protected])
        dropped = tuple({} for _ in self.pools)
        victims = []
        for record in walk:
            victims.append(record)
            for pool_id, held in record.holdings():
                pool, drops = self.pools[pool_id], dropped[pool_id]
                for r in held:
                    d = drops[r] = drops.get(r, 0) + 1
                    if d == pool.cache[r] and r not in pool.active:
                        short[pool_id] -= 1
            if max(short) <= 0:
                return victims
        return None

    def reserve(self, demand: tuple, protected: Record | None = None) -> bool:
        """Evict what the planner chooses for `demand`; False (and nothing evicted) if infeasible."""
        victims = self.plan_eviction(demand, protected)
        if victims is None:
            return False
        for record in victims:
            self.evict(record)
        return True

    def acquire(self, kept: list, private: int, slot_pins=(), protected: Record | None = None,
                draft_kept: list = (), draft_private: int = 0):
        """CR-CAP-3: pin the kept pages (and a hybrid hit's snapshot slots, and an EAGLE hit's
        kept draft pages, CR-SPEC-6), then obtain `private` fresh pages and `draft_private` draft
        pages, evicting with the planner for both pools at once; on failure roll the pins back
        and return None. Returns the sequence's page list (kept pages, then private pages), or
        with draft pages a pair (pages, draft pages)."""
        pages = self.pages
        pages.pin_all(kept)
        for pool, r in slot_pins:
            self.pools[pool].pin(r)
        self.draft.pin_all(draft_kept)
        if not self.reserve((private, 0, 0, draft_private), protected):
            pages.unpin_all(kept)
            for pool, r in slot_pins:
                self.pools[pool].unpin(r)
            self.draft.unpin_all(draft_kept)
            return None
        held = list(kept) + pages.allocate_all(private)
        if not draft_kept and not draft_private:
            return held
        return held, list(draft_kept) + self.draft.allocate_all(draft_private)

    def grow(self, held: list, need: int, draft_held: list | None = None) -> bool:
        """CR-CAP-9: extend a sequence's page list to `need` pages, evicting with the planner;
        an EAGLE sequence's draft pages grow with them, one demand over both pools (CR-SPEC-6)."""
        extra = need - len(held)
        draft_extra = need - len(draft_held) if draft_held is not None else 0
        if extra <= 0 and draft_extra <= 0:
            return True
        if not self.reserve((max(extra, 0), 0, 0, max(draft_extra, 0))):
            return False
        held.extend(self.pages.allocate_all(max(extra, 0)))
        if draft_held is not None:
            draft_held.extend(self.draft.allocate_all(max(draft_extra, 0)))
        return True

    def release(self, held: list, draft_held: list | None = None) -> None:
        """CR-CAP-10: a finished (or failed) sequence gives back its pages (active - 1)."""
        self.pages.unpin_all(held)
        held.clear()
        if draft_held:
            self.draft.unpin_all(draft_held)
            draft_held.clear()

    # -- checks -----------------------------------------------------------------------------------

    def check(self, live_pages: list, live_slots: list) -> None:
        """Assert refcounts, free counts and index agree with records and live users."""
        for pool_id, pool in enumerate(self.pools):
            cache, active = {}, {}
            for record in self.records.values():
                for pool_of, r in record.resources():
                    if pool_of == pool_id:
                        cache[r] = cache.get(r, 0) + 1
            users = live_pages if pool_id == PAGES else [[r] for p, r in live_slots if p == pool_id]
            if pool_id == DRAFT:
                users = []
            for held in users:
                for r in held:
                    active[r] = active.get(r, 0) + 1
            name = POOL_NAMES[pool_id]
            assert cache == pool.cache, f"{name}: cache counts {pool.cache} != records {cache}"
            assert active == pool.active, f"{name}: active counts {pool.active} != users {active}"
            assert pool.held == len(set(cache) | set(active)), f"{name}: held count"
            assert 0 <= pool.free <= pool.capacity, f"{name}: free {pool.free}"
        assert set(self.index.values()) == set(self.pages.cache), "index pages != record pages"
        assert all(self.index[k] == p for p, k in self.page_key.items()), "page_key != inverse of index"
        assert len(self.index) == len(self.page_key)
        assert len(self.records) <= max(self.max_records, 0), "record limit exceeded"
