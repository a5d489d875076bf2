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
