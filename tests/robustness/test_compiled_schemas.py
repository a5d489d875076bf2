"""The compiled schema check (fastjsonschema) in front of jsonschema (conformance/schemas.py).

The compiled check only ever accepts: a document it rejects is described by jsonschema, which
has the last word. So the one thing that must never happen is the compiled check accepting a
document jsonschema rejects: that would let a bad file through with no message at all. These
tests draw documents from every schema, valid and one mutation away from valid, and check
that, and that the schemas keep to the keywords both libraries read alike.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.robustness import schemagen
from conformance import schemas

NAMES = sorted(schemas._schema_files())


def jsonschema_accepts(doc, name: str) -> bool:
    return not any(True for _ in schemas.validator(name).iter_errors(doc))


@pytest.mark.parametrize("name", NAMES)
def test_each_schema_uses_only_keywords_the_compiled_check_reads_alike(name):
    assert schemas.compiled_keywords_suffice(schemas._schema_file(name)) == []


def test_the_keyword_guard_names_what_the_compiled_check_would_misread():
    assert schemas.compiled_keywords_suffice({"type": "array", "prefixItems": [{"type": "string"}]}) == \
        ["$: keyword 'prefixItems'"]
    assert schemas.compiled_keywords_suffice({"properties": {"a": {"$ref": "#/$defs/x", "minimum": 1}}}) == \
        ["$.properties.a: keywords beside $ref"]
    assert schemas.compiled_keywords_suffice({"items": [{"type": "string"}]})[0] == "$: items is not one schema"
    assert schemas.compiled_keywords_suffice({"oneOf": [{"const": 1, "enum": [1, 2]}]}) == \
        ["$.oneOf[0]: const beside enum"]


def test_cross_file_references_and_const_are_kept_in_the_self_contained_copy():
    output = schemas.self_contained("output")
    assert "urn:" not in json.dumps(output) and "$id" not in json.dumps(output)
    common = output["$defs"]["kvconform-schema-common"]["$defs"]
    assert common["requestCache"]["required"] == schemas._schema_file("common")["$defs"]["requestCache"]["required"]
    publications = common["requestCache"]["properties"]["publications"]["items"]
    assert publications == {"$ref": "#/$defs/kvconform-schema-common/$defs/publication"}
    report = schemas.self_contained("report")
    assert report["properties"]["format"] == {"enum": ["kvconform-report-v1"]}        # was {"const": ...}
    bad = {"format": "kvconform-output-v1", "responses": [{"request_idx": 0, "context_cache": {"plan": 7}}]}
    assert not schemas._passes_compiled(bad, "output") and not jsonschema_accepts(bad, "output")


GEN = schemagen.SchemaGen()


@pytest.mark.parametrize("name", schemas.SCHEMA_NAMES)
def test_the_compiled_check_never_accepts_what_jsonschema_rejects(name, fuzz_budget):
    examples, derandomize = fuzz_budget

    @settings(max_examples=examples or 25, derandomize=derandomize, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data):
        doc = GEN.valid(data, name)
        if data.draw(st.booleans(), label="near miss"):
            doc, _ = schemagen.mutate(data, doc)
        if schemas._passes_compiled(doc, name):
            assert jsonschema_accepts(doc, name), list(schemas.validator(name).iter_errors(doc))[:1]
    check()


FIXTURES = Path(__file__).resolve().parents[1] / "meta" / "fixtures"


def test_the_compiled_check_accepts_every_valid_fixture_and_rejects_every_invalid_one():
    """Both sides are exercised: good files never pay for jsonschema, bad ones always reach it."""
    valid = sorted(FIXTURES.glob("*/valid/*.json"))
    invalid = sorted(p for p in FIXTURES.glob("*/invalid/*.json") if p.name != "expected_paths.json")
    assert valid and invalid
    assert [p for p in valid if not schemas._passes_compiled(json.loads(p.read_text()), p.parts[-3])] == []
    assert [p for p in invalid if schemas._passes_compiled(json.loads(p.read_text()), p.parts[-3])] == []
