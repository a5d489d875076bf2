"""Cache behaviours of the vanilla (attention) deployment, one rule per test.

Every expected number is derived by hand in the comment above it, from spec/context-reuse.md,
with P = 4 and the chat template off (one character = one token).
"""
import os
import pytest

from tests.helpers.backend import counters, facts, run, runtime, texts
from gpu_backend.prefix_cache import ContextCache

NO_EOS = {"257": -100}


def image(name, before, after):
    return [{"type": "text", "text": before}, {"type": "image", "image": name}, {"type": "text", "text": after}]


def items(*parts):
    """Content items: strings are text, names ending in .png/.ppm are images."""
    return [{"type": "image", "image": p} if p.endswith((".png", ".ppm")) else {"type": "text", "text": p}
            for p in parts]


def plan_of(res, i=0):
    f = facts(res, i)
    return f["plan"], f["matched_tokens"], f["reused_tokens"]


def test_longest_contiguous_match_over_chained_keys(engine):
    rt = runtime(engine())
    res = run(rt, texts("abcdefgh", "abcdxxxxij", "abcdefghij"))
    # r0 publishes [a-d][e-h]; r1 matches only [a-d] (lookup stops at [xxxx]); r2 matches both
    assert [plan_of(res, i) for i in range(3)] == [
        ("no_reusable_prefix", 0, 0), ("standard", 4, 4), ("standard", 8, 8)]
    c = counters(rt)
    # r1 publishes the new endpoint [a-d][x-x]; r2's 2-page endpoint [a-d][e-h] exists
    assert c["publications"] == {"attempts": 3, "committed": 2, "existing": 1, "successful_endpoints": 3}
    assert c["hit_sequences"] == 2 and c["matched_tokens"] == 12 and c["reused_tokens"] == 12
    # records share [a-d]: pages held = [a-d], [e-h], [x-x] (CR-PUB-6)
    assert c["resource_pools"]["base_kv_pages"] == {"free": 24 - 3, "capacity": 24}


def test_page_identity_is_the_whole_prefix(engine):
    rt = runtime(engine())
    res = run(rt, texts("abcdwxyz", "efghwxyz"))       # page 1 holds wxyz in both
    assert plan_of(res, 1) == ("no_reusable_prefix", 0, 0)


def test_partial_last_page_is_never_keyed(engine):
    rt = runtime(engine())
    res = run(rt, texts("abc", "abcdefghij"))
    assert facts(res, 0)["publications"] == []                       # abc: no complete page
    assert facts(res, 1)["publications"] == [{"point": "prefill_end", "tokens": 8, "pages": 2, "status": "committed"}]
    assert counters(rt)["publications"]["attempts"] == 1


def test_full_input_rewind(engine):
    rt = runtime(engine())
    res = run(rt, texts("abcdefgh", "abcdefgh", "abcde", "abcd"))
    # replay of an aligned cached input gives its last page back: matched 8, reused 4
    assert plan_of(res, 1) == ("full_input_rewind", 8, 4)
    assert facts(res, 1)["publications"][0]["status"] == "existing"
    # abcd after abcde: matched 4, reused 0, still a hit
    assert plan_of(res, 3) == ("full_input_rewind", 4, 0)
    c = counters(rt)
    assert c["hit_sequences"] == 3 and c["plans"] == {"standard": 1, "no_reusable_prefix": 1, "full_input_rewind": 2}


def test_lora_adapter_is_part_of_identity(engine):
    rt = runtime(engine(loraAdapters=["a", "b"]))
    out = []
    for name in ("a", "b", None, "a"):
        doc = texts("abcdefgh")
        doc["available_lora_weights"] = {a: os.path.join(rt.engine_dir, "lora", f"{a}.safetensors") for a in "ab"}
        if name:
            doc["requests"][0]["lora_name"] = name
        out.append(plan_of(run(rt, doc)))
    assert out == [("no_reusable_prefix", 0, 0), ("no_reusable_prefix", 0, 0), ("no_reusable_prefix", 0, 0),
                   ("full_input_rewind", 8, 4)]


def test_sampling_parameters_are_not_identity_and_instances_share_nothing(engine):
    d = engine()
    rt = runtime(d)
    run(rt, texts("abcdefghi", top_k=1))
    res = run(rt, texts("abcdefghi", temperature=1.0, top_k=50, top_p=0.5, num_logprobs=3))
    assert plan_of(res) == ("standard", 8, 8)
    assert plan_of(run(runtime(d), texts("abcdefghi"))) == ("no_reusable_prefix", 0, 0)


@pytest.mark.parametrize("other, hit", [
    ("img_a_16x16.ppm", True), ("img_a_16x16_palette.png", True), ("img_a_16x16_rgba.png", True),
    ("img_b_16x16.png", False)])
def test_media_identity_is_decoded_pixels(engine, other, hit):
    rt = runtime(engine(vision=True))
    # ab A cdefgh: n = 9, pages [a b A c][d e f g]; the same pixels in another encoding match both
    run(rt, texts(image("img_a_16x16.png", "ab", "cdefgh")))
    res = run(rt, texts(image(other, "ab", "cdefgh")))
    assert plan_of(res) == (("standard", 8, 8) if hit else ("no_reusable_prefix", 0, 0))
    assert facts(res)["media_aware"]


def test_media_identity_covers_geometry(engine):
    rt = runtime(engine(vision=True))
    # a 16x32 and a 32x16 image with equal bytes: 2 placeholders each, page 0 = [a b T T]
    run(rt, texts(image("img_t_16x32.png", "ab", "cdefgh")))
    assert plan_of(run(rt, texts(image("img_t_32x16.png", "ab", "cdefgh")))) == ("no_reusable_prefix", 0, 0)
    assert plan_of(run(rt, texts(image("img_t_16x32.png", "ab", "cdefghi")))) == ("standard", 8, 8)


def test_adjacent_media_items_stay_two_items(engine):
    rt = runtime(engine(vision=True))
    # ab A c B def vs ab A c C def (n = 8): page 0 [a b A c] shared, page 1 differs
    run(rt, texts(items("ab", "img_a_16x16.png", "c", "img_b_16x16.png", "def")))
    res = run(rt, texts(items("ab", "img_a_16x16.png", "c", "img_c_16x16.png", "def")))
    assert plan_of(res) == ("standard", 4, 4)
    # ab A B cdef vs ab A C cdef: no separator, page 0 [a b A B] vs [a b A C] differ
    run(rt, texts(items("ab", "img_a_16x16.png", "img_b_16x16.png", "cdef")))
    res = run(rt, texts(items("ab", "img_a_16x16.png", "img_c_16x16.png", "cdef")))
    assert plan_of(res) == ("no_reusable_prefix", 0, 0)


class _AcquireSpy:
    """Records (kept pages, private demand) of every acquisition."""

    def __init__(self, rt):
        self.calls, inner = [], rt.cache._acquire

        def spy(plan):
            self.calls.append((len(plan.kept), plan.demand))
            return inner(plan)
        rt.cache._acquire = spy


def test_media_trim_restatement_and_unchanged_demand(engine):
    rt = runtime(engine(vision=True))
    spy = _AcquireSpy(rt)
    wide = texts(image("img_a_16x64.png", "ab", "cd"))          # n = 8: [a b A0 A1][A2 A3 c d]
    run(rt, wide)
    res = run(rt, wide)
    # rewind to r = 4; positions 3 and 4 are both A: r := 0; restated matched 0, not a hit
    assert plan_of(res) == ("no_reusable_prefix", 0, 0)
    assert counters(rt)["hit_sequences"] == 0
    # CR-MEDIA-5: the replay still pins 1 page and asks for 1 private page
    assert spy.calls[-1] == (1, 1)
    # abc A defg (n = 8): rewind to 4, boundary between A and d: no trim, yet restated standard
    narrow = texts(image("img_a_16x16.png", "abc", "defg"))
    run(rt, narrow)
    assert plan_of(run(rt, narrow)) == ("standard", 4, 4)
    # a one-page media input rewound to r = 0 is not restated (CR-MEDIA-4)
    one = texts(image("img_a_16x16.png", "abc", ""))
    run(rt, one)
    assert plan_of(run(rt, one)) == ("full_input_rewind", 4, 0)


def test_boundary_between_two_items_is_kept(engine):
    rt = runtime(engine(vision=True))
    # abc A B xyz, then abc A B def: page 0 [a b c A] matches; r = 4 sits between A and B
    run(rt, texts(items("abc", "img_a_16x16.png", "img_b_16x16.png", "xyz")))
    res = run(rt, texts(items("abc", "img_a_16x16.png", "img_b_16x16.png", "def")))
    assert plan_of(res) == ("standard", 4, 4)


def test_decode_end_publication(engine):
    rt = runtime(engine())
    # abcdefg (n = 7) generating 3 tokens (max-length): prefill publishes [a-d]; at decode end
    # the history holds n + g - 1 = 9 tokens: 2 pages
    res = run(rt, texts("abcdefg", gen=3, logit_bias=NO_EOS))
    assert len(res["responses"][0]["output_ids"]) == 3
    assert facts(res)["publications"] == [
        {"point": "prefill_end", "tokens": 4, "pages": 1, "status": "committed"},
        {"point": "decode_end", "tokens": 8, "pages": 2, "status": "committed"}]
    # abcdefgh (n = 8) generating 2: floor(9 / 4) = 2 pages, no more than published: no attempt
    res = run(rt, texts("abcdefgh", gen=2, logit_bias=NO_EOS))
    assert [p["point"] for p in facts(res)["publications"]] == ["prefill_end"]
    # finishing at the prefill step (g = 1) has nothing to add
    res = run(rt, texts("wxyzabc", gen=1))
    assert [p["point"] for p in facts(res)["publications"]] == ["prefill_end"]
    # the generated page is reusable: abcdefg + the 2 generated tokens
    gen = run(rt, texts("abcdefg", gen=3, logit_bias=NO_EOS))["responses"][0]["output_ids"]
    res = run(rt, texts("abcdefg" + bytes(gen[:1]).decode() + "zz"))
    assert plan_of(res) == ("standard", 8, 8)


def test_prefill_state_only_publishes_no_decode_end(engine):
    rt = runtime(engine())
    res = run(rt, texts("abcdefg", gen=3, logit_bias=NO_EOS, context_cache_commit_policy="prefill_state_only"))
    assert [p["point"] for p in facts(res)["publications"]] == ["prefill_end"]
    assert counters(rt)["publications"]["attempts"] == 1


def test_existing_publication_touches_the_record(engine):
    rt = runtime(engine(), max_records=2)
    # records abcd, efgh; abcd again is existing -> most recent; ijkl then evicts efgh, not abcd
    run(rt, texts("abcd", "efgh", "abcd", "ijkl"))
    assert plan_of(run(rt, texts("abcd"))) == ("full_input_rewind", 4, 0)
    assert plan_of(run(rt, texts("efgh"))) == ("no_reusable_prefix", 0, 0)


def test_canonical_projection_shares_indexed_pages(engine):
    rt = runtime(engine())
    # one batch: abcdefgh commits [a-d][e-h]; abcdefghijkl (own private copies) publishes a
    # 3-page record projected onto the first record's two pages: 3 pages held, not 5
    res = run(rt, texts("abcdefgh", "abcdefghijkl", batch_size=2))
    assert [p["status"] for r in res["responses"] for p in r["context_cache"]["publications"]] == ["committed"] * 2
    c = counters(rt)
    assert c["records"]["current"] == 2 and c["resource_pools"]["base_kv_pages"]["free"] == 24 - 3
    cache = rt.cache
    first, second = list(cache.records.values())
    assert second.pages[:2] == first.pages
    assert [cache.pages.cache[p] for p in second.pages] == [2, 2, 1]          # CR-PUB-6
    # abcdefgh + xy reuses both pages and publishes the 2-page endpoint again: existing
    assert facts(run(rt, texts("abcdefghxy")))["publications"][0]["status"] == "existing"


def test_bypass_never_publishes_and_evicts_for_its_pages(engine):
    d = engine(maxInputLen=7, maxKVCacheCapacity=8, maxBatchSize=1)          # pool: 2 pages
    rt = runtime(d)
    run(rt, texts("abcd", "efgh"))                                            # 2 records fill the pool
    res = run(rt, texts("ijklm", context_cache_lookup_policy="bypass"))       # needs 2 pages
    c = counters(rt)
    assert facts(res) == {"plan": "no_reusable_prefix", "matched_tokens": 0, "reused_tokens": 0,
                          "media_aware": False, "lookup_bypass": True, "forced_cold": False,
                          "hybrid_restore": False, "snapshot_pressure_skips": 0, "publications": []}
    assert c["records"] == {"current": 0, "evicted": 2} and c["lookup_bypass_sequences"] == 1
    assert c["reclaimed_resources"]["base_kv_pages"] == 2
    assert c["resource_pools"]["base_kv_pages"] == {"free": 2, "capacity": 2}


def test_hidden_state_output_forces_bypass(engine):
    rt = runtime(engine(), output_hidden_states=True)
    res = run(rt, texts("abcdefgh", "abcdefgh"))
    c = counters(rt)
    assert c["hit_sequences"] == 0 and c["lookup_bypass_sequences"] == 2 and c["records"]["current"] == 0
    hs = res["hidden_states"]
    assert sorted(hs) == [0, 1] and tuple(hs[0].shape) == (8, 64)
    assert (hs[0] - hs[1]).abs().max() == 0


def test_warmup_counts_admissions_but_publishes_nothing(engine):
    rt = runtime(engine(), dump_profile=True)
    run(rt, texts("abcdefgh"), warmup=2)
    p = rt.profile()
    c = p["context_cache"]
    assert (c["admitted_sequences"], c["lookup_bypass_sequences"], c["plans"]["no_reusable_prefix"],
            c["publications"]["attempts"]) == (3, 2, 3, 1)
    assert p["prefill"]["total_runs"] == 1


def test_reuse_disabled(engine):
    rt = runtime(engine(), enable_context_reuse=False, dump_profile=True)
    res = run(rt, texts("abcdefgh", "abcdefgh"))
    p = rt.profile()
    assert "context_cache" not in p
    assert (p["prefill"]["reused_tokens"], p["prefill"]["computed_tokens"]) == (0, 16)
    assert res["responses"][1]["context_cache"] is None


def test_metrics_ground_truth(engine):
    """CR-MET-12 ground truth: bypass abcde, then abcde, abcdef, abcd (one batch each)."""
    rt = runtime(engine(), dump_profile=True)
    run(rt, texts("abcde", context_cache_lookup_policy="bypass"))
    run(rt, texts("abcde", "abcdef", "abcd"))
    c = counters(rt)
    got = (c["admitted_sequences"], c["hit_sequences"], c["lookup_bypass_sequences"], c["forced_cold_sequences"],
           c["plans"]["standard"], c["plans"]["no_reusable_prefix"], c["plans"]["full_input_rewind"],
           c["publications"]["attempts"], c["publications"]["committed"], c["publications"]["existing"],
           c["records"]["current"])
    assert got == (4, 2, 1, 0, 1, 2, 1, 3, 1, 2, 1)
    assert c["resource_pools"]["base_kv_pages"]["free"] == 24 - 1
    # prefill: bypass abcde 5, abcde 5, abcdef 6 - 4 reused, abcd 4 (rewind: reused 0)
    assert {k: rt.profile()["prefill"][k] for k in ("total_runs", "reused_tokens", "computed_tokens")} == {
        "total_runs": 4, "reused_tokens": 4, "computed_tokens": 5 + 5 + 2 + 4}


def test_eviction_planner_walks_lru_and_may_free_nothing(engine):
    """CR-CAP-4 ground truth: a 2-page pool with records A [a-d] then B [e-h]."""
    rt = runtime(engine(maxInputLen=7, maxKVCacheCapacity=8, maxBatchSize=1))
    run(rt, texts("abcd", "efgh"))
    res = run(rt, texts("abcdxy"))          # pins A's page, needs 1 private page
    assert plan_of(res) == ("standard", 4, 4)
    c = counters(rt)
    # A is evicted first and frees nothing (its page is pinned); B frees 1 page
    assert c["records"] == {"current": 1, "evicted": 2}
    assert c["reclaimed_resources"]["base_kv_pages"] == 1
    assert facts(res)["publications"][0]["status"] == "committed"        # [a-d] re-indexed


def test_vanilla_hits_do_not_touch_records(engine):
    rt = runtime(engine(maxInputLen=11, maxKVCacheCapacity=12, maxBatchSize=1))   # pool: 3 pages
    run(rt, texts("abcdefgh", "ijkl"))              # A = [a-d][e-h], B = [i-l]; pool full
    res = run(rt, texts("abcdxyz"))                 # hits A's first page, needs 1 private page
    assert plan_of(res) == ("standard", 4, 4)
    # the hit left A least recent: A is evicted (its free [e-h] page suffices), B survives
    assert plan_of(run(rt, texts("ijkl"))) == ("full_input_rewind", 4, 0)
    assert counters(rt)["records"]["evicted"] == 1


def test_record_limit(engine):
    rt = runtime(engine(), max_records=1)
    res = run(rt, texts("abcd", "efgh", "abcd"))
    assert plan_of(res, 2) == ("no_reusable_prefix", 0, 0)
    c = counters(rt)
    assert c["publications"]["committed"] == 3 and c["records"] == {"current": 1, "evicted": 2}
    rt0 = runtime(engine(), max_records=0)
    run(rt0, texts("abcdefgh", "abcdefgh"))
    c = counters(rt0)
    assert c["hit_sequences"] == 0 and c["publications"]["committed"] == 2
    assert c["records"] == {"current": 0, "evicted": 2}
    assert c["resource_pools"]["base_kv_pages"]["free"] == 24


def test_whole_batch_failure_and_length_limits(engine):
    d = engine(maxInputLen=8, maxKVCacheCapacity=12, maxBatchSize=1)
    rt = runtime(d)
    res = run(rt, texts("abcdefgh", "abcdefghi", "efgh", gen=4, logit_bias=NO_EOS))
    assert res["failed_batches"] == 1
    assert [r["finish_reason"] for r in res["responses"]] == ["max-length", "error", "max-length"]
    bad = res["responses"][1]
    assert bad["context_cache"] is None and "max_input_len" in bad["output_text"]
    assert counters(rt)["admitted_sequences"] == 2             # the failed batch moved no counter
    res = run(rt, texts("abcdefgh", gen=5))                    # 8 + 5 > 12
    assert res["failed_batches"] == 1 and "max_kv_cache_capacity" in res["responses"][0]["output_text"]


def test_decode_growth_evicts_records(engine):
    rt = runtime(engine(maxInputLen=11, maxKVCacheCapacity=12, maxBatchSize=1))   # pool: 3 pages
    run(rt, texts("abcdefgh"))                                   # A: 2 pages, 1 page free
    res = run(rt, texts("wxyz", gen=2, logit_bias=NO_EOS))      # 1 page; growth to 2 evicts A
    c = counters(rt)
    assert c["records"] == {"current": 1, "evicted": 1}
    assert c["reclaimed_resources"]["base_kv_pages"] == 2
    assert [p["point"] for p in facts(res)["publications"]] == ["prefill_end"]   # floor(5/4) = 1


def test_no_reuse_inside_a_batch_but_across_batches_and_files(engine):
    rt = runtime(engine())
    run(rt, texts("abcdefgh", "abcdefgh", batch_size=2))
    c = counters(rt)
    assert (c["hit_sequences"], c["publications"]["committed"], c["publications"]["existing"]) == (0, 1, 1)
    assert plan_of(run(rt, texts("abcdefghij"))) == ("standard", 8, 8)


def test_order_of_events_in_a_batch(engine):
    """CR-BATCH-6: admission, prefill-end publications, release of finished-at-prefill slots,
    then per step growth, decode-end publications, release."""
    rt = runtime(engine())
    log = []
    for name in ("admit", "grow", "publish_pages", "release"):
        inner = getattr(rt.cache, name)

        def spy(*a, _inner=inner, _name=name, **k):
            if _name == "release" and not a[0]:
                return _inner(*a, **k)                          # restore pins of a vanilla batch: none
            log.append(_name)
            return _inner(*a, **k)
        setattr(rt.cache, name, spy)
    doc = texts("abcdefgh", "ijklmno", gen=3, batch_size=2)
    doc["requests"][0]["logit_bias"] = {"257": 100}               # finishes at prefill (g = 1)
    doc["requests"][1]["logit_bias"] = NO_EOS                      # 3 tokens: 2 decode steps
    run(rt, doc)
    assert log == ["admit", "admit", "publish_pages", "publish_pages", "release",
                   "grow", "grow", "publish_pages", "release"]


def test_generation_ends(engine):
    rt = runtime(engine())
    free = run(rt, texts("abcdefg", gen=8, logit_bias=NO_EOS))["responses"][0]
    text = free["output_text"]
    assert free["finish_reason"] == "max-length" and len(free["output_ids"]) == 8 and len(text) == 8
    eos = run(rt, texts("abcdefg", gen=8, logit_bias={"257": 100}))["responses"][0]
    assert (eos["finish_reason"], eos["output_text"], eos["output_ids"]) == ("end-of-sequence", "", [257])
    doc = texts("abcdefg", gen=8, logit_bias=NO_EOS)
    doc["requests"][0]["stop"] = [text[4:6], text[2:4]]
    stop = run(rt, doc)["responses"][0]
    assert stop["finish_reason"] == "stop-words"
    assert stop["output_text"] == text[:2] and stop["output_ids"] == free["output_ids"][:4]


def test_legacy_system_prompt_capture_fails_its_batch_only(engine):
    doc = texts("abcdefgh", "ijklmnop")
    doc["requests"][1]["save_system_prompt_kv_cache"] = True
    rt = runtime(engine())
    res = run(rt, doc)
    assert [r["finish_reason"] for r in res["responses"]] == ["max-length", "error"]
    assert res["responses"][1]["output_text"] == (
        "Legacy system-prompt KV-cache capture cannot be combined with the context-cache manager.")
    assert res["failed_batches"] == 1 and counters(rt)["admitted_sequences"] == 1
    assert run(runtime(engine(), enable_context_reuse=False), doc)["failed_batches"] == 0


def test_forced_cold_when_a_cached_plan_cannot_be_acquired():
    """CR-CAP-7 is unreachable with one pool; the fallback itself is checked on the manager."""
    from gpu_backend.identity import SequenceIdentity
    import numpy as np
    cache = ContextCache(P=4, kind="vanilla", num_pages=4, rec_slots=0, pkv_slots=0, max_records=8, enabled=True)
    ident = SequenceIdentity(np.frombuffer(b"abcdefgh", np.uint8), [], 4, None)
    plan, pages, _ = cache.admit(ident, 8, bypass=False, media_aware=False, splits_media=None)
    cache.publish_pages(ident, pages, 2)
    cache.release(pages)
    inner = cache._acquire
    cache._acquire = lambda plan: None if plan.reuses_state else inner(plan)
    plan, pages, _ = cache.admit(SequenceIdentity(np.frombuffer(b"abcdefghij", np.uint8), [], 4, None), 10,
                                 bypass=False, media_aware=False, splits_media=None)
    assert (plan.kind, plan.matched, plan.forced_cold, plan.bypass, len(pages)) == (
        "no_reusable_prefix", 0, True, True, 3)
    c = cache.profile()
    assert (c["forced_cold_sequences"], c["lookup_bypass_sequences"], c["hit_sequences"]) == (1, 1, 0)


def test_invariant_checker_catches_a_leaked_reference(engine):
    from gpu_backend.prefix_cache import CacheInvariantError
    rt = runtime(engine())
    run(rt, texts("abcdefgh"))
    rt.cache.check_invariants()
    page = next(iter(rt.cache.records.values())).pages[0]
    rt.cache.pages.active[page] += 1                 # a reference nobody holds
    with pytest.raises(CacheInvariantError):
        rt.cache.check_invariants()


def test_keys_are_distinct_for_distinct_prefixes():
    """CR-ID-6: 256-bit digests over a tagged encoding; many distinct pages, no collision."""
    import numpy as np
    from gpu_backend.identity import SequenceIdentity
    keys = set()
    for i in range(5000):
        ids = np.asarray([i % 256, i // 256, 0, 1], np.int64)
        keys.add(SequenceIdentity(ids, [], 4, None).page_keys(1)[0])
    assert len(keys) == 5000
    a = SequenceIdentity(np.asarray([1, 2, 3, 4]), [], 4, "ab").page_keys(1)[0]
    b = SequenceIdentity(np.asarray([1, 2, 3, 4]), [], 4, "a").page_keys(1)[0]
    c = SequenceIdentity(np.asarray([1, 2, 3, 4]), [], 4, None).page_keys(1)[0]
    assert len({a, b, c}) == 3 and len(a) == 32
