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

What stays per block is done by C-level builtins over lists of block ids and keys (integers for
a hash-id trace: `map`, `filter`, `compress`, `zip`, `dict.update`): the hit lookup, the touch,
the keying, an eviction of keys held by one block. Only a key held by several blocks is handled
block by block.

The layout. `first` maps a key to the block a hit takes (the first that cached it, vllm
`BlockHashToBlockMap`); `more` to the later holders in the order they cached it (the block
past the N - 1 cap, EAGLE's dropped block, a block past a chain's evicted middle: rare); `key_of`
a block to its key. The free queue is a `FreeQueue` (reference/replay_adapters.py): blocks
without a key at the head, then those never handed out, then the cached blocks, least recently
freed first; a request takes and frees its blocks as lists, and the tail's head is taken a slice
at a time.

tests/reference/test_replay_vllm.py replays random pools through this pool and `VllmBlockPool`
(with a `PeerTrace`) side by side: the same hits, free queue, keys and holders after every
request, and the same evictions, cached blocks and freed steps as the oracle's trace records.
"""
from __future__ import annotations

from collections import deque
from itertools import compress, takewhile
from operator import not_

from .replay_adapters import FreeQueue


class ReplayVllmPool:
    """The one-group `vllm-apc` pool of `block_size` B and `cache_blocks` K (None: unbounded,
    every block new, nothing evicted), prefix caching on or off, EAGLE dropping the last matched
    block (PEER-VLLM-8), its requests run one at a time, each to its end (SIM-ORDER-1). `evicted`: blocks whose key was dropped so far. `log`: a list to record
    the decisions the oracle's trace records, as (rule, value, to) triples (None: nothing)."""

    def __init__(self, block_size: int, cache_blocks: int | None, enable_prefix_caching: bool = True,
                 eagle: bool = False, log: list | None = None):
        self.B, self.K = block_size, cache_blocks
        self.caching, self.eagle, self.log = enable_prefix_caching, eagle, log
        self.first: dict = {}
        self.more: dict = {}
        self.key_of: dict = {}
        self.free = FreeQueue(cache_blocks) if cache_blocks is not None else None
        self.fresh = 1                     # unbounded: the next block number never handed out
        self.evicted = 0

    def hit_blocks(self, keys: list, n: int) -> int:
        """PEER-VLLM-3, -6, -8: the leading cached blocks of an n-token prompt whose blocks have
        `keys`, at most floor((n - 1) / B) (the block of the last prompt token is computed
        again), one less under EAGLE; none without prefix caching."""
        if not self.caching:
            return 0
        k = len(list(takewhile(self.first.__contains__, keys[:(n - 1) // self.B])))
        return max(0, k - 1) if self.eagle else k

    def run(self, keys: list, n: int, g: int) -> int:
        """One request to its end: an n-token prompt sampling g tokens, so computing n + g - 1
        (PEER-VLLM-4), `keys` the keys of its full blocks. Touch the hits, take the other blocks
        from the head of the free queue (evicting), key the full ones, free them all (PEER-VLLM-5).
        Returns the hits (`hit_blocks`)."""
        B = self.B
        computed = n + max(0, g - 1)
        hits = self.hit_blocks(keys, n)
        held = list(map(self.first.__getitem__, keys[:hits]))
        taken = self._take(-(-computed // B) - hits, held, n)
        full = 0
        if self.caching:                                           # PEER-VLLM-4: each full block keyed
            full = computed // B
            if len(keys) != full:
                raise ValueError(f"{len(keys)} keys for the {full} full blocks of {computed} computed tokens")
            self._cache(keys[hits:], taken[:full - hits])
            if self.log is not None and full > hits:
                self.log.append(("PEER-VLLM-4", "cached", full))
        if self.free is not None:
            # PEER-VLLM-5: freed last block first, a block without a key to the head, one with a key
            # to the tail. The full blocks have keys (the hits had theirs, `_cache` gave the rest
            # theirs); the blocks past them have none (taking a block drops its key).
            blocks = held + taken
            self.free.prepend(blocks[full:][::-1])
            self.free.extend(blocks[:full][::-1])
            if self.log is not None and blocks:
                self.log.append(("PEER-VLLM-5", "freed", len(self.free)))
        return hits

    def _take(self, count: int, held: list, n: int) -> list:
        """`count` blocks for the request after its hits `held` leave the free queue: the next
        numbers when unbounded, else the head of the queue, head first; a block with a key drops
        it (an eviction, PEER-VLLM-5)."""
        key_of = self.key_of
        if self.free is None:
            self.fresh += count
            return list(range(self.fresh - count, self.fresh))
        free = self.free
        if -(-n // self.B) > len(free):                           # PEER-VLLM-9, never reached by the replay
            raise ValueError(f"an {n}-token prompt does not fit {len(free)} free blocks (SIM-CAP-2 checks it)")
        free.discard(held)                                         # PEER-VLLM-5: touched, out of the queue
        taken = free.take(count)
        evicted = list(filter(key_of.__contains__, taken))
        if not evicted:
            return taken
        keys = list(map(key_of.pop, evicted))
        self.evicted += len(evicted)
        if self.log is not None:
            self.log += (("PEER-VLLM-5", "evicted", block) for block in evicted)
        more = self.more
        twice = list(map(more.__contains__, keys)) if more else ()
        if any(twice):
            alone = list(compress(keys, map(not_, twice)))
            self._evict_held_twice(compress(zip(evicted, keys), twice))
            keys = alone
        deque(map(self.first.__delitem__, keys), 0)   # a key held by one block: that block, evicted
        return taken

    def _evict_held_twice(self, pairs) -> None:
        """(block, key) evicted, in order, each key held by more than one block when the take
        began: the block leaves the key's holders; its next holder takes a first holder's place."""
        first, more = self.first, self.more
        for block, key in pairs:
            later = more.get(key)
            if first[key] == block:
                if later:
                    first[key] = later.pop(0)
                else:
                    del first[key]
            else:
                later.remove(block)
            if later is not None and not later:
                del more[key]

    def _cache(self, keys: list, blocks: list) -> None:
        """Each block cached under its key, in order (PEER-VLLM-4): the first holder of a key is
        the block a hit takes; a key already held gets one more holder."""
        first = self.first
        self.key_of.update(zip(blocks, keys))
        if not any(map(first.__contains__, keys)) and len(set(keys)) == len(keys):
            first.update(zip(keys, blocks))
            return
        for key, block in zip(keys, blocks):
            if key in first:
                self.more.setdefault(key, []).append(block)
            else:
                first[key] = block

    def holders(self) -> dict:
        """Each cached key and its blocks in the order they cached it (`VllmBlockPool.key_blocks`)."""
        return {key: [block] + self.more.get(key, []) for key, block in self.first.items()}

    def block_keys(self) -> dict:
        """Each block that holds a key, and its key (`VllmBlockPool.block_key`)."""
        return dict(self.key_of)

    def free_queue(self) -> list:
        """The free queue from head to tail (PEER-VLLM-5); empty when unbounded."""
        return [] if self.free is None else list(self.free)
