"""The resource pools the context cache hands ids out of, and the records that hold them.

Four pools (CR-CAP-1, CR-HYB-1, CR-SPEC-5): base KV pages, recurrent snapshot slots, partial-KV
snapshot slots and draft KV pages. Every id carries two reference counts, *active* (live
sequences using it) and *cache* (records holding it), and is free exactly when both are 0
(CR-CAP-2). A *record* is one published endpoint (CR-PUB-4): the ordered pages of a prefix
from page 0, plus the snapshot slots of a checkpoint (CR-HYB-4) or the draft path of an EAGLE
record (CR-SPEC-4); records share pages by reference (CR-PUB-6).

The bytes behind the ids live elsewhere: KV in `kv_pool.KVPool`, snapshots in
`snapshots.SnapshotStore`.
"""
from collections import deque
from dataclasses import dataclass

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
        """(pool, ids) of everything the record holds a cache reference on."""
        yield PAGES, self.pages
        if self.rec_slot is not None:
            yield RECURRENT, (self.rec_slot,)
        if self.pkv_slot is not None:
            yield PARTIAL, (self.pkv_slot,)
        if self.draft is not None:
            yield DRAFT, self.draft
