"""`sglang-radix`: SGLang's radix cache of token ids (spec/peer-profiles.md section 4). Stdlib only.

One tree for every namespace (the namespace keys the root's children, as SGLang's
`RadixKey.child_key` puts `extra_key` and `cache_salt` before the first page), matched page by
page (PEER-SGL-1..4). With a pool of `pool_tokens` KV slots a request first asks for slots as
SGLang's allocator does (PEER-SGL-7: the unmatched prompt and a page of slack when paged, then a
whole free page before every decode step; whole pages held), and when fewer are free evicts whole
leaves, least recently touched first, never a node on its own matched path (PEER-SGL-5:
allocator/base.py `evict_to_free_tokens`, radix_cache.py `evict`, `inc_lock_ref`). The SGLang
release (`version`) selects what changed between releases (PEER-SGL-8): from 0.5.17 the eviction
frees only the shortfall, from 0.5.20 a finished request's node is split at its prompt.

Every node gets a clock value of its own when it is created (SGLang stamps each `TreeNode` with
`time.monotonic()`), and every walk stamps the nodes it passes with one fresh value: so a leaf an
insert creates is strictly newer than the remainder of the node that insert split (PEER-SGL-4),
and no two leaves ever share a value (the nodes one walk stamps lie on one path, where only the
deepest can be a leaf): the eviction order never depends on how a heap breaks ties.

With EAGLE (`eagle`) the tree is keyed by bigrams (PEER-SGL-9: RadixKey `is_bigram`): the units
matched, inserted and counted are pairs of consecutive ids, each standing for the KV of its first.

With a `PeerTrace` the tree records each decision where it is taken (reference/peer_trace.py):
how far a prompt matches and why it stops (the tree ends there, a leaf was evicted, the ids sit
in another namespace), the count in pages, what a request inserts, each eviction with the leaf,
who last touched it and why it goes first.
"""
from __future__ import annotations

import heapq
import re

from .peer_common import PeerProfileError, PeerRequest, computed_sequence
from .peer_sglang_hybrid import (INTERVAL, check_hybrid, evict_states, evict_window, refresh_window, usable_end,
                                 window_freed)
from .peer_profile import PeerProfile, Published, Setting, Signature
from .peer_trace import keyed

VERSION = "0.5.23"
"""The SGLang release whose rules the profile states (the `version` setting's default)."""
SHORTFALL_SINCE = (0, 5, 17)
"""PEER-SGL-8 (b): from this release an allocation evicts only what is missing."""
PROMPT_SPLIT_SINCE = (0, 5, 20)
"""PEER-SGL-8 (a): from this release a finished request's node is split at its page-aligned prompt."""
TEST_NAMESPACE = ("|", None)
"""The namespace of a RadixKey without extra key or salt (what `sglang_namespace` gives a plain request)."""
RELEASE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def sglang_release(version: str) -> tuple:
    """(0, 5, 23) for '0.5.23', '0.5.23.post1', 'v0.5.23rc1'; PeerProfileError if no release opens it."""
    match = RELEASE.match(str(version))
    if match is None:
        raise PeerProfileError(f"sglang-radix: version {version!r} names no SGLang release (MAJOR.MINOR.PATCH)")
    return tuple(int(x or 0) for x in match.groups())


def sglang_namespace(request: PeerRequest) -> tuple:
    """PEER-SGL-2: (extra_key with the LoRA adapter, cache_salt); an empty salt or extra key is
    none (schedule_batch.py `Req.__init__` and radix_cache.py `RadixKey`: `cache_salt or None`;
    io_struct.py `_normalize_extra_key`: `extra_key or None`)."""
    return ((request.extra_key or "") + "|" + (request.lora or ""), request.salt or None)


def sglang_cached(lcp: int, n: int, page_size: int) -> int:
    """PEER-SGL-1: `P * floor(min(L, N - 1) / P)`."""
    return page_size * (max(0, min(lcp, n - 1)) // page_size)


def units(ids: list, eagle: bool) -> list:
    """The tree's units of a sequence: its ids, or with EAGLE its bigrams (PEER-SGL-9)."""
    return list(zip(ids, ids[1:])) if eagle else ids


class Node:
    __slots__ = ("key", "parent", "children", "touched", "locks", "origin", "by", "live", "state", "marked",
                 "state_used")

    def __init__(self, key: list, parent: "Node | None", touched: int):
        self.key, self.parent, self.children, self.touched, self.locks = key, parent, {}, touched, 0
        self.origin = self.by = None         # traced: the step that inserted it; who touched it last
        self.live, self.state = True, False  # its window KV is kept (else a tombstone); it holds a Mamba state
        self.marked = None                   # traced: the step that made it a tombstone or gave it its state
        self.state_used = 0                  # its Mamba state's place in the Mamba LRU list (peer_sglang_hybrid.py)

    def __lt__(self, other: "Node") -> bool:
        return self.touched < other.touched


class RadixCache:
    """PEER-SGL-1..13. `pool_tokens` None: unbounded, nothing is evicted; `radix_cache` False:
    `--disable-radix-cache`, nothing is cached; `version` the SGLang release (PEER-SGL-8);
    `eagle` bigram keys (PEER-SGL-9); `sliding_window` W with `swa_eviction_interval` I
    (PEER-SGL-10..12) and `mamba` (PEER-SGL-13): peer_sglang_hybrid.py."""

    def __init__(self, page_size: int, pool_tokens: int | None = None, radix_cache: bool = True, trace=None,
                 version: str = VERSION, eagle: bool = False, sliding_window: int | None = None,
                 swa_eviction_interval: int = INTERVAL, mamba: bool = False):
        self.P, self.on, self.eagle = page_size, radix_cache, eagle
        self.pool = None if pool_tokens is None else page_size * (pool_tokens // page_size)   # whole pages
        rel = sglang_release(version)
        check_hybrid(sliding_window, swa_eviction_interval, mamba, eagle, page_size, rel)
        self.W, self.I, self.mamba = sliding_window, swa_eviction_interval, mamba
        self.hybrid = sliding_window is not None or mamba
        self.shortfall, self.split_prompt = rel >= SHORTFALL_SINCE, rel >= PROMPT_SPLIT_SINCE
        self.version = version
        self.trace = None
        self.reset()
        self.trace = trace
        self._empty_keys: tuple = ()                         # traced: PEER-SGL-2 steps of the request inserting
        self._why_evict: tuple = ()                          # traced: the PEER-SGL-7/8 steps an eviction follows

    def reset(self) -> None:
        self.root = Node([], None, 0)
        self.clock = 0
        self.size = 0                                       # units (KV slots) held by the tree
        self._evicted_under: dict = {}                      # traced: (node, edge) -> the eviction of that child
        self._cut: dict = {}                                # traced: node -> PEER-SGL-12's step ending there
        self.window_lru: list | None = None                 # live nodes, least recently used first: kept only
        self.requests_cached = 0                            # for a tree the tests build (evict_window)
        if self.trace is not None:
            self.trace.add("PEER-API-4", "reset", True, "the tree was flushed")

    @property
    def tree_tokens(self) -> int:
        """The KV slots the tree holds (RadixCache.total_size)."""
        return self.size

    def free_slots(self) -> int | None:
        """The free KV slots between requests (the allocator's available_size), None unbounded."""
        return None if self.pool is None else self.pool - self.size

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    # --- the tree ------------------------------------------------------------------------------
    def _child_key(self, namespace, ids, at: int) -> tuple:
        return (namespace, tuple(ids[at:at + self.P]))

    def _shared(self, key: list, ids: list, at: int) -> int:
        """Units `key` shares with ids[at:], in whole pages."""
        P, n = self.P, min(len(key), len(ids) - at)
        if key[:n] == ids[at:at + n]:
            return P * (n // P)
        k = 0
        while k + P <= n and key[k:k + P] == ids[at + k:at + k + P]:
            k += P
        return k

    def _walk(self, namespace, ids: list, touch: bool):
        """(matched units, the node the match ends in). A touching walk stamps every node it
        passes with one fresh clock value and splits the node it ends inside (PEER-SGL-4)."""
        node, at = self.root, 0
        if touch:
            now = self._tick()
            self.root.touched = now
        while len(ids) - at >= self.P:
            child = node.children.get(self._child_key(namespace, ids, at))
            if child is None:
                break
            k = self._shared(child.key, ids, at)
            if touch:
                child.touched = now
                if self.trace is not None:
                    child.by = self.trace.owner
            if k < len(child.key):
                if touch:
                    child = self._split(namespace, child, k)
                return at + k, child
            at += k
            node = child
        return at, node

    def _split(self, namespace, child: Node, k: int) -> Node:
        """The first k units of `child` become a new node above it, stamped now (a new TreeNode);
        the remainder keeps the stamp the walk gave it."""
        upper = Node(child.key[:k], child.parent, self._tick())
        upper.locks, upper.origin, upper.by = child.locks, child.origin, child.by
        upper.live = child.live                            # both parts keep their window KV or lack it;
        upper.marked = None if child.live else child.marked   # the Mamba state stays with the lower part
        upper.children = {self._child_key(namespace, child.key, k): child}
        if self.window_lru is not None and child in self.window_lru:
            self.window_lru.insert(self.window_lru.index(child), upper)   # just older than the suffix
        child.parent.children[self._child_key(namespace, child.key, 0)] = upper
        child.key, child.parent = child.key[k:], upper
        return upper

    def _insert(self, namespace, ids: list, computed: int | None = None, why=()) -> "Node | None":
        """PEER-SGL-3: `ids` (the units of the computed sequence, whole pages) go into the tree;
        the new leaf is created after the walk, so it is newer than anything the walk stamped.
        The new leaf, or None (`why`: traced steps the insert follows from besides the keys)."""
        at, node = self._walk(namespace, ids, touch=True)
        if at < len(ids):
            leaf = Node(list(ids[at:]), node, self._tick())
            node.children[self._child_key(namespace, ids, at)] = leaf
            self.size += len(leaf.key)
            if self.trace is not None:
                leaf.by = self.trace.owner
                leaf.origin = self.trace.add("PEER-SGL-3", "inserted", len(ids), f"{self._inserted(ids, computed)} go "
                                             f"into the tree: {at} of them were there, a new leaf holds the other "
                                             f"{len(ids) - at}", causes=self._empty_keys + tuple(why))
            return leaf
        if self.trace is not None:
            self.trace.add("PEER-SGL-3", "inserted", len(ids), f"{self._inserted(ids, computed)} were in the tree "
                           "already: nothing new", causes=tuple(why))
        return None

    def _inserted(self, ids: list, computed: int | None) -> str:
        """'its computed sequence (prompt + sampled ids but the last, 40 ids) in whole pages of 16: 32 ids'."""
        what = "bigrams" if self.eagle else "ids"
        whole = f" in whole pages of {self.P}" if self.P > 1 else ""
        return (f"its computed sequence (prompt + sampled ids but the last, {computed} ids){whole}: {len(ids)} {what}"
                if computed is not None and computed != len(ids) else
                f"its computed sequence (prompt + sampled ids but the last), {len(ids)} {what},")

    def _lock(self, node: Node, delta: int) -> None:
        while node is not self.root and node is not None:
            node.locks += delta
            node = node.parent

    def evict(self, tokens: int, free: int | None = None) -> int:
        """PEER-SGL-5: free whole unlocked leaves, least recently touched first, until `tokens`
        are freed or none is left; a parent left childless and unlocked joins the candidates in
        the same round (`free`: the slots free before, for the trace)."""
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
            if self.window_lru is not None and leaf in self.window_lru:
                self.window_lru.remove(leaf)
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

    # --- slots (PEER-SGL-7, PEER-SGL-8 (b)) ---------------------------------------------------------
    def _make_room(self, held: int, demand: int, need: int, what: str) -> None:
        """Evict when fewer than `demand` slots are free (all of `demand` before 0.5.17, the
        shortfall since), then require `need` free slots: the allocation itself."""
        free = self.pool - self.size - held
        asked = ()
        if self.trace is not None and (free < demand or (self.P > 1 and free < demand + self.P)):
            asked = (self._traced_demand(what, demand, need, free),)
        if free < demand and self.hybrid:
            raise PeerProfileError(f"sglang-radix: {what} asks for {demand} slots with {free} free: an eviction on a "
                                   "sliding-window or Mamba model is not defined by the profile (SGLang evicts window "
                                   "KV and Mamba states from lists of their own)")
        if free < demand:
            target = demand - free if self.shortfall else demand
            if self.trace is not None:
                asked = (self.trace.add("PEER-SGL-8", "evict_target", target, f"SGLang {self.version} evicts "
                                        + (f"only the shortfall, {demand} - {free} = {target} slots (since 0.5.17)"
                                           if self.shortfall else f"all {demand} slots asked for (before 0.5.17)"),
                                        causes=asked),)
            self._why_evict = asked
            self.evict(target, free)
            self._why_evict = ()
        elif asked:
            self.trace.removed(asked[0])                   # a tight allocation that evicted nothing: later lookups cite it
        if self.pool - self.size - held < need:
            raise PeerProfileError(f"sglang-radix: {what} needs {need} free slots of pool_tokens={self.pool} and "
                                   "fewer are free after evicting every leaf it may; the profile does not define "
                                   "what the server does then")

    def _traced_demand(self, what: str, demand: int, need: int, free: int):
        """PEER-SGL-7's step: what an allocation asks for against what is free."""
        paged = (" (a whole page, asked at every decode step)" if what.startswith("the decode") else
                 f" (its rest and a page of slack)") if self.P > 1 else ""
        return self.trace.add("PEER-SGL-7", "asked", demand, f"{what} asks for {demand} slots{paged} with {free} "
                              f"free and takes {need}: " + ("too few are free, leaves are evicted" if free < demand
                                                             else "nothing is evicted"))

    def _extend(self, n: int, matched: int) -> int:
        """The slots a request takes for the rest of its prompt (whole pages when paged), asking
        for the rest and a page of slack (alloc_paged_token_slots_extend)."""
        P = self.P
        need = n - matched if P == 1 else P * (-(-n // P) - matched // P)
        if self.pool is not None:
            self._make_room(0, n - matched + (P if P > 1 else 0), need, "the prompt")
        return need

    def _decode(self, position: int, held: int) -> int:
        """A fed-back sampled token at `position`: one slot, or when paged a whole free page asked
        for every step and taken only when the token starts a page (alloc_paged_token_slots_decode,
        allocator/paged.py `alloc_decode`)."""
        P = self.P
        need = 1 if P == 1 else (P if position % P == 0 else 0)
        if self.pool is not None:
            if self.eagle:
                raise PeerProfileError("sglang-radix: with EAGLE a decode step allocates slots for draft tokens "
                                       "(allocation.py alloc_for_spec_decode), which the profile does not state: "
                                       "a bounded pool after a decode step is not defined (PEER-SGL-9)")
            self._make_room(held, P, need, f"the decode step at position {position}")
        return held + need

    # --- requests --------------------------------------------------------------------------------
    def predict(self, request: PeerRequest) -> int:
        if not self.on:
            if self.trace is not None:
                self.trace.add("PEER-SGL-6", "cached_tokens", 0, "the radix cache is disabled (radix_cache false): "
                               "nothing is cached")
            return 0
        n = len(request.ids)
        looked = units(request.ids[:max(0, n - 1)], self.eagle)
        matched, node = self._walk(sglang_namespace(request), looked, touch=False)
        usable = self._usable(sglang_namespace(request), looked, matched) if self.hybrid else None
        c = sglang_cached(matched if usable is None else usable[0], n, self.P)
        if self.trace is not None:
            self._traced_count(request, looked, matched, node, c, usable)
        return c

    # --- sliding window and Mamba (PEER-SGL-10..13, peer_sglang_hybrid.py) ------------------------
    def _segments(self, namespace, ids: list, matched: int):
        """(start, end, node, whole) of each node the first `matched` units pass, root first."""
        node, at = self.root, 0
        while at < matched:
            child = node.children[self._child_key(namespace, ids, at)]
            k = min(len(child.key), matched - at)
            yield at, at + k, child, k == len(child.key)
            at, node = at + k, child

    def _usable(self, namespace, ids: list, matched: int):
        """PEER-SGL-11, PEER-SGL-13: (the deepest end the match may stop at, the segment that
        decided it, the last tombstone passed)."""
        return usable_end(self._segments(namespace, ids, matched), self.W, self.mamba)

    def _mark_window(self, namespace, key: list, leaf, E: int, protected: int, freed) -> None:
        """PEER-SGL-10: the new leaf's ids before E are a tombstone; a tombstone this insert
        passes at or after max(E, the matched prefix) is live again (swa.py
        `update_component_on_insert_overlap`, `_clip_to_window`, `commit_insert_component_data`)."""
        start = max(E, protected)
        for lo, hi, node, _ in list(self._segments(namespace, key, len(key))):
            if hi <= protected:
                continue
            if node is leaf and E > lo:
                if E < hi:
                    node = self._split(namespace, node, E - lo)       # the upper part: [lo, E)
                node.live, node.marked = False, freed
            elif node is not leaf and not node.live and hi > start:
                if lo < start:
                    self._split(namespace, node, start - lo)          # node keeps [start, hi)
                node.live, node.marked = True, None

    def _give_state(self, namespace, key: list):
        """PEER-SGL-13: the node ending where the cached sequence ends holds a Mamba state
        (mamba.py `commit_insert_component_data`); the insert's walk split there if need be."""
        *_, (lo, hi, node, whole) = self._segments(namespace, key, len(key))
        node.state, node.state_used = True, self._tick()
        if self.trace is not None:
            node.marked = self.trace.add("PEER-SGL-13", "mamba_state", hi, f"request {self.trace.owner} finished: "
                                         f"its cached sequence of {hi} ids ends here, and a Mamba state is kept "
                                         "there only")

    def commit(self, request: PeerRequest, sampled) -> None:
        """Match (touching and locking the matched path), take slots for the rest of the prompt
        and each fed-back sampled token, insert the computed sequence (and from 0.5.20 the
        prompt again, which splits the node there), unlock (PEER-SGL-3, PEER-SGL-7, PEER-SGL-8)."""
        if not self.on:
            return
        namespace, n, P = sglang_namespace(request), len(request.ids), self.P
        self.requests_cached += 1
        self._empty_keys = self._traced_empty_keys(request) if self.trace is not None else ()
        looked = units(request.ids[:max(0, n - 1)], self.eagle)
        matched, node = self._walk(namespace, looked, touch=True)
        self._lock(node, 1)
        held = self._extend(n, matched)
        for k in range(len(sampled) - 1):
            held = self._decode(n + k, held)
        seq = computed_sequence(request.ids, sampled)
        key = units(seq, self.eagle)
        key = key[:P * (len(key) // P)]
        if self.W is not None:
            self._commit_window(namespace, looked, matched, key, n, len(sampled) - 1, len(seq))
        else:
            self._insert(namespace, key, len(seq))
            if self.mamba and key:
                self._give_state(namespace, key)
        if self.split_prompt and not self.hybrid:          # UnifiedRadixCache splits at the prompt with Full alone
            prompt = units(request.ids, self.eagle)
            prompt = prompt[:P * (len(prompt) // P)]
            if 0 < len(prompt) < len(key):
                at, upper = self._walk(namespace, prompt, touch=True)   # PEER-SGL-8 (a): splits the leaf at the prompt
                if self.trace is not None and at == len(prompt) and len(upper.children) == 1:
                    (rest,) = upper.children.values()
                    if rest.parent is upper and len(rest.key) + len(prompt) == len(key) and not rest.children:
                        rest.origin = self.trace.add("PEER-SGL-8", "split", len(rest.key), f"SGLang {self.version} "
                                                     f"inserts the prompt again ({len(prompt)} units, whole pages), "
                                                     f"which splits the node there: the {len(rest.key)} units after "
                                                     "it are a leaf of their own (since 0.5.20)",
                                                     causes=(rest.origin,))
        self._lock(node, -1)

    # --- the tree called directly, as SGLang's unit tests do (parity only) -------------------------
    def insert_key(self, ids: list) -> int:
        """`insert(RadixKey(ids), value)` with values of the test's own: the units already in
        the tree (the `prefix_len` it returns); with Mamba layers the node the key ends at gets
        a state (PEER-SGL-3, PEER-SGL-13). No request runs, so no window KV is freed."""
        key = units(ids, self.eagle)
        at, _ = self._walk(TEST_NAMESPACE, key, touch=False)
        if self.W is not None:
            self._window_list("an insert of hand-built values")
            if any(not node.live for *_, node, _ in self._segments(TEST_NAMESPACE, key, at)):
                raise PeerProfileError("sglang-radix: an insert of hand-built values over a tombstone is not "
                                       "defined by the profile")
        leaf = self._insert(TEST_NAMESPACE, key)
        if self.mamba and key:
            self._give_state(TEST_NAMESPACE, key)
        if self.W is not None and key:
            if leaf is not None:
                self.window_lru.append(leaf)
            *_, (_, _, end, _) = self._segments(TEST_NAMESPACE, key, len(key))
            refresh_window(self, end)
        return at

    def match_key(self, ids: list) -> tuple:
        """`match_prefix(RadixKey(ids))`: (the units matched, the node it ends at:
        `last_device_node`, the root when nothing matched). The whole key is looked up (a
        request looks up N - 1 ids); the walk touches and splits as a request's does
        (PEER-SGL-4), the match ends where PEER-SGL-11/13 let it, and with Mamba layers the
        state it ends at becomes the most recently used (mamba.py `refresh_lru` MATCH_END)."""
        key = units(ids, self.eagle)
        matched, node = self._walk(TEST_NAMESPACE, key, touch=True)
        if not self.hybrid:
            return matched, node
        end, decided, _ = self._usable(TEST_NAMESPACE, key, matched)
        node = self.root if decided is None else decided[2]
        if self.mamba and node.state:
            node.state_used = self._tick()
        if self.W is not None:
            self._window_list("a match called directly")
            refresh_window(self, node)
        return end, node

    def _window_list(self, what: str) -> None:
        """Start the window KV's LRU list on a tree no request has changed (PeerProfileError
        otherwise: the profile keeps it for the calls SGLang's unit tests make, not for requests)."""
        if self.requests_cached:
            raise PeerProfileError(f"sglang-radix: {what} on a sliding-window tree that requests changed is not "
                                   "defined by the profile (the window KV's LRU list is kept for direct calls only)")
        if self.window_lru is None:
            self.window_lru = []

    def evict_window(self, tokens: int, window_tokens: int) -> tuple:
        """`evict(EvictParams(num_tokens, swa_num_tokens))`: (full KV tokens freed, window KV
        tokens freed) (peer_sglang_hybrid.py `evict_window`)."""
        if self.W is None:
            raise PeerProfileError("sglang-radix: an eviction of window KV on a tree without a sliding window")
        self._window_list("an eviction of window KV")
        return evict_window(self, tokens, window_tokens)

    def lock_node(self, node: Node, delta: int) -> None:
        """`inc_lock_ref(node)` (+1) or `dec_lock_ref(node)` (-1): the node and every node above
        it are locked once more or once less (PEER-SGL-5)."""
        self._lock(node, delta)

    def evict_mamba(self, states: int) -> int:
        """`evict(EvictParams(mamba_num=states))`: the Mamba states freed (peer_sglang_hybrid.py
        `evict_states`)."""
        if not self.mamba:
            raise PeerProfileError("sglang-radix: evict_mamba on a tree without Mamba layers")
        return evict_states(self, states)

    # --- the trace: reasons and causes, built only when tracing ----------------------------------
    def _traced_count(self, request: PeerRequest, looked: list, matched: int, node: Node, c: int,
                      usable=None) -> None:
        """The match's step (PEER-SGL-4; PEER-SGL-2 when the ids sit in another namespace), where
        the match may end (PEER-SGL-11, PEER-SGL-13: `usable`) and the count's (PEER-SGL-1): how
        far the first N - 1 ids match, and why no further."""
        tr, n, namespace = self.trace, len(request.ids), sglang_namespace(request)
        what = f"{len(looked)} bigrams of the first N - 1 = {n - 1} ids" if self.eagle else f"first N - 1 = {n - 1} ids"
        rule, why = "PEER-SGL-4", f"the tree matches {matched} of the {what}{keyed(request)}"
        if self.eagle:
            rule = "PEER-SGL-9"
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
                if node in self._cut:
                    causes.append(self._cut[node])
        elif matched < len(looked):
            why += f"; the {len(looked) - matched} {'bigrams' if self.eagle else 'ids'} after it are less than a page of {self.P}"
        causes += list(self._traced_empty_keys(request))
        causes += [s for s in tr.background(any(causes)) if s not in causes]
        match = tr.add(rule, "matched", matched, why, causes=causes)
        if usable is not None:
            match, matched = self._traced_usable(matched, usable, match), usable[0]
        if self.eagle:
            tr.add("PEER-SGL-9", "cached_tokens", c, f"c = P * floor(min(B, N - 1) / P) = {self.P} * floor("
                   f"{min(matched, n - 1)} / {self.P}) = {c}: with EAGLE the tree is keyed by bigrams, each matched "
                   "bigram reuses the KV of its first id", causes=(match,))
            return
        tr.add("PEER-SGL-1", "cached_tokens", c, f"c = P * floor(min(L, N - 1) / P) = {self.P} * floor("
               f"{min(matched, n - 1)} / {self.P}) = {c}: the tree holds whole pages of {self.P} only",
               causes=(match,))

    def _traced_usable(self, matched: int, usable: tuple, match):
        """PEER-SGL-11 or PEER-SGL-13's step: where, of the `matched` ids, the match may end."""
        best, decided, tomb = usable
        at = "the root (0)" if decided is None else f"{best}"
        if self.mamba:
            why = (f"of the {matched} ids the tree matches, the deepest end holding a Mamba state is {at}: a match "
                   "ends only where a finished request's cached sequence ended")
            causes = (match,) + (() if decided is None or decided[2].marked is None else (decided[2].marked,))
            return self.trace.add("PEER-SGL-13", "matched", best, why, causes=causes)
        if tomb is None:
            why = f"no tombstone lies on the {matched} matched ids: the match may end at {matched}"
            return self.trace.add("PEER-SGL-11", "matched", best, why, causes=(match,))
        lo, hi, node = tomb
        why = (f"the window KV of ids {lo}..{hi - 1} on the matched path was freed (a tombstone): a match ends only "
               f"where at least W = {self.W} live ids follow the last tombstone, or before any; of the {matched} "
               f"matched ids that is {at}")
        return self.trace.add("PEER-SGL-11", "matched", best, why,
                              causes=(match,) + (() if node.marked is None else (node.marked,)))

    def _commit_window(self, namespace, looked: list, matched: int, key: list, n: int, decode_steps: int,
                       computed: int) -> None:
        """PEER-SGL-10, PEER-SGL-12: the window KV the request freed while decoding, what it caches
        when its match stopped short of the full-attention hit (swa.py `prepare_for_caching_req`:
        `swa_branching_seqlen`), and the tombstones its insert leaves or revives."""
        best = self._usable(namespace, looked, matched)[0]
        E, moved = window_freed(n, decode_steps, self.W, self.I, self.P, best)
        freed = cut = None
        if self.trace is not None and moved is not None:
            held = n + moved
            freed = self.trace.add("PEER-SGL-10", "window_freed", E, f"request {self.trace.owner} (prompt {n} ids) "
                                   f"held {held} ids at decode step {moved}: {held} - W = {held - self.W} >= "
                                   f"{self.I} (the eviction interval), so the window KV of its first {E} ids "
                                   f"({held} - ceil(max(W, P) / P) * P, whole pages, at least the matched {best}) "
                                   "was freed: cached, those ids are a tombstone")
        if matched > best:
            key = key[:matched]
            if self.trace is not None:
                cut = self.trace.add("PEER-SGL-12", "cached", matched, f"its match stopped at {best}, short of the "
                                     f"{matched} ids whose full-attention KV the tree holds: the request caches "
                                     f"only those {matched} (swa_branching_seqlen), not its own ids after them")
        leaf = self._insert(namespace, key, computed, why=tuple(s for s in (cut, freed) if s is not None))
        self._mark_window(namespace, key, leaf, E, best, freed)
        if cut is not None:
            self._cut[list(self._segments(namespace, key, len(key)))[-1][2]] = cut

    def _matched_elsewhere(self, namespace, ids: list) -> int:
        """The longest match of `ids` under any other namespace (a keying miss tells itself so)."""
        best = 0
        for (other, _), _child in list(self.root.children.items()):
            if other != namespace:
                best = max(best, self._walk(other, ids, touch=False)[0])
        return best

    def _traced_empty_keys(self, request: PeerRequest) -> tuple:
        """PEER-SGL-2's step for a request whose `cache_salt` or `extra_key` is "": it is none."""
        empty = [name for name, value in (("cache_salt", request.salt), ("extra_key", request.extra_key))
                 if value == ""]
        if not empty:
            return ()
        return (self.trace.add("PEER-SGL-2", "namespace", "none", f"{' and '.join(empty)} \"\" is no key: the "
                               "request shares the namespace of requests without one (io_struct.py "
                               "_normalize_extra_key, Req.__init__: `or None`)"),)

    def _depth(self, node: Node) -> int:
        """The units from the root to the end of `node`."""
        depth = 0
        while node is not None and node is not self.root:
            depth, node = depth + len(node.key), node.parent
        return depth

    def _traced_eviction(self, leaf: Node, edge: tuple, need: int, free: int | None) -> None:
        """PEER-SGL-5: an unlocked leaf, the least recently touched, freed for a request short of slots."""
        touched = "" if leaf.by is None else f", last touched by request {leaf.by}"
        asked = (f"evicted, as the request asks for {need} more slots" if not self.shortfall or free is None else
                 f"evicted, as the request is {need} slots short (SGLang >= 0.5.17 evicts only the shortfall)")
        step = self.trace.removed(self.trace.add(
            "PEER-SGL-5", "evicted", len(leaf.key), f"a leaf of {len(leaf.key)} ids (inserted by "
            f"{self.trace.who(leaf.origin)}{touched}) is the least recently touched leaf no running request "
            f"holds: {asked}" + (f" ({free} are free)" if free is not None else ""),
            causes=(leaf.origin,) + self._why_evict))
        self._evicted_under[edge] = step                  # (parent, the edge a later match would follow)


def _make(s: dict, trace=None) -> RadixCache:
    return RadixCache(s["page_size"], s["pool_tokens"], s["radix_cache"], trace, version=s["version"],
                      eagle=s["eagle"], sliding_window=s["sliding_window"],
                      swa_eviction_interval=s["swa_eviction_interval"], mamba=s["mamba"])


def _full_match(s: dict, n: int) -> int:
    """The count of an n-id prompt cached whole: with Mamba 0 (its state sits at n, past the
    N - 1 ids a request looks up: PEER-SGL-13)."""
    if s.get("mamba"):
        return 0
    return sglang_cached(n - 2 if s["eagle"] else n, n, s["page_size"])


PROFILE = PeerProfile(
    name="sglang-radix", runtime="SGLang",
    version=f"SGLang {VERSION} (sgl-project/sglang mem_cache/radix_cache.py, allocation.py, allocator/; the "
            "`version` setting selects the rules of 0.5.16 and older and of 0.5.17-0.5.19, PEER-SGL-8)",
    section="spec/peer-profiles.md section 4",
    settings=(
        Setting("page_size", "size", 1, Published("/get_server_info", "page_size")),
        Setting("pool_tokens", "count", None, Published("/get_server_info", "max_total_num_tokens")),
        Setting("radix_cache", "bool", True, Published("/get_server_info", "disable_radix_cache", convert="not")),
        Setting("version", "version", VERSION, Published("/get_server_info", "version", convert="version",
                                                         note="(the SGLang release: PEER-SGL-8)")),
        Setting("eagle", "bool", False, Published("/get_server_info", "speculative_algorithm", convert="eagle",
                                                  note="(EAGLE, EAGLE3 or FROZEN_KV_MTP: bigram keys, PEER-SGL-9)")),
        Setting("sliding_window", "count", None),
        Setting("swa_eviction_interval", "count", INTERVAL),
        Setting("mamba", "bool", False),
    ),
    count_rule="PEER-SGL-1", after_rule="PEER-SGL-3", key_rule="PEER-SGL-2",
    make=_make,
    full_match=_full_match,
    tokenizer_loader="transformers-auto", reset="/flush_cache", crosscheck=None, lora_field="lora_path",
    features=frozenset({"salt", "lora", "extra_key"}), unit="page_size", unit_name="page",
    cases=("eviction/radix-lru", "eviction/radix-cascade", "eviction/radix-new-leaves", "eviction/radix-paged-decode",
           "eviction/radix-paged-slack", "eviction/radix-locked-path",
           "eviction/radix-prompt-split", "eviction/radix-shortfall", "eviction/radix-decode-fits",
           "eviction/radix-decode-short", "isolation/empty-keys",
           "window/sglang-interval-I-1", "window/sglang-interval-I", "window/sglang-interval-I+1",
           "window/sglang-edge-W-1", "window/sglang-edge-W", "window/sglang-edge-W+1", "mamba/state-edge-L-1",
           "mamba/state-edge-L", "mamba/state-edge-L+1", "mamba/state-at-end", "mamba/shared-prefix"),
    context=(Published("/v1/models", "max_model_len"), Published("/get_server_info", "context_length")),
    adapters=Published("/get_server_info", "lora_paths"),
    signature=Signature("/get_server_info", keys=("page_size", "disable_radix_cache")),
    report_hint="SGLang reports it with --enable-cache-report",
)
"""PEER-SGL-1..13 (the sliding window and Mamba: peer_sglang_hybrid.py)."""
