"""The peer oracle (reference/peers.py) on the worked examples of spec/peer-profiles.md.

Prompts are written as letters, one letter per token id (the spec's convention). Every expected
count is derived by hand in the comment beside it, from the rule the test names.
"""
from __future__ import annotations

import pytest

from reference import peers
from reference.peers import PeerRequest


def t(letters: str) -> list:
    return [ord(c) for c in letters]


def req(letters: str, **keys) -> PeerRequest:
    return PeerRequest(t(letters), **keys)


def test_common_prefix_and_computed_sequence():
    assert peers.common_prefix(t("abcd"), t("abxy")) == 2
    assert peers.common_prefix([], t("a")) == 0
    # S = prompt + G[:-1]: the last sampled token is never fed back
    assert peers.computed_sequence(t("abcd"), t("xyz")) == t("abcdxy")
    assert peers.computed_sequence(t("abcd"), t("x")) == t("abcd")


# --- llama.cpp-server ------------------------------------------------------------------------------

@pytest.mark.parametrize("prompt, expected", [
    ("abcdxy", 4),       # LCP 4, N - 1 = 5: 4
    ("abcdefgh", 7),     # LCP 8, N - 1 = 7: 7 (the whole prompt matched: one token again)
    ("abc", 2),          # LCP 3, N - 1 = 2: 2
    ("zzz", 0),          # LCP 0
])
def test_lcpp_1_common_prefix_less_one(prompt, expected):
    """PEER-LCPP-1: the slot holds abcdefgh."""
    assert peers.llama_cpp_cached(t("abcdefgh"), t(prompt)) == expected


def test_lcpp_2_slot_keeps_generated_tokens():
    slot = peers.simulator("llama.cpp-server")
    slot.commit(req("abcd"), t("xyz"))           # slot: abcd + xy (z stopped generation)
    assert slot.tokens == t("abcdxy")
    assert slot.predict(req("abcdxyQ")) == 6     # LCP 6, N - 1 = 6
    slot.commit(req("abcd"), t("x"))             # one sampled token: nothing fed back
    assert slot.tokens == t("abcd")


def test_lcpp_4_one_slot_is_the_whole_cache():
    slot = peers.simulator("llama.cpp-server")
    slot.commit(req("abcdefgh"), t("z"))         # slot abcdefgh
    assert slot.predict(req("abxyz")) == 2
    slot.commit(req("abxyz"), t("z"))            # slot abxyz
    assert slot.predict(req("abcdefgh")) == 2    # LCP(abxyz, abcdefgh) = 2, not 7


# --- vllm-apc ---------------------------------------------------------------------------------------

def test_vllm_1_keys_chain_over_full_blocks_only():
    keys = peers.vllm_block_keys(t("abcdefghij"), 4)
    assert len(keys) == 2                        # abcd, efgh; ij is partial: no key
    other = peers.vllm_block_keys(t("abcdefgX"), 4)
    assert other[0] == keys[0] and other[1] != keys[1]


def test_vllm_2_salt_on_block_zero_separates_every_block():
    pool = peers.simulator("vllm-apc", {"block_size": 4})
    prompt = "abcdefghijkl"                      # N = 12, cap floor(11 / 4) = 2 blocks
    for salt in ("s1", "s2", None):
        assert pool.predict(req(prompt, salt=salt)) == 0
        pool.commit(req(prompt, salt=salt), t("z"))
    assert pool.predict(req(prompt, salt="s1")) == 8      # 3 blocks cached, 2 counted: 8


def test_vllm_2_lora_keys_every_block():
    a = peers.vllm_block_keys(t("abcdefgh"), 4, req("abcdefgh", lora="alpha"))
    b = peers.vllm_block_keys(t("abcdefgh"), 4, req("abcdefgh"))
    assert a[0] != b[0] and a[1] != b[1]


@pytest.mark.parametrize("prompt, expected", [
    ("abcdefgh", 4),     # k = 2, floor(7 / 4) = 1: 4 (not 8, not 7)
    ("abcdefghi", 8),    # k = 2, floor(8 / 4) = 2: 8
    ("abcdefgX", 4),     # k = 1: 4
    ("abcdefg", 4),      # k = 1 (one full block), floor(6 / 4) = 1: 4
    ("Xbcdefgh", 0),     # the chain breaks at block 0
])
def test_vllm_3_whole_blocks_capped_below_n(prompt, expected):
    pool = peers.simulator("vllm-apc", {"block_size": 4})
    pool.commit(req("abcdefgh"), t("z"))         # S = abcdefgh: 2 blocks cached
    assert pool.predict(req(prompt)) == expected


def test_vllm_3_formula():
    assert peers.vllm_cached(9, 141, 16) == 128  # floor(140 / 16) = 8 blocks
    assert peers.vllm_cached(3, 141, 16) == 48
    assert peers.vllm_cached(1, 1, 16) == 0


def test_vllm_4_sampled_tokens_fill_blocks():
    pool = peers.simulator("vllm-apc", {"block_size": 4})
    pool.commit(req("abcdef"), t("xyz"))         # S = abcdefxy: blocks abcd, efxy
    assert pool.predict(req("abcdefxyQ")) == 8


def test_vllm_5_least_recently_freed_block_evicted_first():
    # B = 4, K = 4: the queue starts [1 2 3 4]. A takes 1 2 3 (keys in 1, 2), frees 3 2 1 to
    # the tail: [4 3 2 1]. B takes 4, 3, 2 (block 2 held A1: evicted), keys B0 in 4, B1 in 3.
    # A again: A0 (block 1) still cached, A1 gone: k = 1, c = 4.
    pool = peers.simulator("vllm-apc", {"block_size": 4, "cache_blocks": 4})
    pool.commit(req("abcdefghi"), t("z"))
    pool.commit(req("mnopqrstu"), t("z"))
    assert pool.predict(req("abcdefghi")) == 4


def test_vllm_5_unbounded_never_evicts():
    pool = peers.simulator("vllm-apc", {"block_size": 4})
    pool.commit(req("abcdefghi"), t("z"))
    pool.commit(req("mnopqrstu"), t("z"))
    assert pool.predict(req("abcdefghi")) == 8   # k = 2, floor(8 / 4) = 2


def test_vllm_5_overflow_is_not_defined():
    pool = peers.simulator("vllm-apc", {"block_size": 4, "cache_blocks": 2})
    with pytest.raises(peers.PeerProfileError):
        pool.commit(req("abcdefghi"), t("z"))    # needs 3 blocks of 2


# --- sglang-radix -----------------------------------------------------------------------------------

@pytest.mark.parametrize("page, prompt, expected", [
    (1, "abcdefgh", 7),      # L 8, N - 1 = 7
    (1, "abcdxy", 4),        # L 4
    (4, "abcdefgh", 4),      # min(8, 7) = 7, floor to 4
    (4, "abcdefgX", 4),      # L 7, floor to 4
    (4, "abcdefghij", 8),    # L 8, N - 1 = 9: 8
])
def test_sgl_1_common_prefix_in_pages(page, prompt, expected):
    tree = peers.simulator("sglang-radix", {"page_size": page})
    tree.commit(req("abcdefgh"), t("z"))         # S = abcdefgh (8: whole pages of 1 and 4)
    assert tree.predict(req(prompt)) == expected


def test_sgl_2_namespaces():
    tree = peers.simulator("sglang-radix")
    for salt in ("s1", "s2"):
        assert tree.predict(req("abcdefgh", salt=salt)) == 0
        tree.commit(req("abcdefgh", salt=salt), t("z"))
    assert tree.predict(req("abcdefgh", salt="s1")) == 7
    assert tree.predict(req("abcdefgh", extra_key="k1", salt="s1")) == 0
    assert tree.predict(req("abcdefgh", lora="alpha", salt="s1")) == 0


def test_sgl_3_computed_sequence_is_cached():
    tree = peers.simulator("sglang-radix")
    tree.commit(req("abcd"), t("xy"))            # S = abcdx
    assert tree.predict(req("abcdxQ")) == 5


def test_reset_empties_every_cache():
    for profile in peers.PROFILES:
        sim = peers.simulator(profile)
        sim.commit(req("abcdefghijklmnopqrstuvwxyz" * 2), t("z"))
        sim.reset()
        assert sim.predict(req("abcdefghijklmnopqrstuvwxyz" * 2)) == 0


@pytest.mark.parametrize("profile, settings", [
    ("nope", {}), ("vllm-apc", {"page_size": 4}), ("vllm-apc", {"block_size": 0}),
    ("sglang-radix", {"page_size": "4"}), ("llama.cpp-server", {"block_size": 16}),
])
def test_bad_settings_are_refused(profile, settings):
    with pytest.raises(peers.PeerProfileError):
        peers.simulator(profile, settings)
