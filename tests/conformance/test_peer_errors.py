"""Resets and errors of the peer suite: a reset is trusted only when the server says it emptied
the cache, the server's own reason reaches the report, a run under the wrong profile says so, a
missing LoRA adapter is named, and a run that tokenized with the server's own endpoint says that
nothing cross-checked the prompt ids. The bundled server (gpu_backend/serve.py), wrapped where a
real server's behaviour is needed, is the test double."""
from __future__ import annotations

import pytest

from conformance.peers import run_case as peer_run_case
from gpu_backend.serve import make_peer

from tests.helpers.peer_servers import PHI3, build_engine, run_peers, serving


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    folder = tmp_path_factory.mktemp("peer-error-engines")
    return {loader: build_engine(folder, loader) for loader in ("transformers-auto", "tokenizers-raw")}


class Wrapped:
    """A bundled server whose answers to some routes are replaced."""

    def __init__(self, peer, **routes):
        self.peer, self.routes, self.calls = peer, routes, {}

    def handle(self, method, path, body):
        self.calls[path] = self.calls.get(path, 0) + 1
        route = self.routes.get(path.split("?")[0])
        if route is not None:
            answer = route(self, body)
            if answer is not None:
                return answer
        return self.peer.handle(method, path, body)


def busy_reset(times):
    """vLLM's /reset_prefix_cache while blocks are held: HTTP 200 {"success": false}."""
    def answer(server, body):
        if server.calls["/reset_prefix_cache"] <= times:
            return 200, {"success": False}
        server.peer.cache.reset()
        return 200, {"success": True}
    return answer


def test_a_reset_that_says_false_is_retried(engines, tmp_path, monkeypatch):
    monkeypatch.setattr(peer_run_case, "RESET_WAIT_S", 5.0)
    server = Wrapped(make_peer("vllm-apc", engines["transformers-auto"]), **{"/reset_prefix_cache": busy_reset(2)})
    with serving(server) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay")
    assert rc == 0 and report["cases"][0]["verdict"] == "PASS"
    assert server.calls["/reset_prefix_cache"] == 3


def test_a_cache_that_cannot_be_emptied_is_error(engines, tmp_path, monkeypatch):
    """Before, {"success": false} was taken for an empty cache and the case judged on it."""
    monkeypatch.setattr(peer_run_case, "RESET_WAIT_S", 0.6)
    server = Wrapped(make_peer("vllm-apc", engines["transformers-auto"]), **{"/reset_prefix_cache": busy_reset(10 ** 6)})
    with serving(server) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay")
    (case,) = report["cases"]
    assert rc == 1 and case["verdict"] == "ERROR"
    assert "the cache could not be emptied" in case["failures"][0]["why"]
    assert server.calls.get("/v1/chat/completions", 0) == 0


def test_the_servers_own_reason_is_reported(engines, tmp_path):
    """vLLM's 404 names the unknown model; the kit used to say only that the server offers no
    chat completions."""
    with serving(make_peer("vllm-apc", engines["transformers-auto"])) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay", "--model", "nope")
    (case,) = report["cases"]
    assert rc == 1 and case["verdict"] == "ERROR"
    why = case["failures"][0]["why"]
    assert "'nope' does not exist" in why and "offers no chat completions" not in why


def test_a_run_under_the_wrong_profile_says_so(engines, tmp_path, capsys):
    with serving(make_peer("llama.cpp-server", engines["tokenizers-raw"])) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay")
    err = capsys.readouterr().err
    assert "looks like llama.cpp-server, not vllm-apc: the --profile may be wrong" in err
    (case,) = report["cases"]
    assert case["verdict"] == "ERROR" and "is --profile right?" in case["failures"][0]["why"]
    assert report["peer"]["server"]["looks_like"] == "llama.cpp-server"


def test_a_missing_adapter_is_named(engines, tmp_path):
    """An SGLang-like server that lists no adapters and lacks beta: the failure names beta."""
    def no_beta(server, body):
        if body.get("lora_path") == "beta":
            return 404, {"error": {"message": "LoRA adapter not found"}}
        return None
    server = Wrapped(make_peer("sglang-radix", engines["transformers-auto"]), **{"/v1/chat/completions": no_beta})
    with serving(server) as url:
        rc, report = run_peers(url, "sglang-radix", tmp_path, "-k", "isolation/lora")
    (case,) = report["cases"]
    assert rc == 1 and case["verdict"] == "ERROR"
    why = case["failures"][0]["why"]
    assert "LoRA adapter not found" in why and "names LoRA adapter 'beta'" in why


def test_adapters_are_taken_from_the_server(engines, tmp_path):
    """A vLLM server that lists one adapter: the LoRA case says which it needs instead of
    failing on a guessed name."""
    def one_adapter(server, body):
        status, doc = server.peer.handle("GET", "/v1/models", None)
        doc["data"] = [d for d in doc["data"] if d["id"] != "beta"]
        return status, doc
    server = Wrapped(make_peer("vllm-apc", engines["transformers-auto"]), **{"/v1/models": one_adapter})
    with serving(server) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "isolation/lora")
    (case,) = report["cases"]
    assert case["verdict"] == "NOT_SUPPORTED"
    assert "lists 1 in /v1/models (alpha)" in case["reason"] and "--lora-modules alpha=DIR beta=DIR" in case["reason"]


def test_without_a_tokenizer_the_headline_says_nothing_cross_checked(engines, tmp_path):
    with serving(make_peer("vllm-apc", engines["transformers-auto"])) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay", tokenizer=None)
    assert rc == 0 and report["summary"]["prompt_ids_from"] == "server tokenization"
    summary = (tmp_path / "report" / "summary.md").read_text().splitlines()[0]
    assert "PEER-TOK-1 checked nothing" in summary
    with serving(make_peer("vllm-apc", engines["transformers-auto"])) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay", tokenizer=PHI3)
    assert "PEER-TOK-1" not in (tmp_path / "report" / "summary.md").read_text().splitlines()[0]


def test_a_reset_that_clears_nothing_says_the_cache_was_not_empty(engines, tmp_path, capsys):
    """A server whose reset answers success but empties nothing: the case's first request reuses
    what the previous case left. The FAIL must say that the first request after the reset found
    a non-empty cache, not only that the count differs."""
    def no_op_reset(server, body):
        return 200, {"success": True}
    server = Wrapped(make_peer("vllm-apc", engines["transformers-auto"]), **{"/reset_prefix_cache": no_op_reset})
    with serving(server) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path / "first", "-k", "reuse/replay")
        assert rc == 0, report          # an empty server: the first run judges the case from empty
        capsys.readouterr()
        rc, report = run_peers(url, "vllm-apc", tmp_path / "again", "-k", "reuse/replay")
    assert rc == 1
    failed = [f for c in report["cases"] for f in c["failures"] if f.get("request") == 0]
    assert failed, report["cases"]
    assert "the cache was not empty, so the reset cleared nothing" in failed[0]["why"]
    # the peer suite writes no request file to re-run: the reproducer column of summary.md and of
    # the console named nothing for a FAIL; it names the transcript of what was sent
    (case,) = report["cases"]
    transcript = f"{case['evidence']}/transcript.json"
    assert case["verdict"] == "FAIL" and transcript.startswith("reproducers/")
    assert (tmp_path / "again" / "report" / transcript).is_file()
    row = next(line for line in (tmp_path / "again" / "report" / "summary.md").read_text().splitlines()
               if line.startswith(f"| {case['id']} ") and "FAIL" in line)
    assert row.rstrip(" |").endswith(transcript), row
    console = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(case["id"] + " "))
    assert console.rstrip().endswith(transcript), console


def test_summary_md_shows_the_tokenizer_relative_to_the_run(engines, tmp_path, monkeypatch):
    """summary.md travels (CI artifacts, the committed examples/): a tokenizer folder inside the
    folder the run started in is shown relative to it, not as this machine's absolute path."""
    from pathlib import Path
    root = Path(PHI3).resolve().parents[2]
    monkeypatch.chdir(root)
    with serving(make_peer("vllm-apc", engines["transformers-auto"])) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay", tokenizer=str(Path(PHI3).resolve()))
    assert rc == 0
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "the kit's tokenizer `spec/tokenizers/phi-3-mini`" in summary, summary
    assert str(root) not in summary.split("## ")[0]
