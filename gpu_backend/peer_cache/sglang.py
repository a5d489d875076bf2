"""sglang-radix: a radix tree per namespace, page-aligned, LRU leaves (PEER-SGL-*)."""
from .common import concat_kv, shared_prefix, walk


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
        k = shared_prefix(a, b)
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
        return self.reported(matched, n), (concat_kv(parts)[:, :, :matched] if matched > 0 else None)

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
