"""The bundled llama.cpp-server (`gpu_backend/peer_cache/llama.py`, served by gpu_backend/serve.py)
on chunk reuse, the slot's context and context shift, by hand: every expected count is worked
out in the test from the token ids with list slicing and the rule's arithmetic (PEER-LCPP-7..9,
spec/peer-profiles.md), never from the server or the oracle. The peer suite judges the same
server against the oracle in tests/conformance/test_peer_profiles.py."""
from __future__ import annotations

import pytest
import torch

from gpu_backend.serve import RequestError, make_peer

from tests.helpers.peer_servers import build_engine

WORDS = "the of and to in is for on with as at by from that this it be are was or an not but all can".split()


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return build_engine(tmp_path_factory.mktemp("llama-engine"), "tokenizers-raw")


def ask(peer, text: str, max_tokens: int = 1, **fields) -> dict:
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "logprobs": True, **fields}
    status, doc = peer.handle("POST", "/v1/chat/completions", body)
    assert status == 200
    return doc


def ids_of(peer, text: str) -> list:
    return peer.engine.prompt([{"role": "user", "content": text}])[0]


def common(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_a_chunk_of_at_least_n_is_moved_down_and_counted(engine):
    """PEER-LCPP-7 by hand: X = head + middle + tail, then Y = head + tail: after the common
    prefix, the tail is a run of the slot's ids that Y continues with to its end; a run of at
    least n is reused (the whole of Y then: N - 1), so the count is N - 1; with n above the
    run's length only the prefix is."""
    x = " ".join(WORDS[:6] + WORDS[10:20] + WORDS[20:26])
    y = " ".join(WORDS[:6] + WORDS[20:26])
    tokens = make_peer("llama.cpp-server", engine)
    ix, iy = ids_of(tokens, x), ids_of(tokens, y)
    prefix = common(ix, iy)
    run = len(iy) - prefix                             # Y's rest, found at the end of X's prompt
    assert ix[len(ix) - run:] == iy[prefix:]
    for n, expected in ((run, len(iy) - 1), (run + 1, prefix)):
        peer = make_peer("llama.cpp-server", engine, settings={"cache_reuse": n})
        ask(peer, x)
        doc = ask(peer, y)
        assert doc["usage"]["prompt_tokens_details"]["cached_tokens"] == expected, n
        assert doc["timings"]["cache_n"] == expected and doc["timings"]["prompt_n"] == len(iy) - expected
        assert peer.cache.tokens == iy                   # PEER-LCPP-2: the slot holds Y (one token sampled)


def test_a_prompt_of_the_slots_context_is_refused(engine):
    """PEER-LCPP-8 by hand: n_ctx 64. A prompt of 64 ids or more is HTTP 400 and leaves the slot."""
    peer = make_peer("llama.cpp-server", engine, settings={"n_ctx": 64})
    assert peer.handle("GET", "/props", None)[1]["default_generation_settings"]["n_ctx"] == 64
    short = " ".join(WORDS[:8])
    ask(peer, short)
    held = list(peer.cache.tokens)
    long = " ".join(WORDS * 3)
    assert len(ids_of(peer, long)) >= 64
    with pytest.raises(RequestError) as refused:
        ask(peer, long)
    assert refused.value.status == 400 and "exceeds the available context size (64 tokens)" in str(refused.value)
    assert peer.cache.tokens == held
    assert ask(peer, short)["usage"]["prompt_tokens_details"]["cached_tokens"] == len(held) - 1


def steer(peer) -> dict:
    """A logit bias that makes every sampled id the same word token: generation never ends early."""
    return {str(peer.engine.tokenize("hello")[-1]): 100}


def prompt_of(peer, n: int) -> str:
    """A prompt of exactly n ids (words added one by one)."""
    for k in range(1, 200):
        text = " ".join((WORDS * 8)[:k])
        if len(ids_of(peer, text)) == n:
            return text
    raise AssertionError(f"no prompt of {n} ids")


def test_without_context_shift_generation_stops_at_the_context(engine):
    """PEER-LCPP-8 by hand: n_ctx 64, a prompt of 60 ids asks for 10: 64 - 60 = 4 are sampled, the
    slot holds the prompt and 3 of them (63 ids)."""
    peer = make_peer("llama.cpp-server", engine, settings={"n_ctx": 64})
    text = prompt_of(peer, 60)
    doc = ask(peer, text, 10, logit_bias=steer(peer))
    assert doc["usage"]["completion_tokens"] == 4
    sampled = [e["id"] for e in doc["choices"][0]["logprobs"]["content"]]
    assert peer.cache.tokens == ids_of(peer, text) + sampled[:3]


def test_context_shift_keeps_n_keep_and_discards_half_the_rest(engine):
    """PEER-LCPP-9 by hand: n_ctx 64, n_keep 8, a prompt of 60 ids sampling 10. Fed back: 9. The
    first three reach 63 ids; before the fourth the slot shifts: K = 8, D = (63 - 8) // 2 = 27,
    positions 8-34 go; then six more are fed: 63 - 27 + 6 = 42 ids. The prompt again shares the
    first 8 (its id 8 is not the slot's id 8, its old id 35)."""
    peer = make_peer("llama.cpp-server", engine, settings={"n_ctx": 64, "context_shift": True, "n_keep": 8})
    text = prompt_of(peer, 60)
    doc = ask(peer, text, 10, logit_bias=steer(peer))
    sampled = [e["id"] for e in doc["choices"][0]["logprobs"]["content"]]
    assert len(sampled) == 10
    before = ids_of(peer, text) + sampled[:3]
    assert peer.cache.tokens == before[:8] + before[35:] + sampled[3:9]
    prompt = ids_of(peer, text)
    assert prompt[8] != before[35]
    assert ask(peer, text)["usage"]["prompt_tokens_details"]["cached_tokens"] == 8


def test_moved_keys_are_rotated_to_their_new_positions(engine):
    """The KV moved by chunk reuse or a context shift keeps its meaning: in the first layer a key
    depends only on its token and position, so the keys of `ab...` computed at positions 1.. and
    moved down by one equal those computed at 0.. (to FP16 rounding)."""
    peer = make_peer("llama.cpp-server", engine)
    ids = ids_of(peer, " ".join(WORDS[:10]))
    fresh = peer.engine.generate(ids[1:], None, 1)["kv"]
    later = peer.engine.generate(ids, None, 1)["kv"][:, :, 1:]
    moved = peer.engine._moved(later, -1)
    assert torch.allclose(moved[0, 0].float(), fresh[0, 0].float(), atol=2e-2)
    assert not torch.allclose(later[0, 0].float(), fresh[0, 0].float(), atol=2e-2)
