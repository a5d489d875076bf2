"""The hash-id mapping of trace replay (spec/trace-replay.md SIM-KEY-1, SIM-KEY-2, SIM-GEN-1):
identical ids share tokens, different ids never do, and a page key is equal exactly when the
page's whole prefix of tokens is, at page sizes that divide the trace's block size and that do
not. Every expectation is derived from the tokens themselves (SIM-KEY-1), never from the keys."""
import random

import pytest

from reference.traffic import BlockChains


def test_tokens_of_the_spec_example():
    """SIM-KEY-1's example, B = 4: T(h, o) = 4h + o, the last block cut to n."""
    chains = BlockChains(4)
    a = chains.request(0, "line 1", 6, 1, [7, 9])
    b = chains.request(1, "line 2", 8, 1, [7, 8])
    assert a.prompt_tokens() == [28, 29, 30, 31, 36, 37]
    assert b.prompt_tokens() == [28, 29, 30, 31, 32, 33, 34, 35]


def test_page_keys_of_the_spec_example():
    """SIM-KEY-2's example, B = 4, page size 3: [7, 9] and [7, 8] share page 0 (28 29 30) and not
    page 1 (31 36 37 against 31 32 33)."""
    chains = BlockChains(4)
    a = chains.request(0, "line 1", 6, 1, [7, 9]).page_keys(3)
    b = chains.request(1, "line 2", 8, 1, [7, 8]).page_keys(3)
    assert len(a) == 2 and len(b) == 2
    assert a[0] == b[0] and a[1] != b[1]


def _random_requests(rng, chains, count, B):
    """Requests over a small id alphabet, so that prefixes, shared later blocks (an id repeated
    after a different prefix, which Mooncake's prefix hashes never do) and partial last blocks all
    occur."""
    out = []
    for i in range(count):
        blocks = rng.randint(1, 5)
        ids = [rng.choice((0, 1, 2)) if j < 2 else rng.randint(0, 6) for j in range(blocks)]
        n = (blocks - 1) * B + rng.randint(1, B)
        out.append(chains.request(i, f"line {i + 1}", n, 1, ids))
    return out


@pytest.mark.parametrize("B, P", [(8, 8), (8, 4), (8, 2), (8, 1), (8, 3), (8, 5), (8, 12), (4, 6), (6, 4),
                                  (512, 16), (512, 100), (512, 768)])
def test_a_page_key_is_equal_exactly_when_its_prefix_of_tokens_is(B, P):
    """For every pair of requests and every complete page: keys equal <=> token prefixes equal."""
    rng = random.Random(B * 100 + P)
    chains = BlockChains(B)
    requests = _random_requests(rng, chains, 60, B)
    tokens = [r.prompt_tokens() for r in requests]
    keys = [r.page_keys(P) for r in requests]
    for r, t, k in zip(requests, tokens, keys):
        assert len(t) == r.n and len(k) == r.n // P
    compared = shared = 0
    for i in range(len(requests)):
        for j in range(i, len(requests)):
            for p in range(min(len(keys[i]), len(keys[j]))):
                same_tokens = tokens[i][:(p + 1) * P] == tokens[j][:(p + 1) * P]
                assert (keys[i][p] == keys[j][p]) == same_tokens, (B, P, requests[i].hash_ids, requests[j].hash_ids, p)
                compared += 1
                shared += same_tokens and i != j
    assert compared > 500 and shared > 50, "the random trace shares too little to test anything"


def test_identical_ids_share_tokens_and_different_ids_never_do():
    """SIM-KEY-1 position by position: equal tokens at a position <=> equal id in its block."""
    B = 5
    chains = BlockChains(B)
    a = chains.request(0, "a", 14, 1, [3, 1, 4])
    b = chains.request(1, "b", 15, 1, [3, 2, 4])
    ta, tb = a.prompt_tokens(), b.prompt_tokens()
    for p in range(14):
        assert (ta[p] == tb[p]) == (a.hash_ids[p // B] == b.hash_ids[p // B])
    assert not set(a.prompt_tokens()[5:10]) & set(b.prompt_tokens()), "different ids share no token anywhere"


def test_the_partial_last_block_is_a_prefix_of_its_ids_run():
    """SIM-KEY-1: a partial last block holds the first tokens of its id's run, so a request that
    ends inside block 2 shares its complete pages there with one that holds block 2 whole."""
    chains = BlockChains(8)
    short = chains.request(0, "a", 8 + 5, 1, [1, 2])
    whole = chains.request(1, "b", 16, 1, [1, 2])
    assert whole.prompt_tokens()[:13] == short.prompt_tokens()
    assert short.page_keys(4) == whole.page_keys(4)[:3]


def test_sampled_tokens_are_new_to_the_whole_trace():
    """SIM-GEN-1: sampled ids are negative (no prompt token is) and no two requests share one;
    keys of pages holding them are negative and distinct per request and page."""
    chains = BlockChains(4)
    a = chains.request(0, "a", 6, 5, [1, 2])
    b = chains.request(1, "b", 6, 3, [1, 2])
    sa, sb = a.sampled_tokens(), b.sampled_tokens()
    assert len(sa) == 5 and len(sb) == 3 and min(a.prompt_tokens()) >= 0
    assert max(sa + sb) < 0 and len(set(sa + sb)) == 8
    assert {a.new_key(i) for i in range(4)}.isdisjoint({b.new_key(i) for i in range(4)})
    assert max(a.new_key(0), b.new_key(0)) < 0 < min(a.page_keys(2))


def test_token_requests_keep_their_tokens():
    chains = BlockChains(512)
    r = chains.token_request(0, "$.requests[0]", [5, 6, 7], 2)
    assert r.prompt_tokens() == [5, 6, 7] and not r.keyed and r.n == 3
