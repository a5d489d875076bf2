"""sglang-radix: a radix tree per namespace, page-aligned, LRU leaves (PEER-SGL-*)."""
import re

from .common import concat_kv, shared_prefix, walk

SHORTFALL_FROM = (0, 5, 17)
"""SGLang 0.5.17 evicts only the slots an allocation is short of (allocator/base.py); before, all it asks for."""
PROMPT_SPLIT_FROM = (0, 5, 20)
"""SGLang 0.5.20 inserts a finished request's page-aligned prompt again, splitting its node there."""
EAGLE_ALGORITHMS = "EAGLE"
"""What the server publishes as `speculative_algorithm` when its tree is keyed by bigrams."""


def release_of(version: str) -> tuple:
    """(major, minor, patch) of a release string such as 0.5.23 or 0.5.23.post1."""
    found = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", str(version))
    if not found:
        raise ValueError(f"version {version!r} is not an SGLang release (MAJOR.MINOR.PATCH)")
    return tuple(int(g or 0) for g in found.groups())


class _Node:
    __slots__ = ("key", "kv", "children", "parent", "used", "pins", "window_kept", "mamba_state")

    def __init__(self, key, kv, parent, used):
        self.key, self.kv, self.children, self.parent, self.used, self.pins = key, kv, {}, parent, used, 0
        self.window_kept = True        # the sliding-window KV of its ids is there (else a tombstone)
        self.mamba_state = False       # a Mamba state for the sequence ending here is kept


class RadixCache:
    """SGLang's radix cache (mem_cache/radix_cache.py, PEER-SGL-1..9): one tree, the namespace
    (extra key + adapter, salt; an empty one is none) before the first page of every edge, matched
    page by page; a match touches its path and splits the node it ends in; every node created
    (a split's upper part, a new leaf) is stamped when it is made. With `pool_tokens` the server
    asks for slots as SGLang's allocator does (the rest of the prompt and a page of slack; a whole
    page before every decode step; whole pages held) and evicts whole unpinned leaves, least
    recently used first, when too few are free: since 0.5.17 only what it is short of. Since 0.5.20
    a finished request's prompt is inserted again, which splits its node there. `eagle` keys the
    tree by pairs of consecutive ids; `radix_cache=False` caches nothing.

    A sliding-window model (`sliding_window` W, `swa_eviction_interval` I: PEER-SGL-10..12) or a
    Mamba one (`mamba`: PEER-SGL-13) keeps beside each node's KV whether its window KV is still
    there and whether a Mamba state ends at it (SGLang 0.5.23's UnifiedRadixCache components):
    a hit stops at the deepest point where the window can be rebuilt or a state exists. Neither
    is served with EAGLE or each other, nor Mamba with pages of more than one id (the profile does
    not say what SGLang does there); a pool evicts as on full attention, which the profile leaves
    undefined for these models."""
    settings = {"page_size": 1, "pool_tokens": None, "radix_cache": True, "version": "0.5.23", "eagle": False,
                "sliding_window": None, "swa_eviction_interval": 128, "mamba": False}

    def __init__(self, page_size=1, pool_tokens=None, radix_cache=True, version="0.5.23", eagle=False,
                 sliding_window=None, swa_eviction_interval=128, mamba=False):
        self.P, self.on, self.version, self.eagle = page_size, radix_cache, version, eagle
        self.pool = None if pool_tokens is None else (pool_tokens // page_size) * page_size
        self.release = release_of(version)
        self.window, self.interval, self.mamba = sliding_window, swa_eviction_interval, mamba
        self.hybrid = sliding_window is not None or mamba
        if self.hybrid and (eagle or (sliding_window is not None and mamba) or (mamba and page_size != 1)
                            or self.release < (0, 5, 23)):
            raise ValueError("a sliding window or Mamba layers are served on SGLang 0.5.23's rules, with no "
                             "EAGLE, not both, and Mamba with page_size 1")
        self.reset()

    def reset(self):
        self.root = _Node([], None, None, 0)
        self.tick, self.size = 0, 0
        self._held, self._pinned = 0, None                  # the running request's slots and path
        self._hit = self._full_hit = 0                      # the running request's usable and full-KV match

    def pages(self, context: int) -> dict:
        """SGLang's `/get_server_info` (PEER-API-5): page size, pool, radix cache, release, drafter."""
        return {("GET", "/get_server_info"): {"page_size": self.P, "disable_radix_cache": not self.on,
                                              "max_total_num_tokens": self.pool, "context_length": context,
                                              "version": self.version,
                                              "speculative_algorithm": EAGLE_ALGORITHMS if self.eagle else None}}

    def namespace(self, req) -> tuple:
        """PEER-SGL-2: extra key with the adapter, and cache_salt, key the root's children; the API
        turns an empty extra key or salt into none."""
        return ((req.extra_key or "") + (req.lora or ""), req.salt or None)

    def units(self, ids):
        """What the tree stores one slot per: the ids, or with EAGLE each id paired with the next."""
        return list(zip(ids, ids[1:])) if self.eagle else list(ids)

    def _edge(self, ns, ids, at=0):
        return ns, tuple(ids[at:at + self.P])

    def _pages_shared(self, a, b) -> int:
        k = shared_prefix(a, b)
        return self.P * (k // self.P)

    def now(self) -> int:
        """A fresh time stamp (SGLang's time.monotonic())."""
        self.tick += 1
        return self.tick

    def _match(self, ns, ids, touch: bool):
        """(units matched, KV parts, the node the match ends in)."""
        node, at, parts = self.root, 0, []
        stamp = self.now() if touch else None
        while len(ids) - at >= self.P:
            child = node.children.get(self._edge(ns, ids, at))
            if child is None:
                break
            k = self._pages_shared(child.key, ids[at:])
            if touch:
                self.touch(child, stamp)
            parts.append(child.kv[:, :, :k])
            at += k
            if k < len(child.key):
                if touch:
                    child = self._split(ns, child, k)
                return at, parts, child
            node = child
        return at, parts, node

    def touch(self, node, stamp):
        """PEER-SGL-4: a match or an insertion passes through `node`: it was used now
        (last_access_time)."""
        node.used = stamp

    def stamp_new(self, node):
        """PEER-SGL-4: a node made now (a new TreeNode) is stamped after everything before it."""
        node.used = self.now()

    def stamp_leaf(self, leaf):
        """A leaf an insert adds is a node made now (PEER-SGL-4)."""
        self.stamp_new(leaf)

    def _split(self, ns, child, k):
        upper = _Node(child.key[:k], child.kv[:, :, :k], child.parent, 0)
        self.stamp_new(upper)
        upper.pins = child.pins
        upper.window_kept = child.window_kept               # the state stays with the lower part
        child.parent.children[self._edge(ns, child.key)] = upper
        upper.children[self._edge(ns, child.key, k)] = child
        child.key, child.kv, child.parent = child.key[k:], child.kv[:, :, k:], upper
        return upper

    def _pin(self, node, delta):
        while node is not None and node is not self.root:
            node.pins += delta
            node = node.parent

    def reported(self, matched: int, n: int) -> int:
        """PEER-SGL-1: the count of a match of `matched` units (already below N): whole pages."""
        return self.P * (matched // self.P)

    def lookup(self, req):
        if not self.on:                                     # PEER-SGL-6: the radix cache disabled
            return 0, None
        n = len(req.ids)
        matched, parts, node = self._match(self.namespace(req), self.units(req.ids[:n - 1]), touch=True)
        self._pinned = node
        self._pin(node, 1)
        self._extend(n, matched)
        self._full_hit = self._hit = matched
        if self.hybrid:
            self._hit = self.usable(self.path_to(node))
        hit = self._hit
        return self.reported(hit, n), (concat_kv(parts)[:, :, :hit] if hit > 0 else None)

    # --- sliding window and Mamba: PEER-SGL-10..13 ---------------------------------------------------
    def path_to(self, node):
        """[(first id, node)] from the root's child down to `node`."""
        chain = []
        while node is not None and node is not self.root:
            chain.append(node)
            node = node.parent
        out, at = [], 0
        for nd in reversed(chain):
            out.append((at, nd))
            at += len(nd.key)
        return out

    def usable(self, path) -> int:
        """How much of a matched path a hit may take: up to the deepest node end holding a Mamba
        state (PEER-SGL-13), or where W live window ids follow the last tombstone, or no tombstone
        came before (PEER-SGL-11)."""
        best, live_since = 0, None                          # None: no tombstone yet on the path
        for at, nd in path:
            end = at + len(nd.key)
            if self.mamba:
                if nd.mamba_state:
                    best = end
            elif not nd.window_kept:
                live_since = end
            elif live_since is None or end - live_since >= self.window:
                best = end
        return best

    def window_freed(self, n, decode_steps) -> int:
        """PEER-SGL-10: how many leading ids lost their window KV while the request decoded: from
        its second decode step, each time W + I ids have slid past what was freed, everything but
        the last max(W, P) ids rounded up to pages, never below the hit (maybe_evict_swa)."""
        keep = -(-max(self.window, self.P) // self.P) * self.P
        freed = 0
        for step in range(1, decode_steps):
            held = n + step
            if held - self.window - freed >= self.interval:
                freed = max(freed, self._hit, held - keep) // self.P * self.P
        return freed

    def cut_short(self, length) -> int:
        """PEER-SGL-12: a request whose hit stopped short of its full-attention match caches only
        that match (swa_branching_seqlen), not its own ids after it."""
        return self._full_hit

    def mark_window(self, ns, ids, leaf, freed):
        """PEER-SGL-10: the new leaf's ids before `freed` are a tombstone; tombstones the insert
        passed at or after max(freed, the hit) get the request's window KV back."""
        revive_from = max(freed, self._hit)
        end_node = leaf if leaf is not None else self._match(ns, ids, touch=False)[2]
        for at, nd in self.path_to(end_node):
            end = at + len(nd.key)
            if nd is leaf:
                if freed > at:
                    if freed < end:
                        nd = self._split(ns, nd, freed - at)
                    nd.window_kept = False
            elif not nd.window_kept and end > revive_from and end > self._hit:
                if at < revive_from:
                    self._split(ns, nd, revive_from - at)   # nd keeps the ids from revive_from on
                nd.window_kept = True

    # --- slots: PEER-SGL-7, PEER-SGL-8 ---------------------------------------------------------------
    def slack(self) -> int:
        """The page SGLang's extend asks for beyond the prompt when paged (alloc_paged_token_slots_extend)."""
        return self.P if self.P > 1 else 0

    def _extend(self, n, matched):
        """The rest of the prompt: asks for it and a page of slack, takes whole pages."""
        pages = -(-n // self.P) - matched // self.P
        self._slots(n - matched + self.slack(), pages * self.P if self.P > 1 else n - matched)

    def decode_step(self, position):
        """A sampled token fed back at `position`: a whole free page asked for, a page taken only
        when the token starts one (alloc_paged_token_slots_decode, alloc_decode); one slot unpaged."""
        if not self.on:
            return
        if self.P == 1:
            self._slots(1, 1)
        else:
            self._slots(self.P, self.P if position % self.P == 0 else 0)

    def _slots(self, asked, taken):
        if self.pool is not None:
            free = self.pool - self.size - self._held
            if free < asked:
                self._evict(self.to_evict(asked, free))
        self._held += taken

    def to_evict(self, asked, free) -> int:
        """PEER-SGL-8 (b): what an allocation short of slots evicts."""
        return asked - free if self.release >= SHORTFALL_FROM else asked

    def _evict(self, tokens):
        """PEER-SGL-5: whole unpinned leaves, least recently used first, until enough are freed; a
        parent left without children joins the candidates."""
        leaves = [nd for nd in self._all() if nd is not self.root and not nd.children and self.evictable(nd)]
        freed = 0
        while freed < tokens and leaves:
            leaf = min(leaves, key=lambda nd: nd.used)
            leaves.remove(leaf)
            parent = leaf.parent
            parent.children = {k: v for k, v in parent.children.items() if v is not leaf}
            freed += len(leaf.key)
            self.size -= len(leaf.key)
            if parent is not self.root and not parent.children and self.joins(parent):
                leaves.append(parent)

    def evictable(self, node) -> bool:
        """A node no running request holds (inc_lock_ref)."""
        return node.pins == 0

    def joins(self, parent) -> bool:
        """A parent left without children joins this round's candidates when nothing holds it
        (radix_cache.py `evict` pushes it on the heap)."""
        return self.evictable(parent)

    def _all(self):
        return walk(self.root)

    # --- what a finished request leaves: PEER-SGL-3, PEER-SGL-8 (a) ---------------------------------
    def store(self, req, sequence, kv, sampled):
        """PEER-SGL-3: the computed sequence, in whole pages, goes into the tree."""
        if not self.on:
            return
        n = len(req.ids)
        for k in range(len(sampled) - 1):
            self.decode_step(n + k)
        ids, ns = self.units(sequence), self.namespace(req)
        length = self.P * (len(ids) // self.P)
        if self.window is not None and self._full_hit > self._hit:
            length = self.cut_short(length)
        ids = ids[:length]
        at, _, node = self._match(ns, ids, touch=True)
        leaf = None
        if at < length:
            leaf = _Node(ids[at:], kv[:, :, at:length].clone(), node, 0)
            self.stamp_leaf(leaf)
            node.children[self._edge(ns, ids, at)] = leaf
            self.size += length - at
        if self.window is not None:
            self.mark_window(ns, ids, leaf, self.window_freed(n, len(sampled) - 1))
        elif self.mamba and length:
            (leaf or node).mamba_state = True                # PEER-SGL-13: where the cached sequence ends
        if not self.hybrid:                                  # UnifiedRadixCache splits there with Full alone
            self.split_at_prompt(ns, ids, n)
        self._pin(self._pinned, -1)
        self._pinned, self._held = None, 0

    def split_at_prompt(self, ns, ids, n):
        """PEER-SGL-8 (a): from 0.5.20 the page-aligned prompt is inserted again, splitting the
        finished request's node at the prompt (radix_cache.py `_insert_cache(split_prompt=True)`)."""
        if self.release < PROMPT_SPLIT_FROM:
            return
        prompt = self.P * ((n - 1 if self.eagle else n) // self.P)     # the prompt's units, whole pages
        if 0 < prompt < len(ids):
            self._match(ns, ids[:prompt], touch=True)
