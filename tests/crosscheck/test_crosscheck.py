"""The cross-check's own machinery, runtime-free (docs/crosscheck.md): the stream generator, the
comparison, the classification, the shrinker and the report, with fake drivers standing in for
vLLM and SGLang. A fake runtime is the oracle with one known cause switched on
(conformance/crosscheck/hypotheses.py), so the cross-check must find, classify and shrink
exactly that cause; the oracle itself must agree with itself everywhere. The real runtimes run in
tests/crosscheck/test_real_runtimes.py (`pytest -m external`).
"""
from __future__ import annotations

import json

import pytest

from conformance.cli import main
from conformance.crosscheck import hypotheses, oracle_side, report, shrink, streams
from conformance.crosscheck.compare import first_difference
from conformance.crosscheck.driver import FakeDriver
from conformance.crosscheck.run import crosscheck
from conformance.parity import peer


def test_streams_are_seeded_and_aim_at_the_rules_edges():
    assert streams.stream("vllm", 7) == streams.stream("vllm", 7)
    assert streams.stream("vllm", 7) != streams.stream("vllm", 8)
    drawn = [streams.stream(r, seed) for r in streams.RUNTIMES for seed in range(300)]
    steps = [s for d in drawn for s in d["steps"]]
    requests = [s for s in steps if "prompt" in s]
    assert all(len(s["prompt"]) >= 2 and s["sampled"] for s in requests)
    assert any(s.get("hold") for s in requests) and any("release" in s for s in steps)
    assert not any(s.get("hold") for d in drawn if d["runtime"] == "sglang" for s in d["steps"])
    assert any(s.get("reset") for s in steps)
    for key in ("lora", "salt", "extra_key", "skip_prefix_cache"):
        assert any(key in s for s in requests), key
    assert any(s.get("salt") == "" for s in requests)
    assert {d["settings"]["block_size"] for d in drawn if d["runtime"] == "vllm"} >= {1, 2, 4, 16, 32}
    assert any(d["settings"].get("cache_blocks") for d in drawn) and any(d["settings"].get("pool_tokens") for d in drawn)
    assert all(d["settings"]["pool_tokens"] % d["settings"]["page_size"] == 0
               for d in drawn if d["settings"].get("pool_tokens"))
    # prompts that share a prefix ending one token before, at and after a block boundary
    shared = {("vllm", 16): set(), ("sglang", 4): set()}
    for d in drawn:
        unit = d["settings"].get("block_size") or d["settings"].get("page_size")
        seen = [s["prompt"] for s in d["steps"] if "prompt" in s]
        for i, a in enumerate(seen):
            for b in seen[:i]:
                n = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                if (d["runtime"], unit) in shared and n >= unit:
                    shared[(d["runtime"], unit)].add(n % unit)
    for key, residues in shared.items():
        assert {0, 1, key[1] - 1} <= residues, key


def test_the_first_difference_names_step_and_field():
    assert first_difference([{"cached": 4}], [{"cached": 4}]) is None
    d = first_difference([{"cached": 4}, {"cached": 8, "free_queue": [1, 2]}], [{"cached": 4}, {"cached": 8, "free_queue": [2, 1]}])
    assert (d.step, d.field, d.runtime, d.oracle) == (1, "free_queue", [1, 2], [2, 1])
    assert first_difference([{"undefined": "x"}], [{"undefined": "y"}]) is None
    assert first_difference([{"cached": 0}], [{"undefined": "y"}]).field == "undefined"
    assert first_difference([{"cached": 0}], []).field == "cached"


def test_the_oracle_agrees_with_itself_and_its_unswitched_copy():
    with FakeDriver(oracle_side.observe, "sglang", "0") as driver:
        result = crosscheck(driver, "sglang", range(150))
    assert result.findings == {} and result.agree == result.streams == 150 and result.requests > 1000
    for seed in range(150):      # the classification's copy of the cache is the oracle until switched
        s = streams.stream("sglang", seed)
        assert hypotheses.observe(s, ()) == oracle_side.observe(s)
        assert hypotheses._observe_variant(s, set()) == oracle_side.observe(s), seed


@pytest.mark.parametrize("runtime, cause, label", [
    ("sglang", "whole_demand", "(b) evicts the whole demand, not the shortfall (SGLang < 0.5.17)"),
    ("sglang", "decode_tokens", "(c) P + 1 slots per decode step, tokens held (the oracle before 1.3.0)"),
    ("sglang", "no_prompt_split", "(a) no split at the prompt boundary (SGLang < 0.5.20)"),
    ("sglang", "empty_extra_key", "empty extra key kept apart (below the API)"),
])
def test_a_planted_cause_is_found_classified_and_shrunk(runtime, cause, label):
    def runtime_observe(stream):
        return hypotheses.observe(stream, (cause,))
    with FakeDriver(runtime_observe, runtime, "fake") as driver:
        result = crosscheck(driver, runtime, range(600), shrink_budget=300)
    assert label in result.findings, result.classes()
    # every class found names the planted cause (alone, or as one the stream cannot tell apart)
    assert all(label in lbl.split(" | ") for lbl in result.findings), result.classes()
    finding = result.findings[label]
    minimal = finding.minimal
    assert sum("prompt" in s for s in minimal["steps"]) <= 8
    assert first_difference(runtime_observe(minimal), oracle_side.observe(minimal)) is not None
    assert finding.runtime == runtime_observe(minimal) and finding.oracle == oracle_side.observe(minimal)


def test_vllm_keys_the_empty_salt_as_vllm_does():
    """The cross-check's one vLLM class, the empty salt (vLLM keys `cache_salt: ""` as no salt,
    PEER-VLLM-17), is the oracle's own reading now: a runtime whose streams lose their empty salts
    agrees with it on every stream, empty salts and all."""
    with FakeDriver(lambda s: hypotheses.observe(s, ("empty_salt",)), "vllm", "0.32.0") as driver:
        result = crosscheck(driver, "vllm", range(300))
    salted = sum(1 for seed in range(300) for step in streams.stream("vllm", seed)["steps"] if step.get("salt") == "")
    assert result.findings == {} and result.agree == result.streams == 300 and salted > 20
    assert hypotheses.CAUSES["vllm"] == ()


def test_the_shrinker_keeps_the_property_and_removes_the_rest():
    s = streams.stream("vllm", 3, max_requests=20)
    s["steps"].insert(3, {"prompt": [1, 2, 7, 3, 4, 5], "sampled": [1, 2, 3], "salt": "s1"})

    def still(candidate):
        return any(7 in step.get("prompt", []) for step in candidate["steps"])
    small = shrink.shrink(s, still)
    requests = [step for step in small["steps"] if "prompt" in step]
    assert still(small) and len(small["steps"]) == 1 and 7 in requests[0]["prompt"] and len(requests[0]["prompt"]) == 2
    assert len(requests[0]["sampled"]) == 1 and "salt" not in requests[0]


def test_the_entries_are_parity_style_and_the_oracle_still_disagrees_with_them(tmp_path):
    with FakeDriver(lambda s: hypotheses.observe(s, ("whole_demand",)), "sglang", "0.5.23") as driver:
        result = crosscheck(driver, "sglang", range(400), shrink_budget=300)
    paths = report.write(result, tmp_path)
    doc = json.loads(paths[1].read_text())
    assert doc["format"] == "kvconform-crosscheck-v1" and doc["version"] == "0.5.23"
    entry = next(e for e in doc["entries"] if e["id"] == "crosscheck/whole-demand")
    assert entry["file"] == "sglang/srt/mem_cache/allocator/base.py" and entry["line"] == 166
    run = peer.Run(entry["scenario"], doc["profile"], None)
    for a in entry["assertions"]:
        assert a["known_disagreement"].startswith("cross-check: (b)")
        assert run.observe(a["observe"]) != a["expected"]
    # the same stream at the release that evicted the whole demand agrees with the fake runtime
    older = peer.Run(dict(entry["scenario"], settings={**entry["scenario"]["settings"], "version": "0.5.16"}),
                     doc["profile"], None)
    assert all(older.observe(a["observe"]) == a["expected"] for a in entry["assertions"])
    row = paths[2].read_text().splitlines()[-1]
    assert row.startswith("| SGLang | 0.5.23 | 400 |") and "(b) evicts the whole demand" in row


def test_a_runtime_the_crosscheck_does_not_install_is_bad_input(capsys):
    assert main(["crosscheck", "--runtime", "vllm==0.1.0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "vllm==0.32.0" in err
    assert main(["crosscheck", "--runtime", "sglang==0.5.23", "--requests", "0"]) == 2


def test_cause_counts_separate_certain_from_possible():
    classes = [{"class": "(b) evict only the shortfall", "streams": 5},
               {"class": "(a) split at the prompt boundary | (b) evict only the shortfall", "streams": 2},
               {"class": "empty salt + (b) evict only the shortfall", "streams": 1},
               {"class": "unclassified (cached)", "streams": 4}]
    counts = report.cause_counts(classes)
    assert counts["(b) evict only the shortfall"] == {"certain": 6, "possible": 8}
    assert counts["(a) split at the prompt boundary"] == {"certain": 0, "possible": 2}
    assert counts["empty salt"] == {"certain": 1, "possible": 1} and len(counts) == 3


def committed_entries():
    return sorted(report.EXAMPLES.glob("*/entries.json"))


def test_the_committed_runs_are_what_docs_crosscheck_shows():
    assert report.committed(), "no committed cross-check run under examples/crosscheck/"
    assert report.doc_is_current(), "docs/crosscheck.md is out of date: run `kvconform crosscheck --update-doc`"


@pytest.mark.parametrize("path", committed_entries(), ids=lambda p: p.parent.name)
def test_each_committed_minimal_stream_still_disagrees_where_it_says(path):
    """The entries' expected values are the runtime's own; the oracle differs from each (a fix of
    the oracle makes this fail: then run the cross-check again and commit its new result)."""
    doc = json.loads(path.read_text())
    for entry in doc["entries"]:
        stream = {"id": entry["id"], "runtime": {"vLLM": "vllm", "SGLang": "sglang"}[doc["runtime"]],
                  "settings": entry["scenario"]["settings"], "steps": entry["scenario"]["steps"]}
        observed = oracle_side.observe(stream)
        for a in entry["assertions"]:
            assert a["known_disagreement"].startswith("cross-check: ")
            assert observed[a["observe"]["step"]].get(a["observe"]["value"]) != a["expected"], (entry["id"], a)


def test_a_focused_search_runs_only_the_streams_the_cause_changes():
    seen = []

    def runtime_observe(stream):
        seen.append(stream["id"])
        return hypotheses.observe(stream, ("decode_tokens",))
    with FakeDriver(runtime_observe, "sglang", "0") as driver:
        result = crosscheck(driver, "sglang", range(300), focus="decode_tokens", max_streams=300)
    assert result.passed_over + result.streams == 300 and 0 < result.streams < 100
    assert LABEL["decode_tokens"] in result.findings and result.agree == 0


LABEL = hypotheses.LABELS


def test_settings_the_profile_does_not_define_stop_the_stream_at_once():
    stream = {"runtime": "vllm", "settings": {"block_size": 2, "sliding_window": 16, "swa_block_size": 4,
                                              "mamba_block_size": 2, "eagle": True, "cache_blocks": 7},
              "steps": [{"prompt": [43, 10, 43, 43, 29, 19], "sampled": [24]}]}
    (seen,) = oracle_side.observe(stream)
    assert "unbounded pool" in seen["undefined"]
