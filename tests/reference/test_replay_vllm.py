"""The replay's vllm-apc pool (reference/replay_vllm.py) is the straightforward oracle
(reference/peer_vllm.py `VllmBlockPool`), block by block.

Random pools (block size, capacity, EAGLE, prefix caching on or off) replay random traffic
(conversations that resend, extend and diverge from earlier prompts, sampling 1 to 3 blocks'
worth of tokens; given by hash ids or by their tokens) through both, one request at a time
(SIM-ORDER-1; a request the pool cannot hold is skipped by both, SIM-CAP-2). The oracle runs as
the peer suite runs it: `predict`, then `commit` (its decode fed back one token at a time),
with a `PeerTrace`. After every request the two must agree on:

- the hits: the replay pool's, times B, is the count the oracle's trace decided (PEER-VLLM-3,
  -6, -8);
- the free queue from head to tail (PEER-VLLM-5), every key and the blocks holding it in the
  order they cached it (PEER-VLLM-4), each block's key, and no reference count left (the oracle's);
- the steps the oracle's trace records for the request: the blocks it evicted, in order
  (PEER-VLLM-5 `evicted`), how far its blocks were cached (PEER-VLLM-4 `cached`) and the free
  queue's length once it freed its blocks (PEER-VLLM-5 `freed`).

The default run replays 24 pools of 60 requests (under 2 s); `-m slow` replays 400 pools of 150.
"""
import random

import pytest

from reference.peer_trace import PeerTrace
from reference.peer_vllm import VllmBlockPool
from reference.replay import TrafficProfile, VllmReplayer
from reference.replay_adapters import KeyedPeerRequest, peer_request
from reference.replay_vllm import ReplayVllmPool
from reference.trace import deciding
from reference.traffic import BlockChains


def random_traffic(rng: random.Random, count: int, trace_block: int, tokens: bool) -> list:
    """Hash-id requests (or the same requests by their tokens): a new conversation starts from one
    of two shared first blocks; a turn resends an earlier prompt's blocks, maybe cut, and adds
    new ones; n ends anywhere in its last block; g samples up to three trace blocks."""
    chains, out, prompts, next_id = BlockChains(trace_block), [], [], 100
    for i in range(count):
        if prompts and rng.random() < 0.7:
            ids = list(rng.choice(prompts))
            if rng.random() < 0.3:
                del ids[rng.randint(1, len(ids)):]
            if rng.random() < 0.8:
                ids += range(next_id, next_id + rng.randint(1, 3))
                next_id += 3
        else:
            ids = [rng.choice((0, 1))] + [rng.randint(2, 12) for _ in range(rng.randint(0, 3))]
        prompts.append(ids)
        n = (len(ids) - 1) * trace_block + rng.randint(1, trace_block)
        g = rng.choice((1, 1, rng.randint(2, 3 * trace_block)))
        r = chains.request(i, f"line {i + 1}", n, g, ids)
        out.append(chains.token_request(i, r.source, r.prompt_tokens(), g) if tokens else r)
    return out


def oracle_steps(trace: PeerTrace, i: int) -> tuple:
    """(the count the trace decided, the blocks it evicted in order, how far its blocks were
    cached, the free queue's length after each release) for request i."""
    steps = trace.requests.get(i, [])
    count = deciding(trace.steps_of(i, "cached_tokens")).to
    evicted = [s.to for s in steps if s.rule == "PEER-VLLM-5" and s.value == "evicted"]
    cached = [s.to for s in steps if s.rule == "PEER-VLLM-4" and s.value == "cached"]
    freed = [s.to for s in steps if s.rule == "PEER-VLLM-5" and s.value == "freed"]
    return count, evicted, cached[-1:], freed


def replay_both(seed: int, requests: int, seen: dict | None = None) -> int:
    """One random pool; returns how many requests both ran. `seen` counts what the pool met:
    requests skipped (SIM-CAP-2), evictions, keys held twice, first holders evicted, the tail's
    entries renumbered while a key was held twice (the pool's `_compact`)."""
    rng = random.Random(seed)
    B, trace_block = rng.choice((1, 2, 3, 4, 5, 8)), rng.choice((2, 3, 4, 6, 8))
    settings = {"block_size": B, "eagle": rng.random() < 0.25, "enable_prefix_caching": rng.random() < 0.9}
    traffic = random_traffic(rng, requests, trace_block, tokens=rng.random() < 0.3)
    longest = max(-(-(r.n + r.output - 1) // B) for r in traffic)
    K = rng.choice((None, longest, longest + rng.randint(1, 3 * longest), rng.randint(2, longest)))
    trace = PeerTrace()
    oracle = VllmBlockPool(B, K, settings["enable_prefix_caching"], settings["eagle"], trace=trace)
    replayer = VllmReplayer(TrafficProfile.make("vllm-apc", settings), K)
    pool = replayer.pool = ReplayVllmPool(B, K, settings["enable_prefix_caching"], settings["eagle"], log=[])
    pool.COMPACT_SLACK = (0, 3, ReplayVllmPool.COMPACT_SLACK)[seed % 3]    # the tail rebuilt as often as it can be, and as it is
    seen = {} if seen is None else seen
    ran, evictions = 0, 0
    where = f"seed {seed}: B={B}, K={K}, {settings}"
    for i, r in enumerate(traffic):
        if K is not None and -(-(r.n + r.output - 1) // B) > K:                # SIM-CAP-2
            assert replayer.run(r) is None, where
            seen["skipped"] = seen.get("skipped", 0) + 1
            continue
        request = KeyedPeerRequest(list(range(r.n)), traffic=r, prompt_keys=r.page_keys(B)) if r.keyed \
            else peer_request(r)           # hash ids: the keys through the hook in vllm_block_keys
        firsts = {key: blocks[0] for key, blocks in oracle.key_blocks.items()}
        trace.begin(i)
        oracle.predict(request)
        oracle.commit(request, r.sampled_tokens())
        del pool.log[:]
        base = pool.base
        count = replayer.run(r)
        at = f"{where}, request {i} (n={r.n}, g={r.output}, {'hash ids' if r.keyed else 'tokens'})"
        want_count, want_evicted, want_cached, want_freed = oracle_steps(trace, i)
        assert count == want_count, at
        assert pool.free_queue() == oracle.free_queue(), at
        assert pool.holders() == oracle.key_blocks, at
        assert pool.block_keys() == oracle.block_key, at
        assert not any(oracle.refs.values()), at
        log = pool.log
        assert [to for rule, what, to in log if what == "evicted"] == want_evicted, at
        assert [to for rule, what, to in log if what == "cached"] == want_cached, at
        assert [to for rule, what, to in log if what == "freed"] == want_freed, at
        evictions += len(want_evicted)
        ran += 1
        seen["evicted"] = seen.get("evicted", 0) + len(want_evicted)
        seen["held twice"] = seen.get("held twice", 0) + bool(pool.more)
        seen["tail rebuilt, a key held twice"] = seen.get("tail rebuilt, a key held twice", 0) + (
            pool.base != base and bool(pool.more))
        seen["first holder evicted"] = seen.get("first holder evicted", 0) + sum(
            firsts.get(key) not in (None, blocks[0]) for key, blocks in oracle.key_blocks.items())
    assert pool.evicted == evictions == replayer.evictions()[0], where
    return ran


def test_random_pools_replay_as_the_oracle():
    seen = {}
    assert sum(replay_both(seed, 60, seen) for seed in range(24)) > 24 * 30
    assert min(seen.values()) > 0 and len(seen) == 5, seen      # each case the fast paths set aside was met


@pytest.mark.slow
def test_random_pools_replay_as_the_oracle_at_length():
    assert sum(replay_both(seed, 150) for seed in range(1000, 1400)) > 400 * 75


def _second_holder() -> ReplayVllmPool:
    """B = 2, K = 4; the queue starts [1, 2, 3, 4] (head first); each request gives the keys of
    its full computed blocks.

    r0 keys [10, 11], n = 4, g = 1: no hit; takes 1 and 2, keyed 10 and 11; both freed to the
       tail, last first: queue [3, 4, 2, 1].
    r1 the same: the cap floor(3 / 2) = 1 leaves one hit (block 1, touched); the sequence's block
       1 (key 11) is computed again in block 3, the key's second holder; freed [3, 1] to the
       tail: queue [4, 2, 3, 1], holders 10: [1], 11: [2, 3].
    """
    pool = ReplayVllmPool(2, 4, log=[])
    assert pool.run([10, 11], 4, 1) == 0
    assert pool.free_queue() == [3, 4, 2, 1]
    assert pool.run([10, 11], 4, 1) == 1
    assert pool.holders() == {10: [1], 11: [2, 3]} and pool.free_queue() == [4, 2, 3, 1]
    return pool


def test_the_first_holder_evicted_by_hand():
    """After `_second_holder`: keys [13, 14], n = 4, g = 1 takes 4 (never handed out) and 2,
    which holds 11 first: 11's later holder, 3, takes its place; freed [2, 4]: queue [3, 1, 2, 4].
    Then keys [10, 11], n = 5: the cap floor(4 / 2) = 2, both hit, in blocks 1 and 3; its third
    block takes 2 (evicting 14) and, without a key, is freed to the head: queue [2, 4, 3, 1]."""
    pool = _second_holder()
    del pool.log[:]
    assert pool.run([13, 14], 4, 1) == 0
    assert [to for _, what, to in pool.log if what == "evicted"] == [2]
    assert pool.holders() == {10: [1], 11: [3], 13: [4], 14: [2]} and pool.free_queue() == [3, 1, 2, 4]
    assert pool.run([10, 11], 5, 1) == 2
    assert pool.holders() == {10: [1], 11: [3], 13: [4]} and pool.free_queue() == [2, 4, 3, 1]
    assert pool.evicted == 2


def test_a_later_holder_evicted_by_hand():
    """After `_second_holder`: keys [10, 11], n = 5, g = 1: both hit (blocks 1 and 2); its third
    block, 4, has no key: freed [4] to the head, [2, 1] to the tail: queue [4, 3, 2, 1]. Then
    keys [13, 14], n = 4 takes 4 and 3, 11's later holder: 11 is held by 2 alone; freed [3, 4]
    to the tail: queue [2, 1, 3, 4]."""
    pool = _second_holder()
    assert pool.run([10, 11], 5, 1) == 2
    assert pool.free_queue() == [4, 3, 2, 1]
    assert pool.run([13, 14], 4, 1) == 0
    assert [to for _, what, to in pool.log if what == "evicted"] == [3]
    assert pool.holders() == {10: [1], 11: [2], 13: [4], 14: [3]} and pool.free_queue() == [2, 1, 3, 4]
