"""The peer oracles' decision trace (reference/peer_trace.py): each pool records its steps where
it decides, the steps never change a prediction, an untraced pool formats nothing, and the
steps say what the spec's worked examples say (which block, which leaf, which slot, and why)."""
from __future__ import annotations

import random

import pytest

from reference import peer_llama, peer_sglang, peer_trtllm, peer_vllm
from reference import peers
from reference.peers import PeerRequest, PeerTrace

SETTINGS = [
    ("llama.cpp-server", {}), ("llama.cpp-server", {"slots": 3}), ("llama.cpp-server", {"slots": 2,
                                                                                       "slot_prompt_similarity": 0.0}),
    ("vllm-apc", {"block_size": 4}), ("vllm-apc", {"block_size": 4, "cache_blocks": 12}),
    ("vllm-apc", {"block_size": 2, "cache_blocks": 20, "eagle": True}),
    ("vllm-apc", {"block_size": 4, "enable_prefix_caching": False}),
    ("sglang-radix", {}), ("sglang-radix", {"page_size": 4, "pool_tokens": 48}), ("sglang-radix", {"pool_tokens": 30}),
    ("sglang-radix", {"radix_cache": False}), ("trtllm-kv-reuse", {"enable_block_reuse": False}),
    ("trtllm-kv-reuse", {"tokens_per_block": 4}), ("trtllm-kv-reuse", {"tokens_per_block": 4, "max_blocks": 16}),
    ("trtllm-kv-reuse", {"tokens_per_block": 4, "copy_on_partial_reuse": False, "max_blocks": 20}),
    ("trtllm-kv-reuse", {"tokens_per_block": 3, "enable_partial_reuse": False}),
    ("trtllm-kv-reuse", {"tokens_per_block": 4, "max_blocks": 16, "max_attention_window": [8, 12]}),
]


def stream(seed: int, length: int = 40) -> list:
    """Requests that share prefixes of every length around block boundaries, under a few salts,
    adapters and extra keys, with a few sampled ids each."""
    rng = random.Random(seed)
    heads = [[rng.randrange(6) for _ in range(rng.randrange(1, 14))] for _ in range(4)]
    out = []
    for _ in range(length):
        ids = list(rng.choice(heads)) + [rng.randrange(6) for _ in range(rng.randrange(0, 9))]
        req = PeerRequest(ids, lora=rng.choice([None, None, "alpha"]), salt=rng.choice([None, None, "s1"]),
                          extra_key=rng.choice([None, None, "k1"]), skip_prefix_cache=rng.random() < 0.05,
                          retention=rng.choice([None, None, {"token_range_retention_configs": [
                              {"token_start": 0, "token_end": 4, "priority": rng.choice([10, 90]),
                               "duration_ms": rng.choice([None, 0, 3])}], "decode_retention_priority": 20}]))
        out.append((req, [rng.randrange(6) for _ in range(rng.randrange(1, 5))]))
    return out


def replay(profile: str, settings: dict, requests: list, trace=None) -> list:
    sim = peers.simulator(profile, settings, trace=trace)
    seen = []
    for k, (req, sampled) in enumerate(requests):
        if trace is not None:
            trace.begin(k)
        seen.append(sim.predict(req))
        try:
            sim.commit(req, sampled)
        except peers.PeerProfileError as e:          # a request beyond a small pool: the same either way
            seen.append(str(e))
            sim.reset()
    return seen + [getattr(sim, "free_queue", lambda: None)()]


@pytest.mark.parametrize("profile, settings", SETTINGS)
def test_tracing_changes_no_prediction_and_every_count_has_its_deciding_step(profile, settings):
    for seed in range(12):
        requests = stream(seed)
        trace = PeerTrace()
        assert replay(profile, settings, requests, trace) == replay(profile, settings, requests)
        for k in range(len(requests)):
            head, chain = trace.explained(k)
            assert head is not None and head.value == "cached_tokens" and chain[-1] is head
            assert head.rule.startswith(("PEER-LCPP-", "PEER-VLLM-", "PEER-SGL-", "PEER-TRT-"))


@pytest.mark.parametrize("module, names", [(peer_vllm, ("span", "keyed", "_blocks")), (peer_sglang, ("keyed",)),
                                           (peer_trtllm, ("keyed",))])
def test_an_untraced_pool_formats_nothing(module, names, monkeypatch):
    def refuse(*args):
        raise AssertionError("a reason was formatted while tracing is off")
    for name in names:
        monkeypatch.setattr(module, name, refuse)
    for profile, settings in SETTINGS:
        replay(profile, settings, stream(3))


def test_llama_records_the_slot_choice_and_the_cap():
    trace = PeerTrace()
    sim = peer_llama.LlamaSlots(slots=2, trace=trace)
    trace.begin(0)
    sim.commit(PeerRequest(list("abcdefgh")), ["x"])          # the last of equally old slots: slot 1
    trace.begin(1)
    sim.commit(PeerRequest(list("zzzzzzzz")), ["x"])          # the least recently used: slot 0
    trace.begin(2)
    assert sim.predict(PeerRequest(list("abcdefgh"))) == 7
    head, chain = trace.explained(2)
    assert [s.rule for s in chain] == ["PEER-LCPP-2", "PEER-LCPP-5", "PEER-LCPP-1"]
    assert "slot 1 shares 1.0000 of the prompt" in chain[1].why and chain[0].owner == 0
    assert head.why.startswith("slot 1 holds 8 ids (left by request 0), 8 of them shared with the prompt: "
                               "c = min(LCP 8, N - 1 = 7) = 7")


def test_vllm_records_the_eviction_that_a_miss_follows_from():
    """PEER-VLLM-5's worked example at B = 4, K = 4: A (2 full blocks) is freed to the tail, B
    (4 blocks) takes A's blocks from the head of the free queue, so A again misses at block 0."""
    trace = PeerTrace()
    pool = peer_vllm.VllmBlockPool(4, 4, trace=trace)
    a, b = PeerRequest(list(range(8))), PeerRequest(list(range(100, 116)))
    for k, req in enumerate((a, b)):
        trace.begin(k)
        pool.predict(req)
        pool.commit(req, [0])
    trace.begin(2)
    assert pool.predict(a) == 0
    head, chain = trace.explained(2)
    assert head.rule == "PEER-VLLM-3" and chain[-2].rule == "PEER-VLLM-1"
    assert "block 0 was cached, then evicted by request 1" in chain[-2].why
    (eviction,) = [s for s in chain if s.value == "evicted" and "(block 0 of request 0's sequence)" in s.why]
    assert eviction.rule == "PEER-VLLM-5" and eviction.owner == 1 and eviction.why.startswith("block id 1 ")
    freed = [s for s in trace.requests[0] if s.value == "freed"]
    assert freed and "with one to the tail" in freed[0].why


def test_vllm_records_the_cap_eagle_and_a_keying_miss():
    trace = PeerTrace()
    pool = peer_vllm.VllmBlockPool(4, None, eagle=True, trace=trace)
    trace.begin(0)
    pool.commit(PeerRequest(list(range(12)), salt="s1"), [0])
    trace.begin(1)
    assert pool.predict(PeerRequest(list(range(12)), salt="s1")) == 4      # 3 cached, cap 2, EAGLE drops 1
    rules = [s.rule for s in trace.steps_of(1, "cached_tokens")]
    assert rules == ["PEER-VLLM-3", "PEER-VLLM-8"] and trace.explained(1)[0].rule == "PEER-VLLM-8"
    assert "keeps" not in trace.steps_of(1, "cached_tokens")[0].why
    assert "block 2, which holds the last prompt token, is computed again" in trace.steps_of(1, "cached_tokens")[0].why
    trace.begin(2)
    assert pool.predict(PeerRequest(list(range(12)), salt="s2")) == 0
    (match,) = trace.steps_of(2, "hit_blocks")
    assert match.rule == "PEER-VLLM-2" and "cached by request 0 under other extra keys" in match.why


def test_sglang_records_the_lru_leaf_it_evicts():
    trace = PeerTrace()
    tree = peer_sglang.RadixCache(1, pool_tokens=20, trace=trace)
    prompts = [PeerRequest(list(range(k * 10, k * 10 + 8))) for k in range(3)]
    for k, req in enumerate((prompts[0], prompts[1], prompts[0], prompts[2])):
        trace.begin(k)
        tree.predict(req)
        tree.commit(req, [99])
    trace.begin(4)
    assert tree.predict(prompts[1]) == 0
    head, chain = trace.explained(4)
    eviction = next(s for s in chain if s.rule == "PEER-SGL-5")
    assert eviction.owner == 3 and "inserted by request 1, last touched by request 1" in eviction.why
    assert "what followed was evicted by request 3" in trace.steps_of(4, "matched")[0].why


def test_trtllm_records_a_partial_reuse_that_takes_a_leaf_out():
    """PEER-TRT-4: a partly matched leaf nobody holds is taken out of the tree and written into."""
    trace = PeerTrace()
    pool = peer_trtllm.TrtllmBlockPool(4, trace=trace)
    for k, ids in enumerate(("abcdefgh", "abcdefxy", "abcdefgh")):
        trace.begin(k)
        pool.predict(PeerRequest(list(ids)))
        pool.commit(PeerRequest(list(ids)), ["z"])
    rules = [s.rule + ":" + s.value for s in trace.requests[1]]
    assert "PEER-TRT-4:partial_reuse" in rules and "PEER-TRT-4:stored" in rules
    head, chain = trace.explained(2)
    assert head.rule == "PEER-TRT-3" and "PEER-TRT-4" in {s.rule for s in chain}


def test_resets_are_steps_of_the_cache():
    trace = PeerTrace()
    pool = peer_vllm.VllmBlockPool(4, 8, trace=trace)
    assert trace.cache == []                                       # a new pool is not a reset
    run = pool.hold(PeerRequest(list(range(9))))
    assert pool.reset_prefix_cache() is False
    pool.release(run)
    assert pool.reset_prefix_cache() is True
    assert [(s.rule, s.to) for s in trace.cache if s.value == "reset"] == [("PEER-API-4", False), ("PEER-API-4", True)]
