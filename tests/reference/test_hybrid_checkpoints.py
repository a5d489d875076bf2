"""Hybrid checkpoints as Edge-LLM 0.10's own coordinator tests see them (CR-HYB-4, CR-HYB-6,
CR-MET-11), at P = 128 like the upstream tests.

Sources: Stars1233/TensorRT-Edge-LLM @ bb29145, unittests/contextCache/
contextCacheHybridCoordinatorTests.cpp. Each expected number is the upstream test's.
"""
import reference

P = 128
PROMPT = "".join(chr(97 + i % 26) for i in range(P + 1))       # n = 129 = P + 1, as upstream


def simulate(requests, *, gen=1, generated=None, slots=4, commit="including_generated_tokens"):
    engine = reference.engine_from_build_args(dict(model="hybrid", maxInputLen=400, maxKVCacheCapacity=512,
                                                   maxKVPoolPages=0, tokensPerPage=P, maxBatchSize=1))
    s_r, s_p = reference.hybrid.slot_sizes(engine)
    flags = reference.RuntimeFlags.from_case_runtime({
        "enableContextReuse": True, "contextCacheRecurrentSnapshotPoolBytes": slots * s_r,
        "contextCachePartialKVSnapshotPoolBytes": slots * s_p})
    doc = {"apply_chat_template": False, "top_k": 1, "max_generate_length": gen,
           "context_cache_commit_policy": commit,
           "requests": [{"messages": [{"role": "user", "content": c}]} for c in requests]}
    sim = reference.Simulator(engine, flags)
    responses = sim.run(doc, ".", generated)
    sim.check_invariants()
    return responses, sim.profile()["context_cache"]


def test_a_decode_end_checkpoint_counts_one_capture_synchronization():
    # DecodeEndCheckpointUsesOneCaptureSyncAndBecomesReusable: n = 129 checkpoints at prefill end
    # (riding the prefill's own synchronization) and at decode end after one decode step; the
    # counter reads 1, and a continuation of the history restores at 130.
    x, y = ord("X"), ord("Y")
    responses, cc = simulate([PROMPT], gen=2, generated=[[x, y]])
    assert cc["hybrid"]["capture_synchronizations"] == 1
    assert [p["tokens"] for p in responses[0]["context_cache"]["publications"]] == [129, 130]
    responses, cc = simulate([PROMPT, PROMPT + "Xz"], gen=2, generated=[[x, y], [x, y]])
    assert (responses[1]["context_cache"]["matched_tokens"], responses[1]["context_cache"]["reused_tokens"]) == \
        (130, 130)


def test_prefill_end_captures_count_no_capture_synchronization():
    # PrefillCheckpointRestoresRecurrentAndPartialKvAtomically runs prefill-end captures only
    _, cc = simulate([PROMPT, PROMPT + "z"])
    assert cc["hybrid"]["capture_synchronizations"] == 0
    assert cc["hybrid"]["restores"] == 1


def test_snapshot_pressure_skips_the_capture_and_keeps_the_restored_record():
    # SnapshotPressureSkipsCaptureAndPreservesReusableRecord: one slot in each snapshot pool; the
    # consumer (129 + 1 tokens) restores the producer's checkpoint at 129, and its own capture is
    # reserved while that record's slots are still pinned: a pressure skip, nothing evicted.
    responses, cc = simulate([PROMPT, PROMPT + "z"], slots=1)
    assert responses[1]["context_cache"]["reused_tokens"] == 129
    assert cc["hybrid"]["snapshot_pressure_skips"] == 1
    assert cc["publications"]["attempts"] == 1
    assert cc["records"]["current"] == 1
    assert cc["resource_pools"]["recurrent_snapshots"] == {"free": 0, "capacity": 1}
    assert cc["resource_pools"]["partial_kv_snapshots"] == {"free": 0, "capacity": 1}
    # the producer's checkpoint survived: a later 129 + 1 restores at 129 again
    responses, _ = simulate([PROMPT, PROMPT + "z", PROMPT + "y"], slots=1)
    assert responses[2]["context_cache"]["reused_tokens"] == 129
