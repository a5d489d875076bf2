"""`sglang-radix`: SGLang's radix cache of token ids (spec/peer-profiles.md section 4). Stdlib only.

One tree for every namespace (the namespace keys the root's children, as SGLang's
`get_child_key` puts `extra_key` before the first token), matched page by page. With a pool of
`pool_tokens` KV slots a request that needs more slots than are free first evicts whole leaves
in the order they were last touched, never a node on its own matched path
(mem_cache/common.py `evict_from_tree_cache`, radix_cache.py `evict`, `inc_lock_ref`).

With a `PeerTrace` the tree records each decision where it is taken (reference/peer_trace.py):
how far a prompt matches and why it stops (the tree ends there, a leaf was evicted, the ids sit
in another namespace), the count in pages, what a request inserts, each eviction with the leaf,
who last touched it and why it goes first.
"""
from __future__ import annotations

import heapq

from .peer_common import PeerProfileError, PeerRequest, computed_sequence
from .peer_profile import PeerProfile, Published, Setting, Signature
from .peer_trace import keyed


def sglang_namespace(request: PeerRequest) -> tuple:
    """PEER-SGL-2: (extra_key with the LoRA adapter, cache_salt)."""
    return ((request.extra_key or "") + "|" + (request.lora or ""), request.salt)


def sglang_cached(lcp: int, n: int, page_size: int) -> int:
    """PEER-SGL-1: `P * floor(min(L, N - 1) / P)`."""
    return page_size * (max(0, min(lcp, n - 1)) // page_size)


class Node:
    __slots__ = ("key", "parent", "children", "touched", "locks", "origin", "by")

    def __init__(self, key: list, parent: "Node | None", touched: int):
        self.key, self.parent, self.children, self.touched, self.locks = key, parent, {}, touched, 0
        self.origin = self.by = None         # traced: the step that inserted it; who touched it last

    def __lt__(self, other: "Node") -> bool:
        return self.touched < other.touched


class RadixCache:
    """PEER-SGL-1..6. `pool_tokens` None: unbounded, nothing is evicted; `radix_cache` False:
    `--disable-radix-cache`, nothing is cached."""

    def __init__(self, page_size: int, pool_tokens: int | None = None, radix_cache: bool = True, trace=None):
        self.P, self.pool, self.on = page_size, pool_tokens, radix_cache
        self.trace = None
        self.reset()
        self.trace = trace

    def reset(self) -> None:
        self.root = Node([], None, 0)
        self.clock = 0
        self.size = 0                                       # tokens held by the tree
        self._evicted_under: dict = {}                      # traced: (node, edge) -> the eviction of that child
        if self.trace is not None:
            self.trace.add("PEER-API-4", "reset", True, "the tree was flushed")

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
                if self.trace is not None:
                    child.by = self.trace.owner
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
        upper.locks, upper.origin, upper.by = child.locks, child.origin, child.by
        upper.children = {self._child_key(namespace, child.key, k): child}
        child.parent.children[self._child_key(namespace, child.key, 0)] = upper
        child.key, child.parent = child.key[k:], upper
        return upper

    def _insert(self, namespace, ids: list, computed: int | None = None) -> None:
        """PEER-SGL-3: `ids` (the first `computed` ids in whole pages) go into the tree."""
        at, node = self._walk(namespace, ids, touch=True)
        if at < len(ids):
            leaf = Node(list(ids[at:]), node, self.clock)
            node.children[self._child_key(namespace, ids, at)] = leaf
            self.size += len(leaf.key)
            if self.trace is not None:
                leaf.by = self.trace.owner
                leaf.origin = self.trace.add("PEER-SGL-3", "inserted", len(ids), f"{self._inserted(ids, computed)} go "
                                             f"into the tree: {at} of them were there, a new leaf holds the other "
                                             f"{len(ids) - at}")
        elif self.trace is not None:
            self.trace.add("PEER-SGL-3", "inserted", len(ids), f"{self._inserted(ids, computed)} were in the tree "
                           "already: nothing new")

    def _inserted(self, ids: list, computed: int | None) -> str:
        """'its computed sequence (prompt + sampled ids but the last, 40 ids) in whole pages of 16: 32 ids'."""
        whole = f" in whole pages of {self.P}" if self.P > 1 else ""
        return (f"its computed sequence (prompt + sampled ids but the last, {computed} ids){whole}: {len(ids)} ids"
                if computed is not None and computed != len(ids) else
                f"its computed sequence (prompt + sampled ids but the last), {len(ids)} ids,")

    def _lock(self, node: Node, delta: int) -> None:
        while node is not self.root and node is not None:
            node.locks += delta
            node = node.parent

    def evict(self, tokens: int, free: int | None = None) -> int:
        """PEER-SGL-5: free whole unlocked leaves, least recently touched first, until `tokens`
        are freed or none is left (`free`: the slots free before, for the trace)."""
        leaves = [n for n in self._nodes() if not n.children and n.locks == 0 and n is not self.root]
        heapq.heapify(leaves)
        freed = 0
        while freed < tokens and leaves:
            leaf = heapq.heappop(leaves)
            parent = leaf.parent
            edge = next(k for k, v in parent.children.items() if v is leaf)
            del parent.children[edge]
            freed += len(leaf.key)
            self.size -= len(leaf.key)
            if self.trace is not None:
                self._traced_eviction(leaf, (parent, edge), tokens, free)
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
            if self.trace is not None:
                self.trace.add("PEER-SGL-6", "cached_tokens", 0, "the radix cache is disabled (radix_cache false): "
                               "nothing is cached")
            return 0
        n = len(request.ids)
        matched, node = self._walk(sglang_namespace(request), request.ids[:max(0, n - 1)], touch=False)
        c = sglang_cached(matched, n, self.P)
        if self.trace is not None:
            self._traced_count(request, matched, node, c)
        return c

    def _take(self, held: int, tokens: int) -> int:
        """PEER-SGL-5: slots for `tokens` more tokens, evicting first when fewer are free."""
        if self.pool is not None:
            need = tokens + (self.P if self.P > 1 else 0)          # a page more per request when paged
            if self.pool - self.size - held < need:
                self.evict(need, self.pool - self.size - held)
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
        self._insert(namespace, seq[:self.P * (len(seq) // self.P)], len(seq))
        self._lock(node, -1)

    # --- the trace: reasons and causes, built only when tracing ----------------------------------
    def _traced_count(self, request: PeerRequest, matched: int, node: Node, c: int) -> None:
        """The match's step (PEER-SGL-4; PEER-SGL-2 when the ids sit in another namespace) and
        the count's (PEER-SGL-1): how far the first N - 1 ids match, and why no further."""
        tr, n, namespace = self.trace, len(request.ids), sglang_namespace(request)
        looked = request.ids[:max(0, n - 1)]
        rule, why = "PEER-SGL-4", f"the tree matches {matched} of the first N - 1 = {n - 1} ids{keyed(request)}"
        causes = [node.origin] if matched else []
        if matched + self.P <= len(looked):
            elsewhere = self._matched_elsewhere(namespace, looked)
            inside = matched < self._depth(node)
            gone = None if inside else self._evicted_under.get((node, self._child_key(namespace, looked, matched)))
            if elsewhere > matched:
                rule = "PEER-SGL-2"
                why += (f"; {elsewhere} of them are cached under another namespace (extra_key with the adapter, and "
                        "cache_salt, key the root's children)")
            elif gone is not None:
                why += f"; what followed was evicted by {tr.who(gone)}"
                causes.append(gone)
            elif inside:
                why += f"; the entry left by {tr.who(node.origin)} goes on with other ids"
            else:
                why += "; no cached entry goes on with the next page's ids"
        elif matched < len(looked):
            why += f"; the {len(looked) - matched} ids after it are less than a page of {self.P}"
        causes += [s for s in tr.background(any(causes)) if s not in causes]
        match = tr.add(rule, "matched", matched, why, causes=causes)
        tr.add("PEER-SGL-1", "cached_tokens", c, f"c = P * floor(min(L, N - 1) / P) = {self.P} * floor("
               f"{min(matched, n - 1)} / {self.P}) = {c}: the tree holds whole pages of {self.P} only",
               causes=(match,))

    def _matched_elsewhere(self, namespace, ids: list) -> int:
        """The longest match of `ids` under any other namespace (a keying miss tells itself so)."""
        best = 0
        for (other, _), _child in list(self.root.children.items()):
            if other != namespace:
                best = max(best, self._walk(other, ids, touch=False)[0])
        return best

    def _depth(self, node: Node) -> int:
        """The ids from the root to the end of `node`."""
        depth = 0
        while node is not None and node is not self.root:
            depth, node = depth + len(node.key), node.parent
        return depth

    def _traced_eviction(self, leaf: Node, edge: tuple, need: int, free: int | None) -> None:
        """PEER-SGL-5: an unlocked leaf, the least recently touched, freed for a request short of slots."""
        touched = "" if leaf.by is None else f", last touched by request {leaf.by}"
        step = self.trace.removed(self.trace.add(
            "PEER-SGL-5", "evicted", len(leaf.key), f"a leaf of {len(leaf.key)} ids (inserted by "
            f"{self.trace.who(leaf.origin)}{touched}) is the least recently touched leaf no running request "
            f"holds: evicted, as the request needs {need} slots" + (f" and {free} are free" if free is not None else ""),
            causes=(leaf.origin,)))
        self._evicted_under[edge] = step                  # (parent, the edge a later match would follow)


PROFILE = PeerProfile(
    name="sglang-radix", runtime="SGLang",
    version="sgl-project/sglang mem_cache/radix_cache.py at 006b0e3d317f, mem_cache/common.py at 2752c8285adf",
    section="spec/peer-profiles.md section 4",
    settings=(
        Setting("page_size", "size", 1, Published("/get_server_info", "page_size")),
        Setting("pool_tokens", "count", None, Published("/get_server_info", "max_total_num_tokens")),
        Setting("radix_cache", "bool", True, Published("/get_server_info", "disable_radix_cache", convert="not")),
    ),
    count_rule="PEER-SGL-1", after_rule="PEER-SGL-3", key_rule="PEER-SGL-2",
    make=lambda s, trace=None: RadixCache(s["page_size"], s["pool_tokens"], s["radix_cache"], trace),
    full_match=lambda s, n: sglang_cached(n, n, s["page_size"]),
    tokenizer_loader="transformers-auto", reset="/flush_cache", crosscheck=None, lora_field="lora_path",
    features=frozenset({"salt", "lora", "extra_key"}), unit="page_size", unit_name="page",
    cases=("eviction/radix-lru",),
    context=(Published("/v1/models", "max_model_len"), Published("/get_server_info", "context_length")),
    adapters=Published("/get_server_info", "lora_paths"),
    signature=Signature("/get_server_info", keys=("page_size", "disable_radix_cache")),
    report_hint="SGLang reports it with --enable-cache-report",
)
"""PEER-SGL-1..6."""
