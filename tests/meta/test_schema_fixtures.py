"""Schema fixtures: every valid fixture validates, every invalid one is rejected at the JSON
path its folder's expected_paths.json names (spec/schemas/*.schema.json)."""
import json
from pathlib import Path

import pytest

from conformance.cases import schemas

FIXTURES = Path(__file__).resolve().parent / "fixtures"
VALID = sorted(FIXTURES.glob("*/valid/*.json"))
INVALID = sorted(p for p in FIXTURES.glob("*/invalid/*.json") if p.name != "expected_paths.json")


def label(p: Path) -> str:
    return f"{p.parts[-3]}/{p.stem}"


def test_every_schema_has_valid_and_invalid_fixtures():
    for name in schemas.SCHEMA_NAMES:
        assert list((FIXTURES / name / "valid").glob("*.json")), f"no valid fixture for {name}"
        assert list((FIXTURES / name / "invalid").glob("*.json")), f"no invalid fixture for {name}"


@pytest.mark.parametrize("path", VALID, ids=label)
def test_valid_fixture(path):
    errors = schemas.schema_errors(json.loads(path.read_text()), path.parts[-3])
    assert errors == [], f"{label(path)} should validate, got {errors}"


@pytest.mark.parametrize("path", INVALID, ids=label)
def test_invalid_fixture_is_rejected_at_its_path(path):
    expected = json.loads((path.parent / "expected_paths.json").read_text())
    assert path.name in expected, f"{path.parent / 'expected_paths.json'} has no entry for {path.name}"
    errors = schemas.schema_errors(json.loads(path.read_text()), path.parts[-3])
    assert errors, f"{label(path)} should be rejected"
    assert expected[path.name] in [p for p, _ in errors], (
        f"{label(path)}: expected an error at {expected[path.name]}, got {errors}")


def test_expected_paths_name_existing_fixtures():
    for table in FIXTURES.glob("*/invalid/expected_paths.json"):
        stale = [name for name in json.loads(table.read_text()) if not (table.parent / name).exists()]
        assert not stale, f"{table}: entries without a fixture: {stale}"
