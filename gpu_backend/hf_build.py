"""Building an engine around a Hugging Face tokenizer folder (`build --tokenizer DIR`).

The engine folder is self-contained: DIR's tokenizer.json, tokenizer_config.json and
chat_template.jinja (when present) are copied to ENGINE/tokenizer/, and config.json names that
copy with the loader (TOK-HF-1, TOK-HF-2). Everything the runtime and the kit's oracle must
agree on is written explicitly: the id count (TOK-HF-9), the EOS and image token ids, and the
media counter with every one of its settings (TOK-MEDIA-7).

    BUILD_ARGS: the build arguments this module reads (all optional)
    describe(args, fail) -> the config.json keys of an hf engine
    copy_tokenizer(src, engine_dir); same_tokenizer(src, engine_dir) -> bool
"""
import filecmp
import json
import os
import shutil

from .chat_template import check_template, template_source
from .hf_loader import FILES, LOADERS, TEMPLATE_FILE, TokenizerFolderError, load_tokenizer, read_config, spelling
from .hf_prompt import image_convention
from .image_counters import check_settings

BUILD_ARGS = {"tokenizer": (str, None), "tokenizerLoader": (str, None), "chatTemplateKwargs": (dict, None),
              "imageCounter": (str, None), "imageCounterSettings": (dict, None)}
FOLDER = "tokenizer"                    # ENGINE/tokenizer/
DEFAULT_LOADER = "tokenizers-raw"
# Small but real settings: an image costs a few to a few hundred tokens, so small engines
# (max_input_len of a few hundred) take images; `--imageCounterSettings` overrides any of them.
BUILD_SETTINGS = {
    "hf/qwen-vl": {"patch": 14, "merge": 2, "min_pixels": 4 * 28 * 28, "max_pixels": 256 * 28 * 28},
    "vllm/qwen-vl": {"patch": 14, "merge": 2, "min_pixels": 4 * 28 * 28, "max_pixels": 256 * 28 * 28},
    "edge-llm/qwen-vl": {"patch": 14, "merge": 2, "min_image_tokens": 4, "max_image_tokens": 256},
    "hf/internvl": {"min_patches": 1, "max_patches": 4, "tile": 448},
    "edge-llm/internvl": {"min_image_tokens": 256, "max_image_tokens": 1280, "tile": 448},
    "hf/phi-3-vision": {"num_crops": 4},
}
DEFAULT_COUNTER = {"<|image_pad|>": "edge-llm/qwen-vl", "<|image|>": "hf/phi-3-vision"}
# Names the renderer itself passes (TOK-HF-4): a template keyword cannot replace them.
RESERVED_KWARGS = ("messages", "tools", "documents", "add_generation_prompt")


def describe(a: dict, fail) -> dict:
    """Config keys of an engine built with `--tokenizer` (a: all build arguments, defaults
    filled; fail(flag, message) raises). Loads the tokenizer once to read its ids."""
    folder, loader = a["tokenizer"], a["tokenizerLoader"] or DEFAULT_LOADER
    if loader not in LOADERS:
        fail("tokenizerLoader", f"expected one of {', '.join(LOADERS)}, got {loader!r}")
    if not os.path.isdir(folder):
        fail("tokenizer", f"{folder} is not a folder")
    for name in FILES:
        if not os.path.isfile(os.path.join(folder, name)):
            fetch = (": the repository's spec/tokenizers/qwen2.5 and qwen3 come without it; "
                     "`.venv/bin/python tools/fetch_qwen_tokenizer.py` fetches it and prints the folders to use"
                     if name == "tokenizer.json" and os.path.basename(os.path.realpath(folder)) in ("qwen2.5", "qwen3")
                     else "")
            fail("tokenizer", f"{folder} has no {name} (TOK-HF-1){fetch}")
    kwargs = a["chatTemplateKwargs"] or {}
    bad = next((k for k in kwargs if k in RESERVED_KWARGS), None)
    if bad is not None:
        fail("chatTemplateKwargs", f"{bad!r} is set by the renderer itself, not a template keyword")
    try:
        json.dumps(kwargs, allow_nan=False)
    except (TypeError, ValueError) as e:
        fail("chatTemplateKwargs", f"not JSON data: {e}")
    if a["audio"]:
        fail("audio", "audio input is not defined with an hf tokenizer (spec/hf-tokenizer.md)")
    try:
        tok = load_tokenizer(folder, loader)
        config = read_config(folder)
    except TokenizerFolderError as e:
        fail("tokenizer", str(e))
    source = template_source(folder, config)
    if source is not None:
        try:
            check_template(source)
        except ValueError as e:
            fail("tokenizer", f"{folder}: {e}")
    eos_name = spelling(config.get("eos_token"))
    eos = None if eos_name is None else tok.token_to_id(eos_name)
    if eos is None:
        fail("tokenizer", f"tokenizer_config.json names no eos_token the tokenizer has ({eos_name!r})")
    out = {"tokenizer": {"profile": "hf", "files": FOLDER, "loader": loader, "chat_template_kwargs": dict(kwargs)},
           "vocab_size": tok.get_vocab_size(with_added_tokens=True), "vision": None, "audio": None,
           "image_token_id": None, "audio_token_id": None, "eos_token_id": eos}
    if not a["vision"]:
        for flag in ("imageCounter", "imageCounterSettings"):
            if a[flag] is not None:
                fail(flag, "needs --vision")
        return out
    convention = image_convention(tok)
    if convention is None:
        fail("vision", "the tokenizer has no image token (<|image_pad|> or <|image|>)")
    token_id, _ = convention
    counter = a["imageCounter"] or DEFAULT_COUNTER[tok.id_to_token(token_id)]
    if counter not in BUILD_SETTINGS:
        fail("imageCounter", f"expected one of {', '.join(BUILD_SETTINGS)}, got {counter!r}")
    try:
        settings = check_settings(counter, {**BUILD_SETTINGS[counter], **(a["imageCounterSettings"] or {})})
    except ValueError as e:
        fail("imageCounterSettings", str(e))
    out.update(vision={"counter": counter, "settings": settings}, image_token_id=token_id)
    return out


def _names(src: str) -> list:
    return list(FILES) + ([TEMPLATE_FILE] if os.path.isfile(os.path.join(src, TEMPLATE_FILE)) else [])


def same_tokenizer(src: str, engine_dir: str) -> bool:
    """Whether ENGINE/tokenizer/ holds exactly DIR's files (a rebuild of the same engine)."""
    dst = os.path.join(engine_dir, FOLDER)
    if not os.path.isdir(dst) or sorted(os.listdir(dst)) != sorted(_names(src)):
        return False
    return all(filecmp.cmp(os.path.join(src, n), os.path.join(dst, n), shallow=False) for n in _names(src))


def copy_tokenizer(src: str, engine_dir: str) -> None:
    """Replace ENGINE/tokenizer/ by a copy of DIR's tokenizer files (nothing else of DIR)."""
    dst = os.path.join(engine_dir, FOLDER)
    tmp = f"{dst}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        for name in _names(src):
            shutil.copyfile(os.path.join(src, name), os.path.join(tmp, name))
        if os.path.lexists(dst):
            shutil.rmtree(dst) if os.path.isdir(dst) and not os.path.islink(dst) else os.remove(dst)
        os.replace(tmp, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
