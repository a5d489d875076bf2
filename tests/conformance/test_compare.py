"""Output comparisons (spec/RUNNING.md section 5) and {{output:K}} templates (section 4)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from conformance.cases.case import bypass_replay_of, check_templates, resolve_outputs, template_refs
from conformance.judge.compare import LOGPROB_DRIFT, NEAR_TIE_NATS, compare_outputs
from conformance import KvconformError
from conformance.judge.verdicts import Verdict


class NoExplain:
    def output(self, i, detail):
        return detail


def response(ids, steps=None, finish="max-length"):
    r = {"request_idx": 0, "batch_idx": 0, "output_ids": ids, "output_text": "", "finish_reason": finish}
    if steps is not None:
        r["logprobs"] = [[{"token_id": t, "token": chr(t), "bytes": [t], "logprob": lp} for t, lp in step]
                         for step in steps]
    return r


def test_equal_outputs_pass():
    a = response([97, 98], [[(97, -0.1), (98, -2.0)], [(98, -0.2), (99, -3.0)]])
    assert compare_outputs([a], [dict(a)], NoExplain(), ids=True) == []


def test_a_different_token_is_a_fail():
    a = response([97, 98], [[(97, -0.1), (98, -2.0)], [(98, -0.2), (99, -3.0)]])
    b = response([97, 99], [[(97, -0.1), (98, -2.0)], [(99, -0.2), (98, -3.0)]])
    [f] = compare_outputs([a], [b], NoExplain(), ids=True)
    assert f.verdict == Verdict.FAIL and f.rule == "CR-OUT-1" and "generated token 1" in f.why


def test_a_near_tie_is_a_quality_warning():
    gap = NEAR_TIE_NATS / 2
    a = response([97, 98], [[(97, -0.1), (98, -2.0)], [(98, -0.70), (99, -0.70 - gap / 2)]])
    b = response([97, 99], [[(97, -0.1), (98, -2.0)], [(99, -0.69), (98, -0.69 - gap)]])
    [f] = compare_outputs([a], [b], NoExplain(), ids=True)
    assert f.verdict == Verdict.QUALITY_WARNING and "near-tie" in f.why


def test_a_near_tie_is_judged_when_the_run_returned_one_candidate_or_none():
    """The bypass replay asks two candidates whatever the case asks (bypass_replay_of), so its
    top-2 gap decides; a run token outside the replay's top two is still a FAIL."""
    gap = NEAR_TIE_NATS / 2
    bypass = response([97, 99], [[(97, -0.1), (98, -2.0)], [(99, -0.69), (98, -0.69 - gap)]])
    for run in (response([97, 98], [[(97, -0.1)], [(98, -0.70)]]), response([97, 98])):
        [f] = compare_outputs([run], [bypass], NoExplain(), ids=True)
        assert f.verdict == Verdict.QUALITY_WARNING and "near-tie" in f.why
    [f] = compare_outputs([response([97, 100])], [bypass], NoExplain(), ids=True)
    assert f.verdict == Verdict.FAIL


def test_the_bypass_replay_asks_two_candidates_in_its_own_file_only():
    doc = {"num_logprobs": 1, "requests": [{"messages": [], "num_logprobs": 0}, {"messages": []}]}
    replay = bypass_replay_of(doc)
    assert replay["context_cache_lookup_policy"] == "bypass" and replay["num_logprobs"] == 2
    assert [r.get("num_logprobs") for r in replay["requests"]] == [2, None]
    assert doc == {"num_logprobs": 1, "requests": [{"messages": [], "num_logprobs": 0}, {"messages": []}]}


def test_a_wide_gap_is_not_a_near_tie():
    a = response([97, 98], [[(97, -0.1), (98, -2.0)], [(98, -0.1), (99, -0.2)]])
    b = response([97, 99], [[(97, -0.1), (98, -2.0)], [(99, -0.1), (98, -0.1 - 2 * NEAR_TIE_NATS)]])
    [f] = compare_outputs([a], [b], NoExplain(), ids=True)
    assert f.verdict == Verdict.FAIL


def test_logprob_drift_on_agreeing_tokens_is_a_quality_warning():
    a = response([97], [[(97, -0.1), (98, -2.0)]])
    b = response([97], [[(97, -0.1 - 2 * LOGPROB_DRIFT), (98, -2.0)]])
    [f] = compare_outputs([a], [b], NoExplain(), ids=True)
    assert f.verdict == Verdict.QUALITY_WARNING and f.rule == "CR-OUT-2"
    small = response([97], [[(97, -0.1 - LOGPROB_DRIFT / 2), (98, -2.0)]])
    assert compare_outputs([a], [small], NoExplain(), ids=True) == []


def test_nan_logprob_is_a_fail():
    a = response([97], [[(97, math.nan), (98, -2.0)]])
    b = response([97], [[(97, -0.1), (98, -2.0)]])
    failures = compare_outputs([a], [b], NoExplain(), ids=True)
    assert any(f.rule == "CR-OUT-3" and f.verdict == Verdict.FAIL for f in failures)


def test_finish_reason_must_agree():
    a = response([97, 257], finish="end-of-sequence")
    b = response([97, 257], finish="max-length")
    [f] = compare_outputs([a], [b], NoExplain(), ids=True)
    assert f.what.endswith("finish_reason") and f.verdict == Verdict.FAIL


def test_texts_are_compared_without_output_ids():
    a = {"request_idx": 0, "batch_idx": 0, "output_text": "abc", "finish_reason": "max-length"}
    [f] = compare_outputs([a], [dict(a, output_text="abd")], NoExplain(), ids=False)
    assert f.what.endswith("output_text")


# --- templates -------------------------------------------------------------------------------------

def doc_with(texts, batch_size=1):
    return {"batch_size": batch_size, "requests": [{"messages": [{"role": "user", "content": t}]} for t in texts]}


def test_templates_are_found_and_resolved():
    doc = doc_with(["hi", "x {{output:0}} y", "{{output:1}}{{output:0}}"])
    assert template_refs(doc) == {1: {0}, 2: {0, 1}}
    out = resolve_outputs(doc, {0: "A", 1: "B"})
    assert [r["messages"][0]["content"] for r in out["requests"]] == ["hi", "x A y", "BA"]
    assert doc["requests"][1]["messages"][0]["content"] == "x {{output:0}} y", "the case itself is not modified"


def test_a_template_must_refer_to_an_earlier_batch():
    case = SimpleNamespace(doc=doc_with(["hi", "{{output:0}}"], batch_size=2), path="x.json",
                           batch_size=lambda: 2)
    with pytest.raises(KvconformError, match="earlier batch"):
        check_templates(case)
    case.doc["batch_size"] = 1
    case.batch_size = lambda: 1
    check_templates(case)
