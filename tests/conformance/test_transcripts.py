"""Generated ids a backend does not print: recovered where that is exact, otherwise only the
counts that need them are not judged (conformance/judge/transcripts.py, spec/RUNNING.md section 4)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

import reference
from conformance.judge import oracle
from conformance.judge.transcripts import Known, known_tokens, predict_known
from conformance.judge.transcripts_hf import recover_ids

PHI3 = str(Path(__file__).resolve().parents[2] / "spec" / "tokenizers" / "phi-3-mini")


@pytest.fixture(scope="module")
def phi3():
    return reference.engine_from_build_args({"maxInputLen": 256, "maxKVCacheCapacity": 512, "maxKVPoolPages": 0,
                                            "tokensPerPage": 16, "tokenizer": PHI3})


def test_a_recovered_text_is_exactly_what_was_generated(phi3):
    """Soundness: whatever the kit recovers from a text is the sequence that printed it. Short
    pieces make many texts ambiguous; those must come back as None, never as another sequence."""
    tok = phi3.hf_tokenizer()
    rng = random.Random(7)
    pool = [i for i in range(300, 2000) if "\ufffd" not in tok.decode([i])]
    recovered = 0
    for _ in range(150):
        seq = [rng.choice(pool) for _ in range(rng.randint(1, 12))]
        text = tok.decode(seq, skip_special_tokens=True)
        got = recover_ids(phi3, text, "max-length", len(seq))
        assert got is None or got == seq, (seq, text, got)
        recovered += got is not None
        eos = recover_ids(phi3, text, "end-of-sequence", 64)
        assert eos is None or eos == seq + [phi3.eos_token_id]
    assert 0 < recovered < 150, "some texts have one tokenization, some more than one"


def test_a_text_that_re_encodes_otherwise_is_still_recovered_when_unique(phi3):
    """Re-encoding a text is not how the kit recovers: a model may emit a split the tokenizer
    would merge. Such a text is recovered when its length leaves one tokenization only."""
    tok = phi3.hf_tokenizer()
    rng = random.Random(3)
    pool = [i for i in range(3000, 9000) if "\ufffd" not in tok.decode([i])]
    for _ in range(40):
        seq = [rng.choice(pool) for _ in range(48)]
        text = tok.decode(seq, skip_special_tokens=True)
        if tok.encode(text, add_special_tokens=False) != seq and recover_ids(phi3, text, "max-length", 48) == seq:
            return
    pytest.fail("no 48-token text with a non-canonical split was recovered")


def doc(*prompts, mgl=4, batch_size=1):
    return {"apply_chat_template": False, "max_generate_length": mgl, "top_k": 1, "batch_size": batch_size,
            "requests": [{"messages": [{"role": "user", "content": p}]} for p in prompts]}


def flags():
    return oracle.flags_of({"enableContextReuse": True})


LONG = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi " * 2).strip()


def test_unrelated_requests_are_predicted_whole_with_counts_only(phi3):
    """max-length finishes give the count; with no request that could meet the unknown tokens the
    prediction is exact and every count is judged."""
    d = doc(LONG, "completely different words here " * 6, mgl=20)
    known = [Known(None, 20, None, "?", "max-length"), Known(None, 20, None, "?", "max-length")]
    prediction, coverage = predict_known(phi3, flags(), d, ".", known, d["max_generate_length"])
    assert coverage.complete and coverage.placeholders == [0, 1]
    assert len(prediction.responses) == 2 and prediction.profile["context_cache"]["admitted_sequences"] == 2


def test_a_request_that_runs_on_into_unknown_tokens_stops_the_prediction_there(phi3):
    """Request 1 starts with request 0's whole input and goes on: it may reuse the pages holding
    request 0's generated tokens, which nobody knows. Request 0 is judged, the rest not."""
    d = doc(LONG, LONG + " and then some more words follow" * 3, mgl=20)
    known = [Known(None, 20, None, "?", "max-length"), Known(None, 20, None, "?", "max-length")]
    prediction, coverage = predict_known(phi3, flags(), d, ".", known, d["max_generate_length"])
    assert not coverage.complete and coverage.requests == 1 and not coverage.aggregates
    assert len(prediction.responses) == 1 and "request 1 may meet the tokens request 0 generated" in coverage.reasons[0]


def test_equal_inputs_with_equal_text_generated_equal_ids(phi3):
    """A replay of the same input with the same text and finish generated the same ids (greedy):
    its decode-end publication dedups exactly as the placeholders say."""
    d = doc(LONG, LONG, mgl=20)
    known = [Known(None, 20, None, "same", "max-length"), Known(None, 20, None, "same", "max-length")]
    _, coverage = predict_known(phi3, flags(), d, ".", known, d["max_generate_length"])
    assert coverage.complete
    known[1] = Known(None, 20, None, "other", "max-length")
    _, coverage = predict_known(phi3, flags(), d, ".", known, d["max_generate_length"])
    assert not coverage.complete and coverage.requests == 1


def test_an_unknown_count_stops_the_prediction_where_it_matters(phi3):
    """An end-of-sequence finish without ids says nothing of the count; the decode-end
    publication of batch 1 depends on it, batch 0's counts do not."""
    d = doc("first prompt words " * 8, LONG, mgl=40)
    known = [Known([5, 6, phi3.eos_token_id], None, "output_ids", "", "end-of-sequence"),
             Known(None, None, None, "unknown", "end-of-sequence")]
    prediction, coverage = predict_known(phi3, flags(), d, ".", known, d["max_generate_length"])
    assert coverage.requests == 1 and not coverage.aggregates and "how many tokens" in coverage.reasons[0]


def test_known_tokens_reads_every_source(phi3):
    r = {"output_text": "", "finish_reason": "max-length", "output_ids": [7, 8]}
    assert known_tokens(r, phi3, 2).ids == [7, 8]
    r = {"output_text": "", "finish_reason": "max-length",
         "logprobs": [[{"token_id": 9, "logprob": -0.1}], [{"token_id": 10, "logprob": -0.2}]]}
    assert known_tokens(r, phi3, 2).ids == [9, 10]
    ambiguous = known_tokens({"output_text": "ab", "finish_reason": "max-length"}, phi3, 2)
    assert ambiguous.ids is None and ambiguous.count == 2
    assert known_tokens({"output_text": "x", "finish_reason": "stop-words"}, phi3, 9).count is None


class TextOnlyAdapter:
    """The oracle posing as a backend that prints text only: no output_ids, no logprobs."""

    def __init__(self):
        from conformance.adapters.reference import ReferenceAdapter
        self.inner = ReferenceAdapter()
        self.name, self.sessions = "text-only", True

    def capabilities(self):
        caps = dict(self.inner.capabilities())
        caps["observables"] = {"per_request_metrics": True, "prefill_profile": True}
        return caps

    def engine_for(self, args):
        return self.inner.engine_for(args)

    def fixed_engine(self):
        return None

    def start(self, engine, runtime):
        session = self.inner.start(engine, runtime)
        run = session.run

        def text_only(doc, base_dir):
            got = run(doc, base_dir)
            for r in got.responses or []:
                r.pop("output_ids", None)
                r.pop("logprobs", None)
            return got
        session.run = text_only
        return session


def test_a_decode_end_case_of_a_text_only_backend_is_judged_not_an_error(tmp_path):
    """A real-tokenizer engine and a backend that prints text only: the case is judged (PASS), and
    what could not be predicted is listed with its reason, instead of the whole case ending ERROR."""
    import json
    from conformance.cases.case import load_case
    from conformance.run.execute import run_case
    from conformance.judge.verdicts import Verdict
    case = doc(LONG, LONG + " and then some more words follow" * 3, "another prompt entirely " * 5, mgl=24)
    case["_conformance"] = {"id": "tmp/text-only-decode-end", "description": "decode-end with text only",
                            "rules": ["CR-PUB-2"], "engine": {"maxInputLen": 256, "maxKVCacheCapacity": 512,
                                                              "maxKVPoolPages": 0, "tokensPerPage": 16,
                                                              "tokenizer": PHI3},
                            "runtime": {"enableContextReuse": True}}
    path = tmp_path / "case.json"
    path.write_text(json.dumps(case))
    adapter = TextOnlyAdapter()
    result = run_case(load_case(path), adapter, adapter.capabilities())
    assert result.verdict == Verdict.PASS, (result.reason, [f.line() for f in result.failures])
    judged = result.details["judged"]
    assert judged["counts"] > 0 and judged["outputs"] == 3
    assert judged["outputs_compared_on"] == {"output_text": [0, 1, 2]}
    for entry in judged.get("not_judged", []):
        assert entry["reason"]


def test_what_is_predicted_from_partial_knowledge_is_what_the_whole_transcript_gives():
    """Soundness on random files: prompts over two letters share prefixes, and some continue an
    earlier prompt with what it generated (a conversation fed back), so generated pages are met.
    Some prompts are replays, answered the same way or not. Whatever predict_known predicts with some ids hidden (their count known or not) equals the
    prediction with every id known."""
    engine = reference.engine_from_build_args({"maxInputLen": 60, "maxKVCacheCapacity": 96, "maxKVPoolPages": 0,
                                              "tokensPerPage": 4, "maxBatchSize": 2})
    rng = random.Random(11)
    eos = engine.eos_token_id
    partial = admitted = 0
    for trial in range(300):
        mgl = rng.choice([1, 3, 6, 9])
        prompts, truth, known = [], [], []
        for k in range(rng.randint(2, 6)):
            replayed = None
            if prompts and rng.random() < 0.25:
                replayed = rng.randrange(len(prompts))   # the same prompt again
                prompt = prompts[replayed]
            elif prompts and rng.random() < 0.5:
                j = rng.randrange(len(prompts))
                prompt = prompts[j] + bytes(t for t in truth[j] if t != eos).decode() + \
                    "".join(rng.choice("ab") for _ in range(rng.randint(0, 6)))
            else:
                prompt = "".join(rng.choice("ab") for _ in range(rng.randint(3, 14)))
            prompts.append(prompt[:50])
            g = mgl if rng.random() < 0.6 else rng.randint(1, mgl)
            ids = [rng.choice(b"ab") for _ in range(g)]
            if g < mgl or rng.random() < 0.2:
                ids[-1] = eos
            if replayed is not None and rng.random() < 0.5:
                ids = list(truth[replayed])              # greedy: the same answer
            finish = "end-of-sequence" if ids[-1] == eos else "max-length"
            truth.append(ids)
            text = bytes(t for t in ids if t != eos).decode()
            hide = rng.random()
            if hide < 0.3:
                known.append(Known(ids, None, "output_ids", text, finish))
            elif finish == "max-length":
                known.append(Known(None, mgl, None, text, finish))
            else:
                known.append(Known(None, None, None, text, finish))
        d = doc(*prompts, mgl=mgl, batch_size=rng.choice([1, 2]))
        d["context_cache_commit_policy"] = rng.choice(["including_generated_tokens"] * 3 + ["prefill_state_only"])
        f = oracle.flags_of({"enableContextReuse": True})
        whole = oracle.predict(engine, f, d, ".", truth)
        prediction, coverage = predict_known(engine, f, d, ".", known, mgl)
        partial += not coverage.complete
        for p in prediction.responses:
            w = whole.responses[p["request_idx"]]
            if p["status"] is None:               # admission facts only
                admitted += 1
                assert {k: w["context_cache"][k] for k in p["context_cache"]} == p["context_cache"], trial
            else:
                assert p["status"] == w["status"] and p.get("context_cache") == w.get("context_cache"), trial
        if coverage.complete:
            assert prediction.profile == whole.profile, trial
    assert 30 < partial < 270 and admitted > 30, (partial, admitted)
