"""The bundled backend's EAGLE path: the draft head, greedy-exact verification, draft pages.

Greedy-exact means an EAGLE run generates exactly what vanilla greedy decoding generates
(CR-SPEC-7, CR-OUT-1): the reference for every output below is the same engine run without
context reuse, where it decodes one token per step. Counts are derived by hand in comments
(spec/context-reuse.md section 12, P = 4).
"""
import json

import pytest

import gpu_backend.draft_head as draft_head
from tests.helpers.backend import counters, facts, run, runtime, texts
from gpu_backend.errors import BackendInputError
from gpu_backend.engine_build import make_config

EAGLE = dict(maxInputLen=12, maxKVCacheCapacity=24, maxKVPoolPages=0, tokensPerPage=4, maxBatchSize=2,
             specDecode="eagle")
PROMPTS = ("abcdefghi", "hello worl", "the quick", "aaaa")


def outputs(result):
    return [r["output_ids"] for r in result["responses"]]


def test_the_build_writes_the_draft_head_and_its_pool(engine):
    d = engine(**EAGLE)
    cfg = json.loads((d / "config.json").read_text())
    # CR-SPEC-5: 0 resolves to the base pool, 2 * ceil(24/4) = 12 pages
    assert cfg["kv_pool_pages"] == cfg["draft_kv_pool_pages"] == 12
    draft = json.loads((d / draft_head.CONFIG).read_text())
    assert draft["weights"] == draft_head.WEIGHTS and (d / draft_head.WEIGHTS).is_file()
    assert make_config(dict(EAGLE, maxDraftKVPoolPages=3))["draft_kv_pool_pages"] == 3
    assert "draft_kv_pool_pages" not in make_config(dict(EAGLE, specDecode=None))
    with pytest.raises(BackendInputError, match="maxDraftKVPoolPages"):
        make_config(dict(EAGLE, specDecode=None, maxDraftKVPoolPages=3))


@pytest.mark.parametrize("batch", [1, 2])
def test_eagle_outputs_equal_vanilla_greedy_outputs(engine, batch):
    d = engine(**dict(EAGLE, maxKVPoolPages=64))           # room to keep every record
    doc = texts(*PROMPTS, gen=8, batch_size=batch)
    vanilla = run(runtime(d, enable_context_reuse=False), doc)
    eagle_rt = runtime(d)
    first, second = run(eagle_rt, doc), run(eagle_rt, doc)          # the second reuses pairs
    assert outputs(first) == outputs(second) == outputs(vanilla)
    assert counters(eagle_rt)["speculative"]["full_page_replays"] > 0


def test_accepted_proposals_give_the_same_tokens(engine, monkeypatch):
    """A draft head that proposes the vanilla continuation: every proposal is accepted, several
    tokens per step, and the outputs are still the vanilla ones."""
    d = engine(**EAGLE)
    doc = texts("abcdefghi", gen=8)
    want = outputs(run(runtime(d, enable_context_reuse=False), doc))[0]
    accepted = []

    def oracle_propose(self, pool, slots_of, committed, hidden, token, count):
        done = committed + 2 - 9            # generated so far: positions 9.. hold generated tokens
        accepted.append(count)
        return want[done:done + count]
    monkeypatch.setattr(draft_head.DraftHead, "propose", oracle_propose)
    got = outputs(run(runtime(d), doc))[0]
    assert got == want
    assert max(accepted) >= 2, accepted     # multi-token steps happened


def test_paired_counts_and_pools(engine):
    d = engine(**dict(EAGLE, maxBatchSize=1))       # base pool ceil(24/4) = 6, draft pool 6
    rt = runtime(d)
    doc = texts("abcdefghi", "abcdefghij", "abcdxy")
    result = run(rt, doc)
    # r0 (n=9) publishes floor(8/4) = 2 paired pages; r1 pairs k=2, keeps 1: standard 8/4;
    # r2 pairs k=1: nothing remains, no_reusable_prefix, matched 4, reused 0; it publishes
    # floor(5/4) = 1 page, a new endpoint with its own draft page
    assert [(facts(result, i)["plan"], facts(result, i)["matched_tokens"], facts(result, i)["reused_tokens"])
            for i in range(3)] == [("no_reusable_prefix", 0, 0), ("standard", 8, 4), ("no_reusable_prefix", 4, 0)]
    c = counters(rt)
    assert c["speculative"] == {"full_page_replays": 2, "pair_publications": 2}
    assert c["records"]["current"] == 2
    # base pages held: [a-d], [e-h]; draft pages: the first record's 2 and r2's own 1
    assert c["resource_pools"]["base_kv_pages"] == {"free": 4, "capacity": 6}
    assert c["resource_pools"]["draft_kv_pages"] == {"free": 3, "capacity": 6}


def test_a_non_greedy_file_decodes_as_vanilla(engine):
    d = engine(**EAGLE)
    rt = runtime(d)
    run(rt, texts("abcdefgh", "abcdefghij", temperature=1.0, top_k=50))
    c = counters(rt)
    # CR-SPEC-7: base-only records, no replay: the second reuses 8
    assert c["speculative"] == {"full_page_replays": 0, "pair_publications": 0}
    assert c["reused_tokens"] == 8
    assert c["resource_pools"]["draft_kv_pages"]["free"] == c["resource_pools"]["draft_kv_pages"]["capacity"]


def test_the_draft_prefill_covers_every_prompt_position(engine):
    """CR-SPEC-4 as Edge-LLM 0.10 runs it: the draft prefill runs after the first token is sampled,
    so 'abcdefgh' (n = 8) generating one token publishes floor(8/4) = 2 pairs, and 'abcdefghi'
    then pairs k = 2 and reuses 4 (the second pair replayed). One position behind the base it
    would have published 1 pair and reused 0."""
    d = engine(**dict(EAGLE, maxBatchSize=1))
    rt = runtime(d)
    result = run(rt, texts("abcdefgh", "abcdefghi"))
    assert facts(result, 0)["publications"] == [{"point": "prefill_end", "tokens": 8, "pages": 2,
                                                 "status": "committed"}]
    assert (facts(result, 1)["plan"], facts(result, 1)["matched_tokens"], facts(result, 1)["reused_tokens"]) == \
        ("standard", 8, 4)


def test_the_last_verification_round_is_reported(engine, monkeypatch):
    """With every proposal accepted, 'abcdefghi' (n = 9) generating 8 tokens takes the prefill's
    token, then a round of 3 (the window stays in the 3 pages held: room 2) and a round of 4: the
    response reports last_verification_accepted 4, and the draft covers n + g - 1 - 4 = 12
    positions when it finishes (the last round's tokens are never run through the draft)."""
    d = engine(**dict(EAGLE, maxBatchSize=1))
    doc = texts("abcdefghi", gen=8, logit_bias={"257": -100.0})
    want = outputs(run(runtime(d, enable_context_reuse=False), doc))[0]
    assert len(want) == 8

    def oracle_propose(self, pool, slots_of, committed, hidden, token, count):
        done = committed + 2 - 9
        return want[done:done + count]
    monkeypatch.setattr(draft_head.DraftHead, "propose", oracle_propose)
    rt = runtime(d)
    result = run(rt, doc)
    assert result["responses"][0]["last_verification_accepted"] == 4
    assert facts(result)["publications"] == [
        {"point": "prefill_end", "tokens": 8, "pages": 2, "status": "committed"},
        {"point": "decode_end", "tokens": 12, "pages": 3, "status": "committed"}]
