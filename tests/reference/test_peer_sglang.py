"""`sglang-radix` (spec/peer-profiles.md section 4): the rules the cross-check against SGLang
0.5.23 corrected or made versioned, each on its spec example, derived by hand in the comments.

Letters are token ids; one sampled token per request unless given (its computed sequence is
then the prompt). Streams named after the cross-check's classes are its minimal streams
(docs/crosscheck.md), where SGLang's own classes report the value asserted.
"""
from __future__ import annotations

import pytest

from reference import peers
from reference.peer_sglang import sglang_release

R = peers.PeerRequest


def run(settings: dict, steps: list, probes: tuple = ()) -> tuple[list, list]:
    """(the count of each step, then of each probe predicted after the last step, uncommitted)."""
    tree = peers.simulator("sglang-radix", settings)
    seen = []
    for prompt, sampled, keys in steps:
        request = R(list(prompt), **keys)
        seen.append(tree.predict(request))
        tree.commit(request, list(sampled))
    return seen, [tree.predict(R(list(p))) for p in probes]


def test_sgl_2_an_empty_salt_is_no_salt():
    """PEER-SGL-2: `cache_salt or None` (schedule_batch.py Req.__init__, radix_cache.py RadixKey);
    SGLang reported 1 on the cross-check's minimal stream where the oracle said 0."""
    assert run({}, [("abcdefgh", "z", {"salt": ""})], ("abcdefghi",))[1] == [8]
    assert run({}, [("AA", "z", {}), ("AB", "z", {"salt": ""})])[0] == [0, 1]
    assert run({}, [("abcdefgh", "z", {"salt": "s1"})], ("abcdefghi",))[1] == [0]


def test_sgl_2_an_empty_extra_key_is_no_extra_key():
    """PEER-SGL-2: the API makes "" None (io_struct.py _normalize_extra_key), alone or before an adapter."""
    assert run({}, [("abcdefgh", "z", {"extra_key": ""})], ("abcdefghi",))[1] == [8]
    steps = [("abcdefgh", "z", {"extra_key": "", "lora": "alpha"}), ("abcdefghi", "z", {"lora": "alpha"})]
    assert run({}, steps)[0] == [0, 8]


def test_sgl_4_the_leaf_an_insert_adds_is_newer_than_the_remainder_it_split():
    """PEER-SGL-4 example (P = 1, pool 8). `abcdef` (6 slots). `abcde` sampling X y: the match
    (first 4 ids) splits `abcdef` into `abcd` | `ef`; the insert of `abcdeX` splits `ef` into
    `e` | `f` (f keeps the insert walk's stamp) and adds the leaf `X`, made after the walk: the
    tree is abcd-e-{f, X}, 7 slots. `pq` asks for 2 with 1 free: one leaf goes, the older: `f`.
    `abcdeXw` matches abcdeX: 6; `abcdefw` matches abcde: 5. Given the same stamp, `f` and `X`
    tie, and the leaf a heap takes first depends on its position: the oracle before peer
    profiles 1.3.0 could take `X`."""
    assert run({"pool_tokens": 8}, [("abcdef", "z", {}), ("abcde", "Xy", {}), ("pq", "r", {})],
               ("abcdeXw", "abcdefw")) == ([0, 4, 0], [6, 5])


def test_sgl_4_the_crosschecks_lru_tie_stream():
    """The cross-check's (d) minimal stream (P = 1, pool 16): SGLang 0.5.23 reported 1 at the
    last request, the oracle before 1.3.0 0."""
    steps = [([11, 34], [24, 0, 18], {}), ([11, 34], [6, 17], {}), ([46, 5, 33], [46, 36], {}),
             ([46, 5, 22], [17, 3, 31], {"lora": "alpha"}), ([48, 3], [41, 43, 45], {}), ([0, 7], [19], {}),
             ([11, 0], [17], {})]
    assert run({"pool_tokens": 16}, steps)[0][-1] == 1


def test_sgl_5_a_childless_parent_is_evicted_in_the_same_round():
    """PEER-SGL-5 example (P = 1, pool 12): abcd with the leaves ef and XY (8 slots); pqrstuvwxy
    asks for 10 with 4 free: ef (2), XY (2), then abcd, childless now (4): 8 freed. A parent kept
    for a later round would leave abcd cached (and the request short of 2 slots)."""
    steps = [("abcdef", "z", {}), ("abcdXY", "z", {}), ("pqrstuvwxy", "z", {})]
    assert run({"pool_tokens": 12}, steps, ("abcdZ", "pqrstuvwxyz")) == ([0, 4, 0], [0, 10])
    # asking for 8 (4 short) takes the two leaves only
    assert run({"pool_tokens": 12}, steps[:2] + [("pqrstuvw", "z", {})], ("abcdZ",))[1] == [4]


def test_sgl_5_the_examples_of_the_spec():
    steps = [("abcdefgh", "z", {}), ("ijklmnop", "z", {}), ("qrstuvwx", "z", {})]
    assert run({"pool_tokens": 20}, steps, ("abcdefgh", "ijklmnop"))[1] == [0, 7]
    steps = [("abcdefgh", "z", {}), ("ijklmnop", "z", {}), ("abcdefgh", "z", {}), ("qrstuvwx", "z", {})]
    assert run({"pool_tokens": 20}, steps, ("abcdefgh", "ijklmnop"))[1] == [7, 0]
    steps = [("abcdefgh", "z", {}), ("abcdXYZW", "z", {}), ("abcdQRST", "z", {})]
    assert run({"pool_tokens": 12}, steps, ("abcdefgh",))[1] == [4]


def test_sgl_7_a_paged_decode_step_asks_for_a_page_and_takes_one_only_at_a_page_start():
    """PEER-SGL-7 example (P = 2, pool 12): abcd (4), abcX under k2 (4): 4 free. pq sampling r s:
    its prompt asks 2 + 2 with 4 free, takes a page (2 free left); its decode step (r at
    position 2 starts a page) asks for a page and takes the last free one: nothing evicted, abY
    reports 2. The oracle before 1.3.0 asked P + 1 = 3 there and evicted abcd (abY: 0). The
    cross-check's (c) minimal stream is this one in other ids: SGLang reported 2."""
    steps = [("abcd", "z", {}), ("abcX", "z", {"extra_key": "k2"}), ("pq", "rs", {})]
    assert run({"page_size": 2, "pool_tokens": 12}, steps, ("abY",))[1] == [2]
    minimal = [([9, 4, 10, 7], [0], {}), ([9, 4, 10, 38], [0], {"extra_key": "k2"}), ([31, 6], [45, 9], {})]
    tree = peers.simulator("sglang-radix", {"page_size": 2, "pool_tokens": 12})
    for prompt, sampled, keys in minimal:
        tree.commit(R(prompt, **keys), sampled)
    assert tree.predict(R([9, 4, 21])) == 2


def test_sgl_7_a_request_holds_whole_pages():
    """P = 4, pool 16: abcdefghij (3 pages held: ceil(10 / 4)), its decode step at position 10
    (not a page start) takes none; the tree keeps 2 pages (8 ids of abcdefghijk). Then a 9-id
    prompt asks 9 + 4 = 13 with 8 free: 5 short, the leaf (8) goes."""
    tree = peers.simulator("sglang-radix", {"page_size": 4, "pool_tokens": 16})
    tree.commit(R(list("abcdefghij")), list("kl"))
    assert tree.tree_tokens == 8
    tree.commit(R(list("pqrstuvwx")), ["y"])
    assert tree.predict(R(list("abcdefghij"))) == 0 and tree.tree_tokens == 8


@pytest.mark.parametrize("version, counts", [("0.5.23", [0, 0, 1]), ("0.5.20", [0, 0, 1]), ("0.5.19", [0, 0, 0]),
                                             ("0.5.16", [0, 0, 0])])
def test_sgl_8_a_split_at_the_prompt_from_0_5_20(version, counts):
    """PEER-SGL-8 (a) example (P = 1, pool 9): abcd on alpha sampling x y leaves abcd | x from
    0.5.20 (one leaf abcdx before); abcQ sampling R S fills the pool with its prompt and its
    decode step evicts one leaf: x, or all of abcdx; aT on alpha then matches a: 1, or 0."""
    steps = [("abcd", "xy", {"lora": "alpha"}), ("abcQ", "RS", {}), ("aT", "z", {"lora": "alpha"})]
    assert run({"pool_tokens": 9, "version": version}, steps)[0] == counts


@pytest.mark.parametrize("version, count", [("0.5.23", 2), ("0.5.17", 2), ("0.5.16", 0)])
def test_sgl_8_only_the_shortfall_is_evicted_from_0_5_17(version, count):
    """PEER-SGL-8 (b) example (P = 2, pool 10): ab; abc sampling d e (ab | cd); abcdF under k2
    asks 5 + 2 = 7 with 6 free: from 0.5.17 it evicts the 1 slot it is short of (the leaf cd),
    before all 7 (cd, then ab). abG then matches ab: 2, or 0. The cross-check's (b) minimal
    stream is this one in other ids."""
    steps = [("ab", "z", {}), ("abc", "de", {}), ("abcdF", "z", {"extra_key": "k2"}), ("abG", "z", {})]
    assert run({"page_size": 2, "pool_tokens": 10, "version": version}, steps)[0][-1] == count


def test_sgl_8_releases_are_read_from_what_servers_report():
    assert sglang_release("0.5.23") == (0, 5, 23) and sglang_release("0.5.23.post1") == (0, 5, 23)
    assert sglang_release("v0.5.16rc2") == (0, 5, 16) and sglang_release("0.6") == (0, 6, 0)
    for bad in ("", "kvconform-bundled", "five"):
        with pytest.raises(peers.PeerProfileError):
            peers.simulator("sglang-radix", {"version": bad})


def test_sgl_9_eagle_keys_the_tree_by_bigrams():
    """PEER-SGL-9 example. P = 1, abcdef cached as 5 bigrams: abcdef looks at the 4 bigrams of
    abcde: 4; abcdefg at 5: 5; abcdXY at ab bc cd dX: 3. P = 2, abcdefgh cached (7 bigrams, 6 in
    pages): abcdefghi looks at 7 bigrams, matches 6; abcdeX at 4: 4."""
    assert run({"eagle": True}, [("abcdef", "z", {})], ("abcdef", "abcdefg", "abcdXY"))[1] == [4, 5, 3]
    assert run({"eagle": True, "page_size": 2}, [("abcdefgh", "z", {})], ("abcdefghi", "abcdeX"))[1] == [6, 4]
    assert peers.PEER_PROFILES["sglang-radix"].full_match(peers.check_settings("sglang-radix", {"eagle": True}), 8) == 6


def test_sgl_9_a_bounded_pool_after_an_eagle_decode_step_is_not_defined():
    tree = peers.simulator("sglang-radix", {"eagle": True, "pool_tokens": 64})
    tree.commit(R(list("abcd")), ["z"])                  # no decode step: defined
    with pytest.raises(peers.PeerProfileError, match="draft tokens"):
        tree.commit(R(list("abcd")), list("xyz"))
