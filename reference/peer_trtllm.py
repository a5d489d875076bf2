"""`trtllm-kv-reuse`: TensorRT-LLM's KV cache block reuse (spec/peer-profiles.md section 5). Stdlib only.

Blocks of `tokens_per_block` T form a radix tree keyed by each block's tokens and the request's
LoRA task id, extra keys and cache salt (TensorRT-LLM kvCacheManager.cpp `BlockKey`,
`KVCacheBlock::findMatchingBlock`, `WindowBlockManager::loadOrAllocateBlocks`, `storeBlocks`).
A request looks up the blocks of its first N - 1 tokens, the last of them possibly partial;
a stored block whose tokens only begin the request's may be reused in part (partial reuse),
copied when it is shared or has children (copy on partial reuse), else taken out of the tree.
When a request finishes its computed sequence is stored, a partial last block included, and its
blocks go back to the free queue last block first; a block taken from the queue's head leaves
the tree with everything below it (`getFreeBlock`, `freeChildren`, evictionPolicy.cpp LRU).

Requests may overlap (`hold` several, then `release` them), so the runtime's own
BlockManagerReuseTest translates step for step; the peer suite uses `commit`. What such a test
may observe of the pool, as the spec defines it: `free_queue()` (PEER-TRT-6) and the blocks a
held request took (`Running.blocks`, numbered as the queue numbers them).

With a `PeerTrace` the pool records each decision where it is taken (reference/peer_trace.py):
the blocks a request matches whole and in part and why the match stops (nothing stored there,
stored under other keys, taken out by a partial reuse or an eviction), what a partial reuse
does with the block (copied, or taken out of the tree), what a request stores, each eviction.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .peer_common import PeerProfileError, PeerRequest
from .peer_profile import PeerProfile, Setting
from .peer_trace import keyed

ROOT = -1


@dataclass(frozen=True)
class BlockKey:
    """PEER-TRT-1/2: a block's tokens and what else keys it (every block of a request)."""
    tokens: tuple
    lora: str | None = None
    salt: str | None = None
    extra_key: str | None = None

    def partial_match(self, other: "BlockKey") -> int:
        """Leading tokens shared with `other` when every key but the tokens agrees, else 0."""
        if (self.lora, self.salt, self.extra_key) != (other.lora, other.salt, other.extra_key):
            return 0
        n = 0
        for a, b in zip(self.tokens, other.tokens):
            if a != b:
                break
            n += 1
        return n


def block_keys(ids, T: int, request: PeerRequest) -> list:
    """The request's keys over `ids` in blocks of T, the last one partial (possibly empty)."""
    return [BlockKey(tuple(ids[i:i + T]), request.lora, request.salt, request.extra_key) for i in range(0, len(ids), T)]


def lookup_keys(request: PeerRequest, T: int) -> list:
    """PEER-TRT-3: the keys a request looks up: its first N - 1 tokens (the last token is always
    computed), plus an empty block when that last token starts a block of its own."""
    n = len(request.ids)
    keys = block_keys(request.ids[:max(0, n - 1)], T, request)
    if n % T == 1:
        keys.append(BlockKey((), request.lora, request.salt, request.extra_key))
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

    def leaf(self) -> bool:
        return not self.children


@dataclass
class Running:
    request: PeerRequest
    blocks: list
    matched: int
    tokens: list = field(default_factory=list)
    """Its computed tokens so far (the prompt, then what `hold` added): what `release` stores."""


class TrtllmBlockPool:
    """PEER-TRT-1..6. `max_blocks` None: unbounded, nothing is ever evicted."""

    def __init__(self, tokens_per_block: int, enable_block_reuse: bool = True, enable_partial_reuse: bool = True,
                 copy_on_partial_reuse: bool = True, max_blocks: int | None = None, trace=None):
        self.T, self.reuse = tokens_per_block, enable_block_reuse
        self.partial, self.copy, self.K = enable_partial_reuse, copy_on_partial_reuse, max_blocks
        self.trace = None
        self.reset()
        self.trace = trace

    def reset(self) -> None:
        self.blocks: dict[int, Block] = {}
        self.root: dict = {}
        self.free = list(range(self.K or 0))
        for b in self.free:
            self.blocks[b] = Block()
        self.fresh = self.K or 0
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

    # --- the pool --------------------------------------------------------------------------------
    def take(self) -> int:
        """A block from the head of the free queue, out of the tree (PEER-TRT-6)."""
        if self.K is None:
            self.fresh += 1
            self.blocks[self.fresh - 1] = Block()
            return self.fresh - 1
        if not self.free:
            raise PeerProfileError(f"trtllm-kv-reuse: a request needs more than max_blocks={self.K} blocks; "
                                   "the profile does not define what the server does then")
        b = self.free.pop(0)
        if self.trace is not None and self.blocks[b].parent is not None:
            self._traced_removal(b, "PEER-TRT-6", "evicted", f"block {b} is at the head of the free queue: taken for "
                                 "a new block, out of the tree with every block below it")
        self.detach(b)
        return b

    def claim(self, b: int) -> None:
        if b in self.free:
            self.free.remove(b)

    def _hold_block(self, run: Running, b: int) -> None:
        self.blocks[b].refs += 1
        run.blocks.append(b)

    def free_queue(self) -> list:
        """The free queue from head (taken first) to tail (PEER-TRT-6)."""
        return list(self.free)

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
        """`addSequence`: match, reuse or copy, and allocate the prompt's ceil(N / T) blocks."""
        run = Running(request, [], 0)
        keys = lookup_keys(request, self.T) if self.reuse else []
        parent = ROOT if self.reuse else None
        for i in range(-(-len(request.ids) // self.T)):
            key = keys[i] if i < len(keys) else None
            found = self.find(parent, key) if parent is not None and key is not None else None
            if found is None:
                b = self.take()
                self.blocks[b].key = key
                parent = None
            else:
                b, n, partial = found
                run.matched += n
                if not partial:
                    self.claim(b)
                    parent = b
                elif self.blocks[b].refs > 0 or not self.blocks[b].leaf():
                    if self.trace is not None:
                        self.trace.add("PEER-TRT-4", "partial_reuse", n, f"block {b} (stored by "
                                       f"{self.trace.who(self.blocks[b].origin)}) matches {n} tokens in part and is "
                                       "shared or has children: copied into a new block, the tree keeps it")
                    b = self.take()                          # copy the reusable tokens into a new block
                    self.blocks[b].key = key
                    parent = None
                else:
                    if self.trace is not None:
                        self._traced_removal(b, "PEER-TRT-4", "partial_reuse", f"block {b} matches {n} tokens in "
                                             "part and is a leaf nobody holds: taken out of the tree and written into")
                    self.detach(b)                           # a private leaf: out of the tree, reused
                    self.claim(b)
                    parent = None
            self._hold_block(run, b)
        run.tokens = list(request.ids)
        return run

    def grow(self, run: Running, tokens: int) -> None:
        """Blocks for `tokens` tokens in all (a sampled token that starts a block takes one)."""
        while len(run.blocks) < -(-tokens // self.T):
            b = self.take()
            self.blocks[b].key = None
            self._hold_block(run, b)

    def release(self, run: Running, tokens: list | None = None) -> None:
        """`releaseBlocks`: store the blocks of `tokens` (default: the request's computed tokens)
        but the last (PEER-TRT-4), then free the request's blocks last first to the tail of the
        queue."""
        tokens = run.tokens if tokens is None else tokens
        if self.reuse:
            self.store(block_keys(tokens[:-1], self.T, run.request), run.blocks)
        for b in reversed(run.blocks):
            self.blocks[b].refs -= 1
            if self.blocks[b].refs == 0 and self.K is not None:
                self.free.append(b)

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

    def commit(self, request: PeerRequest, sampled) -> None:
        self.release(self.hold(request, sampled))

    def hold(self, request: PeerRequest, sampled=()) -> Running:
        """`addSequence`, then the sampled tokens added (a token that starts a block takes one);
        the request holds its blocks until `release`."""
        run = self.admit(request)
        run.tokens = list(request.ids) + list(sampled)
        self.grow(run, len(run.tokens))
        return run

    def tree_tokens(self, b: int) -> tuple:
        """A stored block's tokens (for tests)."""
        return self.blocks[b].key.tokens

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
        rule = "PEER-TRT-3"
        if parent is not None and len(path) < len(keys) and keys[len(path)].tokens:
            key = keys[len(path)]
            other = next((c for k, c in self.children(parent).items() if k.tokens[:1] == key.tokens[:1]
                          and (k.lora, k.salt, k.extra_key) != (key.lora, key.salt, key.extra_key)), None)
            gone = self._taken_from.get(parent)
            if other is not None:
                rule = "PEER-TRT-2"
                why += (f"; block {other} holds the next tokens under other keys (LoRA task id, cache salt, extra "
                        "keys key every block)")
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

def trtllm_cached(matched: int, n: int) -> int:
    """PEER-TRT-3: the count is the matched tokens, which never exceed N - 1."""
    return max(0, min(matched, n - 1))


PROFILE = PeerProfile(
    name="trtllm-kv-reuse", runtime="TensorRT-LLM",
    version="NVIDIA/TensorRT-LLM kvCacheManager.cpp at b35ac1b64368",
    section="spec/peer-profiles.md section 5",
    settings=(
        Setting("tokens_per_block", "size", 32), Setting("enable_block_reuse", "bool", True),
        Setting("enable_partial_reuse", "bool", True), Setting("copy_on_partial_reuse", "bool", True),
        Setting("max_blocks", "count", None),
    ),
    count_rule="PEER-TRT-3", after_rule="PEER-TRT-4", key_rule="PEER-TRT-2",
    make=lambda s, trace=None: TrtllmBlockPool(s["tokens_per_block"], s["enable_block_reuse"],
                                               s["enable_partial_reuse"], s["copy_on_partial_reuse"], s["max_blocks"],
                                               trace),
    full_match=lambda s, n: trtllm_cached(n, n),
    tokenizer_loader="transformers-auto", reset=None, crosscheck=None, lora_field="lora_request",
    features=frozenset({"salt", "lora", "case_salt"}), unit="tokens_per_block", unit_name="block",
    cases=("eviction/trt-blocks",), report_hint="trtllm-serve reports it with kv_cache_config.enable_block_reuse",
)
"""PEER-TRT-1..6. trtllm-serve publishes no setting and offers no cache reset."""
