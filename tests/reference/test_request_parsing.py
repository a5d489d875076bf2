"""Request files: tokenization (spec/tokenizer.md) and input errors with JSON paths."""
from pathlib import Path

import pytest

import reference
from reference.requests import parse_generated

MEDIA = Path(__file__).resolve().parents[2] / "cases" / "media"
ENGINE = reference.engine_from_build_args({"maxInputLen": 40, "maxKVCacheCapacity": 48, "maxKVPoolPages": 0,
                                           "maxBatchSize": 2, "tokensPerPage": 4, "vision": True,
                                           "loraAdapters": ["a", "b"]})


def tokens(doc, engine=None):
    return [list(r.tokens) for r in reference.parse_request_file(doc, str(MEDIA), engine).requests]


def user(*content, role="user"):
    return {"role": role, "content": list(content) if len(content) != 1 or not isinstance(content[0], str) else content[0]}


def test_tokenizer_worked_examples():
    """spec/tokenizer.md section 2."""
    assert tokens({"requests": [{"messages": [user("hi")]}]}) == [[256, 259, 104, 105, 261, 260]]
    assert tokens({"requests": [{"messages": [user("S", role="system"), user("hi")]}]}) == \
        [[256, 258, 83, 261, 259, 104, 105, 261, 260]]
    assert tokens({"apply_chat_template": False, "requests": [{"messages": [user("ab"), user("cd")]}]}) == [[97, 98, 99, 100]]
    assert tokens({"add_generation_prompt": False, "requests": [{"messages": [user("a")]}]}) == [[256, 259, 97, 261]]
    assert tokens({"apply_chat_template": False, "requests": [{"messages": [user("<|image|>")]}]}) == [list(b"<|image|>")]
    image = {"type": "image", "image": "img_20x40.png"}
    assert tokens({"apply_chat_template": False, "requests": [{"messages": [user({"type": "text", "text": "a"}, image)]}]}) == \
        [[97] + [262] * 6]


def test_spans_and_batches():
    doc = {"apply_chat_template": False, "batch_size": 2, "requests": [
        {"messages": [user({"type": "text", "text": "ab"}, {"type": "image", "image": "img_a_16x64.png"},
                           {"type": "image", "image": "img_a_16x64.png"})]},
        {"messages": [user("x")]}, {"messages": [user("y")]}]}
    parsed = reference.parse_request_file(doc, str(MEDIA), ENGINE)
    spans = parsed.requests[0].spans
    assert [(s.start, s.end) for s in spans] == [(2, 6), (6, 10)] and spans[0].digest == spans[1].digest
    assert parsed.batches == [[0, 1], [2]]
    assert reference.parse_request_file(doc, str(MEDIA), ENGINE, batch_size=1).batches == [[0], [1], [2]]
    assert (parsed.max_generate_length, parsed.lookup_policy, parsed.commit_policy) == \
        (256, "use_cache", "including_generated_tokens")


ok = {"messages": [{"role": "user", "content": "abc"}]}


@pytest.mark.parametrize("doc, path", [
    ([], "$"),
    ({}, "$"),
    ({"requests": []}, "$.requests"),
    ({"requests": [ok], "context_cache_lookup_policy": "sometimes"}, "$.context_cache_lookup_policy"),
    ({"requests": [ok], "context_cache_commit_policy": "all"}, "$.context_cache_commit_policy"),
    ({"requests": [ok], "batch_size": 0}, "$.batch_size"),
    ({"requests": [ok], "batch_size": True}, "$.batch_size"),
    ({"requests": [ok], "max_generate_length": "8"}, "$.max_generate_length"),
    ({"requests": [ok, 5]}, "$.requests[1]"),
    ({"requests": [{"messages": []}]}, "$.requests[0].messages"),
    ({"requests": [{"messages": [{"role": "robot", "content": "x"}]}]}, "$.requests[0].messages[0].role"),
    ({"requests": [{"messages": [{"role": "user", "content": 3}]}]}, "$.requests[0].messages[0].content"),
    ({"requests": [{"messages": [user({"type": "video", "frames": []})]}]}, "$.requests[0].messages[0].content[0].type"),
    ({"requests": [{"messages": [user({"type": "image"})]}]}, "$.requests[0].messages[0].content[0]"),
    ({"requests": [ok, {"messages": [user({"type": "text", "text": "a"}, {"type": "image", "image": "nope.png"})]}]},
     "$.requests[1].messages[0].content[1].image"),
    ({"requests": [{"messages": [user({"type": "image", "image": "bad_corrupt.png"})]}]},
     "$.requests[0].messages[0].content[0].image"),
    ({"requests": [{"messages": [user({"type": "audio", "audio": "audio_a_16k.wav"})]}]},
     "$.requests[0].messages[0].content[0].audio"),
    ({"apply_chat_template": False, "requests": [ok, {"messages": [user("")]}]}, "$.requests[1].messages"),
    ({"requests": [dict(ok, lora_name="a")]}, "$.requests[0].lora_name"),
    ({"batch_size": 2, "available_lora_weights": {"a": "x", "b": "y"},
      "requests": [dict(ok, lora_name="a"), dict(ok, lora_name="b")]}, "$.requests[1].lora_name"),
    ({"batch_size": 2, "available_lora_weights": {"a": "x"}, "requests": [ok, dict(ok, lora_name="a")]}, "$.requests[1].lora_name"),
    ({"batch_size": 3, "requests": [ok]}, "$.batch_size"),
    ({"requests": [dict(ok, stop=[""])]}, "$.requests[0].stop"),
    ({"requests": [dict(ok, save_system_prompt_kv_cache="yes")]}, "$.requests[0].save_system_prompt_kv_cache"),
])
def test_input_errors_name_the_json_path(doc, path):
    with pytest.raises(reference.InputError) as e:
        reference.parse_request_file(doc, str(MEDIA), ENGINE)
    assert e.value.path == path, f"expected an error at {path}, got {e.value}"
    assert str(e.value).startswith(path + ": ")


def test_engine_independent_parse_skips_engine_checks():
    doc = {"batch_size": 3, "requests": [{"messages": [user({"type": "audio", "audio": "audio_a_16k.wav"})]}]}
    assert tokens(doc) == [[256, 259] + [263] * 10 + [261, 260]]


def test_placeholder_limit_uses_max_input_len():
    small = reference.engine_from_build_args({"maxInputLen": 3, "maxKVCacheCapacity": 8, "maxKVPoolPages": 0,
                                              "tokensPerPage": 4, "vision": True})
    doc = {"requests": [{"messages": [user({"type": "image", "image": "img_a_32x32.png"})]}]}
    with pytest.raises(reference.InputError, match="max_input_len 3"):
        reference.parse_request_file(doc, str(MEDIA), small)


def test_generated_entries():
    assert parse_generated("XY<|eos|>") == [88, 89, 257]
    assert parse_generated("XY") == [88, 89]
    assert parse_generated([1, 257]) == [1, 257] and parse_generated(None) is None
    for bad in ([320], "é", [True]):
        with pytest.raises(reference.InputError):
            parse_generated(bad)


def test_a_listed_adapter_need_not_be_one_the_engine_was_built_with():
    """CR-BATCH-4: availability is decided by available_lora_weights alone; the oracle never
    reads adapter weights (spec/engine.md section 2), so an adapter file supplied at run time
    under a new name is the runtime's to load or refuse."""
    ok = {"messages": [{"role": "user", "content": "abcdefgh"}]}
    doc = {"available_lora_weights": {"c": "c.safetensors"}, "requests": [dict(ok, lora_name="c")]}
    assert [r.lora_name for r in reference.parse_request_file(doc, str(MEDIA), ENGINE).requests] == ["c"]
