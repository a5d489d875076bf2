"""Unit tests of reference/speculative.py (spec/context-reuse.md section 12, CR-SPEC).

Every expected value is derived by hand in the comment beside it, from the rule cited.
Pages are numbered by hand: the cache below holds base pages 0.. and draft pages 100..
"""
from collections import OrderedDict

import pytest

from reference.capacity import DRAFT, PAGES, ContextCache, Record
from reference.planning import FULL_INPUT_REWIND, NO_REUSABLE_PREFIX, STANDARD
from reference.publication import COMMITTED, EXISTING
from reference.speculative import (decode_end_pairs, greedy_file, paired_lookup, paired_pages, pairing_record,
                                   plan_paired, prefill_end_pairs, publish_pairs)

P = 4


class History:
    """A token history reduced to what planning and publication read: its page keys."""

    def __init__(self, keys):
        self._keys = keys
        self.truth = None

    def keys(self, count):
        return self._keys[:count]


class Seq:
    def __init__(self, keys, n, pages, draft_pages, length=1, last_accepted=None):
        self.history, self.n, self.generated_count = History(keys), n, length
        self.pages, self.draft_pages = pages, draft_pages
        self.published_pages, self.publications = 0, []
        self.generated, self.last_accepted = [120] * length, last_accepted
        self.request = type("Request", (), {"index": 0})()
        self.lookup_bypass, self.steps = False, None        # a paired sequence looked up; no trace


def cache_with(records):
    """A cache whose index maps key k<i> to base page i, holding `records` (key path, draft path).
    Reference counts are not set up: these tests read planning and record contents only."""
    cache = ContextCache(16, 0, 0, 1024, 16)
    for keys, draft in records:
        pages = [int(k[1:]) for k in keys]
        for k, p in zip(keys, pages):
            cache.index[k], cache.page_key[p] = p, k
        cache.records[(keys[-1], len(keys))] = Record((keys[-1], len(keys)), pages, len(keys) * P,
                                                       draft_pages=draft)
    return cache


def test_pairs_the_longest_prefix_of_one_records_draft_path():
    # A pairs 2 pages (draft 100, 101), B is base-only over 3 pages: the match m = 3 pairs k = 2 (CR-SPEC-1)
    cache = cache_with([(["k0", "k1"], [100, 101]), (["k0", "k1", "k2"], None)])
    record, k = pairing_record(cache, [0, 1, 2])
    assert (record.key, k) == (("k1", 2), 2)


def test_base_only_records_are_not_paired():
    cache = cache_with([(["k0", "k1"], None)])
    assert pairing_record(cache, [0, 1]) == (None, 0)
    plan = plan_paired(History(["k0", "k1", "k9"]), 10, P, cache)
    # k = 0: a cold plan, matched 0, every page private in both pools: ceil(10/4) = 3 (CR-SPEC-1, CR-SPEC-6)
    assert (plan.kind, plan.matched, plan.reused, plan.private, plan.draft_private, plan.replay) == \
        (NO_REUSABLE_PREFIX, 0, 0, 3, 3, False)


def test_the_most_recently_used_record_wins_a_tie():
    cache = cache_with([(["k0", "k1"], [100, 101]), (["k0", "k1"], [102, 103])])
    # two records cannot share a key; give the second its own endpoint over the same two pages
    cache.records = OrderedDict([(("k1", 2), cache.records[("k1", 2)])])
    cache.records[("k1", 2, "other")] = Record(("k1", 2, "other"), [0, 1], 8, draft_pages=[104, 105])
    record, k = pairing_record(cache, [0, 1])
    assert record.draft_pages == [104, 105] and k == 2


@pytest.mark.parametrize("keys, n, kind, matched, reused, kept", [
    (["k0", "k1", "x"], 10, STANDARD, 8, 4, [0]),            # k = 2 < n/P: keeps 1 pair, replays [e-h]
    (["k0", "k1"], 8, FULL_INPUT_REWIND, 8, 4, [0]),         # k = 2 = n/P: the replay is the rewind
    (["k0", "x"], 7, NO_REUSABLE_PREFIX, 4, 0, []),          # k = 1: nothing remains, still matched 4
])
def test_one_page_replay(keys, n, kind, matched, reused, kept):
    cache = cache_with([(["k0", "k1"], [100, 101])])
    plan = plan_paired(History(keys), n, P, cache)
    assert (plan.kind, plan.matched, plan.reused, plan.kept) == (kind, matched, reused, kept)
    # CR-SPEC-6: the kept draft pages are the record's; demand ceil(n/P) - kept in both pools
    assert plan.draft_kept == [100, 101][:len(kept)]
    assert plan.private == plan.draft_private == -(-n // P) - len(kept)
    assert plan.replay and plan.hit
    # CR-SPEC-1: the plan binds (protects, touches) the pairing record only when it keeps a pair;
    # k = 1 keeps none and binds none (Edge-LLM 0.10 reusePlan.cpp:241-244,
    # SpecPlanningExactInputRewindsOneFullPage's one-block plan)
    assert (plan.record.key if plan.record is not None else None) == (("k1", 2) if kept else None)


def test_a_one_page_pairing_is_still_found_by_the_lookup():
    # the lookup (0.10's lookupLongest) pairs k = 1 with the record; only the plan leaves it unbound
    cache = cache_with([(["k0", "k1"], [100, 101])])
    base, record, k = paired_lookup(History(["k0", "x"]), 7, P, cache)
    assert (base, record.key, k) == ([0], ("k1", 2), 1)
    assert plan_paired(History(["k0", "x"]), 7, P, cache).record is None


def test_pairing_stops_at_the_base_match():
    # the record's draft path covers 2 pages but only [a-d] is the sequence's: m = 1, so k = 1
    cache = cache_with([(["k0", "k1"], [100, 101])])
    plan = plan_paired(History(["k0", "zz"]), 9, P, cache)
    assert (plan.matched, plan.reused) == (4, 0)


@pytest.mark.parametrize("tokens, pages", [(9, 2), (8, 2), (7, 1), (4, 1), (3, 0), (0, 0)])
def test_pairs_are_the_positions_both_kv_caches_cover(tokens, pages):
    # CR-SPEC-4: floor(c / P) over the c positions whose base and draft KV are both materialized
    assert paired_pages(tokens, P) == pages


def test_prefill_end_publishes_every_complete_page_of_the_prompt():
    # CR-SPEC-4 with CR-PUB-1: the draft prefill runs after the first token is sampled, so its KV
    # covers all n prompt positions: n = 8 publishes floor(8/4) = 2 pairs (Edge-LLM 0.10
    # FirstVerificationPublishesPairAndNextRequestUsesFullPageReplay: n = 256 at P = 128 -> 2 + 2 pages)
    assert prefill_end_pairs(Seq(["k0", "k1"], 8, [0, 1], [100, 101]), P) == 2
    assert prefill_end_pairs(Seq(["k0"], 4, [0], [100]), P) == 1   # n = P: 1 record (PrefillOnlyCompletion...)


def test_publication_points():
    seq = Seq(["k0", "k1"], 7, [0, 1], [100, 101], length=3, last_accepted=1)
    assert prefill_end_pairs(seq, P) == 1                     # floor(7/4)
    seq.published_pages = 1
    assert decode_end_pairs(seq, P, True) == 2                # a = 1: n+g-1-a = 8: floor(8/4) = 2 > 1
    assert decode_end_pairs(seq, P, False) == 0               # prefill_state_only (CR-PUB-3)
    seq.last_accepted = 2
    assert decode_end_pairs(seq, P, True) == 0                # a = 2: floor(7/4) = 1, not more than published
    seq.generated_count, seq.last_accepted = 2, 1
    assert decode_end_pairs(seq, P, True) == 0                # floor(7/4) = 1, not more than published


def test_the_decode_end_lag_is_the_last_rounds_acceptance():
    # CR-SPEC-4: at completion both caches cover n + g - 1 - a positions, a = what the last
    # verification accepted (Edge-LLM 0.10 eagleDecoder.cpp adds each round's accepted count at the
    # start of the next round; contextCacheSpecCoordinatorTests DecodeEndPublishesOnlyTheCommon-
    # BaseDraftBoundary: n = 255, two rounds of 2 -> committed 259, common 257, 2 + 2 pages at P = 128)
    seq = Seq(["k0", "k1", "k2"], 255, [0, 1], [100, 101], length=5, last_accepted=2)
    seq.published_pages = 1                                   # floor(255/128) at prefill end
    assert decode_end_pairs(seq, 128, True) == 2              # floor((255 + 5 - 1 - 2) / 128) = 2
    # P = 4, n = 6, g = 4 (n + g - 1 = 9 base tokens): a = 1 -> floor(8/4) = 2; a = 2 -> floor(7/4) = 1
    seq = Seq(["k0", "k1"], 6, [0, 1], [100, 101], length=4, last_accepted=1)
    seq.published_pages = 1
    assert decode_end_pairs(seq, P, True) == 2
    seq.last_accepted = 2
    assert decode_end_pairs(seq, P, True) == 0


def test_an_unreported_acceptance_is_never_guessed():
    import reference
    seq = Seq(["k0", "k1"], 6, [0, 1], [100, 101], length=4)
    seq.published_pages = 1
    with pytest.raises(reference.Unreported, match="last_verification_accepted"):
        decode_end_pairs(seq, P, True)
    # no a in 1 .. g - 1 publishes more than prefill did (n + g - 2 = 7 < 8): predicted without it
    seq.generated_count = 3
    assert decode_end_pairs(seq, P, True) == 0


def test_publish_new_upgrade_existing():
    cache = cache_with([(["k0", "k1"], None)])
    for p in (0, 1):
        cache.pages.cache[p] = 1                              # the base-only record's references
    seq = Seq(["k0", "k1"], 9, [5, 6, 7], [110, 111, 112])
    for d in seq.draft_pages:
        cache.draft.pin(d)
    publication, paired = publish_pairs(cache, seq, 2, "prefill_end", P)
    # the endpoint exists base-only: upgraded with the sequence's two draft pages (CR-SPEC-4)
    assert (publication["status"], paired) == (COMMITTED, True)
    assert cache.records[("k1", 2)].draft_pages == [110, 111]
    assert cache.draft.cache == {110: 1, 111: 1}
    publication, paired = publish_pairs(cache, seq, 2, "prefill_end", P)
    assert (publication["status"], paired) == (EXISTING, False)
    publication, paired = publish_pairs(cache, seq, 1, "prefill_end", P)
    # a new 1-page endpoint: the canonical base page 0 and the sequence's own first draft page
    record = cache.records[("k0", 1)]
    assert (publication["status"], paired, record.pages, record.draft_pages) == (COMMITTED, True, [0], [110])
    assert cache.draft.cache[110] == 2 and list(record.resources()) == [(PAGES, 0), (DRAFT, 110)]


@pytest.mark.parametrize("top, greedy", [({}, False), ({"top_k": 1}, True), ({"temperature": 0}, True),
                                         ({"temperature": 0.7, "top_k": 50}, False)])
def test_greedy_files(top, greedy):
    # CR-SPEC-7; Edge-LLM's defaults are temperature 1, top_k 50
    assert greedy_file(top) is greedy


@pytest.mark.parametrize("commit", ["including_generated_tokens", "prefill_state_only"])
def test_a_prompt_of_whole_pages_is_reusable_after_one_generated_token(commit):
    """Edge-LLM 0.10's draft prefill runs after the first token is sampled, so an EAGLE request of
    256 tokens at P = 128 that generates one token leaves 2 pairs, and a 257-token continuation
    pairs k = 2 and reuses 128 (one page replayed, CR-SPEC-2). Reading the draft as one position
    behind the base published floor(255/128) = 1 pair and reused 0. Source: Edge-LLM 0.10
    contextCacheSpecCoordinatorTests.cpp FirstVerificationPublishesPairAndNextRequestUsesFullPageReplay
    (2 base + 2 draft pages after n = 256; the continuation's prefill starts at 128)."""
    import reference
    engine = reference.engine_from_build_args(dict(maxInputLen=300, maxKVCacheCapacity=512, maxKVPoolPages=0,
                                                   tokensPerPage=128, specDecode="eagle"))
    flags = reference.RuntimeFlags.from_case_runtime({"enableContextReuse": True})
    prompt = "".join(chr(97 + i % 26) for i in range(256))
    doc = {"apply_chat_template": False, "top_k": 1, "max_generate_length": 1,
           "context_cache_commit_policy": commit,
           "requests": [{"messages": [{"role": "user", "content": c}]} for c in (prompt, prompt + "!")]}
    sim = reference.Simulator(engine, flags)
    first, second = sim.run(doc, ".")
    assert first["context_cache"]["publications"] == [
        {"point": "prefill_end", "tokens": 256, "pages": 2, "status": "committed"}]
    assert (second["context_cache"]["plan"], second["context_cache"]["matched_tokens"],
            second["context_cache"]["reused_tokens"]) == (STANDARD, 256, 128)


@pytest.mark.parametrize("accepted, published, reused", [(1, 2, 4), (2, None, 0), (3, None, 0)])
def test_the_simulator_publishes_at_the_last_rounds_common_boundary(accepted, published, reused):
    """'abcdef' (n = 6) generates 'wxy' + <|eos|> (g = 4, 9 tokens of base KV): at completion its
    draft covers 9 - a positions. a = 1: floor(8/4) = 2 pairs at decode end, and 'abcdefwxq' pairs
    k = 2 and reuses 4; a = 2: floor(7/4) = 1, no more than prefill published, so the follow-up
    pairs k = 1 and reuses 0. A lag of one would have published 2 pairs for every a."""
    import reference
    from reference.requests import parse_generated
    engine = reference.engine_from_build_args(dict(maxInputLen=12, maxKVCacheCapacity=16, maxKVPoolPages=0,
                                                   tokensPerPage=P, specDecode="eagle"))
    flags = reference.RuntimeFlags.from_case_runtime({"enableContextReuse": True})
    doc = {"apply_chat_template": False, "top_k": 1, "max_generate_length": 4,
           "requests": [{"messages": [{"role": "user", "content": c}]} for c in ("abcdef", "abcdefwxq")]}
    sim = reference.Simulator(engine, flags)
    first, second = sim.run(doc, ".", [parse_generated("wxy<|eos|>"), parse_generated("<|eos|>")],
                            last_accepted=[accepted, None])
    points = [(p["point"], p["pages"]) for p in first["context_cache"]["publications"]]
    assert points == [("prefill_end", 1)] + ([("decode_end", published)] if published else [])
    assert second["context_cache"]["reused_tokens"] == reused
    with pytest.raises(reference.Unreported, match="request 0"):
        reference.Simulator(engine, flags).run(doc, ".", [parse_generated("wxy<|eos|>"), parse_generated("<|eos|>")])
    with pytest.raises(reference.InputError, match=r"\$\.last_accepted\[0\]"):
        reference.Simulator(engine, flags).run(doc, ".", [parse_generated("wxy<|eos|>"), parse_generated("<|eos|>")],
                                               last_accepted=[4, None])      # more than g - 1 = 3
