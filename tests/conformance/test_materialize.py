"""Materialization: a case written for its own engine, laid out for one fixed engine under test.

The page structure must survive the layout exactly (pages per request, pages each pair shares,
which request starts with another's whole input, boundary classes k*P - 1, k*P, k*P + 1), what
cannot be expressed is refused with its reason, and the result is deterministic."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference
from conformance.cases.case import Case, materialize as absolute_paths
from conformance.materialize import NotExpressible, build_args_of, engine_key, materialize_for, structure
from conformance.materialize.layout import atoms_of
from conformance.materialize.relayout import CannotRelayout, apply_texts, relayout

from tests.helpers.cases import case

MEDIA = Path(__file__).resolve().parents[2] / "cases" / "media"


def engine(**args) -> dict:
    base = {"maxInputLen": 3072, "maxKVCacheCapacity": 4096, "maxKVPoolPages": 0, "tokensPerPage": 128}
    return reference.engine_from_build_args({**base, **args}).to_config()


def text_case(texts: list[str], P: int = 4, tmp: Path | None = None, **meta) -> Case:
    doc = {"apply_chat_template": False, "max_generate_length": 1, "top_k": 1,
           "requests": [{"messages": [{"role": "user", "content": t}]} for t in texts],
           "_conformance": {"id": "t/x", "description": "x", "rules": ["CR-PLAN-1"],
                            "engine": {"maxInputLen": 60, "maxKVCacheCapacity": 64, "maxKVPoolPages": 0,
                                       "tokensPerPage": P}, "runtime": {"enableContextReuse": True}, **meta}}
    return Case((tmp or Path("/tmp")) / "case.json", doc)


def lengths(doc: dict, P: int) -> list[int]:
    config = reference.engine_from_build_args({"maxInputLen": 4000, "maxKVCacheCapacity": 4096,
                                               "maxKVPoolPages": 0, "tokensPerPage": P})
    return [r.n for r in reference.parse_request_file(doc, "/", config).requests]


# --- the layout keeps the page structure ----------------------------------------------------------

@pytest.mark.parametrize("p1", [8, 16, 128])
def test_boundary_classes_map_to_the_same_classes(p1, tmp_path):
    texts = ["abc", "abcd", "abcde", "abcdefg", "abcdefgh", "abcdefghi", "ab"]
    made = materialize_for(text_case(texts, tmp=tmp_path), engine(tokensPerPage=p1), tmp_path)
    got = lengths(made.doc, p1)
    # by hand: n = 4k + r becomes k*P1 + r for r in {0, 1}, (k + 1)*P1 - (4 - r) for r in {2, 3}
    assert got == [p1 - 1, p1, p1 + 1, 2 * p1 - 1, 2 * p1, 2 * p1 + 1, p1 - 2]


def test_a_shared_prefix_stays_shared_exactly(tmp_path):
    texts = ["abcdefgh", "abcdefghij", "abcdXfghij", "abcdefg"]
    made = materialize_for(text_case(texts, tmp=tmp_path), engine(tokensPerPage=16), tmp_path)
    out = [r["messages"][0]["content"] for r in made.doc["requests"]]
    assert out[1].startswith(out[0]) and out[0].startswith(out[3])      # prefixes stay prefixes
    assert out[2][:16] == out[1][:16] and out[2][16:32] != out[1][16:32]  # page 0 shared, page 1 not


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.text("abcxy", min_size=1, max_size=20), min_size=2, max_size=5),
       st.sampled_from([4, 8]), st.sampled_from([8, 16, 32, 128]))
def test_structure_survives_any_stretch(tmp_path_factory, texts, p0, p1):
    """Random requests built to share prefixes: the structure check holds after stretching."""
    texts = [texts[0] + t if k % 2 else t for k, t in enumerate(texts)]          # half extend another
    if p1 <= p0:
        return
    tmp = tmp_path_factory.mktemp("m")
    c = text_case(texts, P=p0, tmp=tmp)
    made = materialize_for(c, engine(tokensPerPage=p1), tmp)
    src = reference.engine_from_build_args(c.engine_args)
    assert structure(c.doc, "/", src) == structure(made.doc, "/", reference.engine_from_config(made.doc[
        "_conformance"]["materialized"]["engine_config"]))


def test_an_image_that_straddles_a_boundary_still_does(tmp_path):
    c = case("golden/media-trim-split")            # 'ab' + a 4-placeholder image at 2-5 + 'cd', P = 4
    made = materialize_for(c, engine(tokensPerPage=16, vision=True), tmp_path)
    parsed = reference.parse_request_file(made.doc, "/", None)
    span = parsed.requests[0].spans[0]
    assert (span.start, span.end) == (14, 18), "two placeholders on each side of the boundary at 16"


def test_a_page_of_media_grows_the_item(tmp_path):
    item = {"type": "image", "image": str(MEDIA / "img_a_16x64.png")}       # 4 placeholders
    request = {"messages": [{"role": "user", "content": [item, {"type": "text", "text": "abcd"}]}]}
    atoms = atoms_of(request, False, False, lambda it: 4)
    edits = relayout(atoms, 4, 16)
    assert edits.media == {(0, 0): 12}, "page 0 is all image: the image takes the filler"
    doc = {"apply_chat_template": False, "max_generate_length": 1, "requests": [request],
           "_conformance": text_case(["a"]).meta}
    made = materialize_for(Case(tmp_path / "c.json", doc), engine(tokensPerPage=16, vision=True), tmp_path)
    again = materialize_for(Case(tmp_path / "c.json", doc), engine(tokensPerPage=16, vision=True), tmp_path)
    path = made.doc["requests"][0]["messages"][0]["content"][0]["image"]
    assert path == again.doc["requests"][0]["messages"][0]["content"][0]["image"] != item["image"]
    assert reference.decode.load_image(path).placeholders == 16


def test_a_page_of_special_tokens_cannot_stretch():
    from conformance.materialize.layout import Atom
    with pytest.raises(CannotRelayout):
        relayout([Atom("special")] * 8, 4, 16)


def test_shrinking_keeps_the_boundary_classes(tmp_path):
    texts = ["abcdefg", "abcdefgh", "abcdefghi", "abcdefghijklmno"]
    c = text_case(texts, P=8, tmp=tmp_path)
    made = materialize_for(c, engine(tokensPerPage=4, maxInputLen=200, maxKVCacheCapacity=256), tmp_path)
    assert lengths(made.doc, 4) == [3, 4, 5, 7]


def test_shrinking_that_would_merge_two_requests_is_refused(tmp_path):
    c = text_case(["abcdefgh", "abcXefgh"], P=8, tmp=tmp_path)    # they differ in the middle of page 0 only
    with pytest.raises(NotExpressible, match="shared leading pages|whole inputs"):
        materialize_for(c, engine(tokensPerPage=4, maxInputLen=200, maxKVCacheCapacity=256), tmp_path)


def test_text_after_a_template_is_left_as_it_is():
    request = {"messages": [{"role": "user", "content": "abcdef{{output:0}}ghijklmnop"}]}
    atoms = atoms_of(request, False, False, None)
    assert atoms[-1].kind == "opaque" and len(atoms) == 7
    edits = relayout(atoms, 4, 8)
    apply_texts(request, edits.texts)
    assert request["messages"][0]["content"].endswith("{{output:0}}ghijklmnop")


# --- what cannot be expressed, and what is adapted ----------------------------------------------------

@pytest.mark.parametrize("case_id, target, reason", [
    ("golden/media-trim-split", dict(tokensPerPage=16), "needs a vision encoder"),
    ("golden/hyb-endpoints", dict(tokensPerPage=16), "needs recurrent layers"),
    ("golden/sup-2-fp8", dict(tokensPerPage=16), "needs a fp8 KV cache"),
    ("golden/sup-1-block-diffusion", dict(tokensPerPage=16), "needs the deployment"),
    ("golden/id-lora-isolation", dict(tokensPerPage=16), "needs 2 LoRA adapter"),
    ("golden/batch-overlap", dict(tokensPerPage=16), "needs batches of"),
    ("sections/cap/pool-below-minimum", dict(tokensPerPage=16), "refused build"),
])
def test_what_cannot_be_expressed_says_why(case_id, target, reason, tmp_path):
    with pytest.raises(NotExpressible, match=reason):
        materialize_for(case(case_id), engine(**target), tmp_path)


def test_a_plain_case_runs_on_an_eagle_engine_with_paired_pages(tmp_path):
    """A vendor's one engine may speculate (attention-only EAGLE3): plain cases run on it, the
    oracle predicting section 12's paired pages and one-page replay; other methods still refuse."""
    eagle = engine(tokensPerPage=16, specDecode="eagle")
    own = case("sections/plan/exact-replays")
    made = materialize_for(own, eagle, tmp_path)
    assert any("EAGLE3" in a for a in made.adaptations)
    config = reference.engine_from_config(made.doc["_conformance"]["materialized"]["engine_config"])
    sim = reference.Simulator(config, reference.RuntimeFlags.from_case_runtime(made.doc["_conformance"]["runtime"]))
    mgl = made.doc.get("max_generate_length", 256)
    # every verification accepting one token (CR-SPEC-4 needs the last round's acceptance)
    sim.run(made.doc, "/", [[97] * mgl for _ in made.doc["requests"]],
            last_accepted=[1 if mgl > 1 else None for _ in made.doc["requests"]])
    assert sim.profile()["context_cache"]["speculative"]["full_page_replays"] > 0
    with pytest.raises(NotExpressible, match="needs the deployment plain"):
        materialize_for(own, engine(tokensPerPage=16, specDecode="mtp"), tmp_path)


def test_adapters_are_renamed_to_the_engines(tmp_path):
    made = materialize_for(case("golden/id-lora-isolation"), engine(tokensPerPage=16, loraAdapters=["x", "y"]),
                           tmp_path)
    names = {r.get("lora_name") for r in made.doc["requests"]}
    assert names <= {"x", "y", None} and set(made.doc["available_lora_weights"]) == {"x", "y"}
    assert "LoRA adapters a -> x, b -> y" in made.adaptations


def _batch_outcomes(doc: dict, config, runtime: dict, base_dir: str) -> list[str]:
    """Which batches run and which fail, every request generating max_generate_length tokens."""
    sim = reference.Simulator(config, reference.RuntimeFlags.from_case_runtime(runtime))
    mgl = runtime.get("maxGenerateLength") or doc.get("max_generate_length", 256)
    sim.run(doc, base_dir, [[97] * mgl for _ in doc["requests"]])
    return [b["status"] for b in sim.batches]


@pytest.mark.parametrize("case_id", ["sections/batch/length-limits", "golden/batch-length-limits",
                                     "sections/batch/generation-too-long"])
def test_a_request_that_fails_by_length_still_fails_by_it(case_id, tmp_path):
    own = case(case_id)
    made = materialize_for(own, engine(tokensPerPage=128), tmp_path)
    config = reference.engine_from_config(made.doc["_conformance"]["materialized"]["engine_config"])
    here = _batch_outcomes(made.doc, config, made.doc["_conformance"]["runtime"], "/")
    there = _batch_outcomes(own.doc, reference.engine_from_build_args(own.engine_args), own.runtime, own.base_dir)
    assert here == there and "failed" in there


def test_batches_larger_than_the_engines_are_cut(tmp_path):
    c = case("sections/batch/shared-system-prompt")
    assert c.batch_size() > 1 and not {"CR-BATCH-2", "CR-BATCH-6"} & set(c.rules)
    made = materialize_for(c, engine(tokensPerPage=16, maxBatchSize=1), tmp_path)
    assert made.doc["batch_size"] == 1 and any("cut" in a for a in made.adaptations)


def test_expectations_are_dropped_and_the_origin_recorded(tmp_path):
    target = engine(tokensPerPage=16, vision=True)
    made = materialize_for(case("golden/media-trim-split"), target, tmp_path)
    meta = made.doc["_conformance"]
    assert "expect" not in meta and "generated" not in meta
    assert meta["materialized"]["engine"] == engine_key(target)
    assert meta["materialized"]["source_engine"] == case("golden/media-trim-split").engine_args
    assert meta["engine"] == build_args_of(target)
    assert reference.engine_from_build_args(meta["engine"]).to_config() == target


def test_materialization_is_deterministic_and_idempotent(tmp_path):
    target = engine(tokensPerPage=32, vision=True)
    a = materialize_for(case("vlm_context_reuse"), target, tmp_path / "a")
    b = materialize_for(case("vlm_context_reuse"), target, tmp_path / "a")
    assert json.dumps(a.doc, sort_keys=True) == json.dumps(b.doc, sort_keys=True)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(a.doc))
    again = materialize_for(Case(path, copy.deepcopy(a.doc)), target, tmp_path / "a")
    assert again.doc == a.doc, "a materialized case runs unchanged on its engine"


def test_intent_that_does_not_survive_is_reported(tmp_path):
    made = materialize_for(case("golden/cap-two-record-eviction"), engine(tokensPerPage=16), tmp_path)
    assert any(a.startswith("intent: records evicted: 2 on its own engine, 0 here") for a in made.adaptations)


# --- scenarios built for the engine -------------------------------------------------------------------

@pytest.mark.parametrize("args", [dict(tokensPerPage=4, maxInputLen=40, maxKVCacheCapacity=48),
                                  dict(tokensPerPage=16, maxInputLen=512, maxKVCacheCapacity=640, maxBatchSize=3),
                                  dict(tokensPerPage=128)])
def test_pool_scenarios_evict_on_any_pool(args):
    """The scenarios' intent holds whatever the pool (by hand, from their docstrings)."""
    from conformance.cases import scenarios
    engine_ = reference.engine_from_config(engine(**args))
    out = {}
    for name in ("cap/pool-fill", "cap/hit-does-not-protect"):
        doc, runtime = scenarios.build(name, engine_, {"enableContextReuse": True})
        sim = reference.Simulator(engine_, reference.RuntimeFlags.from_case_runtime(runtime))
        out[name] = ([r["context_cache"]["reused_tokens"] for r in sim.run(doc, "/", None)],
                     sim.profile()["context_cache"]["records"]["evicted"])
    reused, evicted = out["cap/pool-fill"]
    assert evicted > 0 and reused[-2] == 0 and reused[-1] > 0   # the first is gone, the last but one held
    reused, evicted = out["cap/hit-does-not-protect"]
    # by hand: the extension hits R1 and evicts R1 (frees nothing) and R2; R2 again misses and,
    # with L - 1 pages free, evicts R3
    assert reused[-2] > 0 and evicted == 3 and reused[-1] == 0


def test_the_birthday_scenario_scales_with_the_pool():
    from conformance.cases import scenarios
    small = reference.engine_from_config(engine(tokensPerPage=16, maxInputLen=512, maxKVCacheCapacity=640))
    doc, _ = scenarios.build("id/distinct-pages-birthday", small, {})
    pages = 10 * len(doc["requests"])
    # by hand: a pool of 40 pages holds 40 keys, so 5 * 2^16 / 40 = 8,192 looked-up pages
    assert small.kv_pool_pages == 40 and pages >= 8192
