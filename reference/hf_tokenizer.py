"""Real Hugging Face tokenizers and chat templates: the `hf` tokenizer profile (spec/hf-tokenizer.md).

The one module of reference/ that uses third-party code: `tokenizers` (the Rust tokenizer
every HF-based runtime ends up in) and `jinja2` (chat templates). Both are imported when a
tokenizer is loaded, never at import time, so the rest of the oracle stays stdlib-only and
`import reference` works where they are missing (TOK-HF-1).

Why two loaders: the same files give different ids depending on who reads them (TOK-HF-2).
`tokenizers-raw` is `tokenizers.Tokenizer.from_file(tokenizer.json)` as it is, which is also
what llama.cpp's GGUF conversion of these files encodes (measured on Phi-3-mini).
`transformers-auto` is what transformers 5.x `AutoTokenizer.from_pretrained(folder)` builds,
reproduced here without importing transformers: its model-specific tokenizer classes rebuild
the pre-tokenization pipeline from `tokenizer_config.json` instead of using the file's
(TOK-HF-3). vLLM, SGLang and TRT-LLM load tokenizers through transformers. TensorRT
Edge-LLM's own C++ reader is neither loader: it skips the normalizer and the added tokens'
strip flags (spec/hf-tokenizer.md TOK-HF-2).

API (what the oracle integration uses):

    tok = load_hf_tokenizer("spec/tokenizers/phi-3-mini", loader="transformers-auto")
    tok.encode(text, add_special_tokens=False)   -> list[int]
    tok.apply_chat_template(messages, add_generation_prompt=True, **template_kwargs) -> str
    tok.chat_ids(messages, add_generation_prompt=True, **template_kwargs) -> list[int]
    tok.plain_ids(messages)                       -> list[int]   # apply_chat_template: false
    tok.expand_images(ids, counts)                -> list[int]
    tok.vocab_size, tok.token_id(spelling), tok.bos_token_id, tok.eos_token_id, tok.decode(ids)

Messages are `{"role", "content"}` dicts; content is a string or a list of
`{"type": "text", "text": T}` / `{"type": "image", ...}` items. A list is flattened into one
string before rendering (TOK-HF-5): texts as they are, each image as `image_placeholder(k)`.
To turn a prompt with images into model input ids, the caller counts each image's tokens
with `reference.media_tokens` (for the runtime being predicted) and calls
`expand_images(ids, counts)`, which repeats the model's image token (TOK-HF-7; Qwen-VL style
placeholders only, Phi-3-vision's processor re-encodes text chunks and is left to the caller).
A request's n is the length of the final list (TOK-HF-9):

    n = len(tok.expand_images(tok.chat_ids(messages, **kwargs), [media_tokens.image_tokens(...), ...]))
"""

import json
import os
import threading
from datetime import datetime

LOADERS = ("tokenizers-raw", "transformers-auto")
LOADER_RULES = {"tokenizers-raw": "TOK-HF-2", "transformers-auto": "TOK-HF-3"}
"""The rule that says which ids each loader gives (TOK-HF-9 for any other)."""
VENDORED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spec", "tokenizers")

# transformers 5.x Qwen2Tokenizer.__init__ (models/qwen2/tokenization_qwen2.py): PRETOKENIZE_REGEX.
_QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
# The named special tokens of a tokenizer_config.json (transformers' special_tokens_map keys).
_NAMED = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_CACHE: dict = {}
_LOCK = threading.Lock()


class HFTokenizer:
    """One loaded tokenizer folder under one loader. Build it with `load_hf_tokenizer`."""

    def __init__(self, folder: str, loader: str, backend, config: dict, chat_template: str | None):
        self.folder, self.loader, self.config = folder, loader, config
        self.chat_template = chat_template
        self._backend = backend
        specials = {key: _spelling(config.get(key)) for key in _NAMED}
        # What transformers passes to every template besides the caller's kwargs (its special_tokens_map).
        self.template_vars = {key: value for key, value in specials.items() if value is not None}
        self.bos_token_id = self._maybe_id(specials["bos_token"])
        self.eos_token_id = self._maybe_id(specials["eos_token"])
        # TOK-HF-7: the single token an image placeholder expands (Qwen-VL's pad, else `<|image|>`)
        self.image_token_id = self._maybe_id("<|image_pad|>")
        if self.image_token_id is None:
            self.image_token_id = self._maybe_id("<|image|>")

    @property
    def vocab_size(self) -> int:
        """Ids the tokenizer can produce: base vocabulary plus added tokens (len(tokenizer) in
        transformers, TOK-HF-9). The model's embedding table may be larger (Phi-3: 32064 rows, 32011 ids)."""
        return self._backend.get_vocab_size(with_added_tokens=True)

    def token_id(self, spelling: str) -> int:
        """The id of a vocabulary entry or added token, spelled as in tokenizer.json; KeyError if none."""
        found = self._backend.token_to_id(spelling)
        if found is None:
            raise KeyError(f"{spelling!r} is not a token of {self.folder}")
        return found

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        """Token ids of `text`. Added tokens spelled in the text are matched (with their
        lstrip/rstrip flags); `add_special_tokens` applies tokenizer.json's post-processor
        (e.g. Phi-3-vision's BOS). Deliberately keyword-only with no default: transformers
        defaults to True in `encode` but uses False for chat, and the two give different n."""
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Text of `ids` through the loader's decoder (for logs and stop strings, not for counting)."""
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def image_placeholder(self, k: int) -> str:
        """The text one image item becomes in a flattened message (TOK-HF-5); `k` counts the
        images of the conversation from 1 (unused by the two conventions: every image's
        placeholder is the same text). Qwen-VL family: `<|vision_start|><|image_pad|><|vision_end|>`
        (what its own chat templates emit); a tokenizer with a single `<|image|>` token
        (Phi-3-vision): `<|image|>`. ValueError for a tokenizer without an image convention."""
        if self._maybe_id("<|image_pad|>") is not None:
            return "<|vision_start|><|image_pad|><|vision_end|>"
        if self._maybe_id("<|image|>") is not None:
            return "<|image|>"
        raise ValueError(f"{self.folder}: no image placeholder convention for this tokenizer")

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, **template_kwargs) -> str:
        """Render the chat template exactly as transformers' `apply_chat_template(tokenize=False)`
        does (TOK-HF-4): sandboxed jinja2 with trim_blocks/lstrip_blocks, its `tojson`,
        `raise_exception` and `strftime_now`, the config's special tokens as variables, and
        `template_kwargs` (e.g. Qwen3's `enable_thinking=False`) on top. The template runs in a
        worker process, bounded in time, memory and output (reference/bounded_template.py):
        ValueError when it does not compile, raises or exceeds a bound."""
        from .bounded_template import render
        if self.chat_template is None:
            raise ValueError(f"{self.folder}: tokenizer_config.json has no chat_template")
        variables = {**self.template_vars, **template_kwargs}
        return render(self.chat_template, dict(variables, messages=self._flatten(messages), tools=None,
                                               documents=None, add_generation_prompt=add_generation_prompt))

    def chat_ids(self, messages, add_generation_prompt: bool = True, **template_kwargs) -> list[int]:
        """The rendered chat, encoded as transformers' `apply_chat_template(tokenize=True)` does:
        with add_special_tokens=False, so the post-processor adds nothing and any BOS comes from
        the template itself (TOK-HF-6). Image tokens are not expanded yet (see expand_images)."""
        rendered = self.apply_chat_template(messages, add_generation_prompt, **template_kwargs)
        return self.encode(rendered, add_special_tokens=False)

    def plain_ids(self, messages) -> list[int]:
        """`apply_chat_template: false`: the flattened contents of all messages joined in order
        with no separator and encoded once, with no special tokens (TOK-HF-8)."""
        text = "".join(m["content"] for m in self._flatten(messages))
        return self.encode(text, add_special_tokens=False)

    def expand_images(self, ids, counts) -> list[int]:
        """Repeat the k-th image token `counts[k]` times (TOK-HF-7): what the HF Qwen-VL processors
        and vLLM do with `<|image_pad|>`. Needs a model whose placeholder holds one image token;
        the number of image tokens must equal len(counts)."""
        if self.image_token_id is None:
            raise ValueError(f"{self.folder}: images are not expanded from a single token for this "
                             f"tokenizer (see spec/hf-tokenizer.md TOK-HF-7)")
        out, k = [], 0
        for token in ids:
            if token != self.image_token_id:
                out.append(token)
                continue
            if k == len(counts):
                raise ValueError(f"more image tokens in the prompt than the {len(counts)} counts given")
            out.extend([token] * counts[k])
            k += 1
        if k != len(counts):
            raise ValueError(f"{len(counts)} image counts given for {k} image tokens in the prompt")
        return out

    def _flatten(self, messages) -> list[dict]:
        """Messages with list contents joined into strings, and None-valued keys dropped (as
        transformers does before rendering)."""
        out, images = [], 0
        for message in messages:
            message = {key: value for key, value in message.items() if value is not None}
            content = message.get("content")
            if isinstance(content, list):
                parts = []
                for item in content:
                    if item["type"] == "text":
                        parts.append(item["text"])
                    elif item["type"] == "image":
                        images += 1
                        parts.append(self.image_placeholder(images))
                    else:
                        raise ValueError(f"content item type {item['type']!r} is not text or image")
                message["content"] = "".join(parts)
            out.append(message)
        return out

    def _maybe_id(self, spelling):
        return None if spelling is None else self._backend.token_to_id(spelling)


def tokenize_hf(messages, path: str, base_dir: str, chat_template: bool, generation_prompt: bool, engine,
                keywords: dict | None = None):
    """The input of one request under the engine's `hf` profile (TOK-HF-5 .. TOK-HF-9): the
    flattened messages rendered with the chat template (or joined), encoded without special
    tokens, each image's token repeated as many times as the engine's media counter says, and
    the media spans of those runs (identity per item, CR-ID-4). `keywords`: the request file's
    template keywords, over the engine's `chat_template_kwargs`. Returns a bytes-v1 `Prompt`
    shape: token ids (array of int32) and spans."""
    from array import array

    from .decode import DecodeError, load_image
    from .errors import InputError
    from .identity import MediaSpan
    from .media_tokens import image_tokens
    from .tokenizer import Prompt

    tok = engine.hf_tokenizer()
    counts, items = [], []
    for j, message in enumerate(messages):
        content = message["content"]
        for k, item in enumerate(content if isinstance(content, list) else []):
            where = f"{path}[{j}].content[{k}]"
            if item["type"] == "audio":
                raise InputError(f"{where}.audio", "audio input is defined for the bytes-v1 tokenizer only")
            if item["type"] != "image":
                continue
            if engine.vision is None:
                raise InputError(f"{where}.image", "the engine has no vision encoder, so it cannot take image input")
            try:
                media = load_image(os.path.join(base_dir, item["image"]))
                count = image_tokens(engine.vision["counter"], media.geometry[0], media.geometry[1],
                                     engine.vision.get("settings"))
            except (DecodeError, ValueError) as e:
                raise InputError(f"{where}.image", str(e)) from None
            if count > engine.max_input_len:
                raise InputError(f"{where}.image", f"the image needs {count} tokens, more than max_input_len "
                                                   f"{engine.max_input_len}")
            counts.append(count)
            items.append(media)
    from .tokenizer import MAX_INPUT_TEXT_BYTES
    kwargs = {**(engine.tokenizer.get("chat_template_kwargs") or {}), **(keywords or {})}    # TOK-HF-4
    try:
        text = (tok.apply_chat_template(messages, generation_prompt, **kwargs) if chat_template
                else "".join(m["content"] for m in tok._flatten(messages)))          # TOK-HF-6, TOK-HF-8
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_INPUT_TEXT_BYTES:
            raise ValueError(f"the input text of this request is {size} bytes, more than the {MAX_INPUT_TEXT_BYTES} "
                             "a request may hold before tokenization (spec/RUNNING.md section 8)")
        ids = tok.encode(text, add_special_tokens=False)
        ids = tok.expand_images(ids, counts) if counts else ids
    except ValueError as e:
        raise InputError(path, str(e)) from None
    prompt = Prompt()
    prompt.tokens = array("i", ids)
    start = 0
    for media, count in zip(items, counts):      # the k-th run of image tokens is image k
        start = ids.index(tok.image_token_id, start)
        prompt.spans.append(MediaSpan(start, start + count, media.digest, "image", media.content))
        start += count
    return prompt


TOKENIZER_FOLDER = "tokenizer"   # an engine folder carries its tokenizer here (spec/engine.md section 1)


def describe_build(args: dict, where: str) -> dict:
    """The description keys a build with `--tokenizer DIR` writes (spec/engine.md section 1):
    the profile (the files copied into the engine folder; here the source folder, which the
    oracle reads), the id count (TOK-HF-9), the end-of-sequence and image token ids, and the
    media counter with every setting (defaults of spec/media-tokens.md TOK-MEDIA-7)."""
    from .errors import InputError
    from .media_tokens import BUILD_SETTINGS, DEFAULT_COUNTER

    folder, loader = args["tokenizer"], args["tokenizerLoader"] or "tokenizers-raw"
    if loader not in LOADERS:
        raise InputError(f"{where}.tokenizerLoader", f"must be one of {', '.join(LOADERS)}")
    if not isinstance(folder, str) or not all(os.path.isfile(os.path.join(folder, f))
                                              for f in ("tokenizer.json", "tokenizer_config.json")):
        raise InputError(f"{where}.tokenizer", f"{folder!r} is not a folder with tokenizer.json and "
                                               f"tokenizer_config.json (TOK-HF-1){fetch_hint(folder)}")
    if args["audio"]:
        raise InputError(f"{where}.audio", "audio input is defined for the bytes-v1 tokenizer only")
    tok = load_hf_tokenizer(folder, loader)
    kwargs = args["chatTemplateKwargs"] or {}
    out = {"tokenizer": {"profile": "hf", "files": os.path.realpath(folder), "loader": loader,
                         "chat_template_kwargs": dict(kwargs)},
           "vocab_size": tok.vocab_size, "eos_token_id": tok.eos_token_id, "image_token_id": None,
           "audio_token_id": None, "vision": None, "audio": None}
    if not args["vision"]:
        return out
    if tok.image_token_id is None:
        raise InputError(f"{where}.vision", "the tokenizer has no image token (<|image_pad|> or <|image|>)")
    counter = args["imageCounter"] or DEFAULT_COUNTER[tok.decode([tok.image_token_id])]
    if counter not in BUILD_SETTINGS:
        raise InputError(f"{where}.imageCounter", f"must be one of {', '.join(sorted(BUILD_SETTINGS))}")
    out.update(image_token_id=tok.image_token_id,
               vision={"counter": counter, "settings": {**BUILD_SETTINGS[counter], **(args["imageCounterSettings"] or {})}})
    return out


FETCHED = ("qwen2.5", "qwen3")
"""spec/tokenizers/ folders committed without their 11 MB tokenizer.json (spec/tokenizers/SOURCES.md)."""


def fetch_hint(folder: str) -> str:
    """Where a committed folder's missing tokenizer.json comes from, or ''."""
    if os.path.basename(os.path.realpath(folder)) in FETCHED and not os.path.isfile(os.path.join(folder, "tokenizer.json")):
        return ("; spec/tokenizers/qwen2.5 and qwen3 are committed without their 11 MB tokenizer.json: "
                "`.venv/bin/python tools/fetch_qwen_tokenizer.py` fetches it and prints the folders to use")
    return ""


def load_hf_tokenizer(folder: str, loader: str = "transformers-auto") -> HFTokenizer:
    """Load tokenizer.json and tokenizer_config.json of `folder` under `loader` (one of LOADERS).

    Loaded tokenizers are cached per (folder, loader, file modification times): parsing a
    Qwen tokenizer.json takes seconds, and the oracle asks for the same profile per request.
    """
    if loader not in LOADERS:
        raise ValueError(f"unknown tokenizer loader {loader!r}; expected one of {LOADERS}")
    folder = os.path.realpath(folder)  # as the OS opens it: `..` after a symlink leaves the link's target
    if fetch_hint(folder):
        raise ValueError(f"{folder} has no tokenizer.json (TOK-HF-1){fetch_hint(folder)}")
    files = [os.path.join(folder, name) for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")]
    stamp = tuple(os.stat(f).st_mtime_ns if os.path.exists(f) else None for f in files)
    key = (folder, loader, stamp)
    with _LOCK:
        if key not in _CACHE:
            for stale in [k for k in _CACHE if k[:2] == key[:2]]:
                del _CACHE[stale]  # the files changed: drop the old version
            _CACHE[key] = _load(folder, loader, *files)
        return _CACHE[key]


def _load(folder: str, loader: str, tokenizer_file: str, config_file: str, template_file: str) -> HFTokenizer:
    from tokenizers import Tokenizer

    try:
        with open(config_file, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{config_file}: cannot read it as JSON: {e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{config_file}: a tokenizer_config.json is a JSON object")
    try:
        if loader == "tokenizers-raw":
            backend = Tokenizer.from_file(tokenizer_file)
        else:
            with open(tokenizer_file, encoding="utf-8") as f:
                spec = json.load(f)
            backend = Tokenizer.from_str(json.dumps(_transformers_auto(spec, config)))
    except Exception as e:             # the `tokenizers` library raises its own exception types
        raise ValueError(f"{tokenizer_file}: not a tokenizer the tokenizers library reads: "
                         f"{' '.join(str(e).split())[:200]}") from None
    return HFTokenizer(folder, loader, backend, config, _chat_template(config, template_file))


def _transformers_auto(spec: dict, config: dict) -> dict:
    """tokenizer.json as transformers 5.x rebuilds it in its tokenizer class's __init__ (TOK-HF-3).

    Kept from the file: vocabulary, merges, post-processor, padding and truncation. Replaced:
    normalizer, pre-tokenizer, decoder and BPE options, from the class and tokenizer_config.json.
    Added tokens come from the config's added_tokens_decoder. The config's add_bos_token and
    add_eos_token are ignored: transformers drops them whenever a tokenizer.json exists
    (tokenization_utils_base.py, `_from_pretrained`), so BOS/EOS come from the file's post-processor.
    """
    cls = config.get("tokenizer_class", "").removesuffix("Fast")
    if cls not in ("LlamaTokenizer", "Qwen2Tokenizer") or spec["model"]["type"] != "BPE":
        raise ValueError(f"loader 'transformers-auto' reproduces LlamaTokenizer and Qwen2Tokenizer "
                         f"(BPE) only, not {config.get('tokenizer_class')!r}")
    spec = dict(spec)
    model = dict(spec["model"])
    if cls == "LlamaTokenizer":
        prefix = config.get("add_prefix_space")
        prefix = True if prefix is None else prefix
        scheme = ("always" if config.get("legacy", False) else "first") if prefix else "never"
        model.update(unk_token=None, fuse_unk=True, byte_fallback=True, ignore_merges=False, dropout=None)
        spec["normalizer"] = None
        spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme,
                                 "split": False}
        decoders = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                    {"type": "ByteFallback"}, {"type": "Fuse"}]
        if prefix:
            decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
        spec["decoder"] = {"type": "Sequence", "decoders": decoders}
    else:
        prefix = bool(config.get("add_prefix_space") or False)
        model.update(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False,
                     byte_fallback=False, ignore_merges=False, dropout=None)
        spec["normalizer"] = {"type": "NFC"}
        spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": _QWEN2_SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": False}]}
        spec["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    spec["model"] = model
    spec["added_tokens"] = _added_tokens(spec, config)
    return spec


def _added_tokens(spec: dict, config: dict) -> list[dict]:
    """The config's added_tokens_decoder (with its strip flags), plus any named special token of
    the config that it lacks, as transformers adds them; tokenizer.json's list if the config has none."""
    decoder = config.get("added_tokens_decoder")
    if not decoder:
        return spec.get("added_tokens", [])
    tokens = [{"id": int(i), "content": t["content"], "single_word": t.get("single_word", False),
               "lstrip": t.get("lstrip", False), "rstrip": t.get("rstrip", False),
               "normalized": t.get("normalized", True), "special": t.get("special", False)}
              for i, t in decoder.items()]
    tokens.sort(key=lambda t: t["id"])
    have = {t["content"] for t in tokens}
    vocab = spec["model"]["vocab"]
    next_id = max([len(vocab) - 1] + [t["id"] for t in tokens]) + 1
    for key in _NAMED:
        spelling = _spelling(config.get(key))
        if spelling is None or spelling in have:
            continue
        token_id = vocab.get(spelling, next_id)
        next_id += token_id == next_id
        tokens.append({"id": token_id, "content": spelling, "single_word": False, "lstrip": False,
                       "rstrip": False, "normalized": False, "special": True})
        have.add(spelling)
    return tokens


def _chat_template(config: dict, template_file: str) -> str | None:
    """A chat_template.jinja next to the config wins over the config's entry, as in transformers 5.x;
    a list of named templates yields the one named "default"."""
    if os.path.exists(template_file):
        with open(template_file, encoding="utf-8") as f:
            return f.read()
    template = config.get("chat_template")
    if isinstance(template, list):
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)
    return template                # a value that is not a string is refused when it is rendered


def _spelling(value):
    """A special token as the config states it: a string, or an AddedToken dict with "content"."""
    return value.get("content") if isinstance(value, dict) else value


def _compile(source: str):
    """The jinja2 environment of transformers' `_cached_compile_jinja_template` (utils/chat_template_utils.py)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` marks assistant text for training masks;
        rendering keeps the body unchanged."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # Jinja's own tojson escapes HTML characters; transformers replaces it with plain json.dumps.
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


def _template_worker() -> None:
    """`python hf_tokenizer.py --template-worker`: compile and render chat templates for
    reference/bounded_template.py, one JSON request per line on stdin, one answer per line on
    stdout, under the memory and output limits it passes in KVCONFORM_TEMPLATE_LIMITS."""
    import resource
    import sys
    limits = json.loads(os.environ.get("KVCONFORM_TEMPLATE_LIMITS") or "{}")
    memory, cap = limits.get("memory"), limits.get("output") or (16 << 20)
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    compiled = {}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "source" in request:
                try:
                    compiled[request["id"]] = _compile(request["source"])
                except Exception as e:                    # jinja2's syntax errors, and any other
                    raise SyntaxError(f"the chat template does not compile: {type(e).__name__}: {e}") from None
            template = compiled[request["id"]]
            answer = {"text": ""}
            if not request.get("compile"):
                parts, size = [], 0
                for piece in template.generate(**json.loads(request["variables"])):
                    size += len(piece)
                    if size > cap:
                        raise OverflowError(f"the chat template renders more than {cap >> 20} Mi characters")
                    parts.append(piece)
                answer["text"] = "".join(parts)
        except MemoryError:
            answer = {"error": f"the chat template used more than {(memory or 0) >> 20} MiB of memory"}
        except (SyntaxError, OverflowError) as e:
            answer = {"error": str(e)}
        except Exception as e:
            answer = {"error": f"the chat template cannot render this conversation: {type(e).__name__}: {e}"}
        del request
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _template_worker()
