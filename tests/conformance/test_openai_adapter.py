"""The openai adapter (conformance/adapters/openai.py) over a mock transport, and the
`kvconform run --backend openai` options: bad input is one line and exit 2, never a traceback."""
from __future__ import annotations

import json

import httpx
import pytest

from conformance.adapters.openai import NotOffered, OpenAIClient, ServerFailure, sampled_ids, server_root
from conformance.cli import main as kvconform
from conformance import KvconformError

from tests.helpers.peer_servers import serving


def client_for(handler, **kw) -> tuple[OpenAIClient, list]:
    seen = []

    def record(request: httpx.Request):
        seen.append(request)
        return handler(request)
    return OpenAIClient("http://127.0.0.1:9/v1", transport=httpx.MockTransport(record), **kw), seen


def completion(**over) -> dict:
    doc = {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "length",
                        "logprobs": {"content": [{"id": 5, "token": "h"}, {"token": "token_id:7"}]}}],
           "usage": {"prompt_tokens": 9, "completion_tokens": 2,
                     "prompt_tokens_details": {"cached_tokens": 4}}}
    doc.update(over)
    return doc


def test_chat_sends_a_greedy_request_and_reads_the_counts():
    client, seen = client_for(lambda r: httpx.Response(200, json=completion(timings={"cache_n": 4})),
                              model="m", api_key="secret")
    out = client.chat([{"role": "user", "content": "x"}], 2, {"cache_salt": "s1"})
    body = json.loads(seen[0].content)
    assert str(seen[0].url) == "http://127.0.0.1:9/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer secret"
    assert body["temperature"] == 0 and body["max_tokens"] == 2 and body["model"] == "m"
    assert body["cache_salt"] == "s1" and body["logprobs"] is True and body["stream"] is False
    assert out.usage["prompt_tokens_details"]["cached_tokens"] == 4 and out.timings == {"cache_n": 4}
    assert out.sampled_ids == [5, 7] and out.text == "hi"


@pytest.mark.parametrize("logprobs, ids", [
    ({"content": [{"id": 3}, {"id": 4}]}, [3, 4]),                        # llama.cpp
    ({"content": [{"token": "token_id:11"}]}, [11]),                      # vLLM
    ({"content": [{"token": "hello"}]}, None),                            # no id
    ({"content": [{"id": -1}]}, None),
    (None, None),
])
def test_sampled_ids(logprobs, ids):
    got, problem = sampled_ids(logprobs)
    assert got == ids and (problem is None) == (ids is not None)


@pytest.mark.parametrize("response, kind, words", [
    (httpx.Response(500, json={"error": {"message": "boom"}}), "http", "HTTP 500: boom"),
    (httpx.Response(503, text=""), "http", "HTTP 503: (empty body)"),
    (httpx.Response(200, text="{not json"), "malformed", "not JSON"),
    (httpx.Response(200, json=[1, 2]), "malformed", "not a JSON object"),
    (httpx.Response(200, json={"choices": []}), "malformed", "exactly one choice"),
    (httpx.Response(200, json=completion(choices=[{"message": {"content": 3}}])), "malformed", "not a string"),
])
def test_failures_are_never_values(response, kind, words):
    client, _ = client_for(lambda r: response)
    with pytest.raises(ServerFailure) as e:
        client.chat([{"role": "user", "content": "x"}], 1)
    assert e.value.kind == kind and words in e.value.message


def test_timeout_and_connection_failures():
    def slow(request):
        raise httpx.ReadTimeout("slow", request=request)

    def refused(request):
        raise httpx.ConnectError("refused", request=request)
    for handler, kind in ((slow, "timeout"), (refused, "connection")):
        client, _ = client_for(handler, timeout=3)
        with pytest.raises(ServerFailure) as e:
            client.post("/flush_cache")
        assert e.value.kind == kind


def test_missing_endpoints_are_not_offered():
    client, _ = client_for(lambda r: httpx.Response(404, json={"error": "no"}))
    with pytest.raises(NotOffered):
        client.tokenize("abc")
    client, _ = client_for(lambda r: httpx.Response(200, json={"tokens": ["a"]}))
    with pytest.raises(ServerFailure):
        client.tokenize("abc")


def test_server_root_and_base_url():
    assert server_root("http://h:1/v1/") == "http://h:1"
    assert server_root("http://h:1") == "http://h:1"
    for bad in ("ftp://h:1", "localhost:8080", "http://"):
        with pytest.raises(KvconformError):
            OpenAIClient(bad)


def one_line_exit_2(argv, capsys, words: str):
    rc = kvconform(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and words in err[0] and "Traceback" not in err[0], err


@pytest.mark.parametrize("extra, words", [
    (["--profile", "kvconform-1"], "needs a peer profile"),
    (["--profile", "vllm-apc", "--peer-setting", "page_size=4"], "has no setting 'page_size'"),
    (["--profile", "vllm-apc", "--peer-setting", "block_size=x"], "expected KEY=N"),
    (["--profile", "llama.cpp-server", "--case", "x.json"], "--case does not apply to --backend openai"),
    (["--profile", "llama.cpp-server", "--api-key-env", "KVCONFORM_TEST_UNSET_KEY"], "not set"),
    (["--profile", "llama.cpp-server", "--executable", "x"], "--backend"),
])
def test_bad_options_are_one_line(extra, words, capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("KVCONFORM_TEST_UNSET_KEY", raising=False)
    one_line_exit_2(["run", "--backend", "openai", "--base-url", "http://127.0.0.1:9", "--report",
                     str(tmp_path / "r"), *extra], capsys, words)


def test_base_url_is_required(capsys, tmp_path):
    one_line_exit_2(["run", "--backend", "openai", "--profile", "sglang-radix", "--report", str(tmp_path / "r")],
                    capsys, "needs --base-url")


def test_an_unreadable_tokenizer_is_bad_input(capsys, tmp_path):
    class Up:                                          # answers /v1/models only (serving() needs handle())
        def handle(self, method, path, body):
            return 200, {"data": []}
    with serving(Up()) as url:
        one_line_exit_2(["run", "--backend", "openai", "--base-url", url, "--profile", "sglang-radix",
                         "--tokenizer", str(tmp_path / "none"), "--report", str(tmp_path / "r")], capsys,
                        "--tokenizer")
        one_line_exit_2(["run", "--backend", "openai", "--base-url", url, "--profile", "sglang-radix",
                         "--report", str(tmp_path / "r")], capsys, "pass --tokenizer DIR")
