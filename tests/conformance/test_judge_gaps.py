"""Who guards the judge: tests for what the kit's own judging code did that no test would notice
if it stopped doing it (found by faulty backends written outside the project and by the mutation
campaign pointed at the kit, docs/mutation.md section 5). Each test fails on the gap it names.
"""
from __future__ import annotations

from conformance.judge.compare import compare_outputs
from conformance.judge.verdicts import CaseResult, Verdict, summarize
from conformance.materialize import _boundary_class


class NoExplain:
    def output(self, i, detail):
        return detail


def text_response(text: str) -> dict:
    return {"request_idx": 0, "batch_idx": 0, "output_text": text, "finish_reason": "max-length"}


def test_an_empty_output_text_is_compared_with_its_replay():
    """CR-OUT-1: the run with reuse answered nothing where its bypass replay answered "abc". An
    empty text is an answer like any other: compared on output_text, first difference at 0."""
    failures = compare_outputs([text_response("")], [text_response("abc")], NoExplain(), ids=False)
    assert [(f.rule, f.what, f.verdict) for f in failures] == [("CR-OUT-1", "responses[0].output_text", Verdict.FAIL)]
    assert "first difference at character 0" in failures[0].why
    # and the other way round: the replay's empty answer against a run's text
    assert compare_outputs([text_response("abc")], [text_response("")], NoExplain(), ids=False)
    assert compare_outputs([text_response("")], [text_response("")], NoExplain(), ids=False) == []


def test_the_materializer_keeps_one_past_a_page_boundary_apart_from_between():
    """relayout.py keeps an input that ends at k*P, k*P + 1 or k*P - 1 at the same place relative
    to the new page size; only other ends are "between". k*P + 1 (one token past the boundary: the
    last page holds one token) is its own class, for every P and k."""
    for P in (3, 4, 16, 128):
        for k in (1, 2, 7):
            assert _boundary_class(k * P, P) == 0
            assert _boundary_class(k * P + 1, P) == 1
            assert _boundary_class(k * P - 1, P) == -1
    # P = 2: one past a boundary is also one before the next, and is kept as one past
    assert [_boundary_class(n, 2) for n in (4, 5)] == [0, 1]
    for n, P in ((18, 16), (30, 16), (130, 128), (10, 4)):
        assert _boundary_class(n, P) == "between", (n, P)


def result(case_id: str, verdict: Verdict, mandatory: bool = True) -> CaseResult:
    return CaseResult(case_id, ["CR-PLAN-1"], mandatory, None, "PLAN", verdict)


def test_a_timeout_beside_judged_cases_makes_the_run_not_conformant():
    """spec/RUNNING.md section 6: no mandatory case may end TIMEOUT. A run that judged cases
    (PASS) and timed out on one is NOT CONFORMANT, not CONFORMANT over what it did judge."""
    s = summarize([result("a", Verdict.PASS), result("b", Verdict.PASS), result("c", Verdict.TIMEOUT)])
    assert s["judged"] == 2 and s["headline"] == "NOT CONFORMANT" and not s["conformant"]
    # a case that is not mandatory may time out
    s = summarize([result("a", Verdict.PASS), result("c", Verdict.TIMEOUT, mandatory=False)])
    assert s["headline"] == "CONFORMANT"


def test_llama_cpp_timings_that_disagree_with_cached_tokens_fail_peer_lcpp_3(tmp_path, monkeypatch):
    """PEER-LCPP-3: where llama.cpp's response has `timings`, cache_n = c and prompt_n = N - c.
    The bundled llama.cpp server with its timings off by one (cached_tokens right) fails the
    peer run on that rule, and nothing else in the response gives it away."""
    from gpu_backend.serve import PeerServer, make_peer

    from tests.helpers.peer_servers import build_engine, run_peers, serving
    answer = PeerServer._response

    def timings_off_by_one(self, *args, **kwargs):
        out = answer(self, *args, **kwargs)
        if "timings" in out:
            out["timings"] = dict(out["timings"], cache_n=out["timings"]["cache_n"] + 1)
        return out
    monkeypatch.setattr(PeerServer, "_response", timings_off_by_one)
    peer = make_peer("llama.cpp-server", build_engine(tmp_path, "tokenizers-raw"))
    with serving(peer) as url:
        rc, report = run_peers(url, "llama.cpp-server", tmp_path, "-k", "reuse/replay")
    failed = [f for c in report["cases"] for f in c.get("failures", []) if c["verdict"] == "FAIL"]
    assert rc == 1 and report["summary"]["headline"] == "NOT CONFORMANT", report["summary"]
    assert failed and {f["rule"] for f in failed} == {"PEER-LCPP-3"}, failed
    assert all(f["what"] == "timings.cache_n" and f["observed"] == f["expected"] + 1 for f in failed)
