"""Documents generated from spec/schemas: valid ones, and near-misses one mutation away.

hypothesis-jsonschema was not used: it documents drafts 4, 6 and 7 only (our schemas are
Draft 2020-12 with cross-file `urn:` references) and would be a new dependency. This module
walks the subset of JSON Schema the spec uses (type, properties, required,
additionalProperties, items, $ref, oneOf, enum, const, minimum/maximum, exclusiveMinimum,
minItems, minLength, maxProperties, pattern, propertyNames, uniqueItems) and draws every choice
through Hypothesis (`data.draw`), so failing examples shrink.

- `SchemaGen(hints).valid(data, "request")`: a document the schema accepts (checked by the
  caller if it matters). `hints` maps a regular expression on the JSON path
  (`$.requests[0].messages[1].content[0].image`) to a strategy that replaces the generated
  value, so media paths, adapter names and text lengths can be steered towards interesting
  values (real media, bad media, escaping paths) instead of random strings.
- `mutate(data, doc)`: one near-miss edit at a random JSON path: a wrong type, a missing key,
  an unknown enum value, a huge or negative number, deep nesting, an empty container, a long
  or non-Unicode string. Returns (document, description).
- `file_bytes(data, doc)`: the document serialized, sometimes damaged at the byte level
  (invalid UTF-8, truncation, NaN/Infinity literals, a byte-order mark, an empty file).
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

from hypothesis import strategies as st

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "spec" / "schemas"
_URN = "urn:kvconform:schema:"

# Values of every JSON type, for type confusion; ints beyond int64 and floats at the edges.
ODD_VALUES = [None, True, False, 0, -1, 1, 1.5, -0.0, 2 ** 63, -(2 ** 63) - 1, 10 ** 30, 1e308, -1e308,
              "", "x", "0", "\u0000", "\ud800", "\U0001F600" * 3, [], [None], {}, {"": None}]
HUGE = [2 ** 31, 2 ** 53 + 1, 2 ** 63, 2 ** 64, 10 ** 30, 10 ** 400, 1e308, 1.7976931348623157e308]
NEGATIVE = [-1, -2, -(2 ** 31), -(2 ** 63), -1e308, -0.5]
TINY = [5e-324, 1e-300, 1e-45, 2.2250738585072014e-308]


def load_schemas() -> dict:
    return {p.name.split(".")[0]: json.loads(p.read_text()) for p in SCHEMA_DIR.glob("*.schema.json")}


def json_path(parts) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


class SchemaGen:
    def __init__(self, hints: dict | None = None, max_items: int = 3, max_depth: int = 12):
        self.schemas = load_schemas()
        self.hints = [(re.compile(k), v) for k, v in (hints or {}).items()]
        self.max_items, self.max_depth = max_items, max_depth

    # --- references ----------------------------------------------------------------------------
    def _resolve(self, ref: str, root: str) -> tuple[dict, str]:
        doc_name, _, pointer = ref.partition("#")
        if doc_name:
            assert doc_name.startswith(_URN), ref
            root = doc_name[len(_URN):]
        node = self.schemas[root]
        for part in [p for p in pointer.split("/") if p]:
            node = node[part]
        return node, root

    # --- valid documents -------------------------------------------------------------------------
    def valid(self, data, name: str):
        return self._gen(data, self.schemas[name], name, (), 0)

    def _gen(self, data, schema: dict, root: str, path: tuple, depth: int):
        for pattern, strategy in self.hints:
            if pattern.fullmatch(json_path(path)):
                return data.draw(strategy, label=json_path(path))
        if "$ref" in schema:
            target, root = self._resolve(schema["$ref"], root)
            return self._gen(data, target, root, path, depth)
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        if "enum" in schema:
            return copy.deepcopy(data.draw(st.sampled_from(schema["enum"])))
        if "oneOf" in schema:
            branch = data.draw(st.sampled_from(schema["oneOf"]))
            return self._gen(data, branch, root, path, depth)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = data.draw(st.sampled_from(kind))
        if kind is None:
            kind = "object" if "properties" in schema else "string"
        if kind == "object":
            return self._object(data, schema, root, path, depth)
        if kind == "array":
            return self._array(data, schema, root, path, depth)
        if kind == "string":
            if "pattern" in schema:
                return data.draw(st.from_regex(schema["pattern"], fullmatch=True).filter(
                    lambda s: len(s) >= schema.get("minLength", 0)))
            return data.draw(st.text(min_size=schema.get("minLength", 0), max_size=12))
        if kind == "integer":
            lo = schema.get("minimum", -5)
            hi = schema.get("maximum", lo + 64)
            return data.draw(st.integers(lo, hi) | st.integers(lo, max(lo, schema.get("maximum", 2 ** 40))))
        if kind == "number":
            lo = schema.get("minimum", schema.get("exclusiveMinimum", -10.0))
            hi = schema.get("maximum", lo + 10.0)
            value = data.draw(st.floats(lo, hi, allow_nan=False, allow_infinity=False))
            if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
                value = hi
            return value
        if kind == "boolean":
            return data.draw(st.booleans())
        if kind == "null":
            return None
        raise AssertionError(f"schema type {kind!r} at {json_path(path)} not handled")

    def _object(self, data, schema, root, path, depth):
        out = {}
        props = schema.get("properties", {})
        required = schema.get("required", [])
        for key in required:
            sub = props.get(key, schema.get("additionalProperties") if isinstance(
                schema.get("additionalProperties"), dict) else {})
            out[key] = self._gen(data, sub, root, path + (key,), depth + 1)
        if depth < self.max_depth:
            for key, sub in props.items():
                if key not in out and data.draw(st.booleans(), label=f"{json_path(path)}.{key}?"):
                    out[key] = self._gen(data, sub, root, path + (key,), depth + 1)
        extra = schema.get("additionalProperties", True)
        limit = schema.get("maxProperties", 1 << 30)
        if isinstance(extra, dict) and depth < self.max_depth:
            names = schema.get("propertyNames", {})
            key_strategy = (st.from_regex(names["pattern"], fullmatch=True) if "pattern" in names
                            else st.text(min_size=1, max_size=6))
            for _ in range(data.draw(st.integers(0, 2))):
                if len(out) >= limit:
                    break
                key = data.draw(key_strategy)
                if key not in props:
                    out[key] = self._gen(data, extra, root, path + (key,), depth + 1)
        elif extra is True and depth < 3 and data.draw(st.booleans(), label="unknown key?"):
            out["x_unknown_" + data.draw(st.text("abc", min_size=1, max_size=3))] = data.draw(
                st.sampled_from(ODD_VALUES[:12]))
        return out

    def _array(self, data, schema, root, path, depth):
        lo = schema.get("minItems", 0)
        hi = max(lo, min(schema.get("maxItems", self.max_items), self.max_items))
        if depth >= self.max_depth:
            hi = lo
        n = data.draw(st.integers(lo, hi))
        items = [self._gen(data, schema.get("items", {}), root, path + (i,), depth + 1) for i in range(n)]
        if schema.get("uniqueItems"):
            seen, unique = set(), []
            for x in items:
                k = json.dumps(x, sort_keys=True)
                if k not in seen:
                    seen.add(k)
                    unique.append(x)
            items = unique
        return items


# --- near-misses --------------------------------------------------------------------------------

def paths_of(doc, prefix=()):
    """Every JSON path of `doc`, the root included."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths_of(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths_of(v, prefix + (i,))


def _get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def _set(doc, path, value):
    if not path:
        return value
    _get(doc, path[:-1])[path[-1]] = value
    return doc


class Deep:
    """`depth` levels of `[...]` or `{"a": ...}` around `leaf`, serialized as text by `dumps`
    (building the Python object would exhaust the recursion limit of json.dumps itself)."""

    def __init__(self, depth: int, leaf, kind: str = "list"):
        self.depth, self.leaf, self.kind = depth, leaf, kind

    def text(self, indent) -> str:
        open_, close = ("[", "]") if self.kind == "list" else ('{"a": ', "}")
        return open_ * self.depth + dumps(self.leaf, indent) + close * self.depth


def dumps(doc, indent=None) -> str:
    """json.dumps that writes Deep values in place."""
    holes = {}

    def encode(x):
        if isinstance(x, Deep):
            key = f"@@deep{len(holes)}@@"
            holes[key] = x.text(indent)
            return key
        if isinstance(x, dict):
            return {k: encode(v) for k, v in x.items()}
        if isinstance(x, list):
            return [encode(v) for v in x]
        return x
    text = json.dumps(encode(doc), indent=indent)
    for key, value in holes.items():
        text = text.replace(json.dumps(key), value)
    return text


MUTATIONS = ("type", "delete", "enum", "huge", "negative", "tiny", "deep", "empty", "long", "unicode",
             "duplicate_item")


def mutate(data, doc):
    """One near-miss edit of `doc` (a deep copy is edited). Returns (document, description)."""
    doc = copy.deepcopy(doc)
    paths = list(paths_of(doc))
    path = data.draw(st.sampled_from(paths), label="mutated path")
    kind = data.draw(st.sampled_from(MUTATIONS), label="mutation")
    where = json_path(path)
    current = _get(doc, path)
    if kind == "delete" and path:
        parent = _get(doc, path[:-1])
        del parent[path[-1]]
        return doc, f"delete {where}"
    if kind == "type" or (kind == "delete" and not path):
        value = data.draw(st.sampled_from(ODD_VALUES))
    elif kind == "enum":
        value = data.draw(st.sampled_from(["bogus", "USE_CACHE", "attention ", "fp4", "video", "tool", ""]))
    elif kind == "huge":
        value = data.draw(st.sampled_from(HUGE))
    elif kind == "negative":
        value = data.draw(st.sampled_from(NEGATIVE))
    elif kind == "tiny":
        value = data.draw(st.sampled_from(TINY))
    elif kind == "deep":
        value = Deep(data.draw(st.sampled_from([50, 500, 5000, 50000])), current,
                     data.draw(st.sampled_from(["list", "dict"])))
    elif kind == "empty":
        value = data.draw(st.sampled_from([[], {}, ""]))
    elif kind == "long":
        value = data.draw(st.sampled_from(["a" * 20000, "\u00e9" * 5000, "<|image|>" * 500]))
    elif kind == "unicode":
        value = data.draw(st.sampled_from(["\ud800", "a\udfffb", "\u0000", "\ufeff", "\U0010ffff", "e\u0301"]))
    else:  # duplicate_item: repeat a list element or an object's value under a new key
        if isinstance(current, list) and current:
            value = current + current[:1]
        elif isinstance(current, dict):
            value = dict(current, **{f"{k}_copy": v for k, v in list(current.items())[:1]})
        else:
            value = [current, current]
    return _set(doc, path, value), f"{kind} at {where}"


def file_bytes(data, doc) -> tuple[bytes, str]:
    """The document as file bytes, sometimes damaged below the JSON level."""
    raw = dumps(doc, data.draw(st.sampled_from([None, 1]))).encode("ascii")
    damage = data.draw(st.sampled_from(["none"] * 6 + ["invalid_utf8", "truncate", "nan", "overflow", "bigint",
                                                        "bom", "empty", "trailing", "not_json"]),
                       label="byte damage")
    if damage == "invalid_utf8":
        at = data.draw(st.integers(0, len(raw)))
        raw = raw[:at] + data.draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80"])) + raw[at:]
    elif damage == "truncate":
        raw = raw[:data.draw(st.integers(0, max(0, len(raw) - 1)))]
    elif damage in ("nan", "overflow", "bigint"):
        numbers = list(re.finditer(rb"(?<![\w\"])-?\d+(\.\d+)?([eE][-+]?\d+)?(?![\w\"])", raw))
        if numbers:
            m = data.draw(st.sampled_from(numbers))
            literal = {"nan": [b"NaN", b"Infinity", b"-Infinity"], "overflow": [b"1e400", b"-1e999", b"1E+309"],
                       "bigint": [b"1" + b"0" * 5000, b"-" + b"9" * 4301]}[damage]
            raw = raw[:m.start()] + data.draw(st.sampled_from(literal)) + raw[m.end():]
    elif damage == "bom":
        raw = b"\xef\xbb\xbf" + raw
    elif damage == "empty":
        raw = b""
    elif damage == "trailing":
        raw = raw + b" {}"
    elif damage == "not_json":
        raw = data.draw(st.sampled_from([b"\x89PNG\r\n\x1a\n", b"requests: []", b"\x00" * 16, b"[" * 100000]))
    return raw, damage
