"""`python -m gpu_backend serve`: an OpenAI-compatible server that caches prompts like a peer runtime.

    python -m gpu_backend serve --profile P --port N      # P: a profile of peer_cache.SERVED
        [--engineDir D | --tokenizer DIR] [--setting KEY=VALUE ...] [--device cpu|cuda|auto]

Loopback only (127.0.0.1). Requests are served one at a time. The reported
`usage.prompt_tokens_details.cached_tokens` (PEER-API-1) is the number of prompt tokens whose
KV came from the cache (peer_cache/; the runtime's own rule), and those tokens really are not
computed again (peer_engine.py). Endpoints follow the real servers, as each profile's entry of
peer_cache.SERVED says (this module never tells profiles apart by name):

    all       GET /health, GET /v1/models, POST /v1/chat/completions
    llama.cpp POST /tokenize {content}, POST /apply-template {messages}, POST /slots/{id}?action=erase,
              `timings` {cache_n, prompt_n, predicted_n} in every completion
    vLLM      POST /tokenize {messages}, POST /reset_prefix_cache; the `model` may name a LoRA adapter
    SGLang    POST /flush_cache; `lora_path` names a LoRA adapter, `extra_key` and `cache_salt` namespace
    TRT-LLM   no cache reset (as trtllm-serve); `lora_request.lora_name` names a LoRA adapter, every
              block is keyed by it and by `cache_salt`; with --setting retention_config=true the
              body's `kv_cache_retention_config` sets block priorities (a bad one is HTTP 400)

Every completion returns the sampled ids in `logprobs.content[k].id` (as llama-server does) and,
with `return_tokens_as_token_ids`, as `"token": "token_id:ID"` (as vLLM does).

Images: where the profile keys images (`Served.images`, vLLM) and the engine has a vision encoder,
a message's content may be a list of `{"type": "text", "text"}` and `{"type": "image_url",
"image_url": {"url": "data:image/png;base64,..."}}` parts, as the OpenAI API sends them. Each
image is decoded by the engine's own rules (media.py), takes as many tokens as the engine's media
counter gives it (a Qwen-VL counter counts as vLLM's processor does), and keys the blocks it
overlaps by its digest and offset (peer_cache/vllm.py); `/tokenize` lays the same images out.
Elsewhere an image is refused (HTTP 400), never cached as if it were text.

Without --engineDir, an engine (2 layers, hidden 64, adapters `alpha` and `beta`) is built in a
temporary folder around --tokenizer (default: the vendored Phi-3-mini tokenizer); when the folder
holds a Qwen-VL `preprocessor_config.json`, as a vision model's folder does, the engine gets a
vision encoder counting images with the processor's patch, merge and pixel bounds. The first
stdout line is `listening on http://127.0.0.1:PORT` (with --port 0, the port chosen).
"""
import base64
import binascii
import json
import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from .peer_cache import SERVED, ChatRequest, ImageSpan, Refused

PROFILES = tuple(SERVED)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
DEFAULT_TOKENIZER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                 "spec", "tokenizers", "phi-3-mini")
MODEL_NAME = "bundled"
MAX_BODY = 8 << 20
PROCESSOR = "preprocessor_config.json"
QWEN_VL_PROCESSORS = ("Qwen2VLImageProcessor", "Qwen2_5_VLImageProcessor", "Qwen3VLImageProcessor")
"""Image processors whose token count the server's `vllm/qwen-vl` counter gives (smart_resize)."""


class RequestError(ValueError):
    """A request the server refuses: (HTTP status, message), an error body and never a count
    (PEER-API-3)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def build_default_engine(tokenizer: str, loader: str = "tokenizers-raw", folder: str | None = None) -> str:
    """A small attention engine around `tokenizer` in `folder`/engine (default: a fresh temporary
    folder), with a vision encoder when the tokenizer folder holds a Qwen-VL image processor."""
    from .engine_build import build_engine
    folder = folder or tempfile.mkdtemp(prefix="kvconform-serve-")
    args = {"maxInputLen": 4096, "maxKVCacheCapacity": 4608, "maxKVPoolPages": 0, "tokensPerPage": 16,
            "tokenizer": tokenizer, "tokenizerLoader": loader, "loraAdapters": ["alpha", "beta"]}
    counter = image_processor(tokenizer)
    if counter is not None:
        args.update(vision=True, imageCounter="vllm/qwen-vl", imageCounterSettings=counter)
    build_engine(os.path.join(folder, "engine"), args)
    return os.path.join(folder, "engine")


def image_processor(folder: str) -> dict | None:
    """The `vllm/qwen-vl` counter settings of a model folder's Qwen-VL `preprocessor_config.json`
    (patch_size, merge_size, min_pixels and max_pixels, or size.shortest_edge / longest_edge, as
    transformers reads them), or None when the folder has no such processor."""
    path = os.path.join(folder, PROCESSOR)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    kind = str(doc.get("image_processor_type", "")).removesuffix("Fast")
    if kind not in QWEN_VL_PROCESSORS:
        return None
    size = doc.get("size") if isinstance(doc.get("size"), dict) else {}
    return {"patch": doc.get("patch_size", 14), "merge": doc.get("merge_size", 2),
            "min_pixels": doc.get("min_pixels", size.get("shortest_edge", 56 * 56)),
            "max_pixels": doc.get("max_pixels", size.get("longest_edge", 28 * 28 * 1280))}


class PeerServer:
    """The server's state: one engine, one cache of the profile. `handle` is HTTP-free."""

    def __init__(self, profile: str, engine, cache):
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r} (one of {', '.join(PROFILES)})")
        self.profile, self.engine, self.cache = profile, engine, cache
        self.served = SERVED[profile]
        self.lock = threading.Lock()
        self.count = 0

    def handle(self, method: str, path: str, body) -> tuple[int, dict]:
        url = urlparse(path)
        route = (method, url.path)
        with self.lock:
            if route == ("GET", "/health"):
                return 200, {"status": "ok"}
            if route == ("GET", "/v1/models"):
                return 200, self.models()
            if route == ("POST", "/v1/chat/completions"):
                return 200, self.chat(_object(body))
            published = self.cache.pages(self.engine.cfg["max_input_len"]).get(route)   # PEER-API-5
            if published is not None:
                return 200, published
            answer = self._tool(method, url, body)
            if answer is not None:
                return 200, answer
        raise RequestError(404, f"no route {method} {url.path} on a {self.profile} server")

    def _tool(self, method: str, url, body):
        """The runtime's own tokenization (PEER-TOK-1) and cache resets (PEER-API-4), where its
        server offers them; None for a route it does not offer."""
        route, served = (method, url.path), self.served
        if route == ("POST", "/tokenize") and served.tokenize == "content":
            return {"tokens": self.engine.tokenize(_string(_object(body), "content"))}
        if route == ("POST", "/apply-template") and served.tokenize == "content":
            return {"prompt": self.engine.prompt(_messages(_object(body)))[1]}
        if route == ("POST", "/tokenize") and served.tokenize == "messages":
            ids = self.engine.layout(self._messages(_object(body)))[0]
            return {"tokens": ids, "count": len(ids), "max_model_len": self.engine.cfg["max_input_len"]}
        for reset_method, path, answer in served.resets:
            if route == (reset_method, path):
                self.cache.reset()
                return dict(answer)
        slot = _slot_id(url.path, getattr(self.cache, "n", 1)) if served.erases_slots else None
        if method == "POST" and slot is not None and parse_qs(url.query).get("action") == ["erase"]:
            erased = len(self.cache.slots[slot]["tokens"])
            self.cache.reset(slot)
            return {"id_slot": slot, "n_erased": erased}
        return None

    def models(self) -> dict:
        """GET /v1/models: the model, and where the runtime lists them (vLLM) each adapter with
        its parent and path."""
        context = self.engine.cfg["max_input_len"]
        data = [{"id": MODEL_NAME, "object": "model", "root": MODEL_NAME, "parent": None, "max_model_len": context}]
        if self.served.lists_adapters:
            data += [{"id": name, "object": "model", "root": path, "parent": MODEL_NAME, "max_model_len": None}
                     for name, path in sorted(self.engine.lora_paths.items())]
        return {"object": "list", "data": data}

    def _messages(self, body: dict) -> list:
        """The request's messages, their image parts decoded (where the profile keys images)."""
        return _messages(body, self._image if self.served.images else None)

    def _image(self, url):
        """An image part's data: URL decoded by the engine's own rules (media.py), counted by its
        media counter."""
        from .media import MediaError, decode_image
        if not self.engine.vision:
            raise RequestError(400, "the model takes no images: it has no vision encoder")
        if not isinstance(url, str) or not url.startswith("data:image/") or ";base64," not in url:
            raise RequestError(400, "image_url.url must be a data:image/...;base64, URL (the server fetches nothing)")
        try:
            data = base64.b64decode(url.split(";base64,", 1)[1], validate=True)
        except (binascii.Error, ValueError):
            raise RequestError(400, "image_url.url is not valid base64") from None
        with tempfile.NamedTemporaryFile(prefix="kvconform-image-") as f:
            f.write(data)
            f.flush()
            try:
                return decode_image(f.name, self.engine.cfg["max_input_len"], count=self.engine.image_count)
            except MediaError as e:
                raise RequestError(400, f"the image cannot be used: {e}") from None

    def chat(self, body: dict) -> dict:
        messages = self._messages(body)
        max_tokens = body.get("max_tokens", 16)
        if type(max_tokens) is not int or max_tokens < 1:
            raise RequestError(400, "max_tokens must be an integer >= 1")
        lora = self._adapter(body)
        try:
            ids, _, spans = self.engine.layout(messages)
        except ValueError as e:
            raise RequestError(400, str(e)) from None
        req = ChatRequest(ids, lora=lora, images=tuple(ImageSpan(s.digest.hex(), s.start, s.count) for s in spans),
                          salt=_optional_string(body, "cache_salt"), extra_key=_optional_string(body, "extra_key"),
                          lora_path=None if lora is None else self.engine.lora_paths[lora],
                          skip_prefix_cache=self.served.read_bypass and _skips_reading(body),
                          retention=body.get("kv_cache_retention_config"))
        n = len(req.ids)
        window = self._window(req, max_tokens)
        try:
            cached, kv = self.cache.lookup(req)
        except ValueError as e:                        # refused by the API (PEER-VLLM-17, Refused) or the cache (a retention config)
            raise RequestError(400, str(e)) from None
        out = self.engine.generate(req.ids, kv, max_tokens, req.lora, _logit_bias(body), images=spans, **window)
        self.cache.store(req, out["sequence"], out["kv"], out["sampled"])
        return self._response(body, n, cached, out)

    def _window(self, req, max_tokens: int) -> dict:
        """How the request meets the context: a cache whose runtime bounds generation by a
        slot's context says so itself (`admit`: a refusal, or where generation stops or shifts,
        PEER-LCPP-8/9); otherwise prompt and max_tokens must fit the engine's context."""
        context = self.engine.cfg["max_input_len"]
        admit = getattr(self.cache, "admit", None)
        if admit is not None:
            try:
                return admit(req, max_tokens, context)
            except ValueError as e:
                raise RequestError(400, str(e)) from None
        if len(req.ids) + max_tokens > context:
            raise RequestError(400, f"{len(req.ids)} prompt tokens + max_tokens {max_tokens} exceed the context "
                                    f"({context})")
        return {}

    def _adapter(self, body: dict):
        """The LoRA adapter a request names in the runtime's own field (vLLM: the model;
        SGLang: lora_path; TensorRT-LLM: lora_request.lora_name), or None."""
        field_name = self.served.lora_field
        if field_name is None:
            return None
        if field_name == "lora_request":
            lora = body.get("lora_request")
            if lora is not None and not (isinstance(lora, dict) and isinstance(lora.get("lora_name"), str)):
                raise RequestError(400, "lora_request must be an object with a string lora_name")
            name = MODEL_NAME if lora is None else lora["lora_name"]
        elif field_name == "model":                # every request names a model: the base one or an adapter
            name = body.get("model", MODEL_NAME)
        else:
            name = body.get(field_name) or MODEL_NAME
        if name in (MODEL_NAME, None):
            return None
        if name not in self.engine.loras:
            raise RequestError(404, f"the model {name!r} does not exist (adapters: {', '.join(self.engine.loras)})")
        return name

    def _response(self, body: dict, n: int, cached: int, out: dict) -> dict:
        """The completion as the real servers answer it: `usage.prompt_tokens` N (PEER-API-2) and
        `prompt_tokens_details.cached_tokens` the cache's count (PEER-API-1), the sampled ids in
        `logprobs.content[k]` (PEER-TOK-2)."""
        self.count += 1
        as_ids = body.get("return_tokens_as_token_ids") is True
        content = [{"id": t, "token": f"token_id:{t}" if as_ids else self.engine.text.token_entry(t)[0],
                    "logprob": lp, "bytes": self.engine.text.token_entry(t)[1], "top_logprobs": []}
                   for t, lp in zip(out["sampled"], out["logprobs"])]
        finish = "stop" if out["sampled"][-1] == self.engine.text.eos else "length"
        g = len(out["sampled"])
        response = {
            "id": f"chatcmpl-{self.count}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", MODEL_NAME),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": out["text"]},
                         "finish_reason": finish,
                         "logprobs": {"content": content} if body.get("logprobs") else None}],
            "usage": {"prompt_tokens": n, "completion_tokens": g, "total_tokens": n + g,
                      "prompt_tokens_details": {"cached_tokens": cached}},
        }
        if self.served.timings:                        # PEER-LCPP-3: the native counts agree with cached_tokens
            response["timings"] = {"cache_n": cached, "prompt_n": n - out["reused"], "predicted_n": g}
        return response


def _setting(item: str, sep: str, value: str):
    """A --setting value: N >= 1, true/false, a number in [0, 1] (slot_prompt_similarity), a list
    N,N,... (TensorRT-LLM's max_attention_window), or a word or release (SGLang's version=0.5.16,
    vllm_version=0.33.0, retention_interval=dense)."""
    from .errors import BackendInputError
    if sep and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if sep and value.count(".") >= 2 and value.split(".")[0].isdigit():
        return value
    parts = value.strip("[]").split(",")
    if sep and ("," in value or value.startswith("[")) and all(p.strip().isdigit() and int(p) >= 1 for p in parts):
        return [int(p) for p in parts]
    if sep and value.isdigit() and int(value) >= 1:
        return int(value)
    if sep and value and (value[0].isalpha() or value.count(".") > 1):
        return value
    try:
        number = float(value) if sep else None
    except ValueError:
        number = None
    if number is None or not 0 <= number <= 1:
        raise BackendInputError("--setting", f"{item!r}: expected KEY=N with N >= 1, KEY=true|false, KEY=X in [0, 1], "
                                "KEY=N,N,... or KEY=MAJOR.MINOR.PATCH")
    return number


def _slot_id(path: str, slots: int) -> int | None:
    """The N of /slots/N when it names a slot of the server."""
    head, _, tail = path.rpartition("/")
    return int(tail) if head == "/slots" and tail.isdigit() and int(tail) < slots else None


def _logit_bias(body: dict) -> dict:
    """OpenAI `logit_bias`: {token id as a string: bias in [-100, 100]}."""
    bias = body.get("logit_bias")
    if bias is None:
        return {}
    if not isinstance(bias, dict) or not all(isinstance(k, str) and k.isdigit() and type(v) in (int, float)
                                             and -100 <= v <= 100 for k, v in bias.items()):
        raise RequestError(400, "logit_bias must map token ids to numbers in [-100, 100]")
    return {int(k): float(v) for k, v in bias.items()}


def _skips_reading(body: dict) -> bool:
    """vLLM's per-request read bypass: prompt log-probabilities asked for, or
    skip_reading_prefix_cache (vllm sampling_params.py)."""
    if body.get("skip_reading_prefix_cache") is not None:
        return body["skip_reading_prefix_cache"] is True
    return body.get("prompt_logprobs") is not None


def _object(body) -> dict:
    if not isinstance(body, dict):
        raise RequestError(400, "the body must be a JSON object")
    return body


def _string(body: dict, key: str) -> str:
    if not isinstance(body.get(key), str):
        raise RequestError(400, f"{key} must be a string")
    return body[key]


def _optional_string(body: dict, key: str):
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise RequestError(400, f"{key} must be a string")
    return value


def _messages(body: dict, image=None) -> list:
    """[{"role", "content"}]: a content is a string, or where `image` decodes image URLs a list of
    OpenAI parts, returned as ("text", str) / ("image", MediaItem) pairs."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages must be a non-empty list")
    out = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(400, "each message needs a string role and a string content")
        content = m.get("content")
        if isinstance(content, list) and image is not None:
            out.append({"role": m["role"], "content": [_part(part, image) for part in content]})
        elif isinstance(content, str):
            out.append({"role": m["role"], "content": content})
        elif isinstance(content, list):
            raise RequestError(400, "this server takes string contents only: its profile does not key cached "
                                    "blocks by image, so it takes no image input")
        else:
            raise RequestError(400, "each message needs a string role and a string content")
    return out


def _part(part, image) -> tuple:
    if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
        return "text", part["text"]
    if isinstance(part, dict) and part.get("type") == "image_url" and isinstance(part.get("image_url"), dict):
        return "image", image(part["image_url"].get("url"))
    raise RequestError(400, "a content part must be {\"type\": \"text\", \"text\"} or {\"type\": \"image_url\", "
                            "\"image_url\": {\"url\"}}")


class _Handler(BaseHTTPRequestHandler):
    server_version = "kvconform-peer-server"
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as real servers set it: the headers and the body go out in two writes, and
    # with Nagle's algorithm the body waits for the client's delayed ACK (40 ms per request).
    disable_nagle_algorithm = True

    def _serve(self, method: str):
        status, doc = 500, {"error": {"message": "internal error"}}
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                raise RequestError(413, "body too large")
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                raise RequestError(400, "the body is not JSON") from None
            status, doc = self.server.peer.handle(method, self.path, body)
        except RequestError as e:
            status, doc = e.status, {"error": {"message": str(e), "code": e.status}}
        except Exception as e:                       # a bug: say so, keep serving
            status, doc = 500, {"error": {"message": f"{type(e).__name__}: {e}", "code": 500}}
        text = isinstance(doc, str)
        data = doc.encode() if text else json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4" if text else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def log_message(self, *args):
        pass


def make_http_server(peer: PeerServer, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A bound HTTP server (not yet serving) for `peer`; refuses anything but loopback.

    One thread per connection, as real servers take several at once: a client that keeps one
    connection alive (HTTP/1.1) while it opens another would otherwise wait until the first
    times out. `PeerServer.handle` takes its lock, so requests still run one at a time."""
    if host not in LOOPBACK:
        raise ValueError(f"the bundled server listens on loopback only (127.0.0.1), not {host!r}")
    httpd = ThreadingHTTPServer(("127.0.0.1" if host == "localhost" else host, port), _Handler)
    httpd.daemon_threads = True
    httpd.peer = peer
    return httpd


def make_peer(profile: str, engine_dir: str | None = None, tokenizer: str | None = None, settings: dict | None = None,
              device: str = "cpu", cache_class=None, engine=None) -> PeerServer:
    """The server state for `profile`; `cache_class` replaces the profile's cache (the seam
    faulty variants use); `engine`, a PeerEngine already loaded (the model is read once and
    served by many caches: the mutation campaign's judging host), stands for `engine_dir`."""
    from .peer_engine import PeerEngine
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r} (one of {', '.join(PROFILES)})")
    served = SERVED[profile]
    cls = cache_class or served.cache
    unknown = set(settings or {}) - set(cls.settings)
    if unknown:
        raise ValueError(f"{profile} has no setting {sorted(unknown)[0]!r} (settings: {', '.join(cls.settings) or 'none'})")
    cache = cls(**(settings or {}))
    if engine is None:
        engine = PeerEngine(engine_dir or build_default_engine(tokenizer or DEFAULT_TOKENIZER, served.tokenizer_loader),
                            device)
    return PeerServer(profile, engine, cache)


def main(args) -> int:
    """The `serve` subcommand (cli.py parses the flags)."""
    from .errors import BackendInputError
    settings = {}
    for item in args.setting or []:
        key, sep, value = item.partition("=")
        settings[key] = _setting(item, sep, value.strip())
    if args.host not in LOOPBACK:
        raise BackendInputError("--host", f"the bundled server listens on loopback only, not {args.host!r}")
    if not 0 <= args.port < 65536:
        raise BackendInputError("--port", f"expected 0..65535, got {args.port}")
    try:
        peer = make_peer(args.profile, args.engineDir, args.tokenizer, settings, args.device)
    except ValueError as e:
        raise BackendInputError("--setting" if "setting" in str(e) else "--engineDir", str(e)) from None
    httpd = make_http_server(peer, args.host, args.port)
    print(f"listening on http://127.0.0.1:{httpd.server_address[1]}", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0
