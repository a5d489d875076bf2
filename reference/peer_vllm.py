"""`vllm-apc`: vLLM's automatic prefix caching in full blocks (spec/peer-profiles.md section 3).

One function per rule and the block pool a sequence of requests leaves behind. Requests may
overlap (`hold` several, then `release` them), so that the runtime's own tests, which hold two
requests at once, translate step for step (vllm tests/v1/core/test_prefix_caching.py); the
peer suite sends one request at a time and uses `commit`. What such a test may observe of the
pool, as the spec defines it: `free_queue()` (PEER-VLLM-5), the blocks a held request took
(`Running.blocks`, numbered as the queue numbers them), whether it was admitted at all
(PEER-VLLM-9) and whether a reset was accepted (`reset_prefix_cache`, PEER-API-4).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from .peer_common import PeerProfileError, PeerRequest, computed_sequence


def vllm_extra_keys(request: PeerRequest, block: int, block_size: int) -> tuple:
    """PEER-VLLM-2: (digest, offset in the block) of each image overlapping the block, the LoRA
    adapter's name and path (every block), and cache_salt (block 0 only)."""
    keys = []
    start, end = block * block_size, (block + 1) * block_size
    for image in request.images:
        if image.start < end and image.start + image.length > start:
            keys.append(("mm", image.digest, image.start - start))
    if request.lora is not None:
        keys.append(("lora", request.lora, request.lora_path))
    if block == 0 and request.salt is not None:
        keys.append(("cache_salt", request.salt))
    return tuple(keys)


def vllm_block_keys(ids, block_size: int, request: PeerRequest | None = None) -> list:
    """PEER-VLLM-1: one key per full block, each the hash of the previous key, the block's ids
    and its extra keys (PEER-VLLM-2). A partial last block has no key."""
    if hasattr(request, "block_keys"):       # hook: keys a trace replay computed (reference/replay.py, SIM-KEY-2)
        return request.block_keys(len(ids) // block_size)
    request = request or PeerRequest(list(ids))
    keys, parent = [], "none"
    for block in range(len(ids) // block_size):
        chunk = tuple(ids[block * block_size:(block + 1) * block_size])
        parent = hashlib.sha256(repr((parent, chunk, vllm_extra_keys(request, block, block_size)))
                                .encode()).hexdigest()
        keys.append(parent)
    return keys


def vllm_cached(hit_blocks: int, n: int, block_size: int, eagle: bool = False) -> int:
    """PEER-VLLM-3 and PEER-VLLM-8: `B * min(k, floor((N - 1) / B))`, one block less under EAGLE."""
    k = max(0, min(hit_blocks, (n - 1) // block_size))
    return block_size * (max(0, k - 1) if eagle else k)


def leading_hits(keys, cached) -> int:
    """How many leading keys are in `cached` (a chain stops at its first miss)."""
    k = 0
    for key in keys:
        if key not in cached:
            break
        k += 1
    return k


@dataclass
class Running:
    """A request holding blocks: its computed sequence's keys, its blocks in order, how many
    tokens it has computed, and how many leading blocks were hits."""
    keys: list
    blocks: list
    computed: int
    hits: int


class VllmBlockPool:
    """The block cache of PEER-VLLM-4..8.

    `cache_blocks` None: unbounded, every block is new and nothing is ever evicted. Otherwise
    blocks 1..K start in the free queue (head first). A key maps to the blocks holding it in the
    order they were cached (a block beyond the N - 1 cap, or dropped under EAGLE, is computed
    again and cached a second time); a hit takes the first (vllm BlockHashToBlockMap)."""

    def __init__(self, block_size: int, cache_blocks: int | None, enable_prefix_caching: bool = True,
                 eagle: bool = False):
        self.B, self.K = block_size, cache_blocks
        self.caching, self.eagle = enable_prefix_caching, eagle
        self.reset()

    def reset(self) -> None:
        self.free = list(range(1, (self.K or 0) + 1))
        self.key_blocks: dict[str, list] = {}
        self.block_key: dict[int, str] = {}
        self.refs: dict[int, int] = {}
        self.fresh = (self.K or 0) + 1

    def cached_keys(self):
        return self.key_blocks

    def free_queue(self) -> list:
        """The free queue from head (allocated first) to tail (PEER-VLLM-5)."""
        return list(self.free)

    def hit_blocks(self, request: PeerRequest) -> int:
        """PEER-VLLM-3, -6, -7, -8: the leading cached blocks a request uses (and reports)."""
        if not self.caching or request.skip_prefix_cache:
            return 0
        keys = vllm_block_keys(request.ids, self.B, request)
        k = leading_hits(keys[:(len(request.ids) - 1) // self.B], self.key_blocks)
        return max(0, k - 1) if self.eagle else k

    def predict(self, request: PeerRequest) -> int:
        return self.B * self.hit_blocks(request)

    def commit(self, request: PeerRequest, sampled) -> None:
        """Run the request through the cache: hits, prompt blocks, one step per fed-back sampled
        token, then free (PEER-VLLM-4, -5)."""
        run = self.hold(request, sampled)
        if run is None:
            raise PeerProfileError(f"vllm-apc: a request needs more than cache_blocks={self.K} blocks; "
                                   "the profile does not define what the server does then")
        self.release(run)

    def hold(self, request: PeerRequest, sampled=()) -> Running | None:
        """Admit the request and compute its sampled tokens but the last; it holds its blocks
        until `release`. None when it does not fit (PEER-VLLM-9): nothing changed."""
        run = self.admit(request, sampled)
        if run is not None:
            for _ in range(len(sampled) - 1):
                self.feed(run)
        return run

    def admit(self, request: PeerRequest, sampled=()) -> Running | None:
        """Touch the hits (out of the free queue), allocate the prompt's blocks, cache the full
        ones. `sampled`: the ids the request will sample, for the keys of its later blocks.
        None, and nothing changed, when the prompt's blocks do not fit (PEER-VLLM-9)."""
        seq = computed_sequence(request.ids, sampled) if sampled else list(request.ids)
        keys = vllm_block_keys(seq, self.B, replace(request, ids=seq))
        hits = self.hit_blocks(request)
        hit_blocks = [self.key_blocks[key][0] for key in keys[:hits]]
        if not self.fits(len(request.ids), hit_blocks):
            return None
        run = Running(keys, [], len(request.ids), hits)
        for block in hit_blocks:
            if self.refs.get(block, 0) == 0 and block in self.free:
                self.free.remove(block)
            self.refs[block] = self.refs.get(block, 0) + 1
            run.blocks.append(block)
        self._grow(run)
        return run

    def fits(self, n: int, hit_blocks: list) -> bool:
        """PEER-VLLM-9: the new blocks of an n-token prompt, plus its hit blocks that sit in the
        free queue (touching them takes them out), must not exceed the free queue."""
        if self.K is None:
            return True
        evictable = sum(1 for b in hit_blocks if self.refs.get(b, 0) == 0)
        return -(-n // self.B) - len(hit_blocks) + evictable <= len(self.free)

    def reset_prefix_cache(self) -> bool:
        """PEER-API-4 on vLLM (block_pool.py `reset_prefix_cache`): refused, nothing changed,
        while a request holds a block; else every key is dropped and the free queue keeps its
        order (`reset` instead starts a fresh pool: the order of blocks without a key changes no
        count)."""
        if any(self.refs.values()):
            return False
        self.key_blocks.clear()
        self.block_key.clear()
        return True

    def feed(self, run: Running) -> None:
        """One sampled token fed back: computed, and a block taken when it starts one."""
        run.computed += 1
        self._grow(run)

    def release(self, run: Running) -> None:
        """PEER-VLLM-5: freed last block first; a block without a key goes to the head of the
        free queue, a block with one to the tail."""
        fresh, cached = [], []
        for block in reversed(run.blocks):
            self.refs[block] -= 1
            if self.refs[block] == 0 and self.K is not None:
                (cached if block in self.block_key else fresh).append(block)
        self.free = fresh + self.free + cached

    def _grow(self, run: Running) -> None:
        while len(run.blocks) < -(-run.computed // self.B):
            run.blocks.append(self._take())
            self.refs[run.blocks[-1]] = 1
        if not self.caching:
            return
        for i in range(run.hits, min(run.computed // self.B, len(run.keys))):
            block = run.blocks[i]
            if block not in self.block_key:
                self.block_key[block] = run.keys[i]
                self.key_blocks.setdefault(run.keys[i], []).append(block)

    def _take(self) -> int:
        if self.K is None:
            self.fresh += 1
            return self.fresh - 1
        if not self.free:
            raise PeerProfileError(f"vllm-apc: a request needs more than cache_blocks={self.K} blocks; "
                                   "the profile does not define what the server does then")
        block = self.free.pop(0)
        old = self.block_key.pop(block, None)
        if old is not None:                                    # PEER-VLLM-5: eviction drops the key
            self.key_blocks[old].remove(block)
            if not self.key_blocks[old]:
                del self.key_blocks[old]
        return block
