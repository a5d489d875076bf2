"""The peer suite as a real deployment meets it: `--model` naming a LoRA adapter, a server that
reports no cached-token count, settings a server publishes that cannot be right or cannot be
read, and a block size beyond the server's context.

Every server here is the bundled one (gpu_backend/serve.py) with one route's answer replaced the
way a real deployment answers it; every count is the oracle's.
"""
from __future__ import annotations

import re

import pytest

from conformance.cli import main as kvconform
from gpu_backend.serve import make_peer
from reference.peers import PEER_PROFILES

from tests.helpers.peer_servers import PHI3, build_engine, run_peers, serving


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    folder = tmp_path_factory.mktemp("peer-deployment-engines")
    return {loader: build_engine(folder, loader) for loader in ("transformers-auto", "tokenizers-raw")}


class Replaced:
    """A bundled server whose answer to some routes is replaced: route(server, method, body) ->
    (status, document) or None to let the bundled server answer."""

    def __init__(self, peer, **routes):
        self.peer, self.routes = peer, routes

    def handle(self, method, path, body):
        route = self.routes.get(path.split("?")[0])
        answer = route(self, method, body) if route is not None else None
        return answer if answer is not None else self.peer.handle(method, path, body)


def one_line_exit_2(capsys, argv) -> str:
    rc = kvconform(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "Traceback" not in err[0], (rc, err)
    return err[0]


def argv_for(url: str, profile: str, tmp_path, *extra) -> list:
    return ["run", "--backend", "openai", "--base-url", url, "--profile", profile, "--report", str(tmp_path / "r"),
            "--force", "--no-progress", "--tokenizer", PHI3, *extra]


# --- --model naming a LoRA adapter --------------------------------------------------------------

def test_a_model_that_is_a_lora_adapter_is_refused_naming_the_base_model(engines, tmp_path, capsys):
    """vLLM runs a request whose model is an adapter on that adapter: with `--model alpha` every
    'base model' request of the LoRA cases ran on alpha, and the kit, predicting them as base,
    FAILed isolation/lora and isolation/salt-and-lora. /v1/models lists alpha with its parent."""
    with serving(make_peer("vllm-apc", engines["transformers-auto"])) as url:
        line = one_line_exit_2(capsys, argv_for(url, "vllm-apc", tmp_path, "--model", "alpha", "-k", "isolation"))
        assert "--model alpha is a LoRA adapter of bundled" in line and "pass --model bundled" in line, line
        assert not (tmp_path / "r").exists()
        rc, report = run_peers(url, "vllm-apc", tmp_path, "--model", "bundled", "-k", "isolation/lora",
                               "-k", "isolation/salt-and-lora")
    assert rc == 0 and [c["verdict"] for c in report["cases"]] == ["PASS", "PASS"], report["cases"]


# --- no cached-token count at all ----------------------------------------------------------------

def without_details(server, method, body):
    """The chat answer of vLLM without --enable-prompt-tokens-details: usage has no details."""
    status, doc = server.peer.handle(method, "/v1/chat/completions", body)
    doc["usage"].pop("prompt_tokens_details", None)
    return status, doc


@pytest.mark.parametrize("profile, loader, option", [
    ("vllm-apc", "transformers-auto", "--enable-prompt-tokens-details"),
    ("llama.cpp-server", "tokenizers-raw", "llama-cpp-python"),
])
def test_a_server_that_reports_no_count_is_nothing_judged_and_says_how_to_turn_it_on(
        profile, loader, option, engines, tmp_path, capsys):
    """Before: NOT CONFORMANT with every case ERROR, and no word of the option that turns the
    count on."""
    server = Replaced(make_peer(profile, engines[loader]), **{"/v1/chat/completions": without_details})
    with serving(server) as url:
        rc, report = run_peers(url, profile, tmp_path, "-k", "reuse/replay", "-k", "boundaries/replay",
                               tokenizer=PHI3)
    summary = report["summary"]
    assert rc == 1 and summary["headline"] == "NOTHING JUDGED", summary
    assert summary["no_count_reported"]["responses"] == 2 * len(report["cases"])
    first = (tmp_path / "report" / "summary.md").read_text().splitlines()[0]
    assert "reported no cached-token count" in first and option in first, first
    out = capsys.readouterr().out
    assert re.search(r"NOTHING JUDGED \(" + re.escape(profile) + r"\).*no cached-token count.*" + re.escape(option),
                     out), out


def test_a_count_missing_from_some_answers_only_stays_not_conformant(engines, tmp_path):
    """One answer without a count among counted ones is the server's fault, not its options'."""
    calls = []

    def second_without(server, method, body):
        calls.append(1)
        return without_details(server, method, body) if len(calls) == 2 else None
    server = Replaced(make_peer("vllm-apc", engines["transformers-auto"]), **{"/v1/chat/completions": second_without})
    with serving(server) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay", "-k", "reuse/shared")
    assert rc == 1 and report["summary"]["headline"] == "NOT CONFORMANT"
    assert "no_count_reported" not in report["summary"]


# --- settings the server publishes ---------------------------------------------------------------

def metrics_saying(**labels):
    def answer(server, method, body):
        status, text = server.peer.handle(method, "/metrics", body)
        for key, value in labels.items():
            text = re.sub(rf'{key}="[^"]*"', f'{key}="{value}"', text)
        return status, text
    return answer


@pytest.mark.parametrize("labels, words", [
    ({"block_size": "-16"}, "publishes block_size='-16' (GET /metrics vllm:cache_config_info block_size)"),
    ({"block_size": "0"}, "publishes block_size='0' (GET /metrics vllm:cache_config_info block_size): setting "
                          "block_size must be an integer 1..1048576"),
    ({"block_size": "16.5"}, "publishes block_size='16.5'"),
    ({"block_size": "100000000000000000000"}, "expected a non-negative integer"),
    ({"num_gpu_blocks": "1"}, "num_gpu_blocks='1' (GET /metrics vllm:cache_config_info num_gpu_blocks - 1"),
    ({"enable_prefix_caching": "maybe"}, "publishes enable_prefix_caching='maybe'"),
])
def test_an_impossible_published_setting_is_bad_input(labels, words, engines, tmp_path, capsys):
    """Before, `block_size="-16"` was dropped without a word and the default 16 judged the server."""
    server = Replaced(make_peer("vllm-apc", engines["transformers-auto"]), **{"/metrics": metrics_saying(**labels)})
    with serving(server) as url:
        line = one_line_exit_2(capsys, argv_for(url, "vllm-apc", tmp_path, "-k", "reuse/replay"))
    assert words in line, line
    assert not (tmp_path / "r").exists()


def test_an_impossible_published_context_is_bad_input(engines, tmp_path, capsys):
    def models(server, method, body):
        status, doc = server.peer.handle(method, "/v1/models", body)
        doc["data"][0]["max_model_len"] = -4096
        return status, doc
    server = Replaced(make_peer("sglang-radix", engines["transformers-auto"]), **{"/v1/models": models})
    with serving(server) as url:
        line = one_line_exit_2(capsys, argv_for(url, "sglang-radix", tmp_path, "-k", "reuse/replay"))
    assert "publishes max_model_len=-4096 (GET /v1/models max_model_len)" in line, line


def test_each_setting_says_where_it_came_from(engines, tmp_path, capsys):
    peer = make_peer("vllm-apc", engines["transformers-auto"], settings={"block_size": 32, "cache_blocks": 24})
    with serving(peer) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay", "--peer-setting", "eagle=false")
    err = capsys.readouterr().err
    assert rc == 0
    assert "block_size=32: published by the server (GET /metrics vllm:cache_config_info block_size)" in err, err
    assert "cache_blocks=24: published by the server (GET /metrics vllm:cache_config_info num_gpu_blocks" in err
    assert "eagle=false: --peer-setting" in err
    said = report["peer"]["settings_said"]
    assert len(said) == len(PEER_PROFILES["vllm-apc"].settings)      # one line per setting, as printed
    assert said == [line.strip() for line in err.splitlines() if line.startswith("  ") and "=" in line][:len(said)]
    assert any("block_size=32: published by the server" in line
               for line in (tmp_path / "report" / "summary.md").read_text().splitlines())


@pytest.mark.parametrize("status", [500, 404])
def test_metrics_that_cannot_be_read_are_said(status, engines, tmp_path, capsys):
    """Before, a /metrics that failed fell back on the defaults without a word."""
    def failing(server, method, body):
        return status, {"error": {"message": "metrics are disabled here"}}
    peer = make_peer("vllm-apc", engines["transformers-auto"])
    with serving(Replaced(peer, **{"/metrics": failing})) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay")
    err = capsys.readouterr().err
    assert rc == 0, err
    warning = next(line for line in err.splitlines() if "warning: GET /metrics could not be read" in line)
    assert ("block_size, cache_blocks, enable_prefix_caching, sliding_window, mamba_block_size, mamba_cache_mode, "
            "retention_interval take the profile's default") in warning, warning
    assert f"HTTP {status}" in warning
    assert "block_size=16: the profile's default (GET /metrics could not be read:" in err
    assert report["peer"]["server"]["fallbacks"]["block_size"].startswith("GET /metrics could not be read")


class ContextOnly:
    """A server that lists its model with a context of 4096 tokens and publishes nothing else
    (a trtllm-serve card that carries max_model_len)."""

    def handle(self, method, path, body):
        if path == "/v1/models":
            return 200, {"data": [{"id": "m", "max_model_len": 4096}]}
        return 404, {"error": "no route"}


def test_trtllm_tokens_per_block_beyond_the_context_is_bad_input(tmp_path, capsys):
    """Every profile falls back on the model card's max_model_len for the context: before, the
    TensorRT-LLM profile read no context and a block of 5000 tokens ran against a 4096-token
    server."""
    with serving(ContextOnly()) as url:
        line = one_line_exit_2(capsys, argv_for(url, "trtllm-kv-reuse", tmp_path, "--peer-setting",
                                                "tokens_per_block=5000"))
    assert "--peer-setting tokens_per_block=5000 exceeds the server's context of 4096 tokens" in line, line
    assert "(GET /v1/models max_model_len)" in line
