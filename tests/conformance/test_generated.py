"""Generated request sets: they find seeded faults, shrink them, and the written reproducer
fails the same way when run alone; against the oracle they find nothing."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.cases.case import load_case
from conformance.run.execute import run_case
from conformance.generate import run_generated
from conformance.generate.draw import FAMILIES, draw_setup, recipes
from conformance.generate.media import ENCODINGS, ImageSpec, materialize
from conformance.judge.verdicts import Verdict

from tests.helpers.mutants import MutantAdapter


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_oracle_passes_generated_examples(family, tmp_path, reference_adapter, reference_manifest):
    result = run_generated(family, reference_adapter, reference_manifest, workdir=tmp_path, examples=25,
                           budget_s=8, seed=0, run_case_fn=lambda c: run_case(c, reference_adapter, reference_manifest))
    assert result.verdict == Verdict.PASS, [f.line() for f in result.failures]
    assert result.details["batches_checked"] >= 20
    assert result.details["examples"] <= 25 and result.details["shrink_steps"] == 0


@pytest.mark.parametrize("mutant, family, rule", [
    ("lora_not_in_identity", "text", "CR-ID-3"),
    ("no_rewind_accounting", "text", "CR-PLAN-2"),
    ("no_media_trim", "vision", None),
])
def test_a_seeded_fault_is_found_shrunk_and_reproduced(mutant, family, rule, tmp_path):
    adapter = MutantAdapter(mutant)
    manifest = adapter.capabilities()
    result = run_generated(family, adapter, manifest, workdir=tmp_path, examples=60, budget_s=20, seed=0,
                           run_case_fn=lambda c: run_case(c, adapter, manifest), reproducer_dir=tmp_path / "repro",
                           regressions_dir=tmp_path / "regressions")
    assert result.verdict == Verdict.FAIL, result.reason
    assert rule is None or rule in {f.rule for f in result.failures}, [f.line() for f in result.failures]
    assert result.details["reproduced"], result.reason
    reproducer = load_case(result.reproducer)
    assert reproducer.id.startswith("regressions/gen-") and "generated" in reproducer.flags
    assert (tmp_path / "regressions" / (reproducer.id.split("/")[1] + ".json")).exists()
    alone = run_case(reproducer, adapter, manifest)
    assert alone.verdict == Verdict.FAIL
    assert result.first_failure().signature() in {f.signature() for f in alone.failures}
    assert len(reproducer.doc["requests"]) <= 8, "shrunk to a handful of requests"


def test_same_pixels_in_other_encodings_decode_equal(tmp_path):
    from reference.decode import load_image
    digests = {load_image(materialize(ImageSpec(3, 16, 32, enc), tmp_path)).digest for enc in ENCODINGS}
    assert len(digests) == 1
    transposed = load_image(materialize(ImageSpec(3, 32, 16), tmp_path)).digest
    assert transposed not in digests, "equal bytes under transposed geometry are another item"


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_recipes_build_valid_request_files(tmp_path_factory, data):
    """Every drawn example is a request file the oracle accepts (or fails only by a length limit)."""
    from conformance.adapters.reference import ReferenceAdapter
    from conformance.generate.example import Example
    manifest = ReferenceAdapter().capabilities()
    family = data.draw(st.sampled_from(list(FAMILIES)))
    setup = draw_setup(data, family, manifest)
    folder = tmp_path_factory.mktemp("gen")
    ex = Example(family, ReferenceAdapter(), manifest, setup, folder / "media", str(folder))
    for lora, step in data.draw(recipes(setup, 4)):
        ex.add_step(lora, step)
    doc = ex.case_doc("generated/check", "check", ["CR-OUT-1"])
    path = folder / "case.json"
    path.write_text(json.dumps(doc))
    loaded = load_case(path)  # schema, templates referring to earlier batches
    assert loaded.id == "generated/check" and len(loaded.doc["requests"]) == len(ex.requests)
    result = run_case(loaded, ReferenceAdapter(), manifest)
    assert result.verdict == Verdict.PASS, (result.reason, [f.line() for f in result.failures])


def test_the_vision_family_draws_images_at_the_counters_bounds():
    """On an engine that counts images with a runtime's counter, the sizes drawn include images
    at its comparison bounds and one step each side (spec/media-tokens.md)."""
    from conformance.generate.draw import Setup, image_sizes
    from conformance.generate.media import SIZES, bound_sizes
    from reference.media_tokens import image_tokens
    edge = {"patch": 14, "merge": 2, "min_image_tokens": 1, "max_image_tokens": 256}
    # min 1 cell: 26 x 30 rounds to 28 x 28 = 784 = min_pixels (1 token), 26 x 58 to 28 x 56 (2);
    # max 256 cells = 16 x 16: 446 x 450 rounds to 448 x 448 = 200,704 = max_pixels (256 tokens),
    # 446 x 422 to 448 x 420 (240), 446 x 478 to 448 x 476 = 213,248, above it: shrunk to 420 x 448 (240)
    sizes = bound_sizes("edge-llm/qwen-vl", edge)
    assert sizes == [(26, 30), (26, 58), (446, 422), (446, 450), (446, 478)]
    assert [image_tokens("edge-llm/qwen-vl", h, w, edge) for h, w in sizes] == [1, 2, 240, 256, 240]
    # InternVL tiles 1 .. 4: aspect ratios 1:1 .. 5:1; Phi-3-vision with 4 crops: ratio 4 and beside it
    assert bound_sizes("hf/internvl", {"min_patches": 1, "max_patches": 4}) == [(16, 16 * c) for c in range(1, 6)]
    assert bound_sizes("hf/phi-3-vision", {"num_crops": 4}) == [(16, 63), (16, 64), (16, 65)]

    class Counted:
        vision = {"counter": "edge-llm/qwen-vl", "settings": edge}
    setup = Setup({}, {}, {}, 1, [None], max_input=1000, hf_engine=Counted())
    # 256 tokens do not fit a quarter of 1000, 240 do
    assert image_sizes(setup) == SIZES + ((26, 30), (26, 58), (446, 422), (446, 478))
    assert image_sizes(Setup({}, {}, {}, 1, [None])) == SIZES
