"""`--backend openai`: any OpenAI-compatible server over HTTP (spec/peer-profiles.md).

The client sends one request at a time and reads back what the peer suite judges; it never
judges. Every way a request can fail is a `ServerFailure` with the reason, never a value:
the peer suite turns a timeout into TIMEOUT and the rest into ERROR (PEER-API-3).

    client = OpenAIClient("http://127.0.0.1:8080", model="m", api_key=None, timeout=120)
    completion = client.chat(messages, max_tokens=1, extra={"cache_salt": "s1"})
    client.apply_template(messages), client.tokenize(text), client.tokenize_messages(messages)
    client.post(path)                     # a reset request (PEER-API-4)

httpx with explicit timeouts (connect, read, write, pool), and `--timeout` a deadline for the
whole request: every socket read and write waits at most what is left of it (`_Deadline`), so a
server that trickles its headers or body a byte at a time cannot hold a run past it. No global
state: one client per run.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpcore
import httpx

from .. import KvconformError
from .secrets import display_url, mask, register

MAX_BODY_BYTES = 16 << 20
"""The most of one response body the kit reads (a chat completion of a few tokens is kilobytes)."""


class ServerFailure(Exception):
    """A request that produced no usable answer. `kind`: timeout, connection, http, malformed."""

    def __init__(self, kind: str, message: str, status: int | None = None, body: str | None = None):
        super().__init__(message)
        self.kind, self.message, self.status, self.body = kind, message, status, body


class NotOffered(Exception):
    """The server does not serve this endpoint (HTTP 404 or 405, or 501)."""


@dataclass
class Completion:
    """What one chat completion reported. `usage` and `timings` are the raw objects (or None):
    the judge decides what a missing or malformed field means."""
    text: str | None
    finish_reason: Any
    usage: Any
    timings: Any
    sampled_ids: list | None
    """The sampled token ids read from the log-probabilities (PEER-TOK-2), or None."""
    sampled_ids_problem: str | None
    raw: dict = field(repr=False, default_factory=dict)


class _Deadline:
    """The deadline of the request this thread is sending (`with deadline(seconds):`)."""
    local = threading.local()

    @classmethod
    def left(cls, timeout: float | None, error: type) -> float | None:
        """The timeout of one socket operation: `timeout`, cut to what is left of the deadline;
        `error` (an httpcore timeout) once nothing is left."""
        at = getattr(cls.local, "at", None)
        if at is None:
            return timeout
        left = at - time.monotonic()
        if left <= 0:
            raise error("the request's deadline (--timeout) passed")
        return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner):
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, _Deadline.left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        return self.inner.write(buffer, _Deadline.left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        return _DeadlineStream(self.inner.start_tls(ssl_context, server_hostname,
                                                    _Deadline.left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str):
        return self.inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's socket backend, each operation bounded by the request's deadline."""

    def __init__(self):
        self.inner = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return _DeadlineStream(self.inner.connect_tcp(host, port, _Deadline.left(timeout, httpcore.ConnectTimeout),
                                                      local_address, socket_options))

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return _DeadlineStream(self.inner.connect_unix_socket(
            path, _Deadline.left(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


def _deadline_transport() -> httpx.BaseTransport:
    """httpx's own transport over the deadline-bounded backend."""
    transport = httpx.HTTPTransport()
    transport._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(),
                                              network_backend=_DeadlineBackend())
    return transport


def server_root(base_url: str) -> str:
    """The server's root URL: the base URL without a trailing `/v1` (llama.cpp, vLLM and SGLang
    serve their own endpoints there)."""
    root = base_url.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


def check_base_url(base_url: str) -> str:
    """An http(s) URL with a host, else bad input (exit 2)."""
    shown = display_url(base_url)                        # a password in it is never printed
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError, ValueError) as e:
        raise KvconformError(f"--base-url {shown!r}: not a URL ({mask(str(e))})") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise KvconformError(f"--base-url {shown!r}: expected http://HOST:PORT or https://HOST:PORT")
    return base_url


class OpenAIClient:
    def __init__(self, base_url: str, *, model: str | None = None, api_key: str | None = None,
                 timeout: float = 120.0, transport: httpx.BaseTransport | None = None):
        self.base_url = check_base_url(base_url)
        self.root = server_root(base_url)
        self.shown_url = display_url(base_url)          # credentials stripped, the password masked
        register(api_key)                                # never printed or written by the kit
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        self.seconds = timeout
        self.http = httpx.Client(headers=headers, timeout=self.timeout, transport=transport or _deadline_transport(),
                                 follow_redirects=False)

    def close(self) -> None:
        self.http.close()

    def describe(self) -> dict:
        return {"base_url": self.shown_url, "model": self.model, "timeout_s": self.timeout.read}

    # ------------------------------------------------------------------ transport

    def _request(self, method: str, path: str, body: dict | None = None) -> Any:
        url = self.root + path
        try:
            response = self._send(method, url, body)
        except httpx.TimeoutException as e:     # a read, a write or the whole request's deadline
            raise ServerFailure("timeout", f"{method} {path}: no answer within {self.timeout.read:g} s "
                                           f"({type(e).__name__})") from None
        except httpx.HTTPError as e:
            raise ServerFailure("connection", f"{method} {path}: cannot reach {display_url(self.root)}: "
                                              f"{type(e).__name__}: {mask(str(e))}") from None
        if response is None:
            raise ServerFailure("malformed", f"{method} {path}: the body is larger than {MAX_BODY_BYTES >> 20} MiB, "
                                             "more than any answer the peer suite asks for")
        if response.status_code in (404, 405, 501):
            raise NotOffered(f"{method} {path}: HTTP {response.status_code}{_reason(response)}")
        if response.status_code != 200:
            raise ServerFailure("http", f"{method} {path}: HTTP {response.status_code}: {_error_text(response)}",
                                response.status_code, response.text[:2000])
        try:
            return response.json()
        except (ValueError, UnicodeDecodeError) as e:
            raise ServerFailure("malformed", f"{method} {path}: the body is not JSON ({e}): "
                                             f"{response.text[:200]!r}", 200, response.text[:2000]) from None

    def _send(self, method: str, url: str, body: dict | None) -> httpx.Response | None:
        """The response with its body read, or None when the body is larger than MAX_BODY_BYTES
        (read no further: a server cannot make the kit hold more than that), all within the
        request's deadline."""
        with self._deadline(), self.http.stream(method, url, json=body) as response:
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    return None
                chunks.append(chunk)
        return httpx.Response(response.status_code, headers=response.headers, content=b"".join(chunks),
                              request=response.request)

    def _deadline(self):
        """For the request sent inside it: every socket operation ends by `--timeout` seconds from now."""
        client = self

        class Scope:
            def __enter__(self):
                _Deadline.local.at = time.monotonic() + client.seconds

            def __exit__(self, *exc):
                _Deadline.local.at = None
        return Scope()

    def get(self, path: str) -> Any:
        return self._request("GET", path)

    def post(self, path: str, body: dict | None = None) -> Any:
        return self._request("POST", path, body if body is not None else {})

    # ------------------------------------------------------------------ endpoints

    def chat(self, messages: list, max_tokens: int, extra: dict | None = None) -> Completion:
        """POST /v1/chat/completions, greedy, with log-probabilities (for the sampled ids)."""
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": False,
                "logprobs": True, "top_logprobs": 1, "return_tokens_as_token_ids": True}
        if self.model is not None:
            body["model"] = self.model
        body.update(extra or {})
        try:
            doc = self._request("POST", "/v1/chat/completions", body)
        except NotOffered as e:
            raise ServerFailure("http", not_offered_chat(str(e))) from None
        if not isinstance(doc, dict):
            raise ServerFailure("malformed", f"the completion is not a JSON object: {_clip(doc)}")
        choices = doc.get("choices")
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            raise ServerFailure("malformed", f"expected exactly one choice, got {_clip(choices)}")
        message = choices[0].get("message")
        text = message.get("content") if isinstance(message, dict) else None
        if text is not None and not isinstance(text, str):
            raise ServerFailure("malformed", f"choices[0].message.content is not a string: {_clip(text)}")
        ids, problem = sampled_ids(choices[0].get("logprobs"))
        return Completion(text, choices[0].get("finish_reason"), doc.get("usage"), doc.get("timings"), ids,
                          problem, doc)

    def apply_template(self, messages: list) -> str:
        """llama.cpp's POST /apply-template: the rendered prompt. NotOffered where absent."""
        doc = self.post("/apply-template", {"messages": messages})
        if not isinstance(doc, dict) or not isinstance(doc.get("prompt"), str):
            raise ServerFailure("malformed", f"/apply-template: expected {{\"prompt\": string}}, got {_clip(doc)}")
        return doc["prompt"]

    def tokenize(self, text: str) -> list:
        """llama.cpp's POST /tokenize, no special tokens added, special tokens parsed."""
        doc = self.post("/tokenize", {"content": text, "add_special": False, "parse_special": True})
        return _token_list(doc, "/tokenize")

    def tokenize_messages(self, messages: list) -> list:
        """vLLM's POST /tokenize with messages: the chat prompt's ids."""
        body = {"messages": messages, "add_generation_prompt": True, "add_special_tokens": False}
        if self.model is not None:
            body["model"] = self.model
        return _token_list(self.post("/tokenize", body), "/tokenize")

    # ------------------------------------------------------------------ plain text (peer settings)

    def get_text(self, path: str, limit: int = 1 << 20) -> str:
        """GET a plain-text endpoint (vLLM's Prometheus `/metrics`), at most `limit` bytes read.
        NotOffered or ServerFailure like any request."""
        try:
            with self._deadline(), self.http.stream("GET", self.root + path) as response:
                if response.status_code in (404, 405, 501):
                    raise NotOffered(f"GET {path}: HTTP {response.status_code}")
                if response.status_code != 200:
                    raise ServerFailure("http", f"GET {path}: HTTP {response.status_code}", response.status_code)
                data = b""
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) >= limit:
                        break
        except httpx.TimeoutException as e:
            raise ServerFailure("timeout", f"GET {path}: no answer within {self.timeout.read:g} s "
                                           f"({type(e).__name__})") from None
        except httpx.HTTPError as e:
            raise ServerFailure("connection", f"GET {path}: cannot reach {self.root}: {type(e).__name__}: {e}") from None
        return data[:limit].decode("utf-8", errors="replace")


def not_offered_chat(message: str) -> str:
    """A 404/405/501 on the chat endpoint: the server's own reason where it gave one (vLLM's 404
    names an unknown model), else that the server offers no chat completions there."""
    if ": " in message.split("HTTP", 1)[-1]:
        return message
    return f"{message}: the server offers no chat completions"


def _reason(response: httpx.Response) -> str:
    """': <the server's message>' of an error response, or '' when it gave none."""
    text = _error_text(response)
    return "" if text == "(empty body)" else f": {text}"


def sampled_ids(logprobs) -> tuple[list | None, str | None]:
    """The sampled ids from `logprobs.content` (llama.cpp's `id`, or vLLM's `token_id:ID`):
    (ids, None), or (None, why they cannot be read)."""
    if not isinstance(logprobs, dict) or not isinstance(logprobs.get("content"), list):
        return None, "the response has no logprobs.content"
    ids = []
    for k, entry in enumerate(logprobs["content"]):
        if not isinstance(entry, dict):
            return None, f"logprobs.content[{k}] is not an object"
        if type(entry.get("id")) is int and entry["id"] >= 0:
            ids.append(entry["id"])
            continue
        token = entry.get("token")
        if isinstance(token, str) and token.startswith("token_id:") and token[9:].isdigit():
            ids.append(int(token[9:]))
            continue
        return None, f"logprobs.content[{k}] names no token id (no \"id\", no \"token_id:N\" token)"
    return ids, None


def _token_list(doc, where: str) -> list:
    tokens = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        raise ServerFailure("malformed", f"{where}: expected {{\"tokens\": [integers]}}, got {_clip(doc)}")
    return tokens


def _error_text(response: httpx.Response) -> str:
    try:
        doc = response.json()
        error = doc.get("error") if isinstance(doc, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            return _clip(message, 300)
    except ValueError:
        pass
    return _clip(response.text, 300) or "(empty body)"


def _clip(value, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."
