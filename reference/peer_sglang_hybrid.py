"""`sglang-radix` on models whose layers are not all full attention (spec/peer-profiles.md section
4, PEER-SGL-10..13). Stdlib only.

SGLang 0.5.23 keeps one radix tree for every layer kind (mem_cache/unified_radix_cache.py
`UnifiedRadixCache`, one component per kind in mem_cache/unified_cache/components/): each node
holds the full-attention KV of its ids, and beside it the sliding-window KV (swa.py
`SWAComponent`) or a Mamba state (mamba.py `MambaComponent`). A node whose sliding-window KV was
freed is a tombstone: its full KV stays, but a match may not end where the window cannot be
rebuilt. A Mamba state exists only where a finished request's cached sequence ends.

    sliding window W   a request frees the window KV behind it while decoding, in steps of at
                       least I ids (PEER-SGL-10); a match ends only where the live ids since the
                       last tombstone number W or more, or where no tombstone lies before it
                       (PEER-SGL-11); a request whose match stopped short of the full-attention
                       hit caches only up to that hit (PEER-SGL-12)
    Mamba              a finished request leaves one state, at the end of its cached sequence; a
                       match ends only at a node holding one (PEER-SGL-13); states evicted
                       directly go least recently used first (`evict_states`, parity only)

The tree itself, its walks and splits are reference/peer_sglang.py's; this module is the part
that decides where a match may end and what an insert marks. Not defined here
(PeerProfileError): an eviction beside either (a pool of `pool_tokens` is fine while nothing has
to be evicted from it; SGLang evicts the window KV and the Mamba states from lists of their own,
swa.py `_evict_device_next_node`, mamba.py), EAGLE beside either,
both at once (a Mamba checkpoint then holds the window behind it, `swa_retain_floor`), Mamba
with pages of more than one id (SGLang needs its extra buffer then, which writes states on a
grid: mamba.py `__init__` asserts `page_size == 1` without it), and releases before 0.5.23.
"""
from __future__ import annotations

from .peer_common import PeerProfileError

HYBRID_SINCE = (0, 5, 23)
"""The release whose UnifiedRadixCache the rules are read from."""
INTERVAL = 128
"""SGLANG_SWA_EVICTION_INTERVAL's default (environ.py): the ids a window slides before it is freed."""


def check_hybrid(window, interval, mamba: bool, eagle: bool, page_size: int, release: tuple) -> None:
    """PeerProfileError for a combination the profile does not define (the module docstring)."""
    if window is None and not mamba:
        return
    what = "a sliding window" if window is not None else "Mamba layers"
    if window is not None and mamba:
        raise PeerProfileError("sglang-radix: a sliding window and Mamba layers together are not defined by the "
                               "profile (a Mamba checkpoint holds the window behind it: swa_retain_floor)")
    if eagle:
        raise PeerProfileError(f"sglang-radix: {what} with EAGLE is not defined by the profile")
    if mamba and page_size != 1:
        raise PeerProfileError("sglang-radix: Mamba layers with page_size > 1 need SGLang's extra buffer (states "
                               "on a grid), which the profile does not define: page_size must be 1")
    if release < HYBRID_SINCE:
        raise PeerProfileError(f"sglang-radix: {what} is stated for SGLang 0.5.23's UnifiedRadixCache; the "
                               "version setting names an older release")
    if window is not None and (window < 1 or interval < 1):
        raise PeerProfileError("sglang-radix: sliding_window and swa_eviction_interval must be at least 1")


def ceil_to(x: int, P: int) -> int:
    return -(-x // P) * P


def window_freed(n: int, decode_steps: int, W: int, I: int, P: int, protected: int):
    """PEER-SGL-10: (E, the decode step that last moved it, or None): the ids before E of a
    request's sequence have their window KV freed when it finishes.

    A prompt of n ids, `protected` of them matched, fed back `decode_steps` sampled tokens; at
    decode step j (0-based) the request holds n + j computed ids. From the second step on
    (`decode_batch_idx >= 1`), once n + j - W >= E + I, E becomes the page-floored greater of E,
    the matched prefix and n + j - ceil_P(max(W, P)) (schedule_batch.py `maybe_evict_swa`,
    `_swa_eviction_trigger`; mem_cache/common.py `free_swa_out_of_window_slots`)."""
    E, moved = 0, None
    for j in range(1, decode_steps):
        pre = n + j
        if pre - W < E + I:
            continue
        E = P * (max(E, protected, pre - ceil_to(max(W, P), P)) // P)
        moved = j
    return E, moved


def usable_end(segments, W: int | None, mamba: bool):
    """PEER-SGL-11, PEER-SGL-13: (the deepest end a match may stop at, the segment that decided it
    or None, the last tombstone segment before the match's end or None).

    `segments`: (start, end, node, whole) for each node the match passes, in order; `whole`
    False for the last when the match ends inside it. With a window, an end is usable where no
    tombstone lies before it or where the live ids since the last tombstone number W or more
    (swa.py `create_match_validator`: `len` starts at infinity and falls to 0 at a tombstone);
    with Mamba, where a node ends that holds a state (mamba.py `create_match_validator`; the upper
    part of a split holds none). The match returns the deepest usable end (unified_tree_core.py
    `_match_prefix_helper`, `best_match_node`)."""
    best, decided, tomb = 0, None, None
    run = float("inf")
    for start, end, node, whole in segments:
        if mamba:
            usable = whole and node.state
        elif not node.live:
            run, usable, tomb = 0, False, (start, end, node)
        else:
            run += end - start
            usable = run >= W
        if usable:
            best, decided = end, (start, end, node)
    return best, decided, tomb


def evict_states(cache, states: int) -> int:
    """PEER-SGL-13's states evicted directly (spec/peer-profiles.md, after the rule; SGLang's
    unit tests call it, a request never does here): free Mamba states, least recently used
    first, until `states` are freed or none is left unlocked. A state on a leaf goes with the
    leaf (its ids' full KV too), any other leaves its node without one (mamba.py
    `_evict_device_next_node`: the LRU tail, a leaf evicted whole, an inner node's state freed
    alone). A state is used when an insert gives it (a new leaf's `insert_mru`, an existing
    node's `reset_node_mru`: `commit_insert_component_data`) and when a match ends at it
    (`refresh_lru` MATCH_END); an insert's walk does not use the states it passes (WALKDOWN).
    The count of states freed."""
    freed = 0
    while freed < states:
        held = [n for n in cache._nodes() if n.state and n.locks == 0 and n is not cache.root]
        if not held:
            break
        node = min(held, key=lambda n: n.state_used)
        node.state = False
        freed += 1
        if not node.children:
            del node.parent.children[next(k for k, v in node.parent.children.items() if v is node)]
            cache.size -= len(node.key)
    return freed


def refresh_window(cache, node) -> None:
    """The window KV's LRU list after an insert or a match ends at `node` (swa.py:332-355
    `refresh_lru` INSERT_END / MATCH_END, unified_tree_core.py:332-355
    `reset_node_and_window_ancestors_mru`): the node and its ancestors, while fewer than W + P
    units lie between them and the end, become the most recently used, the deeper the more
    recent; tombstones are not in the list but their units count. An insert's walk refreshes
    nothing on its own (WALKDOWN); a split puts the new upper part just older than the suffix,
    which keeps its place (unified_tree_core.py `_split_node`: `insert_after(child, node)`)."""
    chain, seen = [], 0
    while node is not cache.root and seen < cache.W + cache.P:
        if node.live:
            chain.append(node)
        seen += len(node.key)
        node = node.parent
    for node in reversed(chain):
        if node in cache.window_lru:
            cache.window_lru.remove(node)
        cache.window_lru.append(node)


def evict_window(cache, tokens: int, window_tokens: int) -> tuple:
    """Full KV first, then window KV (unified_radix_cache.py `_evict_components`, one component
    after the other with one tracker): `cache.evict(tokens)` frees whole leaves (PEER-SGL-5), and
    their window KV counts toward `window_tokens`; then, while fewer window ids are freed, the
    least recently used live unlocked node goes: a leaf whole (its full KV too), any other
    becomes a tombstone (swa.py:754-830 `_evict_device_next_node`). (full ids freed, window ids
    freed)."""
    full = cache.evict(tokens) if tokens > 0 else 0
    window = full
    while window < window_tokens:
        node = next((n for n in cache.window_lru if n.locks == 0), None)
        if node is None:
            break
        cache.window_lru.remove(node)
        window += len(node.key)
        if node.children:
            node.live = False
        else:
            del node.parent.children[next(k for k, v in node.parent.children.items() if v is node)]
            cache.size -= len(node.key)
            full += len(node.key)
    return full, window
