"""The parity suite (parity/*.json): the runtimes' own unit-test assertions through the oracle.

Every expected value in the suite is typed from a runtime's test; these tests check that the
oracle agrees with them (every disagreement documented), that the suite covers what it claims,
that README's table is the one the suite yields, and that the runner does catch a disagreement.
"""
import json
import shutil
from pathlib import Path

import pytest

from conformance import parity
from conformance.cli import main
from conformance.commands import parity as command

SUITE = parity.SUITE_DIR
RUNTIMES = {"Edge-LLM 0.10", "vLLM", "SGLang", "llama.cpp server", "TensorRT-LLM"}


@pytest.fixture(scope="module")
def outcomes():
    return parity.evaluate(parity.load(SUITE))


def test_every_disagreement_is_documented(outcomes):
    bad = parity.unexplained(outcomes)
    assert not bad, "\n".join(f"{o.source}: {o.what}: expected {o.expected!r}, observed {o.observed!r}" for o in bad)


def test_the_suite_covers_five_runtimes_and_agrees(outcomes):
    tallies = parity.tallies(outcomes)
    assert set(tallies) == RUNTIMES
    assert sum(t.translated for t in tallies.values()) >= 140
    expressible = sum(t.expressible for t in tallies.values())
    agree = sum(t.agree for t in tallies.values())
    assert expressible >= 140 and agree >= 0.95 * expressible, (agree, expressible)


def test_every_entry_names_its_source():
    for doc in parity.load(SUITE):
        assert len(doc["commit"]) == 40
        ids = [e["id"] for e in doc["entries"]]
        assert len(ids) == len(set(ids)), f"{doc['_path']}: duplicate entry ids"
        for e in doc["entries"]:
            assert e["file"] and e["test"], e["id"]


def test_the_readme_table_is_the_suites(outcomes):
    assert command.readme_table() == command.table(outcomes), (
        "README.md's parity table is out of date: run `kvconform parity --update-readme`")


def _suite_with(tmp_path, edit):
    shutil.copy(SUITE / "edge-llm-0.10.json", tmp_path / "edge-llm-0.10.json")
    path = tmp_path / "edge-llm-0.10.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    return tmp_path


def test_a_wrong_expectation_is_an_unexplained_disagreement(tmp_path, capsys):
    def edit(doc):
        entry = next(e for e in doc["entries"] if e["id"] == "coordinator/cold-prefix-then-longest-full-block")
        entry["assertions"][1]["expected"] = 256
    assert main(["parity", "--suite", str(_suite_with(tmp_path, edit))]) == 1
    out = capsys.readouterr().out
    assert "UNEXPLAINED Edge-LLM 0.10" in out and "PublishesColdPrefixAndReusesLongestFullBlock" in out
    assert "expected 256, observed 128" in out and "PARITY FAILED" in out


def test_a_deliberate_difference_must_name_the_test(tmp_path, capsys):
    def edit(doc):
        entry = next(e for e in doc["entries"] if e["id"] == "coordinator/cold-prefix-then-longest-full-block")
        entry["assertions"][1].update(expected=256, deliberate="spec/profiles.md")   # profiles.md does not name it
    assert main(["parity", "--suite", str(_suite_with(tmp_path, edit))]) == 1


def test_a_malformed_suite_is_one_line_and_exit_2(tmp_path, capsys):
    def edit(doc):
        doc["entries"][0]["assertions"][0]["op"] = "~"
    assert main(["parity", "--suite", str(_suite_with(tmp_path, edit))]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "edge-llm-0.10.json: $.entries[0].assertions[0].op" in err


def test_the_suite_catches_the_old_eagle_and_hybrid_readings(monkeypatch):
    """The suite is not vacuous: the spec 1.1.0 readings of section 12 and CR-HYB-4 disagree
    with Edge-LLM 0.10's own tests again when put back."""
    import reference.batching as batching
    monkeypatch.setattr(batching, "prefill_end_pairs", lambda seq, P, steps=None: max(seq.n - 1, 0) // P)
    bad = parity.unexplained(parity.evaluate([d for d in parity.load(SUITE) if d["kind"] == "engine"]))
    tests = {o.test for o in bad}
    assert {"FirstVerificationPublishesPairAndNextRequestUsesFullPageReplay",
            "PrefillOnlyCompletionSynchronizesDraftBeforePublishingAndCompaction"} <= tests


# --- requests that hold blocks at once (vLLM's free queue, TensorRT-LLM's BlockManagerReuseTest) ---

HELD_AT_ONCE = {
    "vLLM": {"test_prefill", "test_prefill_plp", "test_evict", "test_basic_prefix_caching_disabled",
             "test_prefill_not_enough_free_blocks_with_computed_blocks", "test_reset_prefix_cache"},
    "TensorRT-LLM": {"BlockManagerReuseTest", "BlockManagerReuseWithLoraTaskIdTest"},
}
POOL_OBSERVABLES = {"free_queue", "free_blocks", "blocks", "hit_blocks", "new_blocks", "admitted", "reset"}
INTERNAL = ("hash values", "linked-list links")


def _observed(doc, entry_test):
    entry = next(e for e in doc["entries"] if e["test"] == entry_test)
    return {a["observe"]["value"] for a in entry["assertions"] if "observe" in a}


def held_at_once_problems(outcomes) -> list[str]:
    """What keeps a test that holds two requests at once from being judged step for step: an
    assertion not expressible for any reason but a value the spec leaves to the pool (hash bits,
    queue links), one that does not agree, no pool observable asserted at all,
    or a free-queue test without a free-queue order."""
    docs = {d["runtime"]: d for d in parity.load(SUITE)}
    problems = []
    for runtime, tests in HELD_AT_ONCE.items():
        for test in sorted(tests):
            mine = [o for o in outcomes if o.runtime == runtime and o.test == test]
            problems += [f"{test}: {o.what}: {o.reason}" for o in mine
                         if o.status == parity.NOT_EXPRESSIBLE and not any(why in o.reason for why in INTERNAL)]
            problems += [f"{test}: {o.what}: observed {o.observed!r}" for o in mine if o.status == parity.DISAGREE]
            if not mine or not _observed(docs[runtime], test) & POOL_OBSERVABLES:
                problems.append(f"{test}: no block-pool observable")
    problems += [f"{t}: no free-queue order" for t in ("test_prefill", "test_prefill_plp", "test_evict")
                 if "free_queue" not in _observed(docs["vLLM"], t)]
    return problems


def test_tests_that_hold_requests_at_once_are_expressed(outcomes):
    assert not held_at_once_problems(outcomes)


def test_the_suite_catches_the_old_free_queue_reading(monkeypatch):
    """Freed blocks all appended to the tail (before PEER-VLLM-5 put those without a key at the
    head) disagree with vLLM's own free-queue orders again."""
    import reference.peer_vllm as peer_vllm

    def release_to_tail(self, run):
        for block in reversed(run.blocks):
            self.refs[block] -= 1
            if self.refs[block] == 0 and self.K is not None:
                self.free.append(block)
    monkeypatch.setattr(peer_vllm.VllmBlockPool, "release", release_to_tail)
    bad = parity.unexplained(parity.evaluate([d for d in parity.load(SUITE) if d["runtime"] == "vLLM"]))
    assert {"test_prefill", "test_prefill_plp", "test_evict"} <= {o.test for o in bad}


def test_the_suite_catches_admission_without_room(monkeypatch):
    """A pool that admits a request its free queue cannot hold (PEER-VLLM-9 ignored) no longer runs
    the two tests whose last request must wait."""
    import reference.peer_vllm as peer_vllm
    monkeypatch.setattr(peer_vllm.VllmBlockPool, "fits", lambda self, n, hit_blocks: True)
    problems = held_at_once_problems(parity.evaluate(parity.load(SUITE)))
    assert any(p.startswith("test_prefill_not_enough_free_blocks_with_computed_blocks") for p in problems)
    assert any(p.startswith("test_basic_prefix_caching_disabled") for p in problems)


def test_the_suite_catches_the_older_context_readings(monkeypatch):
    """llama.cpp's own context tests (read at b11434) fail a server that generates past its slot's
    context without shifting, and one that serves a prompt as long as the slot (PEER-LCPP-8)."""
    import reference.peer_llama as peer_llama
    llama = [d for d in parity.load(SUITE) if d["runtime"] == "llama.cpp server"]
    monkeypatch.setattr(peer_llama, "generation_cap", lambda n, n_ctx, shift: None)
    assert {"test_ctx_shift_disabled_short_prompt", "test_ctx_shift_disabled_stream"} <= {
        o.test for o in parity.unexplained(parity.evaluate(llama))}
    monkeypatch.undo()
    monkeypatch.setattr(peer_llama.LlamaSlots, "refuses", lambda self, request: None)
    assert {"test_ctx_shift_disabled_long_prompt", "test_nocache_long_input_prompt"} <= {
        o.test for o in parity.unexplained(parity.evaluate(llama))}


@pytest.mark.parametrize("paragraph, tests", [
    ("**EAGLE across vLLM versions", {
        "test_eagle_identical_prompt_hits_last_safe_block", "test_eagle_with_partial_blocks",
        "test_eagle_successor_token_controls_last_block_hit",
        "test_eagle_blocks_are_published_only_after_draft_materialization"}),
    ("**EAGLE's drafter groups", {
        "test_eagle_swa_boundary_caches_post_boundary_block", "test_eagle_grouped_swa_siblings_use_same_cache_mask",
        "test_hybrid_local_kv_retention_mtp_reuses_latest_boundary"}),
])
def test_a_deliberate_difference_needs_its_paragraph(tmp_path, monkeypatch, paragraph, tests):
    """Each vLLM profile difference (the EAGLE release, EAGLE's drafter groups) is explained by
    the paragraph of spec/peer-profiles.md that names each test with its file; without that
    paragraph exactly those assertions are unexplained."""
    spec = tmp_path / "spec"
    spec.mkdir()
    text = (parity.ROOT / "spec" / "peer-profiles.md").read_text(encoding="utf-8")
    start = text.index(paragraph)
    end = text.index("\n\n", start)
    (spec / "peer-profiles.md").write_text(text[:start] + text[end:], encoding="utf-8")
    monkeypatch.setattr(parity, "ROOT", tmp_path)
    bad = parity.unexplained(parity.evaluate([d for d in parity.load(SUITE) if d["runtime"] == "vLLM"]))
    assert {o.test for o in bad} == tests


def test_the_suite_catches_a_window_that_keeps_every_block(monkeypatch):
    """vLLM's retention tests read which blocks a sliding-window group keeps (PEER-VLLM-15): a
    pool that keeps every block whatever the retention interval fails them."""
    from reference.peer_vllm_groups import GroupedPool
    monkeypatch.setattr(GroupedPool, "_mask", lambda self, g, start, end, boundaries: None)
    vllm = [d for d in parity.load(SUITE) if d["runtime"] == "vLLM"]
    bad = {o.test for o in parity.unexplained(parity.evaluate(vllm))}
    assert {"test_pure_swa_retention_latest_only", "test_hybrid_local_kv_retention_interval_aligns_in_manager",
            "test_hybrid_cache_blocks_swa_tail_window_only"} <= bad


def test_the_suite_catches_a_mamba_prefill_not_split(monkeypatch):
    """test_hybrid_cache_mamba_align_shared_prefix_detection reads where the scheduler ends a Mamba
    prefill (PEER-VLLM-14: at the shared-prefix junction): a scheduler that never splits fails it."""
    from reference.peer_vllm_groups import GroupedPool
    monkeypatch.setattr(GroupedPool, "_chunk_end", lambda self, run, start: run.n)
    vllm = [d for d in parity.load(SUITE) if d["runtime"] == "vLLM"]
    assert "test_hybrid_cache_mamba_align_shared_prefix_detection" in {
        o.test for o in parity.unexplained(parity.evaluate(vllm))}


def test_the_suite_catches_a_window_that_needs_a_block_too_many(monkeypatch):
    """vLLM's partial-hit checks take keys out of the pool's hash map by hand (without_keys): with
    the block before the window's tail gone the hit stands (PEER-VLLM-13: ceil((W - 1) / B)
    blocks), so a window that needed one block more fails them."""
    import reference.peer_vllm_groups as groups
    need = groups.swa_need
    monkeypatch.setattr(groups, "swa_need", lambda group, eagle: need(group, eagle) + 1)
    vllm = [d for d in parity.load(SUITE) if d["runtime"] == "vLLM"]
    bad = {(o.test, o.line) for o in parity.unexplained(parity.evaluate(vllm))}
    assert {("test_prefill_hybrid_model", 435), ("test_prefill_hybrid_model_eagle", 693)} <= bad


def test_the_suite_catches_a_queue_that_prepends_in_reverse(monkeypatch):
    """vLLM's free-queue tests drive the oracle's queue alone: prepended blocks that joined the
    head in reverse order (PEER-VLLM-5 puts the first of them at the head) fail them."""
    from reference.peer_vllm_keys import FreeQueue
    prepend = FreeQueue.prepend
    monkeypatch.setattr(FreeQueue, "prepend", lambda self, blocks: prepend(self, list(reversed(blocks))))
    vllm = [d for d in parity.load(SUITE) if d["runtime"] == "vLLM"]
    assert "test_free_kv_cache_block_queue_prepend_n" in {o.test for o in parity.unexplained(parity.evaluate(vllm))}


def test_a_paragraph_documents_a_test_only_with_its_file(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("`test_prefill` differs (tests/a.py:3).\n\n`test_evict` differs.\n\nsee tests/b.py\n")
    assert parity.documents(doc, "test_prefill", "tests/a.py")
    assert not parity.documents(doc, "test_evict", "tests/b.py")          # named apart from its file
    assert not parity.documents(doc, "test_pre", "tests/a.py")            # a whole name, not a prefix


def _peer_entry(scenario, observe, expected=0):
    return {"format": "kvconform-parity-v1", "runtime": "X", "repository": "a/b", "commit": "0" * 40,
            "kind": "peer", "profile": scenario.pop("profile"), "entries": [
                {"id": "e", "file": "f", "test": "t", "line": 1, "scenario": scenario,
                 "assertions": [{"line": 1, "what": "w", "observe": observe, "expected": expected}]}]}


@pytest.mark.parametrize("scenario, why", [
    ({"profile": "sglang-radix", "steps": [{"prompt": [1, 2], "hold": "a"}]}, "one request at a time"),
    ({"profile": "vllm-apc", "steps": [{"release": "a"}]}, "no held request named 'a'"),
    ({"profile": "vllm-apc", "settings": {"cache_blocks": 4}, "steps": [
        {"prompt": [1, 2], "hold": "a"}, {"release": "a", "tokens": [1]}]}, "only TensorRT-LLM"),
])
def test_a_scenario_the_pool_cannot_run_is_not_expressible(scenario, why):
    [outcome] = parity.evaluate_file(_peer_entry(scenario, {"step": 0, "value": "cached"}))
    assert outcome.status == parity.NOT_EXPRESSIBLE and why in outcome.reason


def test_an_unbounded_pool_has_no_free_queue():
    scenario = {"profile": "vllm-apc", "steps": [{"prompt": [1, 2, 3]}]}
    [outcome] = parity.evaluate_file(_peer_entry(scenario, {"step": 0, "value": "free_queue"}, []))
    assert outcome.status == parity.NOT_EXPRESSIBLE and "has no free_queue" in outcome.reason


def trt_disagreements() -> set:
    docs = [d for d in parity.load(SUITE) if d["runtime"] == "TensorRT-LLM"]
    return {o.test for o in parity.unexplained(parity.evaluate(docs))}


@pytest.mark.parametrize("reading, tests", [
    ("priorities ignored (every block at the default)", {"BlockManagerBlockPriorityTest",
                                                         "KVCacheManagerDecodeBlockPriorityTest"}),
    ("durations never run out", {"KVCacheManagerTimedEvictionTest"}),
    ("images left out of the key", {"BlockManagerReuseWithMultimodalHashTest"}),
    ("per-token extra ids left out of the key", {"BlockManagerReuseWithExtraIdTest",
                                                 "BlockManagerReuseWithExtraIdAndLoraTaskIdTest"}),
])
def test_the_suite_catches_each_trtllm_rule_left_out(reading, tests, monkeypatch):
    """PEER-TRT-8, -9 and -10 each decide assertions of TensorRT-LLM's own tests: the oracle with
    one of them left out disagrees with those tests again."""
    import reference.peer_trtllm as peer_trtllm
    import reference.peer_trtllm_keys as keys
    if reading.startswith("priorities"):
        take, claim = peer_trtllm.WindowPool.take, peer_trtllm.WindowPool.claim
        monkeypatch.setattr(peer_trtllm.WindowPool, "take", lambda self, run, p, d: take(self, run, 35, d))
        monkeypatch.setattr(peer_trtllm.WindowPool, "claim", lambda self, b, p=None, d=(None,): claim(self, b, None, d))
    elif reading.startswith("durations"):
        monkeypatch.setattr(peer_trtllm.WindowPool, "refresh", lambda self: None)
    elif reading.startswith("images"):
        monkeypatch.setattr(keys, "mm_keys", lambda request, start, end: ())
    else:
        monkeypatch.setattr(keys, "unique_tokens", lambda request, ids: list(ids))
    assert tests <= trt_disagreements(), reading


# --- Edge-LLM's context cache driven call by call (cache and identity scenarios) ---

def _edge_llm():
    return [d for d in parity.load(SUITE) if d["runtime"] == "Edge-LLM 0.10"]


def test_the_cache_scenarios_judge_the_managers_tests(outcomes):
    """The tests that drive Edge-LLM's manager, planner, pools and index directly are judged, not
    set aside: each has expressible assertions, and what stays not expressible says why."""
    mine = [o for o in outcomes if o.runtime == "Edge-LLM 0.10"]
    for test in {"AcquirePinsHitsBeforeEvictionAndAllocatesPrivatePages", "BlockHitDoesNotTouchOwningRecordRecency",
                 "ActiveReferencePreventsReclaim", "PlanningDoesNotChangePoolRefsOrRecordRecency",
                 "ResourceBecomesFreeOnlyAfterBothReferencesReachZero", "ParentHashChangesEveryDescendant",
                 "DynamicGrowthAtomicallyAddsRequestedPages", "EraseRemovesExactKeyAndLruEntry"}:
        assert any(o.test == test and o.status == parity.AGREE for o in mine), test
    vague = [o for o in mine if o.status == parity.NOT_EXPRESSIBLE and (o.reason == parity.SEE_ENTRY or
                                                                       "outside any request" in o.reason)]
    assert not vague, [f"{o.test}:{o.line}: {o.reason}" for o in vague]


def test_the_suite_catches_a_touch_that_does_not_move_the_record(monkeypatch):
    """A touch that leaves the record where it is (an existing publication or an explicit touch
    not moving it to most-recently-used, CR-CAP-5, CR-PUB-4) disagrees with the LRU orders of
    Edge-LLM's record-store and manager tests."""
    import reference.capacity as capacity
    monkeypatch.setattr(capacity.ContextCache, "touch", lambda self, record: None)
    bad = {o.test for o in parity.unexplained(parity.evaluate(_edge_llm()))}
    assert {"InsertAndExplicitTouchMoveOnlyThatRecordToMru", "ExactDuplicateReturnsExistingRecord",
            "PlanningDoesNotChangePoolRefsOrRecordRecency"} <= bad


def test_the_suite_catches_a_planner_that_walks_from_the_most_recent(monkeypatch):
    """An eviction planner that walks the records from most to least recently used (CR-CAP-4
    read backwards) disagrees with the victims of Edge-LLM's eviction-planner tests."""
    import reference.capacity as capacity
    plan_eviction = capacity.ContextCache.plan_eviction

    def backwards(self, demand, protected=None):
        self.records = capacity.OrderedDict(reversed(self.records.items()))
        try:
            return plan_eviction(self, demand, protected)
        finally:
            self.records = capacity.OrderedDict(reversed(self.records.items()))
    monkeypatch.setattr(capacity.ContextCache, "plan_eviction", backwards)
    bad = {o.test for o in parity.unexplained(parity.evaluate(_edge_llm()))}
    assert {"ActiveReferencePreventsReclaim", "DemandAcrossTypesMustBeSatisfiedTogether"} <= bad


def test_the_suite_catches_a_one_page_pairing_that_binds_its_record(monkeypatch):
    """The spec 2.0.0 oracle bound the pairing record of an EAGLE hit that pairs one page and
    keeps nothing (CR-SPEC-1); Edge-LLM 0.10 binds none (reusePlan.cpp:241-244). Put back, that
    reading disagrees with SpecPlanningExactInputRewindsOneFullPage's one-block plan again,
    while the draft-path lookups (lookupLongest) still agree."""
    from conformance.judge import cache_oracle
    plan_paired = cache_oracle.plan_paired

    def binding(history, n, page_size, cache, steps=None):
        plan = plan_paired(history, n, page_size, cache, steps)
        if plan.replay and plan.record is None:
            plan.record = cache_oracle.paired_lookup(history, n, page_size, cache)[1]
        return plan
    monkeypatch.setattr(cache_oracle, "plan_paired", binding)
    bad = parity.unexplained(parity.evaluate(_edge_llm()))
    assert [(o.test, o.line) for o in bad] == [("SpecPlanningExactInputRewindsOneFullPage", 421)]


def test_physical_ids_are_not_observed(monkeypatch):
    """Resources are named by the lease that took them: a pool that hands out ids in another
    order changes no outcome of the cache scenarios (Appendix A)."""
    import reference.capacity as capacity
    allocate_all = capacity.Pool.allocate_all

    def backwards(self, count):
        taken = allocate_all(self, count)
        return list(reversed(taken))
    monkeypatch.setattr(capacity.Pool, "allocate_all", backwards)
    after = parity.evaluate(_edge_llm())
    monkeypatch.undo()
    before = parity.evaluate(_edge_llm())
    assert [(o.entry, o.line, o.status, o.observed) for o in after] == \
           [(o.entry, o.line, o.status, o.observed) for o in before]


def _cache_entry(steps, observe, expected=None):
    return {"format": "kvconform-parity-v1", "runtime": "X", "repository": "a/b", "commit": "0" * 40,
            "kind": "engine", "profile": "edge-llm-0.10", "entries": [
                {"id": "e", "file": "f", "test": "t", "line": 1,
                 "scenario": {"cache": {"tokens_per_page": 4, "pools": {"base_kv_pages": 2}}, "steps": steps},
                 "assertions": [{"line": 1, "what": "w", "observe": observe, "expected": expected}]}]}


@pytest.mark.parametrize("steps, why", [
    ([{"release": "nobody"}], "no lease named 'nobody'"),
    ([{"acquire": "a", "lookup": ["A"], "tokens": 4}, {"publish": "a", "hashes": ["B"], "tokens": 4}],
     "publishes its own token history"),
    ([{"acquire": "a", "tokens": 0}], "never reaches planning"),
    ([{"acquire": "a", "tokens": 4}, {"release": "a"}, {"acquire": "a", "tokens": 4}], "is taken"),
])
def test_a_cache_scenario_the_oracle_cannot_run_is_not_expressible(steps, why):
    [outcome] = parity.evaluate_file(_cache_entry(steps, {"after": 0, "state": "lru"}, []))
    assert outcome.status == parity.NOT_EXPRESSIBLE and why in outcome.reason


@pytest.mark.parametrize("fault, tests", [
    ("one root for every adapter", {"OpaqueIdentityHashBindsExactBytes", "ParentHashChangesEveryDescendant",
                                    "AdapterGenerationChangesHash"}),
    ("an exact digest without its partial tail", {"ExactPrefixDigestIncludesPartialTail"}),
])
def test_the_suite_catches_a_broken_identity(monkeypatch, fault, tests):
    """Identity scenarios can fail: an adapter root that ignores the adapter (CR-ID-3 broken), or
    an exact digest that stops at the last complete page (CR-HYB-5 broken), disagrees with
    Edge-LLM's block-hash tests."""
    from conformance.judge import cache_oracle
    if fault == "one root for every adapter":
        monkeypatch.setattr(cache_oracle, "adapter_root", lambda name: b"root")
    else:
        monkeypatch.setattr(cache_oracle.TokenHistory, "exact_digest",
                            lambda self, length: self.key(length // self.P - 1) if length >= self.P else self.root)
    bad = {o.test for o in parity.unexplained(parity.evaluate(_edge_llm()))}
    assert tests <= bad, (fault, bad)


@pytest.mark.parametrize("fault, what", [
    ("a recurrent slot without its convolution state", "recurrentBytesPerSlot == 216"),
    ("a partial-KV slot without its V half", "partialKvBytesPerSlot == 8192"),
])
def test_the_suite_catches_a_broken_slot_size(monkeypatch, fault, what):
    """Engine scenarios with an engine description can fail: slot sizes that drop a term of
    CR-HYB-1 disagree with hybridSnapshotStorageTests.cpp's ReportsExactBytesPerSlot."""
    from conformance.judge import oracle
    from reference import hybrid
    slot_sizes = oracle.slot_sizes

    def broken(engine):
        s_r, s_p = slot_sizes(engine)
        if fault.startswith("a partial-KV"):
            return s_r, s_p // 2
        r = engine.recurrent
        conv = r["conv_dim"] * r["conv_kernel"] * hybrid.STATE_BYTES[r["state_dtype"]]
        return s_r - engine.recurrent_layers * conv, s_p
    monkeypatch.setattr(oracle, "slot_sizes", broken)
    bad = [o for o in parity.unexplained(parity.evaluate(_edge_llm())) if o.test == "ReportsExactBytesPerSlot"]
    assert [o.what for o in bad] == [what], fault


def test_the_suite_catches_a_hit_that_takes_no_reference(monkeypatch):
    """vLLM's tests read each block's reference count (`ref_cnt`: the running requests holding
    it): a pool that counts a hit block once however many requests hold it fails them."""
    import reference.peer_vllm as peer_vllm
    admit = peer_vllm.VllmBlockPool.admit

    def held_once(self, request, sampled=()):
        run = admit(self, request, sampled)
        for block in (run.blocks[:run.hits] if run is not None else ()):
            self.refs[block] = 1
        return run
    monkeypatch.setattr(peer_vllm.VllmBlockPool, "admit", held_once)
    vllm = [d for d in parity.load(SUITE) if d["runtime"] == "vLLM"]
    bad = {(o.test, o.line) for o in parity.unexplained(parity.evaluate(vllm))}
    assert {("test_prefill", 295), ("test_prefill_plp", 1230)} <= bad


def test_the_suite_catches_an_eviction_without_its_event(monkeypatch):
    """test_kv_cache_events reads the KV events the pool queues: a pool whose evictions queue no
    BlockRemoved fails it."""
    import reference.peer_vllm as peer_vllm
    take = peer_vllm.VllmBlockPool._take

    def silent(self, blocks, count):
        queued = len(self.events) if self.events is not None else 0
        take(self, blocks, count)
        if self.events is not None:
            del self.events[queued:]
    monkeypatch.setattr(peer_vllm.VllmBlockPool, "_take", silent)
    vllm = [d for d in parity.load(SUITE) if d["runtime"] == "vLLM"]
    bad = {(o.test, o.line) for o in parity.unexplained(parity.evaluate(vllm))}
    assert {("test_kv_cache_events", 2105), ("test_kv_cache_events", 2107)} <= bad


def test_the_suite_catches_a_tree_size_that_forgets_inner_nodes(monkeypatch):
    """SGLang's tests read the tree's size (`total_size`): a tree that counted only its leaves'
    tokens, losing a node split off above them, fails them."""
    import reference.peer_sglang as peer_sglang
    leaves = property(lambda self: sum(len(n.key) for n in self._nodes() if not n.children))
    monkeypatch.setattr(peer_sglang.RadixCache, "tree_tokens", leaves)
    sglang = [d for d in parity.load(SUITE) if d["runtime"] == "SGLang"]
    bad = {(o.test, o.line) for o in parity.unexplained(parity.evaluate(sglang))}
    assert ("test_advanced_prefix_match_with_node_splits", 542) in bad


def test_the_suite_catches_image_offsets_from_the_prompt_start(monkeypatch):
    """vLLM's tests read the extra keys each block hashes (PEER-VLLM-2: an image's offset from the
    block's first token): offsets counted from the prompt's start fail them."""
    from conformance.judge import peer_oracle
    extra = peer_oracle.vllm_extra_keys

    def from_prompt_start(request, block, block_size, end=None):
        return tuple(("mm", k[1], k[2] + block * block_size) if k[0] == "mm" else k
                     for k in extra(request, block, block_size, end))
    monkeypatch.setattr(peer_oracle, "vllm_extra_keys", from_prompt_start)
    vllm = [d for d in parity.load(SUITE) if d["runtime"] == "vLLM"]
    bad = {(o.test, o.line) for o in parity.unexplained(parity.evaluate(vllm))}
    assert {("test_mm_prefix_caching", 1733), ("test_generate_block_hash_extra_keys", 830)} <= bad
