"""`trtllm-kv-reuse`: TensorRT-LLM's KV cache block reuse (spec/peer-profiles.md section 5). Stdlib only.

Blocks of `tokens_per_block` T form a radix tree keyed by each block's tokens and the request's
LoRA task id, extra keys, multimodal items and cache salt (TensorRT-LLM kvCacheManager.cpp
`BlockKey`, `KVCacheBlock::findMatchingBlock`, `WindowBlockManager::loadOrAllocateBlocks`,
`storeBlocks`; peer_trtllm_keys.py builds the keys). A request looks up the blocks of its first
N - 1 tokens, the last of them possibly partial; a stored block whose tokens only begin the
request's may be reused in part, copied when it is shared or has children, else taken out of the
tree. When a request finishes its computed sequence is stored, a partial last block included, and
its blocks go back to the free queue of their retention priority, last block first; a new block
comes from the head of the lowest-priority queue and leaves the tree with everything below it
(`getFreeBlock`, `freeChildren`, evictionPolicy.cpp `LRUEvictionPolicy`). A block whose
priority has a duration falls back to the default priority when the duration expires
(`LRUEvictionPolicy::refresh`).

Each distinct attention window (`max_attention_window`, cycled over layers) has its own pool and
tree, `WindowPool`; a request is admitted, grown and stored in every one, and the count is the
largest window's match (PEER-TRT-7). A block that leaves a sliding window while its request runs
goes back to the free queue; if another request takes it, the first stores nothing in that window.

Requests may overlap (`hold` several, then `release` them), so the runtime's own block-pool tests
translate step for step; the peer suite uses `commit`. What such a test may observe of the pool,
as the spec defines it: `free_queue()` (PEER-TRT-6) and the blocks a held request took
(`Held.blocks` of the largest window, `Held.window_blocks` of each), numbered as the queue numbers
them. Time is the pool's clock in ms (PEER-TRT-9): `advance(ms)`, and one ms per admitted request.

With a `PeerTrace` the largest window records each decision where it is taken
(reference/peer_trace.py): the blocks a request matches whole and in part and why the match stops
(nothing stored there, stored under other keys, taken out by a partial reuse or an eviction), what
a partial reuse does with the block, what a request stores, each eviction and its priority.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .peer_common import PeerProfileError, PeerRequest
from .peer_profile import PeerProfile, Published, Setting
from .peer_trace import keyed
from .peer_trtllm_keys import DEFAULT_PRIORITY, BlockKey, block_keys, empty_key, retention_of

__all__ = ["BlockKey", "TrtllmBlockPool", "WindowPool", "block_keys", "lookup_keys", "trtllm_cached", "PROFILE"]

ROOT = -1


def lookup_keys(request: PeerRequest, T: int) -> list:
    """PEER-TRT-3: the keys a request looks up: its first N - 1 tokens (the last token is always
    computed), plus an empty block when that last token starts a block of its own."""
    n = len(request.ids)
    keys = block_keys(request.ids[:max(0, n - 1)], T, request)
    if n % T == 1:
        keys.append(empty_key(request))
    return keys


@dataclass
class Block:
    key: BlockKey | None = None
    parent: int | None = None
    """The block above it in the tree (ROOT for a first block), None when not in the tree."""
    children: dict = field(default_factory=dict)
    refs: int = 0
    origin: object = None
    """Traced: the step that stored it in the tree."""
    priority: int = DEFAULT_PRIORITY
    duration: int | None = None
    expiry: int | None = None
    owner: object = None
    """The request that last took it from the free queue (`mBlockToSequence`)."""

    def leaf(self) -> bool:
        return not self.children


@dataclass
class Running:
    """A request holding blocks in one window."""
    request: PeerRequest
    blocks: list
    matched: int
    tokens: list = field(default_factory=list)
    """Its tokens so far (the prompt, then what `hold` added): `release` stores all but the last."""
    computed: int = 0
    """Tokens whose KV the request holds (`GenerationRequest::getNumTokens`)."""
    removed: int = 0
    """Front blocks that left the window (`getNumFrontBlocksRemoved`)."""
    valid: bool = True
    """False once another request took a block it let go (`isSequenceValidForStoreForReuse`)."""


class WindowPool:
    """One window's pool (PEER-TRT-1..10). `K` None: unbounded, nothing is ever evicted; `W` None:
    full attention (nothing leaves the window)."""

    def __init__(self, T: int, W: int | None, reuse: bool, partial: bool, copy: bool, K: int | None, trace, clock):
        self.T, self.W, self.reuse, self.partial, self.copy, self.K = T, W, reuse, partial, copy, K
        self.clock = clock
        self.trace = None
        self.reset()
        self.trace = trace

    def reset(self) -> None:
        self.blocks: dict[int, Block] = {b: Block() for b in range(self.K or 0)}
        self.root: dict = {}
        self.queues: dict[int, list] = {DEFAULT_PRIORITY: list(range(self.K or 0))}
        self.fresh = self.K or 0
        self.held: list = []
        self.expiring: dict[int, int] = {}        # free block -> when its priority's duration runs out
        self._taken_from: dict = {}       # traced: parent -> the latest step that took a child out of the tree
        if self.trace is not None:
            self.trace.add("PEER-API-4", "reset", True, "a fresh pool: nothing stored")

    # --- the tree ------------------------------------------------------------------------------
    def children(self, parent: int) -> dict:
        return self.root if parent == ROOT else self.blocks[parent].children

    def find(self, parent: int, key: BlockKey):
        """(block, tokens matched, partial) of `findMatchingBlock`, or None."""
        kids = self.children(parent)
        if not key.tokens or not kids:
            return None
        exact = kids.get(key)
        if exact is not None:
            return exact, len(key.tokens), len(self.blocks[exact].key.tokens) < self.T
        if not self.partial:
            return None
        best, best_n = None, 0
        for other, b in kids.items():
            if self.copy or (self.blocks[b].refs == 0 and self.blocks[b].leaf()):
                n = other.partial_match(key)
                if n > best_n:
                    best, best_n = b, n
        return (best, best_n, True) if best is not None else None

    def detach(self, b: int) -> None:
        """Take a block and everything below it out of the tree (`freeChildren`)."""
        block = self.blocks[b]
        for child in list(block.children.values()):
            self.detach(child)
        if block.parent is not None:
            self.children(block.parent).pop(block.key, None)
            block.parent = None

    # --- the free queues (PEER-TRT-6, PEER-TRT-8, PEER-TRT-9) ------------------------------------
    def free_queue(self) -> list:
        """The free blocks in the order they are taken: lowest priority first, head to tail."""
        return [b for p in sorted(self.queues) for b in self.queues[p]]

    def take(self, run: Running, priority: int, duration: int | None) -> int:
        """A new block (`getFreeBlock`): the head of the lowest-priority queue, out of the tree, given
        the priority and duration it is taken with; another running request that let it go stores
        nothing (PEER-TRT-7)."""
        if self.K is None:
            self.fresh += 1
            b = self.fresh - 1
            self.blocks[b] = Block()
        else:
            queue = next((q for p, q in sorted(self.queues.items()) if q), None)
            if queue is None:
                raise PeerProfileError(f"trtllm-kv-reuse: a request needs more than max_blocks={self.K} blocks; "
                                       "the profile does not define what the server does then")
            b = next(iter(queue))
            block = self.blocks[b]
            if self.trace is not None and block.parent is not None:
                self._traced_removal(b, "PEER-TRT-6", "evicted", f"block {b} is at the head of the free queue of "
                                     f"the lowest priority holding one ({block.priority}): taken for a new block, out "
                                     "of the tree with every block below it")
            self.detach(b)
            self.claim(b)
            if block.owner is not None and block.owner is not run and block.owner in self.held:
                block.owner.valid = False
                if self.trace is not None:
                    self.trace.add("PEER-TRT-7", "store_invalidated", b, f"block {b} left the window of a request "
                                   "that still runs and is taken by another: that request will store nothing")
        block = self.blocks[b]
        block.priority, block.duration, block.owner = priority, duration, run
        return b

    def claim(self, b: int, priority: int | None = None, duration=(None,)) -> None:
        """`claimBlock`: out of its free queue and the expiring set; a priority when given, the
        duration always (unless `duration` is left at its marker)."""
        block = self.blocks[b]
        queue = self.queues.get(block.priority, ())
        if b in queue:
            queue.remove(b)
        block.expiry = None
        self.expiring.pop(b, None)
        if priority is not None:
            block.priority = priority
        if duration != (None,):
            block.duration = duration

    def free(self, b: int) -> None:
        """`releaseBlock`: to the tail of its priority's queue; a duration starts to run."""
        block = self.blocks[b]
        if self.K is None:
            return
        self.queues.setdefault(block.priority, []).append(b)
        if block.duration is not None and block.priority != DEFAULT_PRIORITY:
            block.expiry = self.expiring[b] = self.clock.now + block.duration

    def refresh(self) -> None:
        """PEER-TRT-9 (`LRUEvictionPolicy::refresh`): a free block whose duration has run out goes to
        the tail of the default queue, in the order the durations run out."""
        due = sorted((at, b) for b, at in self.expiring.items() if at <= self.clock.now)
        for _, b in due:
            del self.expiring[b]
            block = self.blocks[b]
            self.queues[block.priority].remove(b)
            block.priority, block.expiry = DEFAULT_PRIORITY, None
            self.queues.setdefault(DEFAULT_PRIORITY, []).append(b)
            if self.trace is not None:
                block.origin = self.trace.add("PEER-TRT-9", "expired", b, f"block {b}'s retention duration ran out: "
                                              f"it goes back to the default priority {DEFAULT_PRIORITY}, at the tail "
                                              "of its queue", causes=(block.origin,))

    # --- requests --------------------------------------------------------------------------------
    def predict(self, request: PeerRequest) -> int:
        """PEER-TRT-3: the tokens the lookup would match, without changing the pool."""
        if not self.reuse:
            if self.trace is not None:
                self.trace.add("PEER-TRT-5", "cached_tokens", 0, "block reuse is off (enable_block_reuse false): "
                               "nothing is looked up or stored")
            return 0
        matched, parent, path = 0, ROOT, []
        keys = lookup_keys(request, self.T)
        for key in keys:
            found = self.find(parent, key) if parent is not None else None
            if found is None:
                break
            b, n, partial = found
            matched += n
            if self.trace is not None:
                path.append(found)
            parent = None if partial else b
        if self.trace is not None:
            self._traced_count(request, keys, path, parent, matched)
        return matched

    def admit(self, request: PeerRequest) -> Running:
        """`addSequence`: match, reuse or copy, and allocate the prompt's ceil(N / T) blocks, each
        with the priority and duration its token range gives it (PEER-TRT-8)."""
        self.refresh()
        n = len(request.ids)
        run = Running(request, [], 0, computed=n)
        self.held.append(run)
        keys = lookup_keys(request, self.T) if self.reuse else []
        retention = retention_of(request).per_block(self.T, n)
        parent = ROOT if self.reuse else None
        for i in range(-(-n // self.T)):
            priority, duration = retention[i]
            key = keys[i] if i < len(keys) else None
            found = self.find(parent, key) if parent is not None and key is not None else None
            if found is None:
                b = self.take(run, DEFAULT_PRIORITY if priority is None else priority, duration)
                self.blocks[b].key = key
                parent = None
            else:
                b, k, partial = found
                run.matched += k
                if not partial:
                    self.claim(b, priority, duration)
                    parent = b
                elif self.blocks[b].refs > 0 or not self.blocks[b].leaf():
                    if self.trace is not None:
                        self.trace.add("PEER-TRT-4", "partial_reuse", k, f"block {b} (stored by "
                                       f"{self.trace.who(self.blocks[b].origin)}) matches {k} tokens in part and is "
                                       "shared or has children: copied into a new block, the tree keeps it")
                    old = self.blocks[b]
                    b = self.take(run, old.priority, old.duration)     # the copy keeps the block's priority
                    self.blocks[b].key = key
                    parent = None
                else:
                    if self.trace is not None:
                        self._traced_removal(b, "PEER-TRT-4", "partial_reuse", f"block {b} matches {k} tokens in "
                                             "part and is a leaf nobody holds: taken out of the tree and written into")
                    self.detach(b)                           # a private leaf: out of the tree, reused
                    self.claim(b, priority, duration)
                    parent = None
            self.blocks[b].refs += 1
            run.blocks.append(b)
        run.tokens = list(request.ids)
        return run

    def grow(self, run: Running, tokens: int) -> None:
        """`addToken` up to `tokens` tokens of KV: a block leaves a sliding window once the sequence
        holds W + T tokens beyond it (`adjustBlocksIfNeeded`, `detachFrontBlock`), and a token
        that starts a block takes one with the decode priority (PEER-TRT-8)."""
        retention = retention_of(run.request)
        while run.computed < tokens:
            run.computed += 1
            while self.W is not None and run.computed - run.removed * self.T >= self.W + self.T:
                front = run.blocks[run.removed]
                run.removed += 1
                self.blocks[front].refs -= 1
                if self.blocks[front].refs == 0:
                    self.free(front)
            if (run.computed - 1) % self.T == 0:
                b = self.take(run, retention.decode_priority, retention.decode_duration)
                self.blocks[b].key = None
                self.blocks[b].refs += 1
                run.blocks.append(b)

    def release(self, run: Running, tokens: list | None = None) -> None:
        """`releaseBlocks`: store the blocks of `tokens` (default: the request's) but the last token
        (PEER-TRT-4) unless the request may not store (PEER-TRT-7), then free the blocks it still
        holds, last first."""
        tokens = run.tokens if tokens is None else tokens
        if run in self.held:
            self.held.remove(run)
        if self.reuse and run.valid:
            if len(set(run.blocks)) < len(run.blocks):
                raise PeerProfileError("trtllm-kv-reuse: a request took back a block it had let go out of its "
                                       "window; the profile does not define what it then stores")
            self.store(block_keys(tokens[:-1], self.T, run.request), run.blocks)
        elif self.reuse and self.trace is not None:
            self.trace.add("PEER-TRT-7", "stored", 0, "another request took a block this one let go out of its "
                           "window: nothing is stored")
        freed = []
        for b in reversed(run.blocks[run.removed:]):
            self.blocks[b].refs -= 1
            if self.blocks[b].refs == 0:
                self.free(b)
                freed.append(b)
        if self.trace is not None:
            self._traced_priorities(freed)

    def _traced_priorities(self, freed: list) -> None:
        """PEER-TRT-8: freed blocks that wait at a priority of their own (a cause of what later
        evictions spare or take)."""
        for p in sorted({self.blocks[b].priority for b in freed} - {DEFAULT_PRIORITY}):
            these = [b for b in freed if self.blocks[b].priority == p]
            lasting = {self.blocks[b].duration for b in these} - {None}
            step = self.trace.add("PEER-TRT-8", "freed", p, f"block(s) {', '.join(map(str, these))} go back to the "
                                  f"free queue of retention priority {p}" + (f" for {min(lasting)} ms" if lasting else "")
                                  + f" (the default is {DEFAULT_PRIORITY}; lower priorities are evicted first)",
                                  causes=tuple({self.blocks[b].origin for b in these if self.blocks[b].origin}))
            for b in these:
                self.blocks[b].origin = step

    def store(self, keys: list, blocks: list) -> None:
        parent, matching, new = ROOT, True, []
        for key, b in zip(keys, blocks):
            existing = self.children(parent).get(key) if matching else None
            if existing is not None:
                parent = existing
                continue
            matching = False
            block = self.blocks[b]
            block.key, block.parent = key, parent
            self.children(parent)[key] = b
            parent = b
            new.append(b)
        if self.trace is not None:
            tokens = sum(len(k.tokens) for k in keys)
            step = self.trace.add("PEER-TRT-4", "stored", tokens, f"its computed sequence but the last token, "
                                  f"{tokens} tokens in {len(keys)} block(s) of {self.T} (the last possibly partial), is "
                                  f"stored: {len(new)} block(s) new in the tree, the rest there already")
            for b in new:
                self.blocks[b].origin = step

    # --- the trace: reasons and causes, built only when tracing ----------------------------------
    def _traced_count(self, request: PeerRequest, keys: list, path: list, parent, matched: int) -> None:
        """The count's step (PEER-TRT-3; PEER-TRT-2 when the block that missed is stored under
        other keys): the blocks matched whole and in part, who stored them, why the match stops."""
        tr, n = self.trace, len(request.ids)
        whole = sum(1 for _, _, partial in path if not partial)
        part = [(b, k) for b, k, partial in path if partial]
        why = (f"of the first N - 1 = {n - 1} tokens, {matched} match the stored blocks{keyed(request)}: "
               f"{whole} whole block(s) of {self.T}")
        if part:
            b, k = part[0]
            why += f" and block {b} in part ({k} token{'s' if k != 1 else ''}, partial reuse)"
        causes = [self.blocks[b].origin for b, _, _ in path[-1:]]
        causes += [o for o in (self.blocks[b].origin for b, _, _ in path[:-1]) if o is not None and o not in causes
                   and o.rule in ("PEER-TRT-8", "PEER-TRT-9")]
        rule = "PEER-TRT-3"
        if parent is not None and len(path) < len(keys) and keys[len(path)].tokens:
            key = keys[len(path)]
            other = next((c for k, c in self.children(parent).items() if k.tokens[:1] == key.tokens[:1]
                          and k.others() != key.others()), None)
            gone = self._taken_from.get(parent)
            if other is not None:
                rule = "PEER-TRT-2"
                why += (f"; block {other} holds the next tokens under other keys (LoRA task id, cache salt, extra "
                        "keys and the images a block overlaps key every block)")
                if key.mm != self.blocks[other].key.mm:
                    rule = "PEER-TRT-10"
                causes.append(self.blocks[other].origin)
            elif gone is not None:
                why += f"; the block that followed was taken out of the tree by {tr.who(gone)}"
                causes.append(gone)
            else:
                why += "; nothing stored goes on with the next tokens"
        causes += [s for s in tr.background(any(causes)) if s not in causes]
        tr.add(rule, "cached_tokens", matched, why, causes=causes)

    def _traced_removal(self, b: int, rule: str, value: str, why: str) -> None:
        """A block leaves the tree (an eviction, a partial reuse of a private leaf)."""
        block = self.blocks[b]
        step = self.trace.removed(self.trace.add(rule, value, b, f"{why} (stored by {self.trace.who(block.origin)})",
                                                 causes=(block.origin,)))
        self._taken_from[block.parent] = step



class Clock:
    """The pool's time in ms (PEER-TRT-9): every admitted request is one ms later than the last."""
    def __init__(self):
        self.now = 0


@dataclass
class Held:
    """A request holding blocks in every window: `blocks` and `matched` are the largest window's."""
    runs: dict
    main: Running

    @property
    def blocks(self) -> list:
        return self.main.blocks

    @property
    def matched(self) -> int:
        return self.main.matched

    @property
    def tokens(self) -> list:
        return self.main.tokens

    @property
    def window_blocks(self) -> dict:
        return {("full" if w is None else w): r.blocks for w, r in self.runs.items()}


class TrtllmBlockPool:
    """PEER-TRT-1..10: one `WindowPool` per distinct attention window (`windows`; None or empty:
    full attention), each with `max_blocks` blocks (None: unbounded, nothing is ever evicted).
    The count and what tests observe are the largest window's (PEER-TRT-7)."""

    def __init__(self, tokens_per_block: int, enable_block_reuse: bool = True, enable_partial_reuse: bool = True,
                 copy_on_partial_reuse: bool = True, max_blocks: int | None = None, trace=None, windows=None):
        self.T, self.K = tokens_per_block, max_blocks
        self.clock = Clock()
        sizes = sorted(set(windows or ())) or [None]
        self.windows = {w: WindowPool(tokens_per_block, w, enable_block_reuse, enable_partial_reuse,
                                      copy_on_partial_reuse, max_blocks, trace if w == sizes[-1] else None, self.clock)
                        for w in sizes}
        self.main = self.windows[sizes[-1]]
        self.trace = trace

    def reset(self) -> None:
        for pool in self.windows.values():
            pool.reset()

    def advance(self, ms: int) -> None:
        """Time passes (a test's sleep): durations run out at the next admission's refresh."""
        self.clock.now += ms

    def refuses(self, request: PeerRequest) -> str | None:
        """PEER-TRT-8: a retention config `KvCacheRetentionConfig`'s constructor refuses (the server
        answers HTTP 400 and caches nothing), or None."""
        try:
            retention_of(request)
        except PeerProfileError as e:
            if self.trace is not None:
                self.trace.add("PEER-TRT-8", "refused", True, f"{e}: KvCacheRetentionConfig's constructor refuses "
                               "it, so the server answers HTTP 400 and caches nothing (tensorrt_llm executor, "
                               "KvCacheRetentionConfig)")
            return str(e)
        return None

    def predict(self, request: PeerRequest) -> int:
        """PEER-TRT-3 / PEER-TRT-7: the largest window's match, at the time the request arrives."""
        retention_of(request)                          # a config the runtime refuses is refused here too
        self.clock.now += 1
        self.main.refresh()
        self.clock.now -= 1
        matched = self.main.predict(request)
        if self.trace is not None and len(self.windows) > 1:
            self.trace.add("PEER-TRT-7", "window", self.main.W, f"the count is the largest window's match (window "
                           f"{self.main.W} of {', '.join(map(str, self.windows))}): each window has its own pool and "
                           "tree, and the last window's lookup sets the prepopulated prompt length")
        return matched

    def admit(self, request: PeerRequest) -> Held:
        self.clock.now += 1
        runs = {w: pool.admit(request) for w, pool in self.windows.items()}
        return Held(runs, runs[self.main.W])

    def grow(self, held: Held, tokens: int) -> None:
        for w, pool in self.windows.items():
            pool.grow(held.runs[w], tokens)

    def hold(self, request: PeerRequest, sampled=(), add_tokens: int | None = None) -> Held:
        """`addSequence`, then the KV of the sampled tokens but the last (`addToken` once per
        generation step, G - 1 of them, unless `add_tokens` says how many); the request holds its
        blocks until `release`."""
        held = self.admit(request)
        sampled = list(sampled)
        self.extend(held, sampled, max(0, len(sampled) - 1) if add_tokens is None else add_tokens)
        return held

    def extend(self, held: Held, sampled: list, add_tokens: int) -> None:
        """A held request's sampled ids appended and the KV of `add_tokens` more tokens added."""
        tokens = held.tokens + list(sampled)
        for run in held.runs.values():
            run.tokens = tokens
        self.grow(held, held.main.computed + add_tokens)

    def release(self, held: Held, tokens: list | None = None) -> None:
        for w, pool in self.windows.items():
            pool.release(held.runs[w], tokens)
        sequence = len(held.tokens if tokens is None else tokens) - 1
        smallest = min(self.windows, key=lambda w: w or 1 << 40)
        if self.trace is not None and smallest is not None and sequence >= smallest and held.main.valid:
            self._traced_outgrown(held, sequence, smallest)

    def _traced_outgrown(self, held: Held, sequence: int, window: int) -> None:
        """PEER-TRT-7: a sequence that reached a sliding window is stored whole all the same."""
        blocks = [b for b in held.main.blocks if self.main.blocks[b].origin is not None]
        origins = {self.main.blocks[b].origin for b in blocks}
        step = self.trace.add("PEER-TRT-7", "stored", sequence, f"the computed sequence ({sequence} tokens) reached "
                              f"the sliding window of {window}: each window stores it whole all the same (blocks "
                              "that leave a window go back to the free queue, and are still stored at release)",
                              causes=tuple(o for o in origins if o.rule == "PEER-TRT-4"))
        for b in blocks:
            if self.main.blocks[b].origin in step.causes:
                self.main.blocks[b].origin = step

    def commit(self, request: PeerRequest, sampled) -> None:
        self.release(self.hold(request, sampled))

    def free_queue(self) -> list:
        """The largest window's free blocks, in the order they are taken (PEER-TRT-6)."""
        return self.main.free_queue()

    @property
    def free(self) -> list:
        return self.main.free_queue()

    @property
    def blocks(self) -> dict:
        return self.main.blocks

    def tree_tokens(self, b: int) -> tuple:
        """A stored block's tokens (for tests)."""
        return self.main.blocks[b].key.tokens


def trtllm_cached(matched: int, n: int) -> int:
    """PEER-TRT-3: the count is the matched tokens, which never exceed N - 1."""
    return max(0, min(matched, n - 1))


PROFILE = PeerProfile(
    name="trtllm-kv-reuse", runtime="TensorRT-LLM",
    version="NVIDIA/TensorRT-LLM kvCacheManager.cpp at b35ac1b64368, kvCacheManagerTest.cpp at fb6d3613550d",
    section="spec/peer-profiles.md section 5",
    settings=(
        Setting("tokens_per_block", "size", 32), Setting("enable_block_reuse", "bool", True),
        Setting("enable_partial_reuse", "bool", True), Setting("copy_on_partial_reuse", "bool", True),
        Setting("max_blocks", "count", None), Setting("max_attention_window", "sizes", None),
        Setting("retention_config", "bool", False),
    ),
    count_rule="PEER-TRT-3", after_rule="PEER-TRT-4", key_rule="PEER-TRT-2",
    make=lambda s, trace=None: TrtllmBlockPool(s["tokens_per_block"], s["enable_block_reuse"],
                                               s["enable_partial_reuse"], s["copy_on_partial_reuse"], s["max_blocks"],
                                               trace, s["max_attention_window"]),
    full_match=lambda s, n: trtllm_cached(n, n),
    tokenizer_loader="transformers-auto", reset=None, crosscheck=None, lora_field="lora_request",
    features=frozenset({"salt", "lora", "case_salt", "images"}), unit="tokens_per_block", unit_name="block",
    cases=("eviction/trt-blocks", "eviction/trt-priority", "eviction/trt-duration", "boundaries/trt-window-W-1",
           "boundaries/trt-window-W", "boundaries/trt-window-W+1", "isolation/trt-retention-checks"),
    context=(Published("/v1/models", "max_model_len"),),
    report_hint="trtllm-serve reports it with kv_cache_config.enable_block_reuse",
    case_rules=lambda case_id, s: ["PEER-TRT-10"] if case_id.startswith("images/") else [],
)
"""PEER-TRT-1..10. trtllm-serve publishes none of these settings (nor its context length: its
/v1/models cards carry no max_model_len) and offers no cache reset; `retention_config` says the
server accepts `kv_cache_retention_config` in the request body (trtllm-serve's OpenAI routes do
not forward one)."""
