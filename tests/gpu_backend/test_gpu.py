"""CUDA: the same runtime on the GPU (KV in FP16, compute in float32) says what the CPU says."""
import pytest
import torch

from backend_helpers import MEDIA, runtime, texts

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
    from gpu_backend import capabilities
    assert "cuda" in capabilities("cuda")["features"]
