"""`vllm-apc`'s block pool as a trace replay drives it: one request at a time (SIM-ORDER-1),
every rule spec/peer-profiles.md section 3's (PEER-VLLM-3..9), laid out for 10^7 blocks. Stdlib only.

    pool = ReplayVllmPool(block_size=16, cache_blocks=625_000)
    hits = pool.run(keys, n, g)      # keys: one per full block of the n + g - 1 computed tokens

Why a second pool: `VllmBlockPool` (reference/peer_vllm.py) is the oracle, written so that vLLM's
own tests, which hold several requests at once, translate step for step: a reference count per
block, a request's `Running`, a list of holders per key. At the default block size a replay of a
145M-token trace is 9M blocks, and those per-block dict and list operations in Python were most
of its time. With requests that never overlap, most of that bookkeeping is known in advance:

- Between requests no block is held. With a bounded pool every block is then in the free
  queue and every reference count is 0, so a request's hits all sit in the queue (touching
  them only takes them out: PEER-VLLM-5), and it fits (PEER-VLLM-9) exactly when its prompt's
  blocks fit the pool, which the replay checked before (SIM-CAP-2). There are no reference counts
  here: the running request holds its blocks once each and frees them all at its end.
- A block taken from the queue loses its key as it is taken (an eviction, PEER-VLLM-5), so every
  full block past the hits is keyed (PEER-VLLM-4's "not keyed yet" always holds), and a
  request's decode can be taken and keyed with its prompt (with nothing else taking blocks, one
  token at a time or all at once takes the same blocks in the same order).
- So at release a request's blocks split by position, not block by block: its full blocks (the
  hits, and those it keyed) have keys and go to the tail, the blocks past them have none and go
  to the head (PEER-VLLM-5), each part last block first.

- And every block with a key is in the free queue's tail (a request frees its keyed blocks
  there, the others to the head), so a block taken from the tail is an eviction, and the tail
  can carry each block's key beside it: no map from a block to its key is needed.

What stays per block is done by C-level builtins over lists of block ids and keys (integers for
a hash-id trace: `map`, `compress`, `zip`, `dict.update`, `dict.setdefault`): the hit lookup, the
touch, the keying, the release, an eviction of keys held by one block. Only a key held by several
blocks is handled block by block.

The layout. `first` maps a key to its first holder, the one a hit takes (vllm
`BlockHashToBlockMap`); `more` to the later holders in the order they cached it (the block past
the N - 1 cap, EAGLE's dropped block, a block past a chain's evicted middle: rare). Unbounded, a
holder is a block number. Bounded, the free queue is three parts: `front`, the blocks without a
key (stored head last, so the head is a slice off the end), the blocks `lo..K` never handed out
(a range), and the tail of cached blocks, least recently freed first: `order`, the blocks in the
order they joined with `order_keys` beside them, each entry numbered (`base` + its index). There
a holder is the number of its block's tail entry, not the block: a hit finds its entry in one map
lookup and marks it gone (None), with no second map from a block to its place in the queue, and
a release gives its hits' keys their new entries in one `dict.update`. Eviction takes the
tail's live entries from its head, a slice at a time, with their keys. When most entries are
gone the tail is rebuilt from its live ones, renumbered past every number used, `first` and
`more` following (`_compact`: O(queue) amortized).

tests/reference/test_replay_vllm.py replays random pools through this pool and `VllmBlockPool`
(with a `PeerTrace`) side by side: the same hits, free queue, keys and holders after every
request, and the same evictions, cached blocks and freed steps as the oracle's trace records.
"""
from __future__ import annotations

from collections import deque
from functools import partial
from itertools import compress, repeat, takewhile
from operator import eq, is_not, not_


class ReplayVllmPool:
    """The one-group `vllm-apc` pool of `block_size` B and `cache_blocks` K (None: unbounded,
    every block new, nothing evicted), prefix caching on or off, EAGLE dropping the last matched
    block (PEER-VLLM-8), its requests run one at a time, each to its end (SIM-ORDER-1). `evicted`: blocks whose key was dropped so far. `log`: a list to record
    the decisions the oracle's trace records, as (rule, value, to) triples (None: nothing)."""
    COMPACT_SLACK = 64
    """Dead tail entries allowed beyond the live ones before the tail is rebuilt."""

    def __init__(self, block_size: int, cache_blocks: int | None, enable_prefix_caching: bool = True,
                 eagle: bool = False, log: list | None = None):
        self.B, self.K = block_size, cache_blocks
        self.caching, self.eagle, self.log = enable_prefix_caching, eagle, log
        self.first: dict = {}              # key -> its first holder: a block (unbounded), a tail entry (bounded)
        self.more: dict = {}               # key -> its later holders, in the order they cached it, likewise
        self.evicted = 0
        self.fresh = 1                     # unbounded: the next block number never handed out
        self.key_of: list = [None]         # unbounded: by block number, its key (None: none)
        self.front: list = []              # bounded: the queue's blocks without a key, its head last
        self.lo = 1                        # bounded: the first of the blocks lo..K never handed out
        self.order: list = []              # bounded: the tail's entries, a block or None (touched: gone)
        self.order_keys: list = []         # bounded: each entry's key
        self.base = 0                      # the number of the entry order[0]
        self.head = 0                      # order[:head] are passed (taken or gone)
        self.live = 0                      # blocks in the tail

    def __len__(self) -> int:
        """The free queue's length (bounded)."""
        return len(self.front) + max(0, self.K - self.lo + 1) + self.live

    def hit_blocks(self, keys: list, n: int) -> int:
        """PEER-VLLM-3, -6, -8: the leading cached blocks of an n-token prompt whose blocks have
        `keys`, at most floor((n - 1) / B) (the block of the last prompt token is computed
        again), one less under EAGLE; none without prefix caching."""
        return len(self._hits(keys, n))

    def _hits(self, keys: list, n: int) -> list:
        """The first holders (`first`'s values) of the blocks `hit_blocks` counts, in order: one
        map lookup per key, up to the first miss."""
        if not self.caching:
            return []
        found = list(takewhile(partial(is_not, None), map(self.first.get, keys[:(n - 1) // self.B])))
        if self.eagle and found:
            del found[-1]
        return found

    def run(self, keys: list, n: int, g: int) -> int:
        """One request to its end: an n-token prompt sampling g tokens, so computing n + g - 1
        (PEER-VLLM-4), `keys` the keys of its full blocks. Touch the hits, take the other blocks
        from the head of the free queue (evicting), key the full ones, free them all (PEER-VLLM-5).
        Returns the hits (`hit_blocks`)."""
        B = self.B
        computed = n + max(0, g - 1)
        found = self._hits(keys, n)
        hits, full = len(found), computed // B if self.caching else 0
        if self.caching and len(keys) != full:
            raise ValueError(f"{len(keys)} keys for the {full} full blocks of {computed} computed tokens")
        count = -(-computed // B) - hits
        if self.K is None:
            start = self.fresh
            self.fresh += count
            self.key_of += keys[hits:full]
            self.key_of += repeat(None, count - (full - hits))
            self._key(keys[hits:full], range(start, start + full - hits))
            if self.log is not None and full > hits:
                self.log.append(("PEER-VLLM-4", "cached", full))
            return hits
        if -(-n // B) > len(self):                                # PEER-VLLM-9, never reached by the replay
            raise ValueError(f"an {n}-token prompt does not fit {len(self)} free blocks (SIM-CAP-2 checks it)")
        held = self._touch(found)
        taken = self._take(count)
        if self.log is not None and full > hits:                  # PEER-VLLM-4: each full block keyed
            self.log.append(("PEER-VLLM-4", "cached", full))
        self._free(held + taken, keys, hits, full)
        return hits

    def _key(self, keys: list, holders) -> None:
        """Each new holder cached under its key, in order (PEER-VLLM-4): the first holder of a
        key is the one a hit takes; a key already held gets one more holder. One map probe per
        key (`setdefault` gives back the holder it finds, or the one it stored)."""
        holders = list(holders)
        found = list(map(self.first.setdefault, keys, holders))
        if found != holders:
            more = self.more
            for key, holder, first in zip(keys, holders, found):
                if first != holder:
                    more.setdefault(key, []).append(holder)

    # --- bounded: the free queue (PEER-VLLM-5) ---------------------------------------------------

    def _touch(self, entries: list) -> list:
        """The hits' blocks, out of the free queue (PEER-VLLM-5: a cached block sits in the tail;
        touching it only takes it out): their entries die."""
        order, base = self.order, self.base
        at = [e - base for e in entries]
        held = list(map(order.__getitem__, at))
        deque(map(order.__setitem__, at, repeat(None)), 0)
        self.live -= len(held)
        return held

    def _take(self, count: int) -> list:
        """`count` blocks from the head of the free queue, head first: the blocks without a key,
        then those never handed out, then the tail's, each of which has a key and drops it (an
        eviction, PEER-VLLM-5)."""
        front = self.front
        k = min(count, len(front))
        taken = front[len(front) - k:][::-1]
        del front[len(front) - k:]
        fresh = min(count - k, max(0, self.K - self.lo + 1))
        taken += range(self.lo, self.lo + fresh)
        self.lo += fresh
        if count > len(taken):
            taken += self._evict(count - len(taken))
        return taken

    def _evict(self, wanted: int) -> list:
        """The tail's first `wanted` blocks, head first, their keys dropped (PEER-VLLM-5): a slice
        of entries at a time, the live ones picked by C-level iterators; a key held by one block
        leaves `first` in one map, a key held twice goes through `_evict_held_twice`."""
        if wanted > self.live:
            raise IndexError("take from a free queue's tail shorter than the count")
        order, order_keys, more = self.order, self.order_keys, self.more
        blocks, keys, where = [], [], []
        i = self.head
        while len(blocks) < wanted:
            segment = order[i:i + wanted - len(blocks)]
            live = list(map(is_not, segment, repeat(None)))
            blocks += compress(segment, live)
            keys += compress(order_keys[i:i + len(segment)], live)
            if more:
                where += compress(range(self.base + i, self.base + i + len(segment)), live)
            i += len(segment)
        self.head = i
        self.live -= wanted
        self.evicted += wanted
        if self.log is not None:
            self.log += (("PEER-VLLM-5", "evicted", block) for block in blocks)
        twice = list(map(more.__contains__, keys)) if more else ()
        if any(twice):
            alone = list(compress(keys, map(not_, twice)))
            self._evict_held_twice(compress(zip(where, keys), twice))
            keys = alone
        deque(map(self.first.__delitem__, keys), 0)   # a key held by one block: that block, evicted
        return blocks

    def _evict_held_twice(self, pairs) -> None:
        """(entry, key) evicted, in order, each key held by more than one block when the take
        began: the entry leaves the key's holders; its next holder takes a first holder's place."""
        first, more = self.first, self.more
        for entry, key in pairs:
            later = more.get(key)
            if first[key] == entry:
                if later:
                    first[key] = later.pop(0)
                else:
                    del first[key]
            else:
                later.remove(entry)
            if later is not None and not later:
                del more[key]

    def _free(self, blocks: list, keys: list, hits: int, full: int) -> None:
        """PEER-VLLM-5: a request's blocks freed last first, a block without a key to the head,
        one with a key to the tail. Its full blocks have keys (the hits had theirs, the others are
        keyed here, PEER-VLLM-4) and go to the tail; the blocks past them have none (taking a
        block drops its key) and go to the head. Block t < full gets entry start + full - 1 - t."""
        self.front += blocks[full:]
        start = self.base + len(self.order)
        self.order += blocks[full - 1::-1] if full else ()
        self.order_keys += keys[full - 1::-1] if full else ()
        self.live += full
        self.first.update(zip(keys[:hits], range(start + full - 1, start + full - 1 - hits, -1)))
        self._key(keys[hits:full], range(start + full - 1 - hits, start - 1, -1))
        if len(self.order) - self.head > 2 * self.live + self.COMPACT_SLACK:
            self._compact()
        if self.log is not None and blocks:
            self.log.append(("PEER-VLLM-5", "freed", len(self)))

    def _compact(self) -> None:
        """The tail's live entries renumbered past every number used so far, in order (so it
        stays O(queue)); `first` and `more` follow them."""
        order, head, base = self.order, self.head, self.base
        segment = order[head:]
        live = list(map(is_not, segment, repeat(None)))
        blocks = list(compress(segment, live))
        keys = list(compress(self.order_keys[head:], live))
        old = list(compress(range(base + head, base + len(order)), live))
        new = range(base + len(order), base + len(order) + len(blocks))
        is_first = list(map(eq, map(self.first.get, keys), old))
        self.first.update(compress(zip(keys, new), is_first))
        if not all(is_first):
            for key, was, now, first in zip(keys, old, new, is_first):
                if not first:
                    later = self.more[key]
                    later[later.index(was)] = now
        self.order, self.order_keys, self.base, self.head = blocks, keys, base + len(order), 0

    # --- what the tests compare with VllmBlockPool -----------------------------------------------

    def _block(self, holder):
        return holder if self.K is None else self.order[holder - self.base]

    def holders(self) -> dict:
        """Each cached key and its blocks in the order they cached it (`VllmBlockPool.key_blocks`)."""
        return {key: [self._block(h) for h in [holder] + self.more.get(key, [])] for key, holder in self.first.items()}

    def block_keys(self) -> dict:
        """Each block that holds a key, and its key (`VllmBlockPool.block_key`)."""
        if self.K is None:
            return {block: key for block, key in enumerate(self.key_of) if key is not None}
        return {block: key for block, key in zip(self.order[self.head:], self.order_keys[self.head:])
                if block is not None}

    def free_queue(self) -> list:
        """The free queue from head to tail (PEER-VLLM-5); empty when unbounded."""
        if self.K is None:
            return []
        return self.front[::-1] + list(range(self.lo, self.K + 1)) + [b for b in self.order[self.head:] if b is not None]
