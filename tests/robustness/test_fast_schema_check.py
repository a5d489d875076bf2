"""The fast schema check (jsonschema-rs) in front of jsonschema (conformance/cases/schemas.py).

The fast check only ever accepts: a document it rejects is described by jsonschema, which has
the last word. So the one thing that must never happen is the fast check accepting a document
jsonschema rejects: that would let a bad file through with no message at all. These tests draw
documents from every schema, valid and one mutation away from valid, and check that; and that
what the fast check cannot judge, or a document nested deeper than any schema, reaches
jsonschema instead of crashing the process.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.robustness import schemagen
from conformance.cases import schemas

NAMES = sorted(schemas._schema_files())


def jsonschema_accepts(doc, name: str) -> bool:
    return not any(True for _ in schemas.validator(name).iter_errors(doc))


GEN = schemagen.SchemaGen()


@pytest.mark.parametrize("name", schemas.SCHEMA_NAMES)
def test_the_fast_check_never_accepts_what_jsonschema_rejects(name, fuzz_budget):
    examples, derandomize = fuzz_budget

    @settings(max_examples=examples or 25, derandomize=derandomize, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data):
        doc = GEN.valid(data, name)
        if data.draw(st.booleans(), label="near miss"):
            doc, _ = schemagen.mutate(data, doc)
        if schemas._passes_fast(doc, name):
            assert jsonschema_accepts(doc, name), list(schemas.validator(name).iter_errors(doc))[:1]
    check()


FIXTURES = Path(__file__).resolve().parents[1] / "meta" / "fixtures"


def test_the_fast_check_accepts_every_valid_fixture_and_rejects_every_invalid_one():
    """Both sides are exercised: good files never pay for jsonschema, bad ones always reach it."""
    valid = sorted(FIXTURES.glob("*/valid/*.json"))
    invalid = sorted(p for p in FIXTURES.glob("*/invalid/*.json") if p.name != "expected_paths.json")
    assert valid and invalid
    assert [p for p in valid if not schemas._passes_fast(json.loads(p.read_text()), p.parts[-3])] == []
    assert [p for p in invalid if schemas._passes_fast(json.loads(p.read_text()), p.parts[-3])] == []


def test_references_across_schema_files_are_followed():
    """output refers to common's requestCache: a bad plan there is caught by both checks."""
    bad = {"format": "kvconform-output-v1", "responses": [{"request_idx": 0, "context_cache": {"plan": 7}}]}
    assert not schemas._passes_fast(bad, "output") and not jsonschema_accepts(bad, "output")


def test_what_the_fast_check_cannot_judge_goes_to_jsonschema():
    """A key that is not a string, a value JSON has no type for (never from read_json, but
    check also takes documents built in memory): the fast check raises ValueError on such
    input, so it refuses, and jsonschema has the last word."""
    doc = json.loads(next((FIXTURES / "request" / "valid").glob("*.json")).read_text())
    assert schemas._passes_fast(doc, "request")
    doc["requests"][0][7] = "an int key"
    assert not schemas._passes_fast(doc, "request") and schemas.schema_errors(doc, "request") == []
    del doc["requests"][0]["messages"]
    assert schemas.schema_errors(doc, "request") == [("$.requests[0]", "missing required property 'messages'")]
    assert not schemas._passes_fast({"requests": [object()]}, "request")


def _refs(node, out: list) -> list:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            out.append(node["$ref"])
        for v in node.values():
            _refs(v, out)
    elif isinstance(node, list):
        for v in node:
            _refs(v, out)
    return out


def _target(ref: str, doc: str) -> tuple[str, str]:
    where, _, pointer = ref.partition("#")
    return (where[len(schemas._URN):] if where else doc), pointer


def _resolve(doc: str, pointer: str):
    node = schemas._schema_file(doc)
    for part in filter(None, pointer.split("/")):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def test_no_schema_is_recursive():
    """The fast check walks a document only as deep as the schema leads it (it overflows its
    native stack, killing the process, when a recursive schema meets a deeply nested document):
    so no `$ref` may lead, directly or through others, back into the subschema holding it."""
    seen, path = set(), []

    def visit(node: tuple[str, str]):
        assert node not in path, f"recursive schema: {' -> '.join(d + '#' + p for d, p in path + [node])}"
        if node in seen:
            return
        path.append(node)
        for ref in _refs(_resolve(*node), []):
            visit(_target(ref, node[0]))
        path.pop()
        seen.add(node)

    for name in NAMES:
        visit((name, ""))


def test_the_recursion_guard_finds_a_cycle(monkeypatch):
    looped = {"$id": schemas._URN + "loop", "$defs": {"a": {"items": {"$ref": "#/$defs/b"}},
                                                       "b": {"items": {"$ref": "#/$defs/a"}}},
              "$ref": "#/$defs/a"}
    monkeypatch.setattr(schemas, "_schema_file", lambda name: looped)
    monkeypatch.setattr(schemas, "_schema_files", lambda: {"loop": looped})
    monkeypatch.setattr(sys.modules[__name__], "NAMES", ["loop"])
    with pytest.raises(AssertionError, match="recursive schema"):
        test_no_schema_is_recursive()


def test_a_deeply_nested_document_is_refused_without_a_crash():
    """100,000 levels below a request (deeper than json.loads reads): a clean refusal, in a
    child process so that a native stack overflow would show as a crash, not end the tests."""
    code = ("import sys; from conformance.cases import schemas\n"
            "deep = x = []\n"
            "for _ in range(100000): x.append([]); x = x[0]\n"
            "doc = {'requests': [{'messages': deep}]}\n"
            "print(schemas._passes_fast(doc, 'request'), schemas._passes_fast({'requests': [], 'x': deep}, 'request'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.split() == ["False", "False"]
