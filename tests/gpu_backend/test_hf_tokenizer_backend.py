"""The bundled backend with a real Hugging Face tokenizer (spec/hf-tokenizer.md, spec/media-tokens.md).

Engines are built from the vendored Phi-3 folders (spec/tokenizers/). Expected ids are written
by hand from the worked examples of spec/hf-tokenizer.md; image counts are derived by hand in
comments from spec/media-tokens.md.
"""
import json

import numpy as np
import pytest
from PIL import Image
from tokenizers import Tokenizer

from tests.helpers.backend import ROOT, runtime, schema_validator
from gpu_backend import build_engine
from gpu_backend.cli import main

MINI = ROOT / "spec" / "tokenizers" / "phi-3-mini"
VISION = ROOT / "spec" / "tokenizers" / "phi-3-vision"
SIZES = dict(maxInputLen=400, maxKVCacheCapacity=480, maxKVPoolPages=0, tokensPerPage=16, maxBatchSize=2)
CHAT = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hello"}]
# TOK-HF-2: the rendered Phi-3-mini chat and its ids under both loaders
CHAT_TEXT = "<|system|>\nYou are helpful.<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\n"
CHAT_IDS = {"transformers-auto": [32006, 3492, 526, 8444, 29889, 32007, 32010, 10994, 32007, 32001],
            "tokenizers-raw": [32006, 887, 526, 8444, 29889, 32007, 32010, 15043, 32007, 32001]}
MINI_SPECIALS = {0, 1, 2} | set(range(32001, 32011))          # added tokens other than the EOS 32000


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    built = {}

    def make(name, **kw):
        if name not in built:
            built[name] = tmp_path_factory.mktemp(name.replace("/", "_"))
            build_engine(built[name], {**SIZES, **kw})
        return built[name]
    return make


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("images")
    for name, (h, w), seed in (("a600x800.png", (600, 800), 1), ("b600x800.png", (600, 800), 2),
                               ("c70x84.png", (70, 84), 3)):
        pixels = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(d / name)
    return d


def mini(engines, loader):
    return engines(f"mini-{loader}", tokenizer=str(MINI), tokenizerLoader=loader)


def phi3v(engines):
    # hf/phi-3-vision with num_crops 1 (TOK-MEDIA-6): a 600x800 image has ratio 4/3; s = 1, since
    # s = 2 needs 2 * ceil(2 / (4/3)) = 4 > 1 crops; width 336, height int(336 / (4/3)) = 252,
    # padded to 336: 1x1 crops, (1*1 + 1) * 144 + 1 + (1 + 1) * 12 = 313 tokens
    # (16 crops would give 1921, more than a small engine's max_input_len).
    return engines("phi3v", tokenizer=str(VISION), tokenizerLoader="transformers-auto", vision=True,
                   imageCounterSettings={"num_crops": 1})


def qwen_counter(engines):
    # edge-llm/qwen-vl defaults written by the build: patch 14, merge 2, min 4, max 256 tokens.
    # A 70x84 image (TOK-MEDIA-3): 70 / 28 = 2.5 rounds to even 2, h' = 56; 84 / 28 = 3, w' = 84;
    # 56 * 84 = 4704 lies in [4 * 784, 256 * 784]; (56/14) * (84/14) / 4 = 6 tokens (as in
    # transformers; Edge-LLM 0.7.0 rounded 2.5 up: 84 x 84, 9 tokens).
    return engines("qwen-counter", tokenizer=str(VISION), vision=True, imageCounter="edge-llm/qwen-vl")


def infer(engine_dir, doc, base, **kw):
    rt = runtime(engine_dir, **kw)
    return rt, rt.infer(doc, str(base))["responses"]


def greedy(messages, gen=24, **top):
    return {"temperature": 0, "max_generate_length": gen, "requests": [{"messages": messages}], **top}


# ---------------------------------------------------------------------------------- build


def test_config_of_a_text_engine(engines):
    cfg = json.loads((mini(engines, "transformers-auto") / "config.json").read_text())
    assert cfg["tokenizer"] == {"profile": "hf", "files": "tokenizer", "loader": "transformers-auto",
                                "chat_template_kwargs": {}}
    # TOK-HF-9: 32,000 base ids plus <|endoftext|> .. <|user|> (32000-32010)
    ids = (cfg["vocab_size"], cfg["eos_token_id"], cfg["image_token_id"], cfg["audio_token_id"])
    assert ids == (32011, 32000, None, None)
    assert cfg["vision"] is None and cfg["audio"] is None
    assert sorted(p.name for p in (mini(engines, "transformers-auto") / "tokenizer").iterdir()) == \
        ["tokenizer.json", "tokenizer_config.json"]
    schema_validator("engine").validate(cfg)


def test_config_of_vision_engines(engines):
    cfg = json.loads((phi3v(engines) / "config.json").read_text())
    assert (cfg["vocab_size"], cfg["image_token_id"]) == (32045, 32044)        # <|image|>
    assert cfg["vision"] == {"counter": "hf/phi-3-vision", "settings": {"num_crops": 1}}
    cfg = json.loads((qwen_counter(engines) / "config.json").read_text())
    assert cfg["tokenizer"]["loader"] == "tokenizers-raw"                     # the default loader
    assert cfg["vision"] == {"counter": "edge-llm/qwen-vl",
                             "settings": {"patch": 14, "merge": 2, "min_image_tokens": 4, "max_image_tokens": 256}}
    schema_validator("engine").validate(cfg)


@pytest.mark.parametrize("extra, flag", [
    (["--audio"], "--audio"),
    (["--vision", "--imageCounter", "hf/nope"], "--imageCounter"),
    (["--vision", "--imageCounter", "edge-llm/qwen-vl", "--imageCounterSettings", '{"max_image_tokens": 0}'],
     "--imageCounterSettings"),
    (["--imageCounter", "hf/qwen-vl"], "--imageCounter"),                   # no --vision
    (["--tokenizerLoader", "sentencepiece"], "--tokenizerLoader"),
    (["--chatTemplateKwargs", "[1]"], "--chatTemplateKwargs"),
])
def test_build_refusals_exit_2(tmp_path, capsys, extra, flag):
    code = main(["build", "--engineDir", str(tmp_path / "e"), "--maxInputLen", "40", "--maxKVCacheCapacity", "48",
                 "--maxKVPoolPages", "0", "--tokenizer", str(VISION), *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"gpu_backend: error: {flag}:") and err.count("\n") == 1, err
    assert not (tmp_path / "e").exists()


def test_hf_flags_need_a_tokenizer(tmp_path, capsys):
    code = main(["build", "--engineDir", str(tmp_path / "e"), "--maxInputLen", "40", "--maxKVCacheCapacity", "48",
                 "--maxKVPoolPages", "0", "--tokenizerLoader", "transformers-auto"])
    assert code == 2 and "--tokenizerLoader: needs --tokenizer" in capsys.readouterr().err


def test_cli_build_and_rebuild(tmp_path, capsys):
    args = ["build", "--engineDir", str(tmp_path / "e"), "--maxInputLen", "40", "--maxKVCacheCapacity", "48",
            "--maxKVPoolPages", "0", "--tokenizer", str(MINI), "--chatTemplateKwargs", '{"enable_thinking": false}']
    assert main(args) == 0 and main(args) == 0              # the same engine again: no --force needed
    cfg = json.loads((tmp_path / "e" / "config.json").read_text())
    assert cfg["tokenizer"]["chat_template_kwargs"] == {"enable_thinking": False}
    other = args[:-4] + ["--tokenizer", str(VISION)]
    assert main(other) == 2 and "--force" in capsys.readouterr().err
    (tmp_path / "in.json").write_text(json.dumps(greedy(CHAT, gen=4)))
    assert main(["infer", "--engineDir", str(tmp_path / "e"), "--inputFile", str(tmp_path / "in.json"),
                 "--outputFile", str(tmp_path / "out.json"), "--enableContextReuse"]) == 0
    out = json.loads((tmp_path / "out.json").read_text())
    schema_validator("output").validate(out)
    assert out["responses"][0]["input_tokens"] == 10                      # CHAT_IDS under tokenizers-raw


# ---------------------------------------------------------------------------------- layout


@pytest.mark.parametrize("loader", ["transformers-auto", "tokenizers-raw"])
def test_chat_prompt_golden_ids(engines, loader):
    rt = runtime(mini(engines, loader))
    rf = rt.prepare(greedy(CHAT), str(ROOT))
    r = rf.requests[0]
    assert r.formatted == CHAT_TEXT                                          # TOK-HF-4
    assert r.ids.tolist() == CHAT_IDS[loader] and r.n == 10                  # TOK-HF-2, TOK-HF-6, TOK-HF-9


@pytest.mark.parametrize("loader", ["transformers-auto", "tokenizers-raw"])
def test_template_off_joins_contents(engines, loader):
    # TOK-HF-8: "ab" then "cd" are encoded once as "abcd": [633 (▁ab), 2252 (cd)]
    doc = {"apply_chat_template": False, "requests": [{"messages": [
        {"role": "user", "content": "ab"}, {"role": "assistant", "content": [{"type": "text", "text": "cd"}]}]}]}
    r = runtime(mini(engines, loader)).prepare(doc, str(ROOT)).requests[0]
    assert r.ids.tolist() == [633, 2252] and r.formatted == "abcd"


def test_image_expansion_phi3_vision(engines, images):
    messages = [{"role": "user", "content": [{"type": "image", "image": "a600x800.png"},
                                             {"type": "text", "text": "Hello"}]}]
    _, [resp] = infer(phi3v(engines), greedy(messages, gen=4), images)
    # rendered "<|user|>\n<|image|>Hello<|end|>\n<|assistant|>\n" under transformers-auto: <|user|> 32010,
    # "\n" 13 (no rstrip on Phi-3-vision's role tokens, TOK-HF-6), <|image|> 32044, "Hello" 10994 (no "▁"
    # after a special token, TOK-HF-3), <|end|> 32007, 13, <|assistant|> 32001 (its rstrip takes the
    # last "\n"); the image token becomes 313 copies: n = 6 + 313
    rt = runtime(phi3v(engines))
    r = rt.prepare(greedy(messages), str(images)).requests[0]
    assert r.ids.tolist() == [32010, 13] + [32044] * 313 + [10994, 32007, 13, 32001]
    assert (r.spans[0].start, r.spans[0].count) == (2, 313)
    assert resp["input_tokens"] == r.n == 319
    assert resp["formatted_complete_request"] == "<|user|>\n<|image|>Hello<|end|>\n<|assistant|>\n"


def test_image_expansion_edge_llm_qwen_counter(engines, images):
    # chat template off, tokenizers-raw: "<|image|>Hello" -> <|image|> then "▁Hello" 15043 (the
    # file's normalizer prepends "▁" to every segment); the image is 6 tokens (see qwen_counter)
    doc = {"apply_chat_template": False, "requests": [{"messages": [{"role": "user", "content": [
        {"type": "image", "image": "c70x84.png"}, {"type": "text", "text": "Hello"}]}]}]}
    r = runtime(qwen_counter(engines)).prepare(doc, str(images)).requests[0]
    assert r.ids.tolist() == [32044] * 6 + [15043] and r.n == 7


@pytest.mark.parametrize("content, where, needle", [
    ([{"type": "text", "text": "<|image|>"}, {"type": "image", "image": "c70x84.png"}], ".messages",
     "2 image tokens for 1 image items"),
    ([{"type": "text", "text": "see <|image|>"}], ".messages", "1 image tokens for 0 image items"),
    ([{"type": "audio", "audio": "x.wav"}], ".messages[0].content[0].audio", "hf tokenizer"),
])
def test_layout_input_errors(engines, images, content, where, needle):
    from gpu_backend import BackendInputError
    with pytest.raises(BackendInputError) as e:
        runtime(qwen_counter(engines)).prepare(greedy([{"role": "user", "content": content}]), str(images))
    assert e.value.path == "$.requests[0]" + where and needle in e.value.message


def test_image_on_a_text_engine_is_an_input_error(engines, images):
    from gpu_backend import BackendInputError
    doc = greedy([{"role": "user", "content": [{"type": "image", "image": "c70x84.png"}]}])
    with pytest.raises(BackendInputError) as e:
        runtime(mini(engines, "tokenizers-raw")).prepare(doc, str(images))
    assert e.value.path == "$.requests[0].messages[0].content[0].image"


def test_logit_bias_ids_below_the_tokenizer_id_count(engines):
    from gpu_backend import BackendInputError
    rt = runtime(mini(engines, "tokenizers-raw"))
    rt.prepare(greedy(CHAT, logit_bias={"32010": -5}), str(ROOT))
    with pytest.raises(BackendInputError, match="below 32011"):
        rt.prepare(greedy(CHAT, logit_bias={"32011": -5}), str(ROOT))


# ---------------------------------------------------------------------------------- generation


def test_greedy_generation_emits_no_special_token_and_round_trips(engines):
    tok = Tokenizer.from_file(str(MINI / "tokenizer.json"))              # tokenizers-raw is the file itself
    doc = greedy(CHAT, gen=40, num_logprobs=3)
    doc["requests"] += [{"messages": [{"role": "user", "content": "Tell me a joke."}]}]
    _, responses = infer(mini(engines, "tokenizers-raw"), doc, ROOT)
    for resp in responses:
        ids = resp["output_ids"]
        assert ids and not set(ids) & MINI_SPECIALS and 32000 not in ids[:-1]
        body = [t for t in ids if t != 32000]
        assert resp["output_text"] == tok.decode(body)
        assert resp["finish_reason"] == ("end-of-sequence" if ids[-1] == 32000 else "max-length")
        # fed back as text, the output spells no special token
        assert not set(tok.encode(resp["output_text"], add_special_tokens=False).ids) & (MINI_SPECIALS | {32000})
        for step, entries in zip(ids, resp["logprobs"]):
            assert entries[0]["token_id"] == step
            for e in entries:
                assert e["token"] == tok.id_to_token(e["token_id"]) and e["bytes"] == list(e["token"].encode())
    schema_validator("output").validate({"input_file": "x.json", "responses": responses})


def test_stop_strings_match_decoded_text(engines):
    engine = mini(engines, "transformers-auto")
    _, [free] = infer(engine, greedy(CHAT, gen=16), ROOT)
    text = free["output_text"]
    stop = text[len(text) // 2:len(text) // 2 + 3]
    assert len(stop) == 3
    doc = greedy(CHAT, gen=16)
    doc["requests"][0]["stop"] = stop
    _, [stopped] = infer(engine, doc, ROOT)
    assert stopped["finish_reason"] == "stop-words" and stopped["output_text"] == text[:text.index(stop)]


def test_reuse_matches_a_bypass_replay(engines, images):
    engine = phi3v(engines)
    common = "Hello there, please describe this picture. Then say "
    ask = lambda end: greedy([{"role": "user", "content": [{"type": "image", "image": "a600x800.png"},
                                                         {"type": "text", "text": common + end}]}], gen=8)
    rt = runtime(engine)
    rt.infer(ask("hi."), str(images))
    [hit] = rt.infer(ask("bye."), str(images))["responses"]
    # shared ids: <|user|> "\n" (2), the image (313, positions 2-314), then the common text (5 to 20
    # ids): the last whole shared page ends at 320, after the image, so no media trim (CR-MEDIA-3)
    assert hit["context_cache"]["matched_tokens"] == 320 and hit["context_cache"]["reused_tokens"] == 320
    [replay] = runtime(engine).infer(dict(ask("bye."), context_cache_lookup_policy="bypass"), str(images))["responses"]
    assert replay["context_cache"]["reused_tokens"] == 0
    assert hit["output_ids"] == replay["output_ids"] and hit["input_tokens"] == replay["input_tokens"]


def test_another_image_of_the_same_size_is_not_reused(engines, images):
    engine = phi3v(engines)
    msg = lambda name: greedy([{"role": "user", "content": [{"type": "image", "image": name},
                                                            {"type": "text", "text": "Hello"}]}], gen=8)
    rt = runtime(engine)
    [a] = rt.infer(msg("a600x800.png"), str(images))["responses"]
    [b] = rt.infer(msg("b600x800.png"), str(images))["responses"]
    assert b["context_cache"]["matched_tokens"] == 0          # the image starts inside page 0 (CR-ID-4)
    assert a["input_tokens"] == b["input_tokens"] == 319


# ---------------------------------------------------------------------------------- loaders and counters


def _variant(tmp_path, **changes):
    d = tmp_path / "tok"
    d.mkdir()
    (d / "tokenizer.json").write_bytes((MINI / "tokenizer.json").read_bytes())
    config = json.loads((MINI / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**config, **changes}))
    return d


def test_transformers_auto_config_rules(tmp_path):
    from gpu_backend.hf_loader import load_tokenizer
    # TOK-HF-3: add_bos_token is ignored (no BOS), legacy true prepends "▁" after specials
    bos = load_tokenizer(_variant(tmp_path, add_bos_token=True), "transformers-auto")
    assert bos.encode("Hello world").ids == [15043, 3186]
    (tmp_path / "tok").rename(tmp_path / "tok0")
    legacy = load_tokenizer(_variant(tmp_path, legacy=True), "transformers-auto")
    assert legacy.encode("<|user|>\nHi", add_special_tokens=False).ids == [32010, 6324]
    auto = load_tokenizer(MINI, "transformers-auto")
    assert auto.encode("<|user|>\nHi", add_special_tokens=False).ids == [32010, 18567]
    assert auto.encode(" Hello", add_special_tokens=False).ids == [15043]                # raw: [29871, 15043]
    vision = load_tokenizer(VISION, "tokenizers-raw")
    assert vision.encode("<|user|>\nHi", add_special_tokens=False).ids == [32010, 29871, 13, 18567]


def test_counters_match_the_spec_examples():
    from gpu_backend.image_counters import CounterRefusal, check_settings, count_image

    def count(name, h, w, **settings):
        return count_image(name, check_settings(name, settings), h, w)
    assert count("hf/qwen-vl", 360, 540, max_pixels=12845056) == 247
    assert count("hf/qwen-vl", 360, 540, patch=16, max_pixels=12845056) == 187
    assert count("hf/qwen-vl", 70, 280) == 20 and count("edge-llm/qwen-vl", 70, 280, min_image_tokens=4,
                                                           max_image_tokens=16384) == 20
    assert count("hf/qwen-vl", 2000, 3000) == 1247
    assert count("edge-llm/qwen-vl", 2, 400, min_image_tokens=4, max_image_tokens=16384) == 14
    assert count("hf/qwen-vl", 2, 400) == 29
    assert count("edge-llm/qwen-vl", 10, 1000, min_image_tokens=4, max_image_tokens=256) == 36
    assert count("hf/qwen-vl", 10, 1000, max_pixels=256 * 784) == 20
    assert count("edge-llm/qwen-vl", 60, 76, min_image_tokens=64, max_image_tokens=16384) == 80
    assert count("hf/qwen-vl", 60, 76, min_pixels=50176) == 80
    assert count("hf/qwen-vl", 20, 3000, max_pixels=50176) == 97
    assert count("edge-llm/qwen-vl", 20, 3000, min_image_tokens=4, max_image_tokens=64) == 97
    for name, settings in (("hf/qwen-vl", {}), ("edge-llm/qwen-vl", {"min_image_tokens": 4, "max_image_tokens": 64})):
        with pytest.raises(CounterRefusal):
            count(name, 2, 401, **settings)
    assert [count("hf/internvl", h, w) for h, w in ((448, 448), (448, 896), (1344, 1344))] == [258, 770, 2562]
    assert count("edge-llm/internvl", 448, 448, min_image_tokens=256, max_image_tokens=3328) == 258
    assert count("edge-llm/internvl", 448, 448, min_image_tokens=512, max_image_tokens=3328) == 514
    assert [count("edge-llm/internvl", 16, w, min_image_tokens=768, max_image_tokens=1536)
            for w in (80, 96, 32, 16)] == [1538, 1538, 770, 1282]
    assert count("edge-llm/internvl", 448, 896, min_image_tokens=256, max_image_tokens=3328) == 770
    assert [count("hf/phi-3-vision", h, w) for h, w in ((336, 336), (600, 800), (800, 600))] == [2509, 1921, 1933]
    assert count("hf/phi-3-vision", 600, 800, num_crops=4) == 757
    with pytest.raises(ValueError, match="min_image_tokens"):
        check_settings("edge-llm/qwen-vl", {})                # TOK-MEDIA-7: no default bound


# ---------------------------------------------------------------------------------- a Qwen-style tokenizer

QWEN_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
                 " + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                 "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}"
                 "{% endif %}{% endif %}")
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]


@pytest.fixture(scope="module")
def qwen_folder(tmp_path_factory):
    """A tiny byte-level BPE laid out like Qwen2's files (Qwen2Tokenizer, <|image_pad|>, a
    chat_template.jinja): the vendored Qwen folders have no tokenizer.json."""
    from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
    from gpu_backend.hf_loader import QWEN2_SPLIT
    d = tmp_path_factory.mktemp("qwen")
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_SPLIT), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(["What is this? A picture of a cat, sitting on the mat. Hello there!"] * 20, trainer)
    tok.add_special_tokens(QWEN_SPECIALS)
    tok.save(str(d / "tokenizer.json"))
    base = tok.get_vocab_size(with_added_tokens=False)
    config = {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "added_tokens_decoder": {str(base + i): {"content": t, "lstrip": False, "rstrip": False,
                                                       "normalized": False, "single_word": False, "special": True}
                                       for i, t in enumerate(QWEN_SPECIALS)}}
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    (d / "chat_template.jinja").write_text(QWEN_TEMPLATE)
    return d, base


def test_qwen_style_image_placeholder(engines, images, qwen_folder):
    folder, base = qwen_folder
    engine = engines("qwen", tokenizer=str(folder), tokenizerLoader="transformers-auto", vision=True)
    cfg = json.loads((engine / "config.json").read_text())
    pad = base + 5
    assert (cfg["image_token_id"], cfg["eos_token_id"], cfg["vocab_size"]) == (pad, base + 2, base + 6)
    assert cfg["vision"]["counter"] == "edge-llm/qwen-vl"                     # the <|image_pad|> default
    assert (engine / "tokenizer" / "chat_template.jinja").read_text() == QWEN_TEMPLATE
    doc = greedy([{"role": "user", "content": [{"type": "image", "image": "c70x84.png"},
                                               {"type": "text", "text": "What is this?"}]}], gen=12)
    rt = runtime(engine)
    r = rt.prepare(doc, str(images)).requests[0]
    # TOK-HF-5: the image item becomes <|vision_start|><|image_pad|><|vision_end|>; the pad is then
    # repeated 6 times (the 70x84 image under edge-llm/qwen-vl, see qwen_counter)
    assert r.formatted == ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is this?<|im_end|>\n"
                           "<|im_start|>assistant\n")
    ids = r.ids.tolist()
    start = ids.index(pad)
    assert ids[start - 1] == base + 3 and ids[start:start + 6] == [pad] * 6 and ids[start + 6] == base + 4
    assert (r.spans[0].start, r.spans[0].count) == (start, 6)
    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    unexpanded = raw.encode(r.formatted, add_special_tokens=False).ids     # TOK-HF-3: the rebuild equals the file
    assert ids == unexpanded[:start] + [pad] * 6 + unexpanded[start + 1:]
    [resp] = rt.infer(doc, str(images))["responses"]
    body = [t for t in resp["output_ids"] if t != base + 2]
    assert body and max(body) < base and resp["output_text"] == raw.decode(body)
    assert "\ufffd" not in resp["output_text"]


def test_template_keywords_come_from_the_engine_then_the_request(engines, qwen_folder):
    # TOK-HF-4: the engine's chat_template_kwargs, then the request file's enable_thinking when it sets one
    folder, _ = qwen_folder
    engine = engines("qwen-nothink", tokenizer=str(folder), chatTemplateKwargs={"enable_thinking": False})
    rt = runtime(engine)
    ask = [{"role": "user", "content": "Hello"}]
    think = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    plain_text = think[:-len("<think>\n\n</think>\n\n")]
    assert rt.prepare(greedy(ask), str(ROOT)).requests[0].formatted == think
    assert rt.prepare(greedy(ask, enable_thinking=True), str(ROOT)).requests[0].formatted == plain_text
    plain = runtime(engines("qwen", tokenizer=str(folder), tokenizerLoader="transformers-auto", vision=True))
    assert plain.prepare(greedy(ask), str(ROOT)).requests[0].formatted == plain_text
    assert plain.prepare(greedy(ask, enable_thinking=False), str(ROOT)).requests[0].formatted == think


def test_broken_engine_tokenizer_is_an_input_error(engines, tmp_path):
    import shutil
    from gpu_backend import BackendInputError, Runtime
    engine = tmp_path / "e"
    shutil.copytree(mini(engines, "tokenizers-raw"), engine)
    cfg = json.loads((engine / "config.json").read_text())
    # the model's embedding rows (32064), not len(tokenizer)
    (engine / "config.json").write_text(json.dumps(dict(cfg, vocab_size=32064)))
    with pytest.raises(BackendInputError) as e:
        Runtime(engine)
    assert e.value.path == "$.vocab_size" and "32011" in e.value.message
    (engine / "config.json").write_text(json.dumps(cfg))
    (engine / "tokenizer" / "tokenizer.json").unlink()
    with pytest.raises(BackendInputError) as e:
        Runtime(engine)
    assert e.value.path == "$.tokenizer" and "tokenizer.json" in e.value.message


def test_length_rules_apply_to_the_expanded_n(engines, images):
    # two 313-token images: each fits max_input_len 400 alone (no input error), the prompt of
    # 2 + 313 + 313 + 4 = 632 ids does not: the batch fails at run time (CR-BATCH-5)
    content = [{"type": "image", "image": "a600x800.png"}, {"type": "image", "image": "b600x800.png"},
               {"type": "text", "text": "Hello"}]
    result = runtime(phi3v(engines)).infer(greedy([{"role": "user", "content": content}]), str(images))
    [resp] = result["responses"]
    assert result["failed_batches"] == 1 and resp["finish_reason"] == "error"
    assert resp["input_tokens"] == 632 and "exceeds max_input_len 400" in resp["output_text"]


def test_bytes_v1_engines_keep_their_description(engine):
    cfg = json.loads((engine() / "config.json").read_text())
    assert (cfg["tokenizer"], cfg["vocab_size"], cfg["eos_token_id"], cfg["image_token_id"], cfg["audio_token_id"]) \
        == ("bytes-v1", 320, 257, 262, 263)
    cfg = json.loads((engine(vision=True) / "config.json").read_text())
    assert cfg["vision"] == {"patch_size": 16}
    from gpu_backend import sampler
    assert runtime(engine()).vocab is sampler.BYTES_V1


def test_capabilities_declare_the_hf_profile():
    from gpu_backend.capabilities import capabilities
    caps = capabilities("cpu")
    schema_validator("capabilities").validate(caps)
    assert caps["tokenizer"] == ["bytes-v1", "hf"]


def test_spec_example_phi3_vision_image_then_newline(engines, tmp_path):
    # TOK-HF-7's Phi-3-vision example: [image, "\nWhat is shown?"] under transformers-auto gives
    # [32010, 13, 32044, 5618, 338, 4318, 29973, 32007, 13, 32001] (<|image|>'s rstrip eats the
    # "\n"); an image counted 5 makes n = 14. Under edge-llm/qwen-vl a 28x140 image is 5 tokens:
    # 28 / 28 = 1 and 140 / 28 = 5, 28 * 140 = 3920 >= 4 * 784, (28/14) * (140/14) / 4 = 5.
    Image.fromarray(np.zeros((28, 140, 3), np.uint8)).save(tmp_path / "q.png")
    engine = engines("phi3v-auto-qwen", tokenizer=str(VISION), tokenizerLoader="transformers-auto", vision=True,
                     imageCounter="edge-llm/qwen-vl")
    doc = greedy([{"role": "user", "content": [{"type": "image", "image": "q.png"},
                                               {"type": "text", "text": "\nWhat is shown?"}]}])
    r = runtime(engine).prepare(doc, str(tmp_path)).requests[0]
    assert r.ids.tolist() == [32010, 13] + [32044] * 5 + [5618, 338, 4318, 29973, 32007, 13, 32001] and r.n == 14
