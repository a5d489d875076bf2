"""The context cache's reference counts recounted from scratch (`--checkInvariants`).

Every count the pools keep must equal the references actually held: active counts by the live
sequences' page tables and snapshot pins, cache counts by the records (CR-CAP-2); the free
lists must hold exactly the ids with no reference, the page index exactly the pages records
hold, and the record store must respect its limit (CR-CAP-6). A bookkeeping slip shows here
right after the batch that made it, long before it shows as a wrong count or a stale read.
"""
from .cache_pools import DRAFT, PAGES, POOL_NAMES


class CacheInvariantError(AssertionError):
    pass


def fail(msg):
    raise CacheInvariantError(msg)


def check_invariants(store, live_tables=(), live_slot_pins=(), live_draft_tables=()) -> None:
    """Raise CacheInvariantError unless every reference count of `store` (a cache_store.CacheStore)
    equals the references actually held by records and live sequences, and the free lists and
    index agree."""
    active = [[0] * p.capacity for p in store.pools]
    cache = [[0] * p.capacity for p in store.pools]
    for table in live_tables:
        for i in table:
            active[PAGES][i] += 1
    for p, i in live_slot_pins:
        active[p][i] += 1
    for table in live_draft_tables:
        for i in table:
            active[DRAFT][i] += 1
    _check_records(store, cache)
    for p, pool in enumerate(store.pools):
        _check_pool(p, pool, active[p], cache[p])
    for key, page in store.index.items():
        if store.pages.cache[page] == 0 or store.page_key.get(page) != key:
            fail(f"index maps a key to page {page}, which has no cache reference or another key")
    cached = {i for i in range(store.pages.capacity) if store.pages.cache[i] > 0}
    if cached != set(store.page_key) or len(store.page_key) != len(store.index):
        fail("pages with cache references and indexed pages differ")


def _check_records(store, cache) -> None:
    """Count the records' holdings into `cache`; check keys, checkpoint lengths and the limit."""
    lengths: dict = {}
    for key, rec in store.records.items():
        if rec.key != key:
            fail(f"record stored under a foreign key {key!r}")
        if key[0] == "ckpt":
            lengths[key[2]] = lengths.get(key[2], 0) + 1
        for p, ids in rec.holdings():
            for i in ids:
                cache[p][i] += 1
    if lengths != store.ckpt_lengths:
        fail(f"checkpoint length table {store.ckpt_lengths} != records {lengths}")
    if store.max_records == 0 and store.records or len(store.records) > max(store.max_records, 0):
        fail(f"{len(store.records)} records exceed the limit {store.max_records}")


def _check_pool(p: int, pool, active: list, cache: list) -> None:
    if pool.active != active:
        bad = next(i for i in range(pool.capacity) if pool.active[i] != active[i])
        fail(f"{POOL_NAMES[p]}[{bad}]: active count {pool.active[bad]} != {active[bad]} held")
    if pool.cache != cache:
        bad = next(i for i in range(pool.capacity) if pool.cache[i] != cache[i])
        fail(f"{POOL_NAMES[p]}[{bad}]: cache count {pool.cache[bad]} != {cache[bad]} held by records")
    free = set(pool.free)
    if len(free) != len(pool.free):
        fail(f"{POOL_NAMES[p]}: an id is twice on the free list")
    idle = {i for i in range(pool.capacity) if active[i] == 0 and cache[i] == 0}
    if free != idle:
        fail(f"{POOL_NAMES[p]}: free list != ids with no reference ({sorted(free ^ idle)[:8]})")
