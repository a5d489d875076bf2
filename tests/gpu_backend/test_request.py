"""Request-file validation (exit 2 class) and the bytes-v1 prompt layout (spec/tokenizer.md)."""
import pytest

from tests.helpers.backend import MEDIA, counters, run, runtime, texts
from gpu_backend import BackendInputError
from gpu_backend.request import parse_request_file
from gpu_backend.tokenizer import token_entry


def ids_of(engine_dir, doc, **kw):
    import json
    cfg = json.loads((engine_dir / "config.json").read_text())
    rf = parse_request_file(doc, engine=cfg, base_dir=str(MEDIA), lora_check=lambda *a: None, **kw)
    return [r.ids.tolist() for r in rf.requests]


def test_prompt_layout_examples(engine):
    d = engine(vision=True)
    hi = {"requests": [{"messages": [{"role": "user", "content": "hi"}]}]}
    assert ids_of(d, hi) == [[256, 259, 104, 105, 261, 260]]
    sys = {"requests": [{"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]}]}
    assert ids_of(d, sys) == [[256, 258, 83, 261, 259, 104, 105, 261, 260]]
    off = {"apply_chat_template": False, "requests": [{"messages": [{"role": "user", "content": "ab"},
                                                                     {"role": "assistant", "content": "cd"}]}]}
    assert ids_of(d, off) == [[97, 98, 99, 100]]
    nogen = {"add_generation_prompt": False, "requests": hi["requests"]}
    assert ids_of(d, nogen) == [[256, 259, 104, 105, 261]]
    img = {"apply_chat_template": False, "requests": [{"messages": [{"role": "user", "content": [
        {"type": "image", "image": "img_20x40.png", "do_resize": True}, {"type": "text", "text": "<|image|>"}]}]}]}
    assert ids_of(d, img) == [[262] * 6 + list(b"<|image|>")]
    assert token_entry(257) == ("<|eos|>", list(b"<|eos|>")) and token_entry(65) == ("A", [65])


BAD = [
    ({"requests": []}, "$.requests"),
    ({"requests": [{"messages": [{"role": "tool", "content": "x"}]}]}, "$.requests[0].messages[0].role"),
    ({"requests": [{"messages": [{"role": "user", "content": [{"type": "video", "frames": []}]}]}]},
     "$.requests[0].messages[0].content[0].type"),
    ({"requests": [{"messages": [{"role": "user", "content": 3}]}]}, "$.requests[0].messages[0].content"),
    ({"context_cache_lookup_policy": "sometimes", "requests": [{"messages": [{"role": "user", "content": "x"}]}]},
     "$.context_cache_lookup_policy"),
    ({"context_cache_commit_policy": "all", "requests": [{"messages": [{"role": "user", "content": "x"}]}]},
     "$.context_cache_commit_policy"),
    ({"num_logprobs": 51, "requests": [{"messages": [{"role": "user", "content": "x"}]}]}, "$.num_logprobs"),
    ({"temperature": -1, "requests": [{"messages": [{"role": "user", "content": "x"}]}]}, "$.temperature"),
    ({"max_generate_length": True, "requests": [{"messages": [{"role": "user", "content": "x"}]}]},
     "$.max_generate_length"),
    ({"requests": [{"messages": [{"role": "user", "content": "x"}], "logit_bias": {"400": 1}}]},
     "$.requests[0].logit_bias"),
    ({"requests": [{"messages": [{"role": "user", "content": "x"}], "stop": [""]}]}, "$.requests[0].stop"),
    ({"apply_chat_template": False, "requests": [{"messages": [{"role": "user", "content": ""}]}]},
     "$.requests[0].messages"),
    ({"requests": [{"messages": [{"role": "user", "content": "x"}], "lora_name": "nope"}]},
     "$.requests[0].lora_name"),
    ({"batch_size": 2, "available_lora_weights": {"a": "ENGINE/lora/a.safetensors"},
      "requests": [{"messages": [{"role": "user", "content": "x"}], "lora_name": "a"},
                                    {"messages": [{"role": "user", "content": "y"}]}]}, "$.requests[1].lora_name"),
    ({"batch_size": 3, "requests": [{"messages": [{"role": "user", "content": "x"}]}]}, "$.batch_size"),
    ({"available_lora_weights": {"a": "missing.safetensors"},
      "requests": [{"messages": [{"role": "user", "content": "x"}], "lora_name": "a"}]},
     "$.available_lora_weights.a"),
    ({"available_lora_weights": {"a": "img_a_16x16.png"},
      "requests": [{"messages": [{"role": "user", "content": "x"}], "lora_name": "a"}]},
     "$.available_lora_weights.a"),
]


@pytest.mark.parametrize("doc, path", BAD)
def test_bad_request_files_are_refused_before_anything_runs(engine, doc, path):
    rt = runtime(engine(vision=True, audio=True, loraAdapters=["a"]))
    weights = doc.get("available_lora_weights", {})
    doc = dict(doc, available_lora_weights={k: v.replace("ENGINE", rt.engine_dir) for k, v in weights.items()})
    with pytest.raises(BackendInputError) as e:
        run(rt, doc)
    assert e.value.path == path and "\n" not in e.value.message
    assert counters(rt)["admitted_sequences"] == 0


@pytest.mark.parametrize("name", ["bad_16bit.png", "bad_interlaced.png", "bad_arith.jpg", "bad_12bit.jpg",
                                  "bad_lossless.jpg", "bad_cmyk.jpg", "bad_truncated.jpg", "bad_bomb.png",
                                  "bad_truncated.png", "bad_empty.png", "bad_not_an_image.png", "bad_corrupt.png",
                                  "no_such_file.png", "."])
def test_bad_images(engine, name):
    rt = runtime(engine(vision=True, audio=True))
    doc = {"requests": [{"messages": [{"role": "user", "content": "fine"}]},
                        {"messages": [{"role": "user", "content": [{"type": "image", "image": name}]}]}]}
    with pytest.raises(BackendInputError) as e:
        run(rt, doc)
    assert e.value.path == "$.requests[1].messages[0].content[0].image"
    assert counters(rt)["admitted_sequences"] == 0                     # the first request did not run


@pytest.mark.parametrize("name", ["bad_audio_8k.wav", "bad_audio_corrupt.wav", "bad_audio_empty.wav",
                                  "bad_audio_stereo.wav", "img_a_16x16.png"])
def test_bad_audio(engine, name):
    rt = runtime(engine(vision=True, audio=True))
    with pytest.raises(BackendInputError) as e:
        run(rt, {"requests": [{"messages": [{"role": "user", "content": [{"type": "audio", "audio": name}]}]}]})
    assert e.value.path == "$.requests[0].messages[0].content[0].audio"


def test_media_needs_an_encoder_and_fits_max_input_len(engine):
    doc = {"requests": [{"messages": [{"role": "user", "content": [{"type": "image", "image": "img_a_16x16.png"}]}]}]}
    with pytest.raises(BackendInputError, match="no vision encoder"):
        run(runtime(engine()), doc)
    big = {"requests": [{"messages": [{"role": "user", "content": [{"type": "image", "image": "img_a_32x32.png"}]}]}]}
    with pytest.raises(BackendInputError, match="placeholders"):
        run(runtime(engine(vision=True, maxInputLen=3, maxKVCacheCapacity=8)), big)


def test_audio_placeholders(engine):
    d = engine(audio=True)
    doc = {"apply_chat_template": False, "requests": [{"messages": [{"role": "user", "content": [
        {"type": "audio", "audio": "audio_c_16k.wav"}]}]}]}
    assert ids_of(d, doc) == [[263] * 4]                      # ceil(961 / 320)


def test_flag_overrides(engine):
    d = engine()
    doc = texts("a", "b", "c", gen=3)
    with pytest.raises(BackendInputError) as e:
        ids_of(d, doc, batch_size=3)
    assert e.value.path == "--batchSize"
    rt = runtime(d)
    res = run(rt, texts("abc", "def", "ghi", gen=5, logit_bias={"257": -100}), batch_size=2, max_generate_length=2)
    assert [r["batch_idx"] for r in res["responses"]] == [0, 0, 1]
    assert [len(r["output_ids"]) for r in res["responses"]] == [2, 2, 2]


def test_lora_from_available_weights(engine, tmp_path):
    import shutil
    d = engine(loraAdapters=["a"])
    shutil.copy(d / "lora" / "a.safetensors", tmp_path / "mine.safetensors")
    rt = runtime(d)
    doc = texts("abcdefgh", available_lora_weights={"x": str(tmp_path / "mine.safetensors")})
    doc["requests"][0]["lora_name"] = "x"
    res = run(rt, doc)
    doc2 = texts("abcdefgh", available_lora_weights={"a": str(d / "lora" / "a.safetensors")})
    doc2["requests"][0]["lora_name"] = "a"
    res2 = run(rt, doc2)                    # same weights, another name: another identity (CR-ID-3)
    assert res2["responses"][0]["context_cache"]["plan"] == "no_reusable_prefix"
    assert res["responses"][0]["output_ids"] == res2["responses"][0]["output_ids"]


def test_jpeg_images_are_items_of_their_decoded_pixels(engine):
    """JPEG as Edge-LLM 0.10's stb_image accepts it (spec/tokenizer.md section 3): 'ab' + a 32x48
    JPEG (6 placeholders) + 'c' is n = 9; its progressive re-encoding decodes to the same pixels,
    so a replay through it reuses 8 (the boundary at 8 follows the image); the 48x32 picture is
    another item from page 0 on."""
    rt = runtime(engine(vision=True))

    def request(name):
        return {"messages": [{"role": "user", "content": [{"type": "text", "text": "ab"},
                                                          {"type": "image", "image": name},
                                                          {"type": "text", "text": "c"}]}]}
    doc = {"apply_chat_template": False, "temperature": 0, "max_generate_length": 1,
           "requests": [request("img_j_a_32x48.jpg"), request("img_j_a_32x48_progressive.jpg"),
                        request("img_j_b_48x32.jpg")]}
    result = run(rt, doc)
    got = [(r["input_tokens"], r["context_cache"]["reused_tokens"], r["context_cache"]["media_aware"])
           for r in result["responses"]]
    assert got == [(9, 0, True), (9, 8, True), (9, 0, True)]
