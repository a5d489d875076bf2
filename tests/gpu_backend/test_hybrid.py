"""Recurrent and hybrid deployments (CR-HYB): exact-length endpoint checkpoints, snapshot
pools, capture passes and restores. P = 4, chat template off; counts derived by hand.

Default test engines: hybrid = [recurrent, attention], pure recurrent = 2 recurrent layers, with
4 heads x 16 x state 16 and a 64 x 4 convolution state in fp32, so
S_r = 4*16*16*4 + 64*4*4 = 5120 bytes per recurrent layer and S_p = 1 * 2 * 16 * 2 * 4 * 2 = 512.
"""
import json
import shutil

import pytest

from tests.helpers.backend import BUDGET, counters, facts, run, runtime, texts

NO_EOS = {"257": -100}
S_R_HYBRID, S_R_RECURRENT, S_P = 5120, 2 * 5120, 512


def plan_of(res, i=0):
    f = facts(res, i)
    return f["plan"], f["matched_tokens"], f["reused_tokens"]


def reused(rt, *contents):
    return [facts(run(rt, texts(c)))["reused_tokens"] for c in contents]


def test_snapshot_pool_sizing(engine, tmp_path):
    pools = lambda rt: counters(rt)["resource_pools"]
    p = pools(runtime(engine(model="hybrid")))
    assert p["recurrent_snapshots"] == {"free": BUDGET // S_R_HYBRID, "capacity": BUDGET // S_R_HYBRID}
    assert p["partial_kv_snapshots"]["capacity"] == BUDGET // S_P
    p = pools(runtime(engine(model="recurrent")))
    assert p["recurrent_snapshots"]["capacity"] == BUDGET // S_R_RECURRENT
    assert p["partial_kv_snapshots"]["capacity"] == 0 and p["base_kv_pages"]["capacity"] == 0
    p = pools(runtime(engine()))                                      # vanilla: no snapshot pools
    assert p["recurrent_snapshots"]["capacity"] == p["partial_kv_snapshots"]["capacity"] == 0
    d = tmp_path / "e"                                                # sizes stated by the config
    shutil.copytree(engine(model="hybrid"), d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["snapshot_slot_bytes"] = {"recurrent": 1000, "partial_kv": 100}
    (d / "config.json").write_text(json.dumps(cfg))
    p = pools(runtime(d, recurrent_snapshot_bytes=5500, partial_kv_snapshot_bytes=250))
    assert (p["recurrent_snapshots"]["capacity"], p["partial_kv_snapshots"]["capacity"]) == (5, 2)


@pytest.mark.parametrize("kind", ["hybrid", "recurrent"])
def test_exact_length_endpoint_checkpoints(engine, kind):
    d = engine(model=kind)
    rt = runtime(d)
    run(rt, texts("abcdefghij"))
    res = run(rt, texts("abcdefghijkl"))
    assert plan_of(res) == ("standard", 10, 10) and facts(res)["hybrid_restore"]
    assert reused(runtime(d), "abcdefgh", "abcdefghij") == [0, 8]
    # records at 10 and 6: the longest L < n whose exact identity is the input's [0, L)
    assert reused(runtime(d), "abcdefghij", "abcdef", "abcdefghij", "abcdefghijk", "abcdefgXyz") == [0, 0, 6, 10, 6]
    # a prefix that was never an endpoint is not reusable, even with its pages cached
    assert reused(runtime(d), "abcdefghij", "abcdefghQQ", "abcdefghij") == [0, 0, 0]
    c = counters(rt)
    assert c["hybrid"]["restores"] == 1 and c["plans"]["full_input_rewind"] == 0


def test_partial_kv_slot_only_for_unaligned_lengths(engine):
    rt = runtime(engine(model="hybrid"))
    cap_r, cap_p = BUDGET // S_R_HYBRID, BUDGET // S_P
    res = run(rt, texts("abcdefgh"))
    pools = counters(rt)["resource_pools"]
    assert (pools["recurrent_snapshots"]["free"], pools["partial_kv_snapshots"]["free"]) == (cap_r - 1, cap_p)
    assert facts(res)["publications"] == [{"point": "prefill_end", "tokens": 8, "pages": 2, "status": "committed"}]
    res = run(rt, texts("abcdefghij"))
    pools = counters(rt)["resource_pools"]
    assert (pools["recurrent_snapshots"]["free"], pools["partial_kv_snapshots"]["free"]) == (cap_r - 2, cap_p - 1)
    assert facts(res)["publications"] == [{"point": "prefill_end", "tokens": 10, "pages": 2, "status": "committed"}]
    assert pools["base_kv_pages"]["free"] == 24 - 2                  # both records share [a-d][e-h]


def test_snapshot_pressure_skips_and_reserve_then_publish(engine):
    rt = runtime(engine(model="hybrid"), recurrent_snapshot_bytes=S_R_HYBRID)    # one recurrent slot
    res = run(rt, texts("abcdefgh", "ijklmnop", batch_size=2))
    # reserve pass: slot 0 takes the only slot, slot 1 finds nothing to evict -> skipped
    assert facts(res, 1)["snapshot_pressure_skips"] == 1 and facts(res, 1)["publications"] == []
    run(rt, texts("qrstuvwx", "yzABCDEF", batch_size=2))
    # slot 0 evicts the old record to reserve; slot 1 may not evict slot 0's staged capture
    c = counters(rt)
    assert (c["publications"]["attempts"], c["publications"]["committed"], c["records"]["evicted"]) == (2, 2, 1)
    # prefill-end captures ride the prefill's own synchronization: none counted (CR-MET-11)
    assert (c["hybrid"]["snapshot_pressure_skips"], c["hybrid"]["capture_synchronizations"]) == (2, 0)
    assert c["reclaimed_resources"]["recurrent_snapshots"] == 1


def test_existing_checkpoint_frees_its_reserved_slots(engine):
    rt = runtime(engine(model="hybrid"), recurrent_snapshot_bytes=2 * S_R_HYBRID)
    res = run(rt, texts("abcdefgh", "abcdefgh"))
    assert facts(res, 1)["publications"][0]["status"] == "existing"
    c = counters(rt)
    assert c["resource_pools"]["recurrent_snapshots"]["free"] == 1 and c["records"]["evicted"] == 0


def test_restore_touches_its_record(engine):
    rt = runtime(engine(model="hybrid"), max_records=2)
    res = run(rt, texts("abcdefgh", "ijkl", "abcdefghXY"))
    assert plan_of(res, 2) == ("standard", 8, 8)
    # the hit moved abcdefgh to most recent, so the record limit evicted ijkl
    assert reused(rt, "ijklm") == [0]


def test_restore_pins_and_private_demand(engine):
    for kind, want in (("hybrid", (2, 2)), ("recurrent", (0, 0))):
        rt = runtime(engine(model=kind))
        calls, inner = [], rt.cache._acquire
        rt.cache._acquire = lambda plan: calls.append((len(plan.kept), plan.demand)) or inner(plan)
        run(rt, texts("abcdefghij", "abcdefghijklm"))
        # L = 10: pins floor(10/4) = 2 pages; needs ceil(13/4) - 2 = 2 private pages
        assert calls[-1] == want, kind


def test_prefill_end_captures_are_reserved_while_restore_pins_are_held(engine):
    rt = runtime(engine(model="hybrid"), recurrent_snapshot_bytes=S_R_HYBRID)    # one recurrent slot
    run(rt, texts("abcdefgh", "abcdefghij"))
    # the hit pins the only slot during prefill, and its checkpoint at 10 is reserved then: the
    # old record cannot free it, so the capture is a pressure skip and the record survives
    # (CR-HYB-4, CR-HYB-6; Edge-LLM 0.10 SnapshotPressureSkipsCaptureAndPreservesReusableRecord)
    c = counters(rt)
    assert (c["hybrid"]["restores"], c["hybrid"]["snapshot_pressure_skips"], c["records"]["evicted"]) == (1, 1, 0)
    assert c["publications"]["attempts"] == 1 and c["records"]["current"] == 1
    assert reused(rt, "abcdefghiz") == [8]


def test_media_is_never_trimmed_in_checkpoints(engine):
    rt = runtime(engine(model="hybrid", vision=True))
    a = {"type": "image", "image": "img_a_16x64.png"}                   # 4 placeholders
    run(rt, texts([{"type": "text", "text": "ab"}, a]))                  # checkpoint at L = 6
    res = run(rt, texts([{"type": "text", "text": "ab"}, a, {"type": "text", "text": "cd"}]))
    assert plan_of(res) == ("standard", 6, 6) and facts(res)["media_aware"]


@pytest.mark.parametrize("kind, pages", [("hybrid", (1, 2)), ("recurrent", (0, 0))])
def test_decode_end_checkpoint(engine, kind, pages):
    rt = runtime(engine(model=kind))
    res = run(rt, texts("abcdefg", gen=3, logit_bias=NO_EOS))
    # prefill end: L = n = 7; decode end: L = n + g - 1 = 9
    assert facts(res)["publications"] == [
        {"point": "prefill_end", "tokens": 7, "pages": pages[0], "status": "committed"},
        {"point": "decode_end", "tokens": 9, "pages": pages[1], "status": "committed"}]
    # one capture synchronization: the decode step's; the prefill-end capture rides the prefill's
    # own (CR-MET-11; Edge-LLM 0.10 DecodeEndCheckpointUsesOneCaptureSyncAndBecomesReusable)
    assert counters(rt)["hybrid"]["capture_synchronizations"] == 1
    rt = runtime(engine(model=kind))
    res = run(rt, texts("abcdefg", gen=3, logit_bias=NO_EOS, context_cache_commit_policy="prefill_state_only"))
    assert [p["tokens"] for p in facts(res)["publications"]] == [7]


def test_checkpoint_order_of_events(engine):
    rt = runtime(engine(model="hybrid"))
    log = []
    for name in ("admit", "grow", "reserve_capture", "publish_checkpoint", "release"):
        inner = getattr(rt.cache, name)

        def spy(*a, _inner=inner, _name=name, **k):
            if not (_name == "release" and not a[0]):
                log.append(_name)
            return _inner(*a, **k)
        setattr(rt.cache, name, spy)
    doc = texts("abcdefgh", "ijklmno", gen=3, batch_size=2)
    doc["requests"][0]["logit_bias"] = {"257": 100}
    doc["requests"][1]["logit_bias"] = NO_EOS
    run(rt, doc)
    assert log == ["admit", "admit", "reserve_capture", "reserve_capture", "publish_checkpoint",
                   "publish_checkpoint", "release", "grow", "grow", "reserve_capture", "publish_checkpoint",
                   "release"]
