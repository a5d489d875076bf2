"""`sglang-radix`: SGLang's radix cache of token ids (spec/peer-profiles.md section 4). Stdlib only.

One tree for every namespace (the namespace keys the root's children, as SGLang's
`get_child_key` puts `extra_key` before the first token), matched page by page. With a pool of
`pool_tokens` KV slots a request that needs more slots than are free first evicts whole leaves
in the order they were last touched, never a node on its own matched path
(mem_cache/common.py `evict_from_tree_cache`, radix_cache.py `evict`, `inc_lock_ref`).
"""
from __future__ import annotations

import heapq

from .peer_common import PeerProfileError, PeerRequest, computed_sequence


def sglang_namespace(request: PeerRequest) -> tuple:
    """PEER-SGL-2: (extra_key with the LoRA adapter, cache_salt)."""
    return ((request.extra_key or "") + "|" + (request.lora or ""), request.salt)


def sglang_cached(lcp: int, n: int, page_size: int) -> int:
    """PEER-SGL-1: `P * floor(min(L, N - 1) / P)`."""
    return page_size * (max(0, min(lcp, n - 1)) // page_size)


class Node:
    __slots__ = ("key", "parent", "children", "touched", "locks")

    def __init__(self, key: list, parent: "Node | None", touched: int):
        self.key, self.parent, self.children, self.touched, self.locks = key, parent, {}, touched, 0

    def __lt__(self, other: "Node") -> bool:
        return self.touched < other.touched


class RadixCache:
    """PEER-SGL-1..6. `pool_tokens` None: unbounded, nothing is evicted; `radix_cache` False:
    `--disable-radix-cache`, nothing is cached."""

    def __init__(self, page_size: int, pool_tokens: int | None = None, radix_cache: bool = True):
        self.P, self.pool, self.on = page_size, pool_tokens, radix_cache
        self.reset()

    def reset(self) -> None:
        self.root = Node([], None, 0)
        self.clock = 0
        self.size = 0                                       # tokens held by the tree

    # --- the tree ------------------------------------------------------------------------------
    def _child_key(self, namespace, ids, at: int) -> tuple:
        return (namespace, tuple(ids[at:at + self.P]))

    def _shared(self, a: list, b: list) -> int:
        """Tokens two lists share, in whole pages."""
        n = 0
        while n + self.P <= min(len(a), len(b)) and a[n:n + self.P] == b[n:n + self.P]:
            n += self.P
        return n

    def _walk(self, namespace, ids: list, touch: bool):
        """(matched tokens, the node the match ends in): a match that ends inside a node splits it."""
        node, at = self.root, 0
        if touch:
            self.root.touched = self.clock
        while len(ids) - at >= self.P:
            child = node.children.get(self._child_key(namespace, ids, at))
            if child is None:
                break
            k = self._shared(child.key, ids[at:])
            if touch:
                child.touched = self.clock
            if k < len(child.key):
                if touch:
                    child = self._split(namespace, child, k)
                at += k
                return at, child
            at += k
            node = child
        return at, node

    def _split(self, namespace, child: Node, k: int) -> Node:
        upper = Node(child.key[:k], child.parent, child.touched)
        upper.locks = child.locks
        upper.children = {self._child_key(namespace, child.key, k): child}
        child.parent.children[self._child_key(namespace, child.key, 0)] = upper
        child.key, child.parent = child.key[k:], upper
        return upper

    def _insert(self, namespace, ids: list) -> None:
        at, node = self._walk(namespace, ids, touch=True)
        if at < len(ids):
            leaf = Node(list(ids[at:]), node, self.clock)
            node.children[self._child_key(namespace, ids, at)] = leaf
            self.size += len(leaf.key)

    def _lock(self, node: Node, delta: int) -> None:
        while node is not self.root and node is not None:
            node.locks += delta
            node = node.parent

    def evict(self, tokens: int) -> int:
        """PEER-SGL-5: free whole unlocked leaves, least recently touched first, until `tokens`
        are freed or none is left."""
        leaves = [n for n in self._nodes() if not n.children and n.locks == 0 and n is not self.root]
        heapq.heapify(leaves)
        freed = 0
        while freed < tokens and leaves:
            leaf = heapq.heappop(leaves)
            parent = leaf.parent
            del parent.children[next(k for k, v in parent.children.items() if v is leaf)]
            freed += len(leaf.key)
            self.size -= len(leaf.key)
            if parent is not self.root and not parent.children and parent.locks == 0:
                heapq.heappush(leaves, parent)
        return freed

    def _nodes(self):
        stack = [self.root]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    # --- requests --------------------------------------------------------------------------------
    def predict(self, request: PeerRequest) -> int:
        if not self.on:
            return 0
        n = len(request.ids)
        matched, _ = self._walk(sglang_namespace(request), request.ids[:max(0, n - 1)], touch=False)
        return sglang_cached(matched, n, self.P)

    def _take(self, held: int, tokens: int) -> int:
        """PEER-SGL-5: slots for `tokens` more tokens, evicting first when fewer are free."""
        if self.pool is not None:
            need = tokens + (self.P if self.P > 1 else 0)          # a page more per request when paged
            if self.pool - self.size - held < need:
                self.evict(need)
            if self.pool - self.size - held < tokens:
                raise PeerProfileError(f"sglang-radix: a request needs more than pool_tokens={self.pool} slots; "
                                       "the profile does not define what the server does then")
        return held + tokens

    def commit(self, request: PeerRequest, sampled) -> None:
        """Match (touching and locking the matched path), take slots for the rest of the prompt
        and one per fed-back sampled token, insert the computed sequence, unlock (PEER-SGL-3)."""
        if not self.on:
            return
        self.clock += 1
        namespace, n = sglang_namespace(request), len(request.ids)
        matched, node = self._walk(namespace, request.ids[:max(0, n - 1)], touch=True)
        matched = sglang_cached(matched, n, self.P)
        self._lock(node, 1)
        held = self._take(0, n - matched)
        for _ in range(len(sampled) - 1):
            held = self._take(held, 1)
        seq = computed_sequence(request.ids, sampled)
        self.clock += 1
        self._insert(namespace, seq[:self.P * (len(seq) // self.P)])
        self._lock(node, -1)
