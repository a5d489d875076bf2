"""The model itself: forward pass against an independent float64 NumPy forward, determinism
of the weights, confidence of greedy choices, and sensitivity to its KV cache."""
import statistics

import numpy as np
import pytest
import torch

from tests.helpers.backend import MEDIA, texts
from gpu_backend import Runtime
from gpu_backend.engine_build import make_config
from gpu_backend.request import parse_request_file
from tests.helpers.np_reference import NumpyModel  # the backend tests' own float64 forward

# The runtime computes in float32 and stores K/V in FP16; the NumPy forward computes in float64
# and rounds K/V to FP16 the same way. Measured max |diff| is about 1e-2 on logits of magnitude
# up to ~60 (an FP16 rounding that lands on the other side of a boundary, amplified by sharp
# attention); the tolerance is 5x that.
LOGIT_ATOL = 0.05
KINDS = ("attention", "recurrent", "hybrid")


def _content(media: bool):
    if not media:
        return "Hello, paged world! 0123"
    return [{"type": "text", "text": "hi "}, {"type": "image", "image": "img_20x40.png"},
            {"type": "text", "text": "x"}, {"type": "audio", "audio": "audio_c_16k.wav"},
            {"type": "image", "image": "img_a_16x16.png"}, {"type": "text", "text": "end"}]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lora", [None, "a"])
@pytest.mark.parametrize("media", [False, True])
def test_forward_matches_numpy_float64(engine, kind, lora, media):
    d = engine(model=kind, vision=True, audio=True, loraAdapters=["a"], untiedEmbeddings=(kind == "hybrid"))
    rt = Runtime(d)
    req = {"messages": [{"role": "user", "content": _content(media)}]}
    if lora:
        req["lora_name"] = lora
    doc = {"requests": [req], "available_lora_weights": {"a": f"{d}/lora/a.safetensors"}}
    # prefill chunks of 9 and 5 positions, then one position at a time: both paths, state carried
    got = rt.teacher_forced_logits(doc, MEDIA, chunks=[9, 5]).double().numpy()
    r = parse_request_file(doc, engine=rt.cfg, base_dir=str(MEDIA), lora_check=lambda *a: None).requests[0]
    ref = NumpyModel(rt.cfg, f"{d}/model.safetensors", f"{d}/lora/a.safetensors" if lora else None)
    want = ref.logits(list(r.ids), [(s.start, s.modality, s.data) for s in r.spans])
    assert got.shape == want.shape == (r.n, 320)
    assert np.abs(got - want).max() <= LOGIT_ATOL
    assert (got.argmax(-1) == want.argmax(-1)).all()


def test_lora_changes_the_logits(engine):
    d = engine(loraAdapters=["a"])
    rt = Runtime(d)
    doc = texts("abcdefghijkl")
    base = rt.teacher_forced_logits(doc, MEDIA)
    doc["requests"][0]["lora_name"] = "a"
    doc["available_lora_weights"] = {"a": f"{d}/lora/a.safetensors"}
    tuned = rt.teacher_forced_logits(doc, MEDIA)
    assert (base - tuned).abs().max() > 1.0


def test_weights_are_a_function_of_seed_and_arguments(tmp_path, engine):
    from gpu_backend import build_engine
    args = dict(maxInputLen=8, maxKVCacheCapacity=12, maxKVPoolPages=0, tokensPerPage=4, loraAdapters=["x"])
    build_engine(tmp_path / "a", args)
    build_engine(tmp_path / "b", args)
    build_engine(tmp_path / "c", {**args, "seed": 1})
    read = lambda p: (p / "model.safetensors").read_bytes() + (p / "lora" / "x.safetensors").read_bytes()
    assert read(tmp_path / "a") == read(tmp_path / "b")
    assert read(tmp_path / "a") != read(tmp_path / "c")


def test_config_follows_engine_md(engine):
    from tests.helpers.backend import schema_validator
    import json
    d = engine(model="hybrid", numLayers=3, vision=True, loraAdapters=["a", "b"], maxKVPoolPages=40)
    cfg = json.loads((d / "config.json").read_text())
    schema_validator("engine").validate(cfg)
    assert cfg["layer_kinds"] == ["recurrent", "attention", "recurrent"]
    assert cfg["recurrent"] == {"num_heads": 4, "head_dim": 16, "state_size": 16, "conv_kernel": 4,
                                "conv_dim": 64, "state_dtype": "fp32"}
    assert cfg["kv_pool_pages"] == 40 and cfg["tokens_per_page"] == 4
    assert cfg["lora_adapters"] == {"a": {"rank": 4, "path": "lora/a.safetensors"},
                                    "b": {"rank": 4, "path": "lora/b.safetensors"}}
    assert make_config(dict(maxInputLen=40, maxKVCacheCapacity=48, maxKVPoolPages=0, tokensPerPage=4,
                            maxBatchSize=2))["kv_pool_pages"] == 2 * 12        # CR-CAP-1 minimum


PROMPTS = ["the quick brown fox", "Hello there, how are", "1, 2, 3, 4,", "Once upon a time in a paged",
           "zebra", "KV cache reuse must not change", "pack my box with five dozen", "<|image|> is text"]


@pytest.mark.parametrize("kind", KINDS)
def test_model_is_confident_and_not_degenerate(engine, kind):
    """Greedy choices are far from ties and generations are varied text (the numbers of docs/bundled-backend.md)."""
    rt = Runtime(engine(model=kind, maxInputLen=60, maxKVCacheCapacity=100, maxBatchSize=8))
    res = rt.infer({"temperature": 0, "max_generate_length": 24, "num_logprobs": 2, "batch_size": 8,
                    "requests": [{"messages": [{"role": "user", "content": p}]} for p in PROMPTS]}, MEDIA)
    margins, outputs = [], []
    for r in res["responses"]:
        margins += [c[0]["logprob"] - c[1]["logprob"] for c in r["logprobs"]]
        outputs.append(r["output_ids"])
        if len(r["output_ids"]) >= 4:
            assert len(set(r["output_ids"])) >= 3, "a generation repeats one token"
    median = statistics.median(margins)
    print(f"{kind}: median top-1/top-2 margin {median:.2f} nats over {len(margins)} steps;"
          f" below 0.05: {sum(m < 0.05 for m in margins)}")
    assert median >= 2.0
    assert sum(m < 0.05 for m in margins) <= 0.03 * len(margins)
    assert len({tuple(o) for o in outputs}) >= 3, "every prompt gives the same answer"


def test_outputs_depend_on_the_kv_cache(engine):
    """A wrong KV page must change what the model says: perturbing the K/V of the first page
    moves later logits far beyond the kit's 0.02 log-probability tolerance."""
    rt = Runtime(engine())
    doc = texts("abcdefghijklmnopqrstuvwxyz")
    clean = torch.log_softmax(rt.teacher_forced_logits(doc, MEDIA), -1)
    write = rt.kv.write

    def corrupt(layer, slots, k, v):                  # page 0 holds its positions in another order
        k, v = k.clone(), v.clone()
        k[:4], v[:4] = k[:4].flip(0), v[:4].flip(0)
        write(layer, slots, k, v)
    rt.kv.write = corrupt
    bad = torch.log_softmax(rt.teacher_forced_logits(doc, MEDIA), -1)
    assert (clean[8:] - bad[8:]).abs().max() > 0.5


def test_fp8_kv_runs_without_reuse_and_stays_close(engine):
    fp16 = Runtime(engine()).teacher_forced_logits(texts("abcdefghijklmnop"), MEDIA)
    rt8 = Runtime(engine(kvCacheDtype="fp8"))
    assert rt8.kv.kv.dtype == torch.float8_e4m3fn
    fp8 = rt8.teacher_forced_logits(texts("abcdefghijklmnop"), MEDIA)
    assert torch.isfinite(fp8).all()
    assert (fp8.argmax(-1) == fp16.argmax(-1)).float().mean() >= 0.8
    res = rt8.infer(texts("abcdefgh", gen=4), MEDIA)
    assert res["failed_batches"] == 0 and len(res["responses"][0]["output_ids"]) >= 1


def test_odd_head_dim_matches_numpy(engine):
    """engine.md accepts any head_dim; with an odd one RoPE leaves the last channel unrotated."""
    d = engine(headDim=15, numHeads=4, numKVHeads=1)
    rt = Runtime(d)
    doc = texts("odd heads, still paged")
    got = rt.teacher_forced_logits(doc, MEDIA, chunks=[7]).double().numpy()
    r = parse_request_file(doc, engine=rt.cfg, base_dir=str(MEDIA), lora_check=lambda *a: None).requests[0]
    want = NumpyModel(rt.cfg, f"{d}/model.safetensors").logits(list(r.ids))
    assert np.abs(got - want).max() <= LOGIT_ATOL
