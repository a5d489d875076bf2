"""Generated request sets: they find seeded faults, shrink them, and the written reproducer
fails the same way when run alone; against the oracle they find nothing."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.cases import load_case
from conformance.execute import run_case
from conformance.generate import run_generated
from conformance.generate.draw import FAMILIES, draw_setup, recipes
from conformance.generate.media import ENCODINGS, ImageSpec, materialize
from conformance.verdicts import Verdict

from mutants import MutantAdapter


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
    from conformance.generate.machine import Example
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
