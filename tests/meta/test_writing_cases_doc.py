"""docs/writing-cases.md has one heading per key of a case's `_conformance` block, as the schema
defines them (spec/schemas/request.schema.json `$defs/conformance`), and no heading for a key the
schema does not define: the page cannot fall behind the format."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_case_key_has_its_heading():
    schema = json.loads((ROOT / "spec" / "schemas" / "request.schema.json").read_text())
    keys = set(schema["$defs"]["conformance"]["properties"])
    page = (ROOT / "docs" / "writing-cases.md").read_text(encoding="utf-8")
    block = page.split("## The keys of `_conformance`", 1)[1].split("\n## ", 1)[0]
    headings = re.findall(r"^### `([a-z_]+)`$", block, re.M)
    assert len(headings) == len(set(headings)), f"a key has two headings: {headings}"
    assert set(headings) == keys, (f"docs/writing-cases.md: keys without a heading {sorted(keys - set(headings))}, "
                                   f"headings of no key {sorted(set(headings) - keys)}")
    required = set(schema["$defs"]["conformance"]["required"])
    for key in keys:
        first_line = block.split(f"### `{key}`\n\n", 1)[1].split("\n", 1)[0]     # "Type, **required** ..."
        assert ("**required**" in first_line) == (key in required), f"{key}: its first line says required or not"
