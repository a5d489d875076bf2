"""The llama.cpp-server oracle's chunk reuse, context and context shift (PEER-LCPP-7..9) and slot
similarity at its threshold (PEER-LCPP-5), by hand: every expected value is derived in the comment
beside it from tools/server/server-context.cpp (ggml-org/llama.cpp b11434), never from the oracle.
One letter is one token id."""
from __future__ import annotations

import pytest

from reference import peers
from reference.peer_llama import f32, fed_through, reuse_chunks, shift_plan
from reference.peer_trace import PeerTrace


def t(s: str) -> list:
    return [ord(c) for c in s]


def req(s: str) -> peers.PeerRequest:
    return peers.PeerRequest(t(s))


# --- PEER-LCPP-7: chunk reuse ------------------------------------------------------------------------

@pytest.mark.parametrize("n, prompt, expected", [
    (3, "abefghXY", 6),     # LCP 2 (ab); c, d start no run; efgh (4 >= 3) moved to 2-5; X starts none: min(6, 7)
    (5, "abefghXY", 2),     # the run efgh is 4 < 5: only the prefix
    (4, "abefghXY", 6),     # a run of exactly n is reused (>=, not >)
    (3, "abefghij", 7),     # the run efghij reaches the prompt's end: min(8, N - 1 = 7)
    (3, "abXefgh", 2),      # X is at the prompt's head: no run starts at it, so efgh is never reached
    (2, "abcdhi", 5),       # LCP 4 (abcd); e, f, g start no run; hi (2 >= 2) moved down: min(6, 5) = 5
    (0, "abefghXY", 2),     # cache_reuse 0: PEER-LCPP-1
])
def test_lcpp_7_chunks_of_at_least_n_are_moved_down(n, prompt, expected):
    sim = peers.simulator("llama.cpp-server", {"cache_reuse": n})
    sim.commit(req("abcdefghij"), t("z"))
    assert sim.predict(req(prompt)) == expected


def test_lcpp_7_the_loop_skips_one_slot_id_after_a_short_run():
    # slot abcXefgh, prompt abefgh, n 3: at head_c 2 'c' vs 'e' (0); 'X' (0); 'e' run efgh = 4: moved
    # from 4 to 2
    assert reuse_chunks(t("abcXefgh"), t("abefgh"), 2, 3) == (6, [(4, 2, 4)])
    # slot aefXefgh, prompt aefgh, n 3: LCP 3 (aef); head_c 3 'X' vs 'g' (0), 'e' vs 'g' (0), 'f' (0),
    # 'g' run gh = 2 < 3: nothing moved
    assert reuse_chunks(t("aefXefgh"), t("aefgh"), 3, 3) == (3, [])


def test_lcpp_7_two_chunks_in_order():
    # slot ab CD xx EF yy, prompt ab CD EF Q, n 2: LCP 4 (abCD); head_c 4 'x' (0), 5 'x' (0), 6 'E' run EF
    # = 2: moved to 4-5, heads 8 / 6; 'y', 'y' vs 'Q': end. count min(6, 6) = 6
    sim = peers.simulator("llama.cpp-server", {"cache_reuse": 2})
    sim.commit(req("abCDxxEFyy"), t("z"))
    assert sim.predict(req("abCDEFQ")) == 6
    # the slot afterwards holds the computed sequence (PEER-LCPP-2)
    sim.commit(req("abCDEFQ"), t("uv"))
    assert sim.tokens == t("abCDEFQu")


def test_lcpp_7_is_traced_with_the_chunks_moved():
    trace = PeerTrace()
    sim = peers.simulator("llama.cpp-server", {"cache_reuse": 3}, trace=trace)
    trace.begin(0)
    sim.commit(req("abcdefghij"), t("z"))
    trace.begin(1)
    assert sim.predict(req("abefghXY")) == 6
    step, _ = trace.explained(1)
    assert step.rule == "PEER-LCPP-7" and "ids 4-7 of the slot continue the prompt at 2-5" in step.why


# --- PEER-LCPP-8: the slot's context ---------------------------------------------------------------------

def test_lcpp_8_a_prompt_of_n_ctx_ids_is_refused_and_leaves_the_slot():
    sim = peers.simulator("llama.cpp-server", {"n_ctx": 16})
    sim.commit(req("abcd"), t("z"))
    assert sim.refuses(req("abcdefghijklmnop")) is not None     # 16 >= 16
    assert "exceeds the available context size (16 tokens)" in sim.refuses(req("abcdefghijklmnop"))
    assert sim.refuses(req("abcdefghijklmno")) is None          # 15 < 16
    sim.commit(req("abcdefghijklmnop"), [])
    assert sim.tokens == t("abcd")
    assert sim.predict(req("abcd")) == 3


def test_lcpp_8_a_refused_request_makes_its_slot_the_most_recently_used():
    sim = peers.simulator("llama.cpp-server", {"slots": 2, "n_ctx": 16})
    sim.commit(req("abcdefgh"), t("z"))          # fresh: slot 1
    sim.commit(req("mnopqrst"), t("z"))          # slot 0
    long = req("abcdefghijklmnopq")              # 17 ids: shares 8/17 with slot 1 (> 0.1): slot 1, refused
    assert sim.slot_for(long) == 1 and sim.refuses(long) is not None
    sim.commit(long, [])
    # slot 1 was used last: an unrelated prompt now takes slot 0
    assert sim.slot_for(req("uvwxyzAB")) == 0


def test_lcpp_8_without_context_shift_generation_stops_at_the_context():
    sim = peers.simulator("llama.cpp-server", {"n_ctx": 16})
    assert sim.generation_cap(req("abcdefghijkl")) == 4                  # 16 - 12
    sim.commit(req("abcdefghijkl"), t("WXYZ"))                           # 4 sampled, 3 fed: 15 ids
    assert len(sim.tokens) == 15
    with pytest.raises(peers.PeerProfileError, match="more than the 4"):
        sim.commit(req("abcdefghijkl"), t("VWXYZ"))
    assert peers.simulator("llama.cpp-server", {"n_ctx": 16, "context_shift": True}).generation_cap(
        req("abcdefghijkl")) is None


# --- PEER-LCPP-9: context shift -----------------------------------------------------------------------------

def test_lcpp_9_the_spec_example():
    # n_ctx 16, n_keep 2, prompt 13 ids, sampled NOPQR: N, O fed (15); before P: K 2, D (15 - 2) // 2 = 6
    # (cdefgh) discarded: abijklmNO; P, Q fed: abijklmNOPQ
    sim = peers.simulator("llama.cpp-server", {"n_ctx": 16, "context_shift": True, "n_keep": 2})
    sim.commit(req("abcdefghijklm"), t("NOPQR"))
    assert sim.tokens == t("abijklmNOPQ")
    assert sim.predict(req("abijklmZ")) == 7
    assert sim.predict(req("abcdefgh")) == 2


def test_lcpp_9_shift_plan_and_repeated_shifts():
    assert shift_plan(15, 16, 2) == (2, 6)
    assert shift_plan(15, 16, 0) == (0, 7)       # (15 - 0) // 2
    assert shift_plan(15, 16, 40) == (12, 1)     # n_keep capped at n_ctx - 4; (15 - 12) // 2 = 1
    # n_ctx 8, n_keep 0, prompt abcdef, sampled ghijklmn (g..m fed, n stops): g fed (7 held); before h:
    # K 0, D 7 // 2 = 3, abc discarded: defg; h, i, j fed (7 held again: defghij); before k: def
    # discarded: ghij; k, l, m fed: ghijklm
    held, shifts = fed_through(t("abcdef"), t("ghijklmn"), 8, True, 0)
    assert shifts == [(7, 0, 3), (7, 0, 3)]
    assert held == t("ghijklm")


def test_lcpp_9_no_shift_below_the_context():
    held, shifts = fed_through(t("abc"), t("xyz"), 16, True, 0)
    assert shifts == [] and held == t("abcxy")


def test_lcpp_9_is_traced():
    trace = PeerTrace()
    sim = peers.simulator("llama.cpp-server", {"n_ctx": 16, "context_shift": True, "n_keep": 2}, trace=trace)
    trace.begin(0)
    sim.commit(req("abcdefghijklm"), t("NOPQR"))
    trace.begin(1)
    sim.predict(req("abcdefgh"))
    _, chain = trace.explained(1)
    assert any(s.rule == "PEER-LCPP-9" and "ids 2-7 of what it held discarded" in s.why for s in chain)


# --- PEER-LCPP-5 at its threshold ------------------------------------------------------------------------------

def test_lcpp_5_a_share_equal_to_the_threshold_is_not_above_it():
    # slots 2, threshold 0.1: slot 1 abcdefghij (fresh: the last slot), slot 0 mnopqrstuv
    sim = peers.simulator("llama.cpp-server", {"slots": 2})
    sim.commit(req("abcdefghij"), t("z"))
    sim.commit(req("mnopqrstuv"), t("z"))
    # 'm' + 9 new ids: 1/10 = 0.1 with slot 0, not above 0.1: LRU, slot 1 (used first)
    assert sim.slot_for(req("mABCDEFGHI")) == 1
    # 'm' + 8 new ids: 1/9 = 0.111 > 0.1: slot 0
    assert sim.slot_for(req("mABCDEFGH")) == 0


def test_lcpp_5_the_most_similar_of_two_non_empty_slots():
    sim = peers.simulator("llama.cpp-server", {"slots": 2})
    sim.commit(req("abcdefghij"), t("z"))              # fresh server: slot 1
    sim.commit(req("ab" + "X" * 18), t("z"))           # 2/20 = 0.1 with slot 1, not above: LRU, slot 0
    assert sim.slots[0] == t("ab" + "X" * 18)
    # abcdYYYYYY: slot 0 shares 2/10 = 0.2, slot 1 4/10 = 0.4, both above 0.1: the larger, slot 1 (a
    # server taking the first slot above the threshold would take slot 0 and report 2)
    assert sim.slot_for(req("abcdYYYYYY")) == 1
    assert sim.predict(req("abcdYYYYYY")) == 4


def test_lcpp_5_compares_in_single_precision():
    # threshold 0.33333333: the nearest float is 0.3333333433 (the float nearest 1/3, too), so a share of
    # 3/9 equals the threshold in single precision and is not above it, although 1/3 > 0.33333333 in double
    assert f32(3 / 9) == f32(0.33333333) and 3 / 9 > 0.33333333
    sim = peers.simulator("llama.cpp-server", {"slots": 2, "slot_prompt_similarity": 0.33333333})
    sim.commit(req("abcdefghi"), t("z"))               # slot 1
    sim.commit(req("mnopqrstu"), t("z"))               # slot 0
    sim.commit(req("mnopqrstu"), t("z"))               # 9/9 with slot 0: slot 0 again, now the most recent
    # abcDEFGHI shares 3/9 with slot 1: not above the threshold: LRU, which is slot 1 as well; and
    # mnoDEFGHI shares 3/9 with slot 0: not above: LRU, slot 1, not slot 0 (a double comparison says 0)
    assert sim.slot_for(req("mnoDEFGHI")) == 1
    assert sim.predict(req("mnoDEFGHI")) == 0
