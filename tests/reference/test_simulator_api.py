"""The public API the runner calls: Simulator, simulate, NeedsTranscript, rejections,
predictions and profiles that follow the schemas, and transcript_tokens."""
import copy

import pytest

import reference
from conformance.cases import schemas

P4 = {"maxInputLen": 24, "maxKVCacheCapacity": 32, "maxKVPoolPages": 0, "tokensPerPage": 4}
ON = reference.RuntimeFlags(enable_context_reuse=True, dump_profile=True)


def engine(**extra):
    return reference.engine_from_build_args({**P4, **extra})


def doc(*texts, **top):
    return {"apply_chat_template": False, "max_generate_length": 1,
            "requests": [{"messages": [{"role": "user", "content": t}]} for t in texts], **top}


def test_public_names():
    assert reference.SPEC_VERSION == "3.0.0"
    e = reference.InputError("$.requests[0]", "bad")
    assert (e.path, e.message, str(e)) == ("$.requests[0]", "bad", "$.requests[0]: bad")


def test_predictions_and_profile_follow_the_schemas():
    predictions, profile = reference.simulate(engine(), ON, doc("abcdefgh", "abcdefgh", "abcdefghij" * 3), ".")
    assert schemas.schema_errors(predictions, "predictions") == []
    assert schemas.schema_errors(profile, "profile") == []
    assert predictions["batches"][2]["status"] == "failed" and predictions["responses"][2]["status"] == "error"
    assert [r["context_cache"] and r["context_cache"]["plan"] for r in predictions["responses"]] == \
        ["no_reusable_prefix", "full_input_rewind", None]


def test_repeated_runs_share_the_cache_and_warmup_applies_once():
    """CR-BATCH-3 across request files; CR-POL-4 only before the first file."""
    sim = reference.Simulator(engine(), reference.RuntimeFlags(enable_context_reuse=True, warmup=1))
    first = sim.run(doc("abcdefgh"), ".")
    second = sim.run(doc("abcdefghij"), ".")
    sim.check_invariants()
    assert first[0]["context_cache"]["plan"] == "no_reusable_prefix"
    assert second[0]["context_cache"]["reused_tokens"] == 8
    cc = sim.profile()["context_cache"]
    assert (cc["admitted_sequences"], cc["lookup_bypass_sequences"]) == (3, 1)
    assert [b["batch_idx"] for b in sim.batches] == [0, 0], "batch records accumulate, indexed per file"


def test_reuse_disabled_profile_and_facts():
    predictions, profile = reference.simulate(engine(), reference.RuntimeFlags(dump_profile=True), doc("abcdefgh"), ".")
    assert profile == {"prefill": {"total_runs": 1, "reused_tokens": 0, "computed_tokens": 8}}
    assert predictions["responses"][0]["context_cache"] is None
    assert reference.simulate(engine(), reference.RuntimeFlags(), doc("abcd"), ".")[1] == {}


def test_a_rejected_deployment_refuses_to_run():
    sim = reference.Simulator(engine(kvCacheDtype="fp8"), ON)
    assert sim.rejection.rule == "CR-SUP-2" and sim.profile() == {}
    with pytest.raises(reference.DeploymentRejected):
        sim.run(doc("abcd"), ".")
    predictions, profile = reference.simulate(engine(kvCacheDtype="fp8"), ON, doc("abcd"), ".")
    assert predictions["rejected"]["rule"] == "CR-SUP-2" and predictions["responses"] == [] and profile == {}
    assert schemas.schema_errors(predictions, "predictions") == []


def test_eagle_reuse_is_predicted_with_a_draft_pool():
    """Attention-only EAGLE reuse is section 12 (CR-SPEC): predicted, with a draft pool as large as
    the base pool by default (CR-SPEC-5); without reuse there is no draft pool."""
    sim = reference.Simulator(engine(specDecode="eagle"), ON)
    sim.run(doc("abcdefghi", top_k=1), ".")                     # greedy: paired (CR-SPEC-7)
    pools = sim.profile()["context_cache"]["resource_pools"]
    assert pools["draft_kv_pages"]["capacity"] == pools["base_kv_pages"]["capacity"] > 0
    assert sim.profile()["context_cache"]["speculative"]["pair_publications"] == 1   # [a-h]: floor((9-1)/4) = 2 pages
    off = reference.Simulator(engine(specDecode="eagle"), reference.RuntimeFlags())
    off.run(doc("abcd"), ".")
    assert off.cache.draft.capacity == 0


@pytest.mark.parametrize("text, top, needs", [
    ("abcdefg", {"max_generate_length": 3}, True),                       # floor(9/4)=2 > floor(7/4)=1
    ("abcde", {"max_generate_length": 3}, False),                        # floor(7/4)=1 = floor(5/4)
    ("abcdefg", {"max_generate_length": 1}, False),
    ("abcdefg", {"max_generate_length": 3, "context_cache_commit_policy": "prefill_state_only"}, False),
    ("abcdefg", {"max_generate_length": 3, "context_cache_lookup_policy": "bypass"}, False),
])
def test_needs_transcript_only_when_counts_depend_on_generation(text, top, needs):
    sim = reference.Simulator(engine(), ON)
    if needs:
        with pytest.raises(reference.NeedsTranscript, match="request 0"):
            sim.run(doc(text, **top), ".")
        sim = reference.Simulator(engine(), ON)
        responses = sim.run(doc(text, **top), ".", generated=[[88, 89, 257]])
        assert [p["point"] for p in responses[0]["context_cache"]["publications"]] == ["prefill_end", "decode_end"]
    else:
        assert sim.run(doc(text, **top), ".")[0]["status"] == "ok"


def test_hybrid_decode_end_needs_a_transcript():
    e = engine(model="hybrid")
    flags = reference.RuntimeFlags(enable_context_reuse=True, recurrent_snapshot_bytes=10 ** 6, partial_kv_snapshot_bytes=10 ** 6)
    with pytest.raises(reference.NeedsTranscript):
        reference.simulate(e, flags, doc("abcde", max_generate_length=2), ".")
    predictions, _ = reference.simulate(e, flags, doc("abcde", max_generate_length=2), ".", [[257]])
    assert len(predictions["responses"][0]["context_cache"]["publications"]) == 1


def test_growth_eviction_needs_a_transcript():
    """CR-CAP-9: growth that evicts depends on how long each sequence runs."""
    small = reference.engine_from_build_args({"maxInputLen": 8, "maxKVCacheCapacity": 12, "maxKVPoolPages": 0,
                                              "tokensPerPage": 4})
    file = doc("wxyz", "abcdefgh", max_generate_length=4, context_cache_commit_policy="prefill_state_only")
    with pytest.raises(reference.NeedsTranscript, match="evicts"):
        reference.simulate(small, ON, file, ".")
    predictions, profile = reference.simulate(small, ON, file, ".", [[257], [1, 2, 257]])
    assert profile["context_cache"]["records"]["evicted"] == 1
    predictions, profile = reference.simulate(small, ON, file, ".", [[257], [257]])
    assert profile["context_cache"]["records"]["evicted"] == 0


@pytest.mark.parametrize("generated, path", [
    ([[1]], "$.generated"),
    ([[1], [1, 2, 3, 4]], "$.generated[1]"),
    ([[1], []], "$.generated[1]"),
    ([[1], [257, 1]], "$.generated[1]"),
    ([[1], [400]], "$.generated[1]"),
])
def test_generated_is_checked(generated, path):
    with pytest.raises(reference.InputError) as e:
        reference.Simulator(engine(), ON).run(doc("abcd", "efgh", max_generate_length=3), ".", generated)
    assert e.value.path == path


def test_check_invariants_catches_a_corrupted_cache():
    sim = reference.Simulator(engine(), ON)
    sim.run(doc("abcdefgh"), ".")
    sim.check_invariants()
    broken = copy.deepcopy(sim)
    page = next(iter(broken.cache.index.values()))
    broken.cache.pages.cache[page] += 1
    with pytest.raises(AssertionError):
        broken.check_invariants()
    broken = copy.deepcopy(sim)
    broken.metrics.committed += 1
    with pytest.raises(AssertionError):
        broken.check_invariants()


def test_transcript_tokens():
    output = {"responses": [
        {"output_ids": [65, 66, 257], "output_text": "AB", "finish_reason": "end-of-sequence"},
        {"logprobs": [[{"token_id": 67, "token": "C", "bytes": [67], "logprob": -0.5},
                       {"token_id": 68, "token": "D", "bytes": [68], "logprob": -0.1}]],
         "output_text": "D", "finish_reason": "max-length"},
        {"output_text": "XY", "finish_reason": "end-of-sequence"},
        {"output_text": "XY", "finish_reason": "max-length"},
        {"output_text": "XY", "finish_reason": "stop-words"},
        {"output_text": "", "finish_reason": "error", "output_ids": [1]},
        {"output_text": "", "finish_reason": "cancelled"},
    ]}
    assert reference.transcript_tokens(output) == [[65, 66, 257], [68], [88, 89, 257], [88, 89], None, None, None]
    assert reference.transcript_tokens({"responses": "no"}) == []
