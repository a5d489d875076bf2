"""Loading a Hugging Face tokenizer folder under a named loader (spec/hf-tokenizer.md).

The ids of a prompt depend on which code reads the files (TOK-HF-2), so the loader is part of
an engine's tokenizer profile:

- `tokenizers-raw`: tokenizer.json exactly as written (`Tokenizer.from_file`).
- `transformers-auto`: the pipeline transformers 5.x `AutoTokenizer` assembles (TOK-HF-3). Its
  tokenizer classes build a fresh `Tokenizer` in `__init__` from the file's vocabulary and
  merges, install their own normalizer, pre-tokenizer and decoder, then add the config's
  `added_tokens_decoder` one by one; the file's post-processor is kept (its padding and
  truncation too, but transformers turns them off for an encode that asks for neither, as a
  prompt's does), and `add_bos_token` / `add_eos_token` are dropped. This module rebuilds it the same way,
  through the `tokenizers` API, without importing transformers.

    load_tokenizer(folder, loader) -> tokenizers.Tokenizer   (cached by file contents)
    read_config(folder) -> dict                               (tokenizer_config.json)
"""
import hashlib
import json
import os
import threading

LOADERS = ("tokenizers-raw", "transformers-auto")
FILES = ("tokenizer.json", "tokenizer_config.json")
TEMPLATE_FILE = "chat_template.jinja"
NAMED_SPECIALS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

# transformers 5.x Qwen2Tokenizer's pre-tokenizer split (models/qwen2/tokenization_qwen2.py).
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

_cache: dict = {}
_lock = threading.Lock()


class TokenizerFolderError(ValueError):
    """A folder that is not a usable tokenizer profile under the loader asked for (TOK-HF-1)."""


def spelling(value):
    """A special token as a config names it: a string, or an AddedToken dict's content."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def read_config(folder: str) -> dict:
    path = os.path.join(folder, "tokenizer_config.json")
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise TokenizerFolderError(f"cannot read {path}: {e}") from None
    if not isinstance(config, dict):
        raise TokenizerFolderError(f"{path} is not a JSON object")
    return config


def load_tokenizer(folder: str, loader: str):
    """The `tokenizers.Tokenizer` that encodes as `loader` does on `folder` (TOK-HF-2).

    Cached by (loader, contents of the files): parsing a tokenizer.json takes a noticeable
    fraction of a second, and copies of one folder in several engines load once."""
    if loader not in LOADERS:
        raise TokenizerFolderError(f"unknown tokenizer loader {loader!r} (expected {' or '.join(LOADERS)})")
    blobs = []
    for name in FILES:
        try:
            with open(os.path.join(folder, name), "rb") as f:
                blobs.append(f.read())
        except OSError as e:
            raise TokenizerFolderError(f"{folder}: cannot read {name}: {e.strerror or e}") from None
    key = (loader, hashlib.sha256(b"\0".join(hashlib.sha256(b).digest() for b in blobs)).hexdigest())
    with _lock:
        if key not in _cache:
            _cache[key] = _build(folder, loader, blobs[0])
        return _cache[key]


def _build(folder: str, loader: str, tokenizer_json: bytes):
    from tokenizers import Tokenizer
    try:
        raw = Tokenizer.from_str(tokenizer_json.decode("utf-8"))
    except Exception as e:          # the Rust side raises its own exception type
        raise TokenizerFolderError(f"{folder}: tokenizer.json does not load: {e}") from None
    if loader == "tokenizers-raw":
        return raw
    return _transformers_auto(folder, raw, json.loads(tokenizer_json), read_config(folder))


def _transformers_auto(folder: str, raw, spec: dict, config: dict):
    """TOK-HF-3: the class named by `tokenizer_class` rebuilds everything but the vocabulary,
    merges, post-processor, padding and truncation."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    cls = str(config.get("tokenizer_class") or "")
    cls = cls[:-4] if cls.endswith("Fast") else cls
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or cls not in ("LlamaTokenizer", "Qwen2Tokenizer"):
        raise TokenizerFolderError(
            f"{folder}: loader transformers-auto is defined for LlamaTokenizer and Qwen2Tokenizer BPE files"
            f" (TOK-HF-3), not {config.get('tokenizer_class')!r} with a {model.get('type')!r} model")
    vocab = model.get("vocab") or {}
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model.get("merges") or []]
    if cls == "LlamaTokenizer":
        prefix = config.get("add_prefix_space")
        prefix = True if prefix is None else bool(prefix)
        scheme = "never" if not prefix else ("always" if config.get("legacy") else "first")
        tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=True, byte_fallback=True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=False)
        steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
        if prefix:
            steps.append(decoders.Strip(" ", 1, 0))
        tok.decoder = decoders.Sequence(steps)
    else:
        tok = Tokenizer(models.BPE(vocab, merges, continuing_subword_prefix="", end_of_word_suffix="",
                                   fuse_unk=False, byte_fallback=False))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=bool(config.get("add_prefix_space") or False), use_regex=False)])
        tok.decoder = decoders.ByteLevel()
    if raw.post_processor is not None:
        tok.post_processor = raw.post_processor
    # The file's padding and truncation are kept by transformers but switched off for every call
    # that asks for neither (`set_truncation_and_padding` with DO_NOT_PAD / DO_NOT_TRUNCATE), as
    # prompt encoding does: they never apply here.
    _add_config_tokens(folder, tok, spec, config)
    return tok


def _add_config_tokens(folder: str, tok, spec: dict, config: dict) -> None:
    """Added tokens as transformers registers them: the config's `added_tokens_decoder` in id
    order with its strip flags (tokenizer.json's list when the config has none), then any
    named special token still missing. Every id must come out as the config states it."""
    from tokenizers import AddedToken

    table = config.get("added_tokens_decoder")
    if isinstance(table, dict) and table:
        entries = sorted(((int(i), t) for i, t in table.items()), key=lambda e: e[0])
    else:
        entries = [(t["id"], t) for t in spec.get("added_tokens") or []]
    for token_id, t in entries:
        token = AddedToken(t["content"], single_word=bool(t.get("single_word", False)),
                           lstrip=bool(t.get("lstrip", False)), rstrip=bool(t.get("rstrip", False)),
                           normalized=bool(t.get("normalized", not t.get("special", False))),
                           special=bool(t.get("special", False)))
        tok.add_tokens([token])
        got = tok.token_to_id(t["content"])
        if got != token_id:
            raise TokenizerFolderError(f"{folder}: added token {t['content']!r} is id {token_id} in the config"
                                       f" but gets {got} when registered in order (ids must be contiguous)")
    have = {t.content for t in tok.get_added_tokens_decoder().values()}
    for key in NAMED_SPECIALS:
        name = spelling(config.get(key))
        if name is not None and name not in have:
            tok.add_tokens([AddedToken(name, normalized=False, special=True)])
            have.add(name)
