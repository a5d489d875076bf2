"""Prefix caches of four peer runtimes, for the bundled OpenAI-compatible server (serve.py).

Each cache keeps the real KV of what it caches ([attention layers, 2, tokens, kv heads, head
dim], FP16) and hands the KV of a hit back to the engine, which then computes only the rest of
the prompt. The rules are the runtimes' own (spec/peer-profiles.md), implemented here
independently of the kit's oracle (the docstrings and comments cite the PEER rule each part
implements):

    SlotCache     llama.cpp-server  slots chosen by similarity, else LRU; min(common prefix, N - 1)
    BlockCache    vllm-apc          chained hashes of full blocks; B * min(hits, (N - 1) // B);
                                    freed blocks without a key reused first
    RadixCache    sglang-radix      radix tree per (extra key + adapter, salt); page-aligned; LRU leaves
    TrtBlockTree  trtllm-kv-reuse   a tree of blocks keyed by tokens, adapter and salt; partial reuse

    cache.lookup(req) -> (reported count, KV of the reused tokens or None)
    cache.store(req, sequence, kv, sampled)   sequence = prompt + sampled[:-1], kv of all of it
    cache.reset()
    cache.pages(context) -> {(method, path): document}   what the real server publishes about it

SERVED (at the end) is the server's one list of the profiles it serves: each profile's cache,
settings and defaults, and the parts of its runtime's HTTP API that serve.py imitates; the
command line and the server read it. Subclasses change one method (`cap`, `spans`, `reported`,
`extras`, `namespace`, `release`, `touch`, `label`): the seams the kit's faulty server variants
use.
"""
import hashlib
from dataclasses import dataclass, field


def _concat(parts: list):
    """The KV of consecutive cached pieces, [layers, 2, tokens, kv heads, head dim], joined on
    tokens (torch is imported here: the command line reads SERVED without loading it)."""
    import torch
    return torch.cat(parts, dim=2)


def walk(root):
    """Every node of a tree whose nodes keep their children in `.children` (a dict), root first."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children.values())


@dataclass
class ChatRequest:
    ids: list
    lora: str | None = None
    salt: str | None = None
    extra_key: str | None = None
    extras: dict = field(default_factory=dict)
    lora_path: str | None = None
    skip_prefix_cache: bool = False


def _shared(a, b) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class SlotCache:
    """llama-server with `slots` slots (`-np N --cache-ram 0`), each the tokens it computed and
    their KV (PEER-LCPP-1..5). A request takes the slot whose tokens share the largest fraction
    of its prompt, above `slot_prompt_similarity`, else the least recently used one
    (server-context.cpp get_available_slot; the last of equally old slots). The host prompt
    cache (`--cache-ram` above 0, PEER-LCPP-6) is not served."""
    settings = {"slots": 1, "slot_prompt_similarity": 0.1, "cache_ram_mib": 0}

    def __init__(self, slots=1, slot_prompt_similarity=0.1, cache_ram_mib=0):
        if cache_ram_mib != 0:
            raise ValueError("setting cache_ram_mib: the bundled server has no host prompt cache (PEER-LCPP-6): "
                             "only 0 is served")
        self.n, self.threshold = slots, slot_prompt_similarity
        self.slots = [{"tokens": [], "kv": None, "used": -1} for _ in range(slots)]
        self.clock = 0
        self.current = 0

    def reset(self, slot: int | None = None):
        """Erase one slot (or all), PEER-API-4: its tokens go, its last use stays (as the server's)."""
        for i in ([slot] if slot is not None else range(self.n)):
            self.slots[i]["tokens"], self.slots[i]["kv"] = [], None

    @property
    def tokens(self):
        return self.slots[0]["tokens"]

    def pages(self, context: int) -> dict:
        """llama-server's `/props` and `/slots` (PEER-API-5: the kit reads `total_slots`)."""
        return {("GET", "/props"): {"total_slots": self.n, "default_generation_settings": {"n_ctx": context}},
                ("GET", "/slots"): [{"id": i, "n_ctx": context, "is_processing": False} for i in range(self.n)]}

    def cap(self, n: int) -> int:
        """PEER-LCPP-1: at least one prompt token is evaluated again (server-context.cpp: n_past--)."""
        return n - 1

    def pick(self, ids) -> int:
        """PEER-LCPP-5: the most similar slot above the threshold, else the least recently used."""
        best, best_sim = None, 0.0
        if self.threshold != 0:
            for i, slot in enumerate(self.slots):
                if slot["tokens"]:
                    sim = _shared(slot["tokens"], ids) / len(ids)
                    if sim > best_sim and sim > self.threshold:
                        best, best_sim = i, sim
        if best is None:
            best = 0
            for i, slot in enumerate(self.slots):
                if slot["used"] <= self.slots[best]["used"]:
                    best = i
        return best

    def lookup(self, req):
        self.current = self.pick(req.ids)
        slot = self.slots[self.current]
        c = max(0, min(_shared(slot["tokens"], req.ids), self.cap(len(req.ids))))
        use = min(c, len(req.ids) - 1)
        return c, (slot["kv"][:, :, :use] if use > 0 else None)

    def store(self, req, sequence, kv, sampled):
        """PEER-LCPP-2 / PEER-LCPP-4: the slot now holds the computed sequence, nothing else."""
        self.clock += 1
        self.slots[self.current].update(tokens=list(sequence), kv=kv, used=self.clock)


class BlockCache:
    """vLLM automatic prefix caching: full blocks keyed by a hash chain with extra keys
    (PEER-VLLM-1..8).

    A key may be held by several blocks (a block beyond the N - 1 cap, or dropped under EAGLE,
    is computed and cached again); a hit uses the block that cached it first. Freed blocks go
    back last block first: a block without a key to the head of the free queue, one with a key
    to the tail (vllm/v1/core/block_pool.py free_blocks)."""
    settings = {"block_size": 16, "cache_blocks": None, "enable_prefix_caching": True, "eagle": False}

    def __init__(self, block_size=16, cache_blocks=None, enable_prefix_caching=True, eagle=False):
        self.B, self.capacity = block_size, cache_blocks
        self.caching, self.eagle = enable_prefix_caching, eagle
        self.reset()

    def pages(self, context: int) -> dict:
        """vLLM's `/metrics` line `vllm:cache_config_info` (PEER-API-5): block size, prefix caching
        and num_gpu_blocks, the usable blocks and the null block 0."""
        labels = {"block_size": self.B, "enable_prefix_caching": self.caching,
                  "num_gpu_blocks": "None" if self.capacity is None else self.capacity + 1}
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return {("GET", "/metrics"): "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
                                     "# TYPE vllm:cache_config_info gauge\n"
                                     f"vllm:cache_config_info{{{text}}} 1.0\n"}

    def reset(self):
        self.holder = {}                        # key -> block ids holding it, first cached first
        self.blocks = {}                        # block id -> [key, kv]
        self.free = list(range(1, (self.capacity or 0) + 1))
        self.fresh = 1                          # next id of an unbounded cache

    # seams ---------------------------------------------------------------------------------
    def spans(self, n: int) -> list:
        """PEER-VLLM-1: the token ranges that are hashed: full blocks only."""
        return [(i * self.B, (i + 1) * self.B) for i in range(n // self.B)]

    def extras(self, req, index: int) -> tuple:
        """PEER-VLLM-2: the adapter's name and path key every block, cache_salt block 0."""
        out = () if req.lora is None else (("lora", req.lora, req.lora_path),)
        if index == 0 and req.salt is not None:
            out += (("cache_salt", req.salt),)
        return out

    def reported(self, hit_spans: list, n: int) -> int:
        """PEER-VLLM-3: whole hit blocks below N - 1; PEER-VLLM-8: EAGLE one block fewer."""
        blocks = min(len(hit_spans), (n - 1) // self.B)
        return self.B * (max(0, blocks - 1) if self.eagle else blocks)

    # --------------------------------------------------------------------------------------
    def keys(self, ids, req) -> list:
        out, parent = [], b""
        for index, (a, b) in enumerate(self.spans(len(ids))):
            h = hashlib.blake2b(parent, digest_size=16)
            h.update(repr((list(ids[a:b]), self.extras(req, index))).encode())
            parent = h.digest()
            out.append(parent)
        return out

    def _hits(self, keys, req) -> int:
        """Leading cached keys; none with caching off (PEER-VLLM-6) or a read bypass (PEER-VLLM-7)."""
        if not self.caching or req.skip_prefix_cache:
            return 0
        k = 0
        while k < len(keys) and self.holder.get(keys[k]):
            k += 1
        return k

    def lookup(self, req):
        n, spans, keys = len(req.ids), self.spans(len(req.ids)), self.keys(req.ids, req)
        hits = self._hits(keys, req)
        c = self.reported(spans[:hits], n)
        use = min(c, n - 1)
        if use <= 0:
            return c, None
        parts = [self.blocks[self.holder[k][0]][1] for k in keys[:hits]]
        return c, _concat(parts)[:, :, :use]

    def store(self, req, sequence, kv, sampled):
        """PEER-VLLM-4: the request runs through the pool, the full blocks of its computed
        sequence cached as they fill; then its blocks are freed (PEER-VLLM-5)."""
        n = len(req.ids)
        keys, spans = self.keys(sequence, req), self.spans(len(sequence))
        used = self.reported(spans[:self._hits(keys[:len(self.spans(n))], req)], n) // self.B
        held = []
        for key in keys[:used]:
            block = self.holder[key][0]
            if block in self.free:
                self.free.remove(block)
            held.append(block)
        computed = n
        self._take(held, -(-n // self.B))
        self._keep(held, keys, spans, kv, used, computed)
        for _ in range(len(sampled) - 1):
            computed += 1
            self._take(held, -(-computed // self.B))
            self._keep(held, keys, spans, kv, used, computed)
        if self.capacity is not None:
            self.release(held)

    def release(self, held: list) -> None:
        """PEER-VLLM-5: free a finished request's blocks, last first: unkeyed to the head, keyed
        to the tail."""
        unkeyed = [b for b in reversed(held) if b not in self.blocks]
        self.free = unkeyed + self.free + [b for b in reversed(held) if b in self.blocks]

    def _take(self, held, blocks):
        while len(held) < blocks:
            if self.capacity is None:
                block, self.fresh = self.fresh, self.fresh + 1
            elif not self.free:
                raise RuntimeError(f"out of KV blocks ({self.capacity})")
            else:
                block = self.free.pop(0)                # PEER-VLLM-5: the head of the free queue
                old = self.blocks.pop(block, [None])[0]
                if old is not None:                     # evicted: its key goes
                    self.holder[old].remove(block)
            held.append(block)

    def _keep(self, held, keys, spans, kv, used, computed):
        if not self.caching:
            return
        for i in range(used, len(keys)):
            a, b = spans[i]
            if b > computed:
                break
            if self.blocks.get(held[i], [None])[0] == keys[i]:
                continue
            self.blocks[held[i]] = [keys[i], kv[:, :, a:b].clone()]
            self.holder.setdefault(keys[i], []).append(held[i])


class _Node:
    __slots__ = ("key", "kv", "children", "parent", "used", "pins")

    def __init__(self, key, kv, parent, used):
        self.key, self.kv, self.children, self.parent, self.used, self.pins = key, kv, {}, parent, used, 0


class RadixCache:
    """SGLang's radix cache (mem_cache/radix_cache.py, PEER-SGL-1..6): one tree, the namespace (extra key +
    adapter, salt) before the first page of every edge, matched page by page; a match touches
    its path and splits the node it ends in. With `pool_tokens` a request short of free slots
    evicts whole unpinned leaves, the least recently used first, as many tokens as it needs
    (mem_cache/common.py evict_from_tree_cache); `radix_cache=False` caches nothing."""
    settings = {"page_size": 1, "pool_tokens": None, "radix_cache": True}

    def __init__(self, page_size=1, pool_tokens=None, radix_cache=True):
        self.P, self.pool, self.on = page_size, pool_tokens, radix_cache
        self.reset()

    def reset(self):
        self.root = _Node([], None, None, 0)
        self.tick, self.size = 0, 0
        self._held, self._pinned = 0, None                  # the running request's slots and path

    def pages(self, context: int) -> dict:
        """SGLang's `/get_server_info` (PEER-API-5): page size, pool, radix cache on or off."""
        return {("GET", "/get_server_info"): {"page_size": self.P, "disable_radix_cache": not self.on,
                                              "max_total_num_tokens": self.pool, "context_length": context,
                                              "version": "kvconform-bundled"}}

    def namespace(self, req) -> tuple:
        """PEER-SGL-2: extra key with the adapter, and cache_salt, key the root's children."""
        return ((req.extra_key or "") + (req.lora or ""), req.salt)

    def _edge(self, ns, ids, at=0):
        return ns, tuple(ids[at:at + self.P])

    def _pages_shared(self, a, b) -> int:
        k = _shared(a, b)
        return self.P * (k // self.P)

    def _match(self, ns, ids, touch: bool):
        """(tokens matched, KV parts, the node the match ends in)."""
        node, at, parts = self.root, 0, []
        while len(ids) - at >= self.P:
            child = node.children.get(self._edge(ns, ids, at))
            if child is None:
                break
            k = self._pages_shared(child.key, ids[at:])
            if touch:
                self.touch(child)
            parts.append(child.kv[:, :, :k])
            at += k
            if k < len(child.key):
                if touch:
                    child = self._split(ns, child, k)
                return at, parts, child
            node = child
        return at, parts, node

    def touch(self, node):
        """PEER-SGL-4: a match or an insertion passes through `node`: it was used now
        (last_access_time)."""
        node.used = self.tick

    def _split(self, ns, child, k):
        upper = _Node(child.key[:k], child.kv[:, :, :k], child.parent, child.used)
        upper.pins = child.pins
        child.parent.children[self._edge(ns, child.key)] = upper
        upper.children[self._edge(ns, child.key, k)] = child
        child.key, child.kv, child.parent = child.key[k:], child.kv[:, :, k:], upper
        return upper

    def _pin(self, node, delta):
        while node is not None and node is not self.root:
            node.pins += delta
            node = node.parent

    def reported(self, matched: int, n: int) -> int:
        """PEER-SGL-1: the count of a match of `matched` tokens (already below N): whole pages."""
        return self.P * (matched // self.P)

    def lookup(self, req):
        if not self.on:                                     # PEER-SGL-6: the radix cache disabled
            return 0, None
        n = len(req.ids)
        self.tick += 1
        matched, parts, node = self._match(self.namespace(req), req.ids[:n - 1], touch=True)
        self._pinned = node
        self._pin(node, 1)
        self._slots(n - matched)
        return self.reported(matched, n), (_concat(parts)[:, :, :matched] if matched > 0 else None)

    def _slots(self, tokens):
        """Make room for `tokens` more tokens (and a page more when paged): evict when short."""
        if self.pool is None:
            return
        need = tokens + (self.P if self.P > 1 else 0)
        if self.pool - self.size - self._held < need:
            self._evict(need)
        self._held += tokens

    def _evict(self, tokens):
        """PEER-SGL-5: whole unpinned leaves, least recently used first, until enough are freed."""
        leaves = [nd for nd in self._all() if nd is not self.root and not nd.children and nd.pins == 0]
        freed = 0
        while freed < tokens and leaves:
            leaf = min(leaves, key=lambda nd: nd.used)
            leaves.remove(leaf)
            parent = leaf.parent
            parent.children = {k: v for k, v in parent.children.items() if v is not leaf}
            freed += len(leaf.key)
            self.size -= len(leaf.key)
            if parent is not self.root and not parent.children and parent.pins == 0:
                leaves.append(parent)

    def _all(self):
        return walk(self.root)

    def decode_step(self):
        """A sampled token fed back takes a slot (the bundled server calls this per step)."""
        if self.on:
            self._slots(1)

    def store(self, req, sequence, kv, sampled):
        """PEER-SGL-3: the computed sequence, in whole pages, goes into the tree."""
        if not self.on:
            return
        for _ in range(len(sampled) - 1):
            self.decode_step()
        length = self.P * (len(sequence) // self.P)
        ids, ns = list(sequence[:length]), self.namespace(req)
        self.tick += 1
        at, _, node = self._match(ns, ids, touch=True)
        if at < length:
            node.children[self._edge(ns, ids, at)] = _Node(ids[at:], kv[:, :, at:length].clone(), node, self.tick)
            self.size += length - at
        self._pin(self._pinned, -1)
        self._pinned, self._held = None, 0


class _TrtBlock:
    __slots__ = ("tokens", "kv", "children")

    def __init__(self, tokens, kv):
        self.tokens, self.kv, self.children = tokens, kv, {}


class TrtBlockTree:
    """TensorRT-LLM block reuse (kvCacheManager.cpp, PEER-TRT-1..5): blocks of T tokens in a tree whose edges
    are (tokens, LoRA task id, salt, extra key); a request looks up its first N - 1 tokens, a
    partial last block included; a partly matching block is copied when it has children, else
    taken out of the tree and written into (without copy on partial reuse only such leaves are
    candidates); a finished request stores its computed sequence. Unbounded: never evicts (the
    kit cannot empty a TensorRT-LLM pool between cases, so eviction, PEER-TRT-6, is not served
    here: `max_blocks` is unset)."""
    settings = {"tokens_per_block": 32, "enable_block_reuse": True, "enable_partial_reuse": True,
                "copy_on_partial_reuse": True, "max_blocks": None}

    def __init__(self, tokens_per_block=32, enable_block_reuse=True, enable_partial_reuse=True,
                 copy_on_partial_reuse=True, max_blocks=None):
        if max_blocks is not None:
            raise ValueError("setting max_blocks: the bundled server does not evict blocks (PEER-TRT-6 is not "
                             "served): leave it unset")
        self.T, self.on = tokens_per_block, enable_block_reuse
        self.partial, self.copy = enable_partial_reuse, copy_on_partial_reuse
        self.reset()

    def reset(self):
        self.root = _TrtBlock((), None)

    def pages(self, context: int) -> dict:
        """trtllm-serve publishes none of its cache settings."""
        return {}

    def label(self, req) -> tuple:
        """PEER-TRT-2: what keys every block besides its tokens."""
        return (req.lora, req.salt, req.extra_key)

    def chunks(self, ids) -> list:
        return [tuple(ids[i:i + self.T]) for i in range(0, len(ids), self.T)]

    def reported(self, matched: int, n: int) -> int:
        """PEER-TRT-3: the tokens matched, a partly matched block's included."""
        return matched

    def _shared_with(self, node, chunk, label):
        """PEER-TRT-1 / PEER-TRT-4: (child, tokens shared) of the best child for `chunk`: an exact
        edge first, then the longest common prefix among the children that may be reused in part."""
        exact = node.children.get((chunk, label))
        if exact is not None:
            return exact, len(chunk), (chunk, label)
        best = (None, 0, None)
        if self.partial:
            for (tokens, other), child in node.children.items():
                if other != label or not (self.copy or not child.children):
                    continue
                n = _shared(tokens, chunk)
                if n > best[1]:
                    best = (child, n, (tokens, other))
        return best

    def lookup(self, req):
        """PEER-TRT-3: the blocks of the first N - 1 tokens, the last of them possibly in part."""
        if not self.on:                                     # PEER-TRT-5: block reuse off
            return 0, None
        n, label = len(req.ids), self.label(req)
        node, matched, parts = self.root, 0, []
        for chunk in self.chunks(req.ids[:n - 1]):
            child, k, edge = self._shared_with(node, chunk, label)
            if child is None or k == 0:
                break
            parts.append(child.kv[:, :, :k])
            matched += k
            if edge != (chunk, label) or len(chunk) < self.T:     # reused in part: the match ends here
                if not child.children:                      # PEER-TRT-4:
                    node.children.pop(edge)                 # a leaf nobody holds: taken out, written into
                break                                       # (else copied: the tree keeps it)
            node = child
        c = self.reported(matched, n)
        use = min(matched, n - 1)
        return c, (_concat(parts)[:, :, :use] if use > 0 else None)

    def store(self, req, sequence, kv, sampled):
        """PEER-TRT-4: the computed sequence's blocks, a partial last one included, join the tree."""
        if not self.on:
            return
        label, node, at = self.label(req), self.root, 0
        for chunk in self.chunks(sequence):
            child = node.children.get((chunk, label))
            if child is None:
                child = _TrtBlock(chunk, kv[:, :, at:at + len(chunk)].clone())
                node.children[(chunk, label)] = child
            node, at = child, at + len(chunk)



@dataclass(frozen=True)
class Served:
    """A peer profile the bundled server serves: its cache (whose `settings` are the profile's
    settings and defaults) and what of its runtime's HTTP API serve.py imitates."""
    name: str
    cache: type
    tokenizer_loader: str
    """How the runtime reads a tokenizer folder: llama.cpp as written, the others through transformers."""
    lora_field: str | None = None
    """The request field naming a LoRA adapter: model (vLLM), lora_path (SGLang), lora_request
    (TensorRT-LLM: {"lora_name", ...}); None: no per-request adapters."""
    resets: tuple = ()
    """(method, path, answer) of each route that empties the whole cache (PEER-API-4)."""
    erases_slots: bool = False
    """POST /slots/{id}?action=erase empties one slot (llama.cpp)."""
    tokenize: str | None = None
    """POST /tokenize takes `content` (llama.cpp, with POST /apply-template) or `messages` (vLLM)."""
    lists_adapters: bool = False
    """GET /v1/models lists each adapter with its parent and path (vLLM)."""
    read_bypass: bool = False
    """prompt_logprobs or skip_reading_prefix_cache skips the cache read (vLLM, PEER-VLLM-7)."""
    timings: bool = False
    """Every completion carries the native `timings` (llama.cpp, PEER-LCPP-3)."""

    @property
    def settings(self) -> dict:
        return dict(self.cache.settings)


SERVED = {s.name: s for s in (
    Served("llama.cpp-server", SlotCache, "tokenizers-raw", erases_slots=True, tokenize="content", timings=True),
    Served("vllm-apc", BlockCache, "transformers-auto", "model", (("POST", "/reset_prefix_cache", {"success": True}),),
           tokenize="messages", lists_adapters=True, read_bypass=True),
    Served("sglang-radix", RadixCache, "transformers-auto", "lora_path",
           (("POST", "/flush_cache", {"message": "Cache flushed."}), ("GET", "/flush_cache", {"message": "Cache flushed."}))),
    Served("trtllm-kv-reuse", TrtBlockTree, "transformers-auto", "lora_request"),
)}
"""Every profile the server serves, by name (the kit's peer profiles; a test holds the two lists equal)."""
