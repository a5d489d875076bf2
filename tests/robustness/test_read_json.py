"""read_json (conformance/cases/schemas.py): refusals of duplicate keys and non-finite numbers.

A repeated key is refused with the JSON path of the object that repeats it, however deep in a
large file and whatever its strings hold; NaN, infinities and numbers beyond a 64-bit float are
refused; everything else reads as json.loads reads it. The fuzz test holds read_json to an
independent reading of the same text (the pairs of every object, walked in document order).
"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conformance.cases import schemas
from conformance import KvconformError


def write(tmp_path, text: str):
    path = tmp_path / "doc.json"
    path.write_text(text, encoding="utf-8")
    return path


def refusal(path) -> str:
    with pytest.raises(KvconformError) as e:
        schemas.read_json(path)
    return str(e.value)


def independent(text: str):
    """The document json.loads reads, or (JSON path, key) of the first object in document order
    that repeats a key, found from each object's pairs as written (not with read_json's code)."""
    pairs_of = json.loads(text, object_pairs_hook=lambda pairs: ("object", pairs))

    def first(node, path):
        if isinstance(node, tuple):
            seen = []
            for key, _ in node[1]:
                if key in seen:
                    return path, key
                seen.append(key)
            kept = {}
            for key, value in node[1]:
                kept[key] = value
            children = [(value, f"{path}.{key}") for key, value in kept.items()]
        elif isinstance(node, list):
            children = [(value, f"{path}[{i}]") for i, value in enumerate(node)]
        else:
            return None
        for value, where in children:
            found = first(value, where)
            if found:
                return found
        return None

    return first(pairs_of, "$") or json.loads(text)


def big_request_file(requests: int = 2000) -> dict:
    return {"batch_size": 1, "requests": [
        {"messages": [{"role": "system", "content": "You: are 'helpful': " * 20},
                      {"role": "user", "content": [{"type": "text", "text": f"question {i}: why?"}]}]}
        for i in range(requests)]}


def test_a_duplicate_key_deep_inside_a_large_file_is_named_with_its_path(tmp_path):
    text = json.dumps(big_request_file())
    inner = '{"type": "text", "text": "question 1733: why?"}'
    assert text.count(inner) == 1
    text = text.replace(inner, '{"type": "text", "text": "question 1733: why?", "type": "text"}')
    path = write(tmp_path, text)
    assert refusal(path) == f"{path}: $.requests[1733].messages[1].content[0]: duplicate key 'type'"


def test_a_large_file_without_duplicates_reads_as_json_loads_reads_it(tmp_path):
    doc = big_request_file()
    doc["limits"] = {"big": 2 ** 70, "negative": -2 ** 64, "small": 1e-300, "pi": 3.141592653589793}
    text = json.dumps(doc, ensure_ascii=False)
    got = schemas.read_json(write(tmp_path, text))
    assert got == doc and type(got["limits"]["big"]) is int and got["limits"]["big"] == 2 ** 70


@pytest.mark.parametrize("text, where, key", [
    ('{"a": 1, "a": 1}', "$", "a"),
    ('{"a": {"b": 1, "c": {"d": [1, {"e": 2, "e": 3}]}}}', "$.a.c.d[1]", "e"),
    ('{"k:1": "x", "k:1": "y"}', "$", "k:1"),                    # the key itself holds ':'
    ('{"a": "::::", "a": ""}', "$", "a"),                        # the value dropped held ':'
    ('{"a": {"x": 1, "x": 2}, "a": 3}', "$", "a"),               # the duplicate inside was dropped too
    # each '\\u003a' decodes to ':' but is no ':' in the text
    ('{"a": "\\u003a", "a": "\\u003a"}', "$", "a"),
    ('{"a": "\\u003A", "a": "\\u003A"}', "$", "a"),
    ('[{"s": "\\ud800", "s": 1}]', "$[0]", "s"),                 # a lone surrogate
    ('{"n": 123456789012345678901234567890, "n": 0}', "$", "n"),  # an integer beyond 64 bits
])
def test_duplicates_are_refused_however_they_hide(tmp_path, text, where, key):
    path = write(tmp_path, text)
    assert refusal(path) == f"{path}: {where}: duplicate key {key!r}"


@pytest.mark.parametrize("text, message", [
    ('{"requests": [{"temperature": NaN}]}', "invalid JSON: NaN is not a JSON number"),
    ('{"a": [1, Infinity]}', "invalid JSON: Infinity is not a JSON number"),
    ('{"a": -Infinity}', "invalid JSON: -Infinity is not a JSON number"),
    ('{"a": {"b": 1e400}}', "invalid JSON: the number 1e400 is out of range for a 64-bit float"),
    ('{"a": NaN, "a": 1}', "invalid JSON: NaN is not a JSON number"),      # the first problem wins, as before
])
def test_non_finite_numbers_are_refused(tmp_path, text, message):
    path = write(tmp_path, text)
    assert refusal(path) == f"{path}: {message}"


def test_odd_but_valid_json_reads_as_json_loads_reads_it(tmp_path):
    """A lone surrogate (refused later by the request checks, not here), an escaped ':', an
    integer beyond 64 bits."""
    for text in ('{"s": "\\ud800x"}', '{"s": "a\\u003ab"}', '{"n": 123456789012345678901234567890}'):
        assert schemas.read_json(write(tmp_path, text)) == json.loads(text)


KEYS = st.sampled_from(["a", "b", "a:b", ":", "", "\u00e9", "\\u003a", "\\ud83d\\ude00"])
SCALARS = st.one_of(st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=False, allow_infinity=False),
                    st.booleans(), st.none(), st.sampled_from(['":"', '"x:y::"', '"\\u003a"', '"\\n"', '"\u00e9"']))


def _text(value) -> str:
    if isinstance(value, tuple):                       # an object as pairs: keys may repeat
        return "{" + ", ".join(f'"{k}": {_text(v)}' for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_text(v) for v in value) + "]"
    return value if isinstance(value, str) else json.dumps(value)


VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(st.tuples(KEYS, inner), max_size=4).map(tuple)), max_leaves=20)


def test_read_json_agrees_with_an_independent_reading(tmp_path, fuzz_budget):
    examples, derandomize = fuzz_budget

    @settings(max_examples=examples or 300, derandomize=derandomize, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(VALUES)
    def check(value):
        text = _text(value)
        path = write(tmp_path, text)
        expected = independent(text)
        if isinstance(expected, tuple):
            where, key = expected
            assert refusal(path) == f"{path}: {where}: duplicate key {key!r}"
        else:
            assert schemas.read_json(path) == expected
    check()
