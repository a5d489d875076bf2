"""Request files: parsing, semantic validation and batching (CR-POL-1, CR-POL-5, CR-BATCH-1,
CR-BATCH-4, CR-BATCH-5, spec/tokenizer.md).

Every error is an InputError carrying the JSON path of the offending value, e.g.
"$.requests[2].messages[0].content[1].image". Unknown keys are ignored (Edge-LLM's parser does
the same), so a case file with a `_conformance` block parses like a plain request file.
"""

import os
import re
from dataclasses import dataclass, field
from array import array

from .errors import InputError
from .identity import MediaSpan
from .tokenizer import EOS, MAX_INPUT_TEXT_BYTES, VOCAB_SIZE, tokenize_messages
from .trace import Step

DEFAULT_MAX_GENERATE_LENGTH = 256
LOOKUP_POLICIES = ("use_cache", "bypass")
COMMIT_POLICIES = ("including_generated_tokens", "prefill_state_only")


@dataclass
class Request:
    """One request of a file, tokenized."""
    index: int
    tokens: array
    spans: list[MediaSpan]
    lora_name: str | None
    legacy_capture: bool
    stop: list[str]
    disable_spec_decode: bool = False      # CR-SPEC-7: its batch decodes as vanilla

    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def has_audio(self) -> bool:
        return any(s.modality == "audio" for s in self.spans)


@dataclass
class ParsedFile:
    """A request file after parsing: requests, their batches and the file-level settings."""
    requests: list[Request]
    batches: list[list[int]]
    batch_size: int
    max_generate_length: int
    lookup_policy: str
    commit_policy: str
    available_lora: dict = field(default_factory=dict)
    template: dict = field(default_factory=dict)
    """The file's chat-template switches as given (apply_chat_template, add_generation_prompt,
    enable_thinking; TOK-HF-4): what the trace says decided an `hf` input's ids."""


def _check(cond: bool, path: str, message: str) -> None:
    if not cond:
        raise InputError(path, message)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_text(text: str, path: str) -> None:
    """Text is tokenized as its UTF-8 bytes (spec/tokenizer.md section 2): a JSON string holding a
    lone UTF-16 surrogate (an escape such as \\ud800) has none, so it is an input error. ASCII
    text (the common case, told in O(1)) holds no surrogate and is not searched."""
    bad = None if text.isascii() else _SURROGATE.search(text)
    if bad is not None:
        raise InputError(path, f"not valid Unicode: lone surrogate U+{ord(bad.group()):04X} at offset "
                               f"{bad.start()} (text must be encodable as UTF-8)")


def _is_int(value) -> bool:
    return type(value) is int


def parse_request_file(doc, base_dir: str, engine=None, batch_size: int | None = None, *,
                       lora_files: bool = False) -> ParsedFile:
    """Parse and check a request file; tokenize every request (media decoded from base_dir).

    With `engine` the engine-dependent checks run too: media support, the image placeholder
    limit, LoRA adapters the engine lacks, and batch_size <= max_batch_size (CR-BATCH-1).
    `batch_size` is the --batchSize override, if any. With `lora_files` the weight path of every
    adapter a request names must be a regular file (CR-BATCH-4), as a runtime requires; it is
    off where a case's paths are relative to an engine folder that does not exist (the
    reference backend). Weights are never read. Raises InputError.
    """
    _check(isinstance(doc, dict), "$", "a request file must be a JSON object")
    _check("requests" in doc, "$", "missing required key 'requests'")
    reqs = doc["requests"]
    _check(isinstance(reqs, list) and len(reqs) > 0, "$.requests", "must be a non-empty array")
    lookup = doc.get("context_cache_lookup_policy", "use_cache")
    _check(lookup in LOOKUP_POLICIES, "$.context_cache_lookup_policy",
           f"unknown lookup policy {lookup!r} (CR-POL-1: use_cache or bypass)")
    commit = doc.get("context_cache_commit_policy", "including_generated_tokens")
    _check(commit in COMMIT_POLICIES, "$.context_cache_commit_policy",
           f"unknown commit policy {commit!r} (CR-POL-5: including_generated_tokens or prefill_state_only)")
    file_batch = doc.get("batch_size", 1)
    _check(_is_int(file_batch) and file_batch >= 1, "$.batch_size", "must be an integer >= 1")
    mgl = doc.get("max_generate_length", DEFAULT_MAX_GENERATE_LENGTH)
    _check(_is_int(mgl) and mgl >= 1, "$.max_generate_length", "must be an integer >= 1")
    template = doc.get("apply_chat_template", True)
    _check(type(template) is bool, "$.apply_chat_template", "must be a boolean")
    gen_prompt = doc.get("add_generation_prompt", True)
    _check(type(gen_prompt) is bool, "$.add_generation_prompt", "must be a boolean")
    thinking = doc.get("enable_thinking", False)
    _check(type(thinking) is bool, "$.enable_thinking", "must be a boolean")
    # TOK-HF-4: a file that sets enable_thinking passes it to an hf chat template (bytes-v1 has none)
    keywords = {"enable_thinking": thinking} if "enable_thinking" in doc else {}
    vocab = engine.vocab_size if engine is not None else VOCAB_SIZE
    _logit_bias(doc, "$", vocab)
    lora = doc.get("available_lora_weights", {})
    _check(isinstance(lora, dict) and all(isinstance(v, str) and v for v in lora.values()),
           "$.available_lora_weights", "must map adapter names to weight paths")
    _check(isinstance(base_dir, str), "$", "base_dir must be a directory path")

    requests = [_request(r, i, base_dir, template, gen_prompt, lora, engine, lora_files, keywords)
                for i, r in enumerate(reqs)]
    size = batch_size if batch_size is not None else file_batch
    if engine is not None and size > engine.max_batch_size:
        source = " (--batchSize)" if batch_size else ""
        raise InputError("$.batch_size", f"batch size {size}{source} exceeds the engine's "
                                         f"max_batch_size {engine.max_batch_size} (CR-BATCH-1)")
    batches = [list(range(i, min(i + size, len(requests)))) for i in range(0, len(requests), size)]
    for b, batch in enumerate(batches):
        first = requests[batch[0]].lora_name
        for i in batch[1:]:
            if requests[i].lora_name != first:
                raise InputError(f"$.requests[{i}].lora_name",
                                 f"batch {b} mixes LoRA adapters {first!r} (request {batch[0]}) and "
                                 f"{requests[i].lora_name!r} (request {i}) (CR-BATCH-4)")
    switches = {k: doc[k] for k in ("apply_chat_template", "add_generation_prompt", "enable_thinking") if k in doc}
    return ParsedFile(requests, batches, size, mgl, lookup, commit, lora, switches)


def _request(r, i: int, base_dir: str, template: bool, gen_prompt: bool, lora: dict, engine,
             lora_files: bool = False, keywords: dict | None = None) -> Request:
    # Checked with `if` rather than _check: paths and messages are written only for an error
    # (a file of 10,000 requests runs these lines 10,000 times).
    path = f"$.requests[{i}]"
    if not isinstance(r, dict):
        raise InputError(path, "a request must be an object")
    if "messages" not in r:
        raise InputError(path, "missing required key 'messages'")
    messages = r["messages"]
    if not (isinstance(messages, list) and messages):
        raise InputError(f"{path}.messages", "must be a non-empty array")
    for j, m in enumerate(messages):
        _message(m, path, j)
    name = r.get("lora_name")
    if name is not None:
        _check(isinstance(name, str) and name, f"{path}.lora_name", "must be a non-empty string")
        _check(name in lora, f"{path}.lora_name",
               f"LoRA adapter {name!r} is not in available_lora_weights (CR-BATCH-4)")
        if lora_files:
            _lora_file(name, lora[name], base_dir)
    _logit_bias(r, path, engine.vocab_size if engine is not None else VOCAB_SIZE)
    legacy = r.get("save_system_prompt_kv_cache", False)
    if type(legacy) is not bool:
        raise InputError(f"{path}.save_system_prompt_kv_cache", "must be a boolean")
    no_spec = r.get("disable_spec_decode", False)
    if type(no_spec) is not bool:
        raise InputError(f"{path}.disable_spec_decode", "must be a boolean")
    stop = r.get("stop", [])
    if isinstance(stop, str):
        stop = [stop]
    if not (isinstance(stop, list) and all(isinstance(s, str) and s for s in stop)):
        raise InputError(f"{path}.stop", "must be a non-empty string or a list of them")
    where = f"{path}.messages"
    _check_input_size(messages, where)
    if engine is not None and engine.hf:
        from .hf_tokenizer import tokenize_hf
        prompt = tokenize_hf(messages, where, base_dir, template, gen_prompt, engine, keywords)
    else:
        prompt = tokenize_messages(messages, where, base_dir, template, gen_prompt, engine)
    if not prompt.tokens:
        raise InputError(where, "the input has 0 tokens (CR-BATCH-5)")
    return Request(i, prompt.tokens, prompt.spans, name, legacy, stop, no_spec)


def _check_input_size(messages: list, path: str) -> None:
    """A request's text is bounded before anything tokenizes it (spec/RUNNING.md section 8): a
    longer one is refused at once, not tokenized for minutes before its length fails the batch."""
    size = 0
    for m in messages:
        content = m["content"]
        if isinstance(content, str):
            size += _utf8_size(content)
        else:
            size += sum(_utf8_size(i["text"]) for i in content if i.get("type") == "text")
    _check(size <= MAX_INPUT_TEXT_BYTES, path, f"the text of this request is {size} bytes, more than the "
                                               f"{MAX_INPUT_TEXT_BYTES} a request may hold before tokenization")


def _utf8_size(text: str) -> int:
    """The length of `text` in UTF-8 bytes: its length when it is ASCII, without encoding it."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _lora_file(name: str, ref: str, base_dir: str) -> None:
    """CR-BATCH-4: the weight path of an adapter in use names a regular file, resolved against the
    request file's folder like media paths (spec/tokenizer.md section 3); decided from metadata."""
    file = ref if os.path.isabs(ref) else os.path.join(base_dir, ref)
    _check(os.path.isfile(file), f"$.available_lora_weights.{name}",
           f"no LoRA weight file at {ref[:200]} (missing or not a regular file)")


def _logit_bias(obj: dict, path: str, vocab: int = VOCAB_SIZE) -> None:
    """`logit_bias` maps token ids (decimal strings) below the vocabulary size to a bias in
    [-100, 100]; a bias on a token the vocabulary does not have is an input error."""
    if "logit_bias" not in obj:
        return
    bias = obj["logit_bias"]
    _check(isinstance(bias, dict) and len(bias) <= 1024, f"{path}.logit_bias",
           "must be an object of at most 1024 token-id: bias entries")
    for key, value in bias.items():
        _check(key.isascii() and key.isdigit() and int(key) < vocab, f"{path}.logit_bias",
               f"key {key[:40]!r} is not a token id below {vocab}")
        _check(type(value) in (int, float) and -100 <= value <= 100, f"{path}.logit_bias[{key!r}]",
               "must be a number in [-100, 100]")


def _message(m, request_path: str, j: int) -> None:
    """Message j of a request (checked with `if`, as in _request)."""
    if not isinstance(m, dict):
        raise InputError(f"{request_path}.messages[{j}]", "a message must be an object")
    if "role" not in m or "content" not in m:
        raise InputError(f"{request_path}.messages[{j}]", "a message needs 'role' and 'content'")
    if m["role"] not in ("system", "user", "assistant"):
        raise InputError(f"{request_path}.messages[{j}].role", f"unknown role {m['role']!r}")
    content = m["content"]
    if isinstance(content, str):
        if not content.isascii():                          # ASCII holds no lone surrogate
            _check_text(content, f"{request_path}.messages[{j}].content")
        return
    path = f"{request_path}.messages[{j}]"
    _check(isinstance(content, list), f"{path}.content", "must be a string or an array of items")
    for k, item in enumerate(content):
        where = f"{path}.content[{k}]"
        _check(isinstance(item, dict), where, "a content item must be an object")
        kind = item.get("type")
        _check(kind in ("text", "image", "audio"), f"{where}.type",
               f"unsupported content item type {kind!r} (text, image or audio)")
        _check(kind in item, where, f"a {kind} item needs a {kind!r} key")
        value = item[kind]
        _check(isinstance(value, str) and (kind == "text" or value), f"{where}.{kind}",
               "must be a string" if kind == "text" else "must be a non-empty file path")
        if kind == "text":
            _check_text(value, f"{where}.text")


def parse_generated(entry, path: str = "$") -> list[int] | None:
    """A golden case's `generated` entry: a list of token ids, or ASCII text optionally ending
    in "<|eos|>" (then id 257 is appended); None stays None."""
    if entry is None:
        return None
    if isinstance(entry, str):
        text, eos = (entry[:-7], True) if entry.endswith("<|eos|>") else (entry, False)
        _check(text.isascii(), path, "generated text must be ASCII")
        return list(text.encode("ascii")) + ([EOS] if eos else [])
    _check(isinstance(entry, list) and all(_is_int(t) and 0 <= t < VOCAB_SIZE for t in entry),
           path, f"must be a list of token ids in [0, {VOCAB_SIZE})")
    return list(entry)


def input_steps(engine, parsed, request) -> list:
    """The trace steps (reference/trace.py) of how `request`'s input length n was decided:
    bytes-v1 (spec/tokenizer.md), or on an `hf` engine the loader's ids (TOK-HF-2/3), the
    template switches (TOK-HF-4, TOK-HF-8) and each image's count (TOK-MEDIA-*)."""
    from .hf_tokenizer import LOADER_RULES          # explanations only: not imported to simulate
    from .media_tokens import COUNTER_RULES
    n = request.n
    media = sum(s.end - s.start for s in request.spans)
    if not engine.hf:
        why = f"bytes-v1 (spec/tokenizer.md) gives n = {n}" + (f", {media} of them media placeholders" if media else "")
        return [Step(None, "input_tokens", n, why)]
    loader = engine.tokenizer["loader"]
    loader_rule = LOADER_RULES.get(loader, "TOK-HF-9")
    template = getattr(parsed, "template", None) or {}
    switches = {k: v for k, v in template.items() if k != "apply_chat_template"}
    kwargs = dict(engine.tokenizer.get("chat_template_kwargs") or {})
    text = n - media
    profile = f"the hf profile ({loader} loader, {loader_rule}, spec/hf-tokenizer.md)"
    steps = [Step(loader_rule, "input_tokens", text, f"{profile} gives n = {text} text and template ids"
                  + (" before the images are expanded" if media else ""))]
    # what the prompt the loader encodes is: the template's switches decide the text ids as much
    # as the loader does, so where the file sets them theirs is the deciding step
    if not template.get("apply_chat_template", True):
        steps.append(Step("TOK-HF-8", "input_tokens", text, "apply_chat_template is false: the message texts are "
                                                             f"joined and encoded, no template: {text} ids"))
    elif switches or kwargs:
        said = ", ".join(f"{k}={v!r}" for k, v in {**kwargs, **switches}.items())
        steps.append(Step("TOK-HF-4", "input_tokens", text, f"the chat template renders the prompt with {said}: "
                                                             f"{text} text and template ids"))
    counter = (engine.vision or {}).get("counter")
    rule = COUNTER_RULES.get(counter, "TOK-MEDIA-1")
    count = text
    for k, s in enumerate(request.spans, 1):
        size = s.end - s.start
        images = ", ".join(str(x.end - x.start) for x in request.spans[:k])
        steps.append(Step(rule, "input_tokens", count + size,
                          f"{profile} gives n = {count + size}: {text} text and template ids and {k} image(s) of "
                          f"{images} tokens under {counter} ({rule}, spec/media-tokens.md)",
                          before=count))
        count += size
    return steps

