"""Token selection: seeded sampling, top-k / top-p, logit bias, masked vocabulary, logprobs."""
import math

from tests.helpers.backend import run, runtime, texts

NO_EOS = {"257": -100}


def gen(rt, **top):
    top.setdefault("logit_bias", NO_EOS)
    doc = texts("abcdefgh", gen=12, num_logprobs=5, **top)
    return run(rt, doc)["responses"][0]


def test_seeded_sampling_is_reproducible_and_seed_dependent(engine):
    d = engine()
    a = gen(runtime(d, seed=1), temperature=1.5, top_k=0, top_p=1.0)["output_ids"]
    b = gen(runtime(d, seed=1), temperature=1.5, top_k=0, top_p=1.0)["output_ids"]
    others = {tuple(gen(runtime(d, seed=s), temperature=1.5, top_k=0, top_p=1.0)["output_ids"]) for s in range(2, 6)}
    assert a == b and len(others | {tuple(a)}) > 1


def test_top_k_one_and_tiny_top_p_are_greedy(engine):
    rt = runtime(engine(), enable_context_reuse=False)
    greedy = gen(rt, temperature=0)["output_ids"]
    assert gen(rt, temperature=2.0, top_k=1)["output_ids"] == greedy
    assert gen(rt, temperature=1.0, top_k=0, top_p=1e-6)["output_ids"] == greedy


def test_logprobs_format_and_masked_vocabulary(engine):
    rt = runtime(engine(), enable_context_reuse=False)
    r = gen(rt, temperature=0)
    assert len(r["logprobs"]) == len(r["output_ids"]) == 12
    for step, tok in zip(r["logprobs"], r["output_ids"]):
        assert len(step) == 5 and step[0]["token_id"] == tok
        lps = [c["logprob"] for c in step]
        assert lps == sorted(lps, reverse=True) and sum(math.exp(x) for x in lps) <= 1 + 1e-6
        for c in step:
            assert c["token_id"] < 128 and c["bytes"] == [c["token_id"]] and c["token"] == chr(c["token_id"])
    assert all(t < 128 for t in r["output_ids"])


def test_logit_bias_shapes_the_choice(engine):
    rt = runtime(engine(), enable_context_reuse=False)
    r = gen(rt, temperature=0, logit_bias={"88": 100, "257": -100})
    assert set(r["output_ids"]) == {88} and r["output_text"] == "X" * 12
    # a bias cannot make the sampler emit a token it never emits (a special other than EOS)
    r = gen(rt, temperature=0, logit_bias={"262": 100, "257": -100})
    assert all(t < 128 for t in r["output_ids"])


def test_top_logprobs_are_the_first_k_of_the_whole_vocabulary_sorted_ties_by_id():
    """top_logprobs sorts only the tokens at or above the k-th value: the answer is the first k
    of the stable descending sort of the whole row, on rows of many ties, a masked vocabulary,
    one allowed token and a NaN."""
    import torch

    from gpu_backend.sampler import top_logprobs

    def whole_sort(row, k):
        vals, idx = torch.sort(torch.log_softmax(row, dim=-1), descending=True, stable=True)
        return [(i, min(v, 0.0)) for v, i in zip(vals[:k].tolist(), idx[:k].tolist())]

    g = torch.Generator().manual_seed(0)
    for t in range(400):
        V, k = (7, 300, 32045)[t % 3], 1 + t % 9
        row = torch.randn(V, generator=g)
        if t % 4 == 1:
            row = torch.round(row * 2) / 2                                  # ties straddle the k-th value
        if t % 4 == 2:
            row[torch.rand(V, generator=g) < 0.9] = float("-inf")
        if t % 4 == 3:
            row[:] = float("-inf")
            row[t % V] = 0.0
        if t % 50 == 7:
            row[t % V] = float("nan")
        got = [(e["token_id"], e["logprob"]) for e in top_logprobs(row, k, entry=lambda i: ("", b""))]
        want = whole_sort(row, k)
        assert [i for i, _ in got] == [i for i, _ in want], (t, V, k)
        assert all(a == b or (math.isnan(a) and math.isnan(b)) for (_, a), (_, b) in zip(got, want)), (t, V, k)
