"""CUDA: the same runtime on the GPU (KV in FP16, attention in FP16, the rest in float32 with TF32
off) says what the CPU says, and what the kit's float64 reference says."""
import pytest
import torch

from tests.gpu_backend.test_attention_paths import paged_calls  # noqa: F401 (a fixture)
from tests.helpers.backend import MEDIA, runtime, texts

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("kind", ["attention", "hybrid"])
def test_cuda_matches_cpu_and_reuses(engine, kind):
    d = engine(model=kind, vision=True)
    doc = texts("The paged cache keeps this prefix", "The paged cache keeps this prefix, twice",
                gen=6, num_logprobs=2, logit_bias={"257": -100})
    gpu = runtime(d, device="cuda", poison_fresh_pages=True)
    assert gpu.kv.kv.is_cuda if gpu.kv else True
    warm = gpu.infer(doc, MEDIA)
    cold = runtime(d, device="cpu").infer(dict(doc, context_cache_lookup_policy="bypass"), MEDIA)
    assert warm["responses"][1]["context_cache"]["reused_tokens"] > 0
    for a, b in zip(warm["responses"], cold["responses"]):
        assert a["output_ids"] == b["output_ids"]
        for la, lb in zip(a["logprobs"], b["logprobs"]):
            assert abs(la[0]["logprob"] - lb[0]["logprob"]) <= 0.02
    from gpu_backend.capabilities import capabilities
    assert "cuda" in capabilities("cuda")["features"]


DIFFERENTIAL_PROMPTS = ("The paged cache keeps this prefix", "The paged cache keeps this prefix, twice",
                        "Another prompt with other words in it")


def _judged_against_reference(d, doc, result):
    """The kit's judgement of `result` against its float64 reference (spec/RUNNING.md section 5):
    (failures, requests checked). The reference reads only the engine folder and the request."""
    import json
    from conformance.judge import oracle
    from conformance.judge.numerical_judge import judge_request
    from numerical_reference.source import WeightsReference
    from reference.engine import resolve_paths
    engine = oracle.engine_of(resolve_paths(json.loads((d / "config.json").read_text()), str(d)))
    parsed = oracle.parse(doc, str(MEDIA), engine, oracle.flags_of({}))
    items = [(parsed.requests[i], doc["requests"][i], r["output_ids"]) for i, r in enumerate(result["responses"])]
    scored = WeightsReference().score_all(str(d), engine, items, doc, str(MEDIA))
    failures = []
    for i, (response, s) in enumerate(zip(result["responses"], scored)):
        failures += judge_request(i, response, s, "float64 reference")[0]
    return failures, sum(1 for s in scored if s.steps)


def _differential_doc():
    doc = texts(*DIFFERENTIAL_PROMPTS, gen=8, num_logprobs=2, logit_bias={"257": -100})
    doc["requests"].append({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "see "}, {"type": "image", "image": "img_20x40.png"},
        {"type": "text", "text": " and say"}]}]})
    return doc


def test_cpu_outputs_agree_with_the_float64_reference(engine):
    """The differential below, on CPU: it runs (and would catch a wrong model) without a GPU."""
    d = engine(model="hybrid", vision=True)
    doc = _differential_doc()
    result = runtime(d, device="cpu").infer(doc, MEDIA)
    failures, checked = _judged_against_reference(d, doc, result)
    assert checked == len(doc["requests"])
    assert failures == [], [f.line() for f in failures]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("kind", ["attention", "hybrid"])
def test_cuda_outputs_agree_with_the_float64_reference(engine, kind):
    """CUDA (FP16 attention, TF32 off) against the float64 NumPy reference, with reuse on: every
    generated token is the reference's argmax (near-ties excused) and every log-probability within
    the tolerance calibrated from FP16 KV rounding. A QUALITY_WARNING (drift between the noise
    bound and the tolerance: FP16 attention's extra rounding) is allowed; a FAIL is not."""
    from conformance.judge.verdicts import Verdict
    d = engine(model=kind, vision=True)
    doc = _differential_doc()
    result = runtime(d, device="cuda").infer(doc, MEDIA)
    assert not torch.backends.cuda.matmul.allow_tf32
    assert result["responses"][1]["context_cache"]["reused_tokens"] > 0
    failures, checked = _judged_against_reference(d, doc, result)
    assert checked == len(doc["requests"])
    for f in failures:
        print("against the reference:", f.line())
    assert [f.line() for f in failures if f.verdict not in (Verdict.QUALITY_WARNING,)] == []


# CUDA attention runs in FP16 on both paths (layers.ATTENTION_DTYPE): outputs of magnitude ~1
# differ by a few FP16 roundings (2^-11 each), not by float32 rounding as on CPU.
FP16_ROUNDING = 1e-2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("P", [4, 16, 64])
def test_cuda_paged_attention_equals_gather(engine, P, paged_calls):
    """The compiled paged kernel (gpu_backend/paged_flex_attention.py) against the gather path on
    CUDA: attention outputs within FP16 rounding (tests/gpu_backend/test_attention_paths.py's
    rows); then, where the prompts reach whole pages, a runtime with reuse on each path: the same
    tokens, facts and counters, log-probabilities within LOGPROB_TOL, and the paged run judged
    against the float64 reference as test_cuda_outputs_agree_with_the_float64_reference is."""
    from tests.gpu_backend.test_attention_paths import compare_runs, paths_differ_by
    assert paths_differ_by(P, "cuda") <= FP16_ROUNDING
    if P > 16:
        return
    d = engine(vision=True, tokensPerPage=P, maxInputLen=64, maxKVCacheCapacity=80)
    doc = _differential_doc()
    assert compare_runs(d, [doc], paged_calls, device="cuda")["reused_tokens"] > 0
    result = runtime(d, device="cuda", attention="paged").infer(doc, MEDIA)
    failures, checked = _judged_against_reference(d, doc, result)
    assert checked == len(doc["requests"])
    assert [f.line() for f in failures if f.verdict.name != "QUALITY_WARNING"] == []
