"""`sglang-radix` on sliding-window and Mamba models (spec/peer-profiles.md section 4,
PEER-SGL-10..13): each rule on its spec example, derived by hand in the docstrings. The same
streams were driven through SGLang 0.5.23's own UnifiedRadixCache (tools/crosscheck/drive_sglang.py),
which reported every count asserted here.

Prompts are lists of ids (a range for a long prompt); one sampled token per request unless given.
"""
from __future__ import annotations

import pytest

from reference import peers
from reference.peer_sglang_hybrid import window_freed
from reference.peer_trace import PeerTrace

R = peers.PeerRequest
A = list(range(1000, 1040))                  # a 40-id prompt
S = list(range(5000, 5160))                  # 160 sampled tokens
SEQ = A + S                                  # its computed sequence is SEQ[:199]
WINDOW = {"sliding_window": 8}               # P = 1, I = 128 (the default)


def counts(settings: dict, steps: list) -> list:
    tree = peers.simulator("sglang-radix", settings)
    out = []
    for prompt, sampled in steps:
        request = R(list(prompt))
        out.append(tree.predict(request))
        tree.commit(request, list(sampled))
    return out


def test_sgl_10_a_decode_frees_the_window_behind_it_from_the_second_step():
    """PEER-SGL-10: 40 ids, 159 decode steps, W = 8, I = 128: step j holds 40 + j ids and frees
    once 40 + j - 8 >= 0 + 128, first at j = 96: E = 136 - 8 = 128; again only once
    40 + j - 8 >= 128 + 128 (j = 224 > 158). P = 4, W = 10, I = 8, two decode steps: only j = 1
    counts; a 16-id prompt holds 17: 17 - 10 = 7 < 8, nothing; 17 ids: 18 - 10 = 8 >= 8, E =
    4 * floor((18 - 12) / 4) = 4; 30 ids: E = 4 * floor((31 - 12) / 4) = 16. At j = 0 nothing is
    ever freed (a 40-id prompt with one decode step)."""
    assert window_freed(40, 159, 8, 128, 1, 0) == (128, 96)
    assert [window_freed(n, 2, 10, 8, 4, 0)[0] for n in (16, 17, 30)] == [0, 4, 16]
    assert window_freed(400, 1, 8, 1, 1, 0) == (0, None)
    assert window_freed(40, 159, 8, 128, 1, 132)[0] == 132      # never below the matched prefix


@pytest.mark.parametrize("k, second, third", [
    (10, 0, 10), (127, 0, 127), (128, 0, 128), (129, 0, 129), (135, 0, 135),    # cut short: the hit only
    (136, 136, 138), (137, 137, 139), (150, 150, 152), (199, 199, 201)])
def test_sgl_11_12_a_match_ends_where_w_live_ids_follow_the_tombstone(k, second, third):
    """PEER-SGL-11, PEER-SGL-12: after SEQ[:199] with 0..127 a tombstone (W = 8), a prompt of its
    first k ids and two more matches k: usable only when k - 128 >= 8 (k >= 136), else the root
    (0). Cut short, it caches its first k ids only (its full-attention hit), so the same prompt
    and one id more reports k; not cut short it cached all k + 2 + 0 = k + 2 (one sampled token)."""
    seq = SEQ[:k]
    assert counts(WINDOW, [(A, S), (seq + [1, 2], [7]), (seq + [1, 2, 3], [7])]) == [0, second, third]


def test_sgl_11_paged_the_edge_is_a_page_multiple():
    """PEER-SGL-11 (P = 4, W = 10, I = 8): a 17-id prompt sampling three tokens caches 16 ids,
    0..3 a tombstone; a prompt sharing k of them reports 16 only for k = 16, 17 (16 - 4 >= 10)."""
    settings = {"page_size": 4, "sliding_window": 10, "swa_eviction_interval": 8}
    p17 = list(range(100, 117))
    got = [counts(settings, [(p17, [5, 6, 7]), (p17[:k] + [1, 2], [7])])[1] for k in range(18)]
    assert got == [0] * 16 + [16, 16]


def test_sgl_11_the_deepest_usable_end_before_a_tombstone():
    """PEER-SGL-11: a prompt of SEQ's first 10 ids made 0..9 live again (PEER-SGL-10, its insert
    passes the tombstone at or after max(0, 0)); SEQ's first 120 ids then match 120 but may end
    only at 10 (10..119 still a tombstone, no W live ids after it)."""
    assert counts(WINDOW, [(A, S), (SEQ[:10] + [1, 2], [7]), (SEQ[:120] + [1, 2], [7])]) == [0, 0, 10]


def test_sgl_10_a_short_decode_leaves_the_window_whole():
    """PEER-SGL-10: fewer than W + I - N + 1 decode steps free nothing: counted as full attention."""
    assert counts(WINDOW, [(A, S[:50]), (SEQ[:60] + [1], [7])]) == [0, 60]


def test_sgl_13_a_mamba_state_only_where_a_cached_sequence_ends():
    """PEER-SGL-13 example (P = 1): a 20-id prompt sampling 4 caches 23 ids, the state at 23. Its
    first 10 ids and two new ones: 0 (no state at 10); with one more: 12 (the second's state).
    Its first 23 and two new ones: 23; its first 22 and a new one: 0. The 20-id prompt again: 0
    (its state sits at 20, past the 19 ids looked up), again 0, with one id more 20."""
    mamba = {"mamba": True}
    a, s = list(range(1000, 1020)), [5, 6, 7, 8]
    seq = a + s
    assert counts(mamba, [(a, s), (seq[:10] + [1, 2], [7]), (seq[:10] + [1, 2, 3], [7])]) == [0, 0, 12]
    assert counts(mamba, [(a, s), (seq[:23] + [1, 2], [7]), (seq[:22] + [99], [7])]) == [0, 23, 0]
    assert counts(mamba, [(a, [7]), (a, [7]), (a, [7]), (a + [3], [7])]) == [0, 0, 0, 20]


def test_the_rule_that_decides_is_in_the_trace():
    """The count's chain names PEER-SGL-11 (and the tombstone's PEER-SGL-10) where a tombstone
    stops the match, PEER-SGL-12 where the second request cached only its hit, PEER-SGL-13
    where no state ends the match."""
    def chain(settings, steps, probe):
        trace = PeerTrace()
        tree = peers.simulator("sglang-radix", settings, trace=trace)
        for i, (prompt, sampled) in enumerate(steps + [(probe, [7])]):
            trace.begin(i)
            request = R(list(prompt))
            tree.predict(request)
            tree.commit(request, sampled)
        last, causes = trace.explained(len(steps))
        return {s.rule for s in [last] + causes}
    assert {"PEER-SGL-10", "PEER-SGL-11"} <= chain(WINDOW, [(A, S)], SEQ[:130] + [1])
    assert "PEER-SGL-12" in chain(WINDOW, [(A, S), (SEQ[:10] + [1, 2], [7])], SEQ[:10] + [1, 2, 3])
    assert "PEER-SGL-13" in chain({"mamba": True}, [(A, [7])], A[:30] + [1])


def test_a_pool_is_defined_until_it_must_evict():
    """A pool of 100 slots: 40 + 2 ids cached, a second request of 50 asks for 50 with 58 free
    (defined: nothing is evicted), a third of 30 asks for 30 with 8 free: an eviction, not defined."""
    tree = peers.simulator("sglang-radix", {"sliding_window": 8, "pool_tokens": 100})
    for prompt, sampled in ((A, [1, 2, 3]), (list(range(50)), [7])):
        tree.predict(R(prompt))
        tree.commit(R(prompt), sampled)
    with pytest.raises(peers.PeerProfileError, match="eviction on a sliding-window or Mamba model"):
        tree.commit(R(list(range(200, 230))), [7])


@pytest.mark.parametrize("settings, words", [({"mamba": True, "eagle": True}, "EAGLE"),
    ({"mamba": True, "page_size": 4}, "page_size"), ({"mamba": True, "sliding_window": 8}, "together"),
    ({"sliding_window": 8, "version": "0.5.20"}, "0.5.23")])
def test_what_the_profile_does_not_define(settings, words):
    with pytest.raises(peers.PeerProfileError, match=words):
        peers.simulator("sglang-radix", settings)


# --- the trees called directly, as SGLang's unit tests do (parity only) ---------------------------
INSERTS = ([1, 2, 3], [1, 2, 3, 4, 5, 6, 7], [10, 11, 12], [1, 2, 3, 4, 5, 60, 70])


def built(settings: dict):
    tree = peers.simulator("sglang-radix", {"page_size": 1, **settings})
    return tree, [tree.insert_key(ids) for ids in INSERTS]


def test_mamba_tree_called_directly_evicts_states_least_recently_used_first():
    """test_mamba_radix_cache_1 by hand: the inserts leave 123 (state) / 45 (none, split) / 67
    and 60 70 (states), and 10 11 12 (state); evict(1) takes the oldest leaf, 10 11 12;
    evict_mamba(1) the oldest state, 123's (inner: the state alone). 12345 matches 0, the two
    7-id keys 7 at 2-id nodes; those matches use 60 70, then 67, so the next evict_mamba takes
    60 70 whole and 1 2 3 4 5 60 70 matches 0 at the root. The 0.5.23 wheel's UnifiedRadixCache
    gave the same on the same calls."""
    tree, prefixes = built({"mamba": True})
    assert prefixes == [0, 3, 0, 5]
    assert tree.evict(1) == 3 and tree.tree_tokens == 9              # 3 + 4 + 3 + 2 ids, less 3
    assert tree.evict_mamba(1) == 1 and tree.tree_tokens == 9           # an inner state: no ids freed
    assert [(m, len(n.key)) for m, n in map(tree.match_key, ([1, 2, 3, 4, 5], INSERTS[3], INSERTS[1]))] == \
        [(0, 0), (7, 2), (7, 2)]
    assert tree.evict_mamba(1) == 1 and tree.tree_tokens == 7           # the leaf 60 70, whole
    matched, node = tree.match_key(INSERTS[3])
    assert (matched, node is tree.root) == (0, True)


def test_a_match_makes_the_state_it_ends_at_the_most_recently_used():
    """Without the match that ends at 67, 67's state (second insert) is older than 60 70's
    (fourth): the second evict_mamba takes 67, and 1 2 3 4 5 60 70 still matches 7."""
    tree, _ = built({"mamba": True})
    tree.evict(1)
    tree.evict_mamba(1)
    tree.match_key(INSERTS[3])
    tree.evict_mamba(1)
    assert tree.match_key(INSERTS[3])[0] == 7 and tree.match_key(INSERTS[1])[0] == 0


def test_window_tree_called_directly_follows_the_window_lru_list():
    """test_swa_radix_cache_1 on 0.5.23's rules, W = 4: the window list, oldest first, is 67, 10
    11 12, 123, 45, 60 70 (the fourth insert refreshes 60 70, 45 and 123: 2 + 2 < 5 <= 2 + 2 + 3;
    67 keeps its place from the second). evict(1, 0) frees 10 11 12 (3, 3), evict(0, 1) the leaf
    67 (2, 2), evict(1, 2) the leaf 60 70 (2, 2): no tombstone, so 12345 and 1 2 3 4 5 60 70 match
    5, at 45. The 0.5.23 wheel gave the same (the test, written for SWARadixCache, asserts 0 and 7)."""
    tree, prefixes = built({"sliding_window": 4})
    assert prefixes == [0, 3, 0, 5]
    assert [[n.key for n in tree.window_lru]] == [[[6, 7], [10, 11, 12], [1, 2, 3], [4, 5], [60, 70]]]
    assert [tree.evict_window(f, w) for f, w in ((1, 0), (0, 1), (1, 2))] == [(3, 3), (2, 2), (2, 2)]
    assert [(m, n.key) for m, n in map(tree.match_key, ([1, 2, 3, 4, 5], INSERTS[3]))] == [(5, [4, 5]), (5, [4, 5])]


def test_an_inner_node_evicted_from_the_window_list_becomes_a_tombstone():
    """After a match of 1 2 3 4 5 60 70 (refreshing 123, 45, 60 70) and one of 1234567
    (refreshing 123, 45, 67), the oldest window KV is 10 11 12, then 60 70, then 123: evict(0, 6)
    frees 10 11 12 and 60 70 whole (3 + 2 = 5 < 6) and makes 123 a tombstone (5 + 3 = 8): 12345
    then matches 0 (2 live ids after the tombstone, fewer than W = 4) and 1234567 7 (4 live)."""
    tree, _ = built({"sliding_window": 4})
    tree.match_key(INSERTS[3])
    tree.match_key(INSERTS[1])
    assert [n.key for n in tree.window_lru][:3] == [[10, 11, 12], [60, 70], [1, 2, 3]]
    assert tree.evict_window(0, 6) == (5, 8)
    assert tree.match_key([1, 2, 3, 4, 5])[0] == 0 and tree.match_key(INSERTS[1])[0] == 7


def test_direct_window_calls_are_refused_on_a_tree_requests_changed():
    tree = peers.simulator("sglang-radix", {"page_size": 1, "sliding_window": 4})
    tree.commit(R([1, 2, 3, 4, 5]), [9])
    with pytest.raises(peers.PeerProfileError, match="requests changed"):
        tree.evict_window(1, 1)
