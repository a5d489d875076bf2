"""The oracle reading request files for an engine with a real tokenizer (spec/hf-tokenizer.md
TOK-HF-5 .. TOK-HF-9, spec/media-tokens.md): the ids of each request, its image runs and n.
Expected ids are the worked examples of the spec, derived by hand there."""
from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

import reference
from reference.engine import engine_from_build_args, engine_from_config

SPEC = Path(__file__).resolve().parents[2] / "spec" / "tokenizers"
SYS_HELLO = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hello"}]


ID_COUNTS = {"phi-3-mini": 32011, "phi-3-vision": 32045}      # TOK-HF-9: the tokenizers' id counts


def hf_engine(folder: str, loader: str = "tokenizers-raw", vision: dict | None = None, **config):
    base = engine_from_build_args({"maxInputLen": 2048, "maxKVCacheCapacity": 2304, "maxKVPoolPages": 0,
                                   "tokensPerPage": 16, "vision": vision is not None}).to_config()
    base.update(tokenizer={"profile": "hf", "files": str(SPEC / folder), "loader": loader},
                vocab_size=ID_COUNTS[folder], eos_token_id=32000, image_token_id=32044 if vision else None, vision=vision,
                audio_token_id=None, **config)
    return engine_from_config(base)


def parse(engine, messages, template: bool = True, **doc):
    request_file = dict({"apply_chat_template": template, "requests": [{"messages": messages}]}, **doc)
    return reference.parse_request_file(request_file, "/", engine).requests[0]


def png(folder: Path, name: str, h: int, w: int) -> str:
    path = folder / name
    Image.new("RGB", (w, h), (10, 20, 30)).save(path)
    return str(path)


@pytest.mark.parametrize("loader, ids", [
    ("transformers-auto", [32006, 3492, 526, 8444, 29889, 32007, 32010, 10994, 32007, 32001]),   # TOK-HF-2
    ("tokenizers-raw", [32006, 887, 526, 8444, 29889, 32007, 32010, 15043, 32007, 32001]),
])
def test_a_chat_prompt_is_the_loaders_ids(loader, ids):
    r = parse(hf_engine("phi-3-mini", loader), SYS_HELLO)
    assert list(r.tokens) == ids and r.n == 10 and not r.spans


def test_the_template_off_joins_the_contents_and_encodes_once():
    messages = [{"role": "user", "content": "ab"}, {"role": "user", "content": "cd"}]
    assert list(parse(hf_engine("phi-3-mini"), messages, template=False).tokens) == [633, 2252]   # TOK-HF-8


def test_an_image_becomes_its_counted_run(tmp_path):
    engine = hf_engine("phi-3-vision", "transformers-auto", {"counter": "hf/phi-3-vision", "settings": {"num_crops": 1}})
    messages = [{"role": "user", "content": [{"type": "image", "image": png(tmp_path, "a.png", 16, 16)},
                                             {"type": "text", "text": "\nWhat is shown?"}]}]
    r = parse(engine, messages)
    # by hand (TOK-MEDIA-6): one 336 crop, (1*1 + 1)*144 + 1 + (1 + 1)*12 = 313 tokens; the prompt
    # [32010, 13, 32044, 5618, 338, 4318, 29973, 32007, 13, 32001] (TOK-HF-7) with 32044 x 313
    assert r.n == 9 + 313 and list(r.tokens[:2]) == [32010, 13] and list(r.tokens[-7:]) == [5618, 338, 4318,
                                                                                             29973, 32007, 13, 32001]
    assert [(s.start, s.end, s.modality) for s in r.spans] == [(2, 315, "image")]


@pytest.mark.parametrize("counter, tokens", [("edge-llm/qwen-vl", 36), ("hf/qwen-vl", 20)])
def test_the_runtimes_counter_decides_the_image_length(counter, tokens, tmp_path):
    """A 10 x 1000 image, patch 14, merge 2 (factor 28), bounds of 4 and 256 tokens: 10/28 rounds
    to 0. Edge-LLM 0.10 clamps it to one factor: 28 x 1008 (1000/28 = 35.7 -> 36), 28224 pixels
    within [3136, 200704], (28/14)*(1008/14)/4 = 36 tokens; HF leaves 0, so its min-pixels branch
    scales both sides by sqrt(3136/10000) = 0.56: 28 x 560, 20 tokens (TOK-MEDIA-2, TOK-MEDIA-3)."""
    settings = ({"min_image_tokens": 4, "max_image_tokens": 256} if counter.startswith("edge")
                else {"min_pixels": 4 * 784, "max_pixels": 256 * 784})
    engine = hf_engine("phi-3-vision", vision={"counter": counter, "settings": settings})
    r = parse(engine, [{"role": "user", "content": [{"type": "image", "image": png(tmp_path, "i.png", 10, 1000)}]}],
              template=False)
    assert r.n == tokens and len(r.spans) == 1 and r.spans[0].end - r.spans[0].start == tokens


def test_equal_pictures_are_one_item_and_other_geometry_another(tmp_path):
    engine = hf_engine("phi-3-vision", vision={"counter": "hf/phi-3-vision", "settings": {"num_crops": 1}})
    a, b = png(tmp_path, "a.png", 16, 16), png(tmp_path, "b.png", 16, 16)
    c = png(tmp_path, "c.png", 16, 32)
    spans = [parse(engine, [{"role": "user", "content": [{"type": "image", "image": x}]}], template=False).spans[0]
             for x in (a, b, c)]
    assert spans[0].digest == spans[1].digest != spans[2].digest          # CR-ID-4


@pytest.mark.parametrize("item, where", [
    ({"type": "image", "image": "x.png"}, "$.requests[0].messages[0].content[0].image"),
    ({"type": "audio", "audio": "x.wav"}, "$.requests[0].messages[0].content[0].audio"),
])
def test_media_an_hf_engine_cannot_take_is_an_input_error(item, where):
    with pytest.raises(reference.InputError) as e:
        parse(hf_engine("phi-3-mini"), [{"role": "user", "content": [item]}])
    assert e.value.path == where


def test_logit_bias_is_checked_against_the_engines_vocabulary():
    engine = hf_engine("phi-3-mini")
    parse(engine, SYS_HELLO, logit_bias={"32010": -5})
    with pytest.raises(reference.InputError) as e:
        parse(engine, SYS_HELLO, logit_bias={"40000": 1})
    assert e.value.path == "$.logit_bias"


@pytest.mark.parametrize("change, where", [
    ({"tokenizer": {"profile": "hf", "files": "x"}}, "$.tokenizer.loader"),
    ({"tokenizer": {"profile": "sentencepiece"}}, "$.tokenizer"),
    ({"vision": {"counter": "hf/qwen-vl"}, "image_token_id": None}, "$.image_token_id"),
    ({"vision": {"counter": "my/counter"}}, "$.vision.counter"),
    ({"vocab_size": None}, "$.vocab_size"),
])
def test_an_hf_description_states_what_the_oracle_needs(change, where):
    config = hf_engine("phi-3-vision", vision={"counter": "hf/phi-3-vision"}).to_config()
    config.update(change)
    with pytest.raises(reference.InputError) as e:
        engine_from_config(config)
    assert e.value.path == where


def test_a_relative_tokenizer_folder_is_read_beside_the_description(tmp_path):
    import json
    import shutil
    shutil.copytree(SPEC / "phi-3-mini", tmp_path / "tokenizer")
    config = hf_engine("phi-3-mini").to_config()
    config["tokenizer"] = dict(config["tokenizer"], files="tokenizer")
    (tmp_path / "config.json").write_text(json.dumps(config))
    engine = reference.load_engine(str(tmp_path))
    assert engine.tokenizer["files"] == str(tmp_path / "tokenizer")
    assert parse(engine, SYS_HELLO).n == 10


THINKING = ("{% for m in messages %}{{ '<|user|>' + m['content'] + '<|end|>' }}{% endfor %}"
            "{% if enable_thinking is defined and enable_thinking is false %}{{ '<|assistant|>' }}{% endif %}")


@pytest.mark.parametrize("engine_kwargs, doc, ids", [
    # <|user|> 32010, '▁Hello' 15043 (tokenizers-raw: Metaspace prepends after a special), <|end|> 32007,
    # and <|assistant|> 32001 only when enable_thinking is false
    ({}, {}, [32010, 15043, 32007]),
    ({}, {"enable_thinking": False}, [32010, 15043, 32007, 32001]),
    ({"enable_thinking": False}, {}, [32010, 15043, 32007, 32001]),
    ({"enable_thinking": False}, {"enable_thinking": True}, [32010, 15043, 32007]),
])
def test_template_keywords_engine_then_request(tmp_path, engine_kwargs, doc, ids):
    """TOK-HF-4: the engine's chat_template_kwargs, then the request file's enable_thinking."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((SPEC / "phi-3-mini" / name).read_bytes())
    (tmp_path / "chat_template.jinja").write_text(THINKING)
    base = engine_from_build_args({"maxInputLen": 2048, "maxKVCacheCapacity": 2304, "maxKVPoolPages": 0,
                                   "tokensPerPage": 16}).to_config()
    base.update(tokenizer={"profile": "hf", "files": str(tmp_path), "loader": "tokenizers-raw",
                           "chat_template_kwargs": engine_kwargs}, vocab_size=32011, eos_token_id=32000,
                image_token_id=None, audio_token_id=None)
    request = parse(engine_from_config(base), [{"role": "user", "content": "Hello"}], **doc)
    assert list(request.tokens) == ids
