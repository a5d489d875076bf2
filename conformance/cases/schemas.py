"""Loading JSON files and validating them against spec/schemas, with one-line errors.

Every message names the file and the JSON path of the offending value (`$.requests[2].stop`),
so a user can find the problem without a traceback.

Validation is on the hot path of `kvconform simulate` and of every output a run judges, so a
document is first checked by a fast validator (`jsonschema-rs`, in Rust); only a document that
check rejects is walked again by jsonschema, which has the last word and describes the problem.
So the messages are jsonschema's, and a disagreement between the two can only cost time: the
fast check is trusted only to accept (tests/robustness/test_fast_schema_check.py draws
documents to hold it to that).
"""
from __future__ import annotations

import difflib
import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import KvconformError

MAX_INPUT_BYTES = 32 << 20
"""spec/RUNNING.md section 8: the largest JSON file the kit reads (33,554,432 bytes), checked from
its size before a byte is read. Parsing is the memory a file can cost (a file of `{}` objects
takes about 25 times its size), so this bounds what any input can make the kit hold."""

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "spec" / "schemas"
SCHEMA_NAMES = ("request", "output", "profile", "predictions", "engine", "capabilities", "report")
_URN = "urn:kvconform:schema:"


def json_path(parts) -> str:
    """`['requests', 2, 'stop']` -> `$.requests[2].stop`."""
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def read_json(path: str | Path) -> Any:
    """Parse a JSON file, or raise KvconformError naming the file and what is wrong."""
    p = Path(path)
    if not p.exists():
        raise KvconformError("file not found", str(path))
    if p.is_dir():
        raise KvconformError("is a directory, expected a JSON file", str(path))
    if not p.is_file():  # a FIFO would block the read, a device such as /dev/zero never ends
        raise KvconformError("not a regular file, expected a JSON file", str(path))
    try:
        size = p.stat().st_size
        if size > MAX_INPUT_BYTES:
            raise KvconformError(f"{size} bytes, more than the {MAX_INPUT_BYTES} a JSON input file may have "
                                 "(spec/RUNNING.md section 8); not read", str(path))
        with p.open("rb") as f:
            data = f.read(MAX_INPUT_BYTES + 1)          # the file may have grown since
        if len(data) > MAX_INPUT_BYTES:
            raise KvconformError(f"more than the {MAX_INPUT_BYTES} bytes a JSON input file may have "
                                 "(spec/RUNNING.md section 8)", str(path))
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise KvconformError(f"not valid UTF-8 (byte {e.start})", str(path)) from None
    except OSError as e:
        raise KvconformError(f"cannot read: {e.strerror}", str(path)) from None
    duplicated: list = []
    try:
        doc = json.loads(text, parse_constant=_not_json, parse_float=_finite_float,
                         object_pairs_hook=lambda pairs: _object(pairs, duplicated))
    except json.JSONDecodeError as e:
        raise KvconformError(f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}", str(path)) from None
    except RecursionError:
        raise KvconformError("invalid JSON: nested too deeply", str(path)) from None
    except ValueError as e:  # NaN / Infinity, or an integer of more than 4300 digits
        raise KvconformError(f"invalid JSON: {e}", str(path)) from None
    if duplicated:
        where, key = _first_duplicate(doc)
        raise KvconformError(f"duplicate key {key!r}", str(path), where)
    return doc


class _Duplicated(dict):
    """An object that repeated a key (RFC 8259 leaves its meaning open: Python keeps the last
    value, other readers the first), kept only until read_json finds where it is."""
    key = ""


def _object(pairs, duplicated: list) -> dict:
    """json's object hook: a dict, tagged (and counted) when a key repeats. The hook cannot
    know where the object is; `_first_duplicate` finds its JSON path afterwards."""
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    dup = _Duplicated(obj)
    dup.key = _first_repeat(pairs)
    duplicated.append(dup)
    return dup


def _first_repeat(pairs):
    seen = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)


def _first_duplicate(doc) -> tuple[str, str]:
    """(JSON path, key) of the first object, in document order, that repeated a key."""
    stack: list = [(doc, [])]
    while stack:                                   # iterative: documents may nest deeply
        value, parts = stack.pop()
        if isinstance(value, _Duplicated):
            return json_path(parts), value.key
        if isinstance(value, dict):
            stack.extend((v, parts + [k]) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((v, parts + [i]) for i, v in reversed(list(enumerate(value))))
    raise AssertionError("a duplicate was counted but not found")


def _not_json(name: str):
    """Python's json module accepts NaN, Infinity and -Infinity; JSON (RFC 8259) does not, and a
    NaN slips through every `minimum` of a schema (all comparisons with NaN are false)."""
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is out of range for a 64-bit float")
    return value


@lru_cache(maxsize=None)
def _registry():
    """jsonschema's view of spec/schemas (imported only when a document needs describing)."""
    from referencing import Registry, Resource
    return Registry().with_resources((_URN + name, Resource.from_contents(contents))
                                     for name, contents in _schema_files().items())


@lru_cache(maxsize=None)
def validator(name: str):
    """The jsonschema (Draft 2020-12) validator of spec/schemas/<name>.schema.json."""
    from jsonschema import Draft202012Validator
    return Draft202012Validator(_registry().contents(_URN + name), registry=_registry())


@lru_cache(maxsize=None)
def _schema_files() -> dict:
    """spec/schemas/<name>.schema.json by name, parsed once (no jsonschema needed)."""
    names = sorted(f.name[:-len(".schema.json")] for f in SCHEMA_DIR.glob("*.schema.json"))
    return {name: _schema_file(name) for name in names}


@lru_cache(maxsize=None)
def _schema_file(name: str) -> dict:
    """spec/schemas/<name>.schema.json, parsed once; its `$id` is urn:kvconform:schema:<name>."""
    contents = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
    assert contents["$id"] == _URN + name, f"{name}.schema.json: $id {contents['$id']!r}"
    return contents


@lru_cache(maxsize=None)
def _fast(name: str):
    """The fast check of schema `name`: jsonschema-rs (Rust, Draft 2020-12, formats not asserted),
    the schemas it refers to read from spec/schemas when it first needs them."""
    import jsonschema_rs
    return jsonschema_rs.validator_for(_schema_file(name), validate_formats=False,
                                       retriever=lambda uri: _schema_file(uri[len(_URN):]))


def _passes_fast(instance: Any, name: str) -> bool:
    """Whether the fast check accepts `instance`. What it cannot judge (an object with a key that
    is not a string, a value JSON has no type for) goes to jsonschema, which says what is wrong.
    It walks a document only as deep as the schema does, and no schema of spec/schemas is
    recursive (tested), so a deeply nested document cannot overflow its stack."""
    try:
        return _fast(name).is_valid(instance)
    except ValueError:
        return False


def schema_errors(instance: Any, name: str) -> list[tuple[str, str]]:
    """All (json_path, message) problems of `instance` against schema `name`, sorted by path."""
    if _passes_fast(instance, name):
        return []
    out = []
    try:
        for error in validator(name).iter_errors(instance):
            error = _most_specific(error)
            out.append((json_path(error.absolute_path), _describe(error)))
    except RecursionError:
        return [("$", "nested too deeply")]
    return sorted(set(out))


def check(instance: Any, name: str, file: str | None = None) -> None:
    """Raise KvconformError for the first schema problem of `instance`."""
    errors = schema_errors(instance, name)
    if errors:
        path, message = errors[0]
        raise KvconformError(message, file, path)


def _most_specific(error):
    """For a failed oneOf/anyOf, the error of the branch the author most likely meant.

    A branch that fails a `const` (a discriminator such as an item's `"type": "image"`) did
    not apply, so it is set aside; among what remains the deepest error wins (an image item
    missing its path, not "content is not a string").
    """
    if not error.context:
        return error
    branches: dict = {}
    for e in error.context:
        branches.setdefault(e.relative_schema_path[0], []).append(e)
    applicable = [errs for errs in branches.values() if not any(e.validator == "const" for e in errs)]
    if not applicable:
        consts = [e for errs in branches.values() for e in errs if e.validator == "const"]
        if len({tuple(e.absolute_path) for e in consts}) == 1:  # no discriminator value matched
            merged = consts[0]
            merged.validator, merged.validator_value = "enum", [e.validator_value for e in consts]
            return merged
    candidates = [e for errs in (applicable or list(branches.values())) for e in errs]
    leaves = [_most_specific(e) for e in candidates]
    return max(leaves, key=lambda e: (len(e.absolute_path), e.validator != "type"))


def _describe(error) -> str:
    """A short message: jsonschema's default repeats the whole instance."""
    v = error.validator
    if v == "required":
        missing = [r for r in error.validator_value if r not in (error.instance or {})]
        return f"missing required property {missing[0]!r}" if missing else error.message
    if v == "additionalProperties":
        return error.message.replace("Additional properties are not allowed", "unknown property")
    if v in ("enum", "const"):
        allowed = error.validator_value if v == "enum" else [error.validator_value]
        return f"{_short(error.instance)} is not one of {allowed}"
    if v == "type":
        return f"expected {error.validator_value}, got {_short(error.instance)}"
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems",
             "minLength", "maxProperties", "pattern"):
        return f"{_short(error.instance)} violates {v} {error.validator_value!r}"
    return error.message if len(error.message) < 200 else error.message[:197] + "..."


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- keys a request file may hold ------------------------------------------------------------

WARNINGS_SHOWN = 10
"""Unknown keys the commands warn about one by one; the rest are counted in one more line."""


def unknown_request_keys(doc: Any, limit: int | None = None) -> list[tuple[str, str]]:
    """[(JSON path, "unknown key ignored (did you mean K?)")] for every key of a request file's
    top level, requests, messages and content items that spec/schemas/request.schema.json does
    not name. Such keys are legal (Edge-LLM ignores them), but a typo such as
    `max_generate_lenght` silently runs with the default, so the commands warn about each.
    Keys beginning with `_` (the kit's `_conformance` and similar blocks) are never reported.
    With `limit`, the first `limit` keys, then ("$", "... and N more unknown keys ignored")
    when there are more: a file of 100,000 such keys is 11 lines, and only those get a hint."""
    found = _unknown_keys(doc)
    shown = []
    for parts, key, known, levels in found:
        if limit is not None and len(shown) == limit:
            more = 1 + sum(1 for _ in found)
            return shown + [("$", f"... and {more:,} more unknown keys ignored")]
        shown.append((json_path(parts + [key]), f"unknown key ignored{_hint(key, known, levels)}"))
    return shown


def _unknown_keys(doc: Any):
    """(parts, key, known keys, levels) of each unknown key, in document order, no hint yet."""
    if not isinstance(doc, dict):
        return
    levels = _request_key_levels()
    request_keys, message_keys = frozenset(levels["a request"]), frozenset(levels["a message"])
    yield from _unknown_in(doc, [], "the top level", levels)
    for i, r in enumerate(_dicts(doc.get("requests"))):
        messages = _dicts(r.get("messages"))
        if request_keys.issuperset(r) and all(message_keys.issuperset(m) and type(m.get("content")) is str
                                              for m in messages):
            continue                         # the common case, told at once: nothing to report
        yield from _unknown_in(r, ["requests", i], "a request", levels)
        for j, m in enumerate(messages):
            yield from _unknown_in(m, ["requests", i, "messages", j], "a message", levels)
            for k, item in enumerate(_dicts(m.get("content"))):
                kind = item.get("type")
                known = levels["by type"].get(kind) if isinstance(kind, str) else None
                if known is not None:
                    where = ["requests", i, "messages", j, "content", k]
                    yield from _unknown_in(item, where, "a content item", levels, known)


def _dicts(value) -> list:
    """The objects of a list (the rest is the schema's business, not a key question)."""
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


@lru_cache(maxsize=None)
def _request_key_levels() -> dict:
    """The property names of each object level of the request schema, read from the schema."""
    schema = _schema_file("request")
    defs = schema["$defs"]
    by_type = {b["properties"]["type"]["const"]: tuple(b["properties"]) for b in defs["item"]["oneOf"]}
    return {"the top level": tuple(schema["properties"]), "a request": tuple(defs["request"]["properties"]),
            "a message": tuple(defs["message"]["properties"]),
            "a content item": tuple(sorted({k for keys in by_type.values() for k in keys})), "by type": by_type}


def _unknown_in(obj: dict, parts: list, level: str, levels: dict, known=None):
    known = levels[level] if known is None else known
    return ((parts, key, known, levels) for key in obj if key not in known and not key.startswith("_"))


def _hint(key: str, known, levels: dict) -> str:
    """A close key of the same object, else where a close (or equal) key belongs."""
    near = difflib.get_close_matches(key, known, n=1)
    if near:
        return f" (did you mean {near[0]}?)"
    for level, keys in levels.items():
        near = difflib.get_close_matches(key, keys, n=1) if level != "by type" else []
        if near:
            return f" ({key} is a key of {level})" if near[0] == key else f" (did you mean {near[0]}? a key of {level})"
    return ""
