"""Broken OpenAI-compatible servers end ERROR, FAIL or TIMEOUT, never PASS (PEER-API-1..4).

A stand-in llama.cpp server (stdlib http.server, threaded) renders a trivial template and
tokenizes by bytes, so the kit takes every prompt id from it (PEER-TOK-1 without a kit
tokenizer), and keeps one slot with the PEER-LCPP rules. Its `mode` breaks one thing. The
`ok` mode is the control: the same harness reaches CONFORMANT, so every other verdict is the
defect's doing.
"""
from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import pytest

from conformance.cli import main as kvconform

SAMPLED = 120          # the id of every sampled token ('x')


def render(messages) -> str:
    return "".join(f"<{m['role']}>{m['content']}\n" for m in messages) + "<assistant>"


def tokenize(text: str) -> list:
    return list(text.encode())


class FakeLlamaServer:
    def __init__(self, mode: str):
        self.mode, self.slot, self.release = mode, [], threading.Event()

    def chat(self, body: dict):
        if self.mode == "hang":
            self.release.wait(30)
            return 200, {}
        if self.mode == "http-500":
            return 500, {"error": {"message": "slot unavailable"}}
        if self.mode == "not-json":
            return 200, b"<html>bad gateway</html>"
        if self.mode == "two-choices":
            return 200, {"choices": [{}, {}], "usage": {}}
        ids = tokenize(render(body["messages"]))
        n, g = len(ids), body["max_tokens"]
        lcp = 0
        while lcp < min(n, len(self.slot)) and self.slot[lcp] == ids[lcp]:
            lcp += 1
        cached = min(lcp, n - 1)                                  # PEER-LCPP-1
        self.slot = ids + [SAMPLED] * (g - 1)                     # PEER-LCPP-2
        broken = {"negative": -1, "float": float(cached), "string": str(cached), "bool": True,
                  "above-prompt": n + 1}
        usage = {"prompt_tokens": n, "completion_tokens": g, "total_tokens": n + g,
                 "prompt_tokens_details": {"cached_tokens": broken.get(self.mode, cached)}}
        if self.mode == "no-usage":
            usage = None
        elif self.mode == "no-details":
            del usage["prompt_tokens_details"]
        elif self.mode == "prompt-miscounted":
            usage["prompt_tokens"] = n + 1
        doc = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * g},
                            "finish_reason": "length",
                            "logprobs": {"content": [{"id": SAMPLED, "token": "x", "logprob": 0.0}] * g}}],
               "timings": {"cache_n": cached, "prompt_n": n - cached, "predicted_n": g}}
        if usage is not None:
            doc["usage"] = usage
        return 200, doc

    def serve(self, method: str, path: str, body, headers):
        """The HTTP entry (a subclass may look at the headers)."""
        return self.handle(method, path, body)

    def handle(self, method: str, path: str, body):
        route = urlparse(path).path
        if route == "/v1/models":
            return 200, {"data": [{"id": "fake"}]}
        if route == "/apply-template":
            return 200, {"prompt": render(body["messages"])}
        if route == "/tokenize":
            return 200, {"tokens": tokenize(body["content"])}
        if route == "/slots/0":
            if self.mode == "reset-fails":
                return 500, {"error": {"message": "erase failed"}}
            self.slot = []
            return 200, {"n_erased": 0}
        if route == "/v1/chat/completions":
            return self.chat(body)
        return 404, {"error": {"message": "no route"}}


def handler(fake: FakeLlamaServer):
    """The HTTP side of a fake: `fake.serve` answers (status, document); a document that is a
    list of byte strings is sent chunk by chunk (a large body the fake never holds whole)."""
    class Handler(BaseHTTPRequestHandler):
        def _serve(self, method):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, doc = fake.serve(method, self.path, json.loads(raw) if raw else None, self.headers)
            chunks = (doc if isinstance(doc, list) and all(isinstance(c, bytes) for c in doc)
                      else [doc if isinstance(doc, bytes) else json.dumps(doc).encode()])
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(sum(map(len, chunks))))
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(chunk)
            except OSError:
                pass                              # the kit gave up on a hanging request

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

        def log_message(self, *args):
            pass
    return Handler


@contextlib.contextmanager
def serving(fake: FakeLlamaServer):
    """Serve `fake` on a free loopback port until the block ends; yields its base URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler(fake))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        fake.release.set()
        httpd.shutdown()
        httpd.server_close()


def fake_server(mode: str):
    return serving(FakeLlamaServer(mode))


def run(url: str, tmp_path, *extra: str) -> tuple[int, dict]:
    report = tmp_path / "report"
    rc = kvconform(["run", "--backend", "openai", "--base-url", url, "--profile", "llama.cpp-server",
                    "--report", str(report), "--force", "--no-progress", *extra])
    path = report / "report.json"
    return rc, (json.loads(path.read_text()) if path.exists() else {})


def test_the_control_server_conforms(tmp_path):
    with fake_server("ok") as url:
        rc, report = run(url, tmp_path, "--timeout", "10")
    assert rc == 0 and report["summary"]["headline"] == "CONFORMANT"
    assert {c["verdict"] for c in report["cases"]} == {"PASS"}
    assert any(s["reported"] > 0 for c in report["cases"] for s in c["details"]["steps"])


@pytest.mark.parametrize("mode, verdict, rule, words", [
    ("hang", "TIMEOUT", "PEER-API-3", "no answer within"),
    ("http-500", "ERROR", "PEER-API-3", "HTTP 500: slot unavailable"),
    ("not-json", "ERROR", "PEER-API-3", "not JSON"),
    ("two-choices", "ERROR", "PEER-API-3", "exactly one choice"),
    ("no-usage", "ERROR", "PEER-API-1", "no usage object"),
    ("no-details", "ERROR", "PEER-API-1", "reports no cached_tokens"),
    ("negative", "FAIL", "PEER-API-1", "negative"),
    ("float", "FAIL", "PEER-API-1", "float, not an integer"),
    ("string", "FAIL", "PEER-API-1", "str, not an integer"),
    ("bool", "FAIL", "PEER-API-1", "bool, not an integer"),
    ("above-prompt", "FAIL", "PEER-API-1", "more tokens cached than the prompt"),
    ("prompt-miscounted", "ERROR", "PEER-API-2", "different prompt"),
    ("reset-fails", "ERROR", "PEER-API-3", "HTTP 500: erase failed"),
])
def test_a_broken_server_is_never_pass(mode, verdict, rule, words, tmp_path):
    with fake_server(mode) as url:
        rc, report = run(url, tmp_path, "--timeout", "1" if mode == "hang" else "10", "-k", "reuse/replay")
    # no answer carried a count: nothing was judged, and the headline says why (docs/peers.md section 6)
    headline = "NOTHING JUDGED" if mode in ("no-usage", "no-details") else "NOT CONFORMANT"
    assert rc == 1 and report["summary"]["headline"] == headline
    (case,) = report["cases"]
    assert case["verdict"] == verdict
    first = case["failures"][0]
    assert first["rule"] == rule and words in first["why"], first
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert headline in summary and "reuse/replay" in summary


def test_an_unreachable_server_is_bad_input(tmp_path, capsys):
    with fake_server("ok") as url:
        pass                                           # the port is closed again
    rc, report = run(url, tmp_path, "--timeout", "2")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and report == {}
    assert len(err) == 1 and "cannot start the openai adapter" in err[0] and "Traceback" not in err[0]


def test_list_names_the_cases_and_sends_no_chat(tmp_path, capsys):
    with fake_server("http-500") as url:                 # any chat request would fail
        rc = kvconform(["run", "--backend", "openai", "--base-url", url, "--profile", "llama.cpp-server",
                        "--report", str(tmp_path / "report"), "--list"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and not (tmp_path / "report").exists()
    assert "reuse/replay\treuse\tpeer:llama.cpp-server" in lines and "eviction/one-slot\teviction\tpeer:llama.cpp-server" in lines
    assert not any("isolation/" in line for line in lines)          # no salts or adapters on llama.cpp
