"""The one-way dependencies of ARCHITECTURE.md section 1.

Differential testing is worthless if the backend and the oracle share code, and the oracle
must run anywhere Python runs. These tests read the import statements of every module, so
they also catch imports inside functions.
"""
import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_top_levels(package: str) -> dict[str, set[str]]:
    """{module file: top-level names it imports} for every .py file of `package`."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        out[str(path.relative_to(ROOT))] = names
    return out


@pytest.mark.parametrize("package, forbidden", [
    ("gpu_backend", {"reference", "conformance"}),
    ("reference", {"gpu_backend", "conformance", "torch", "numpy"}),
    # the numerical reference is written from the spec, apart from the backend it judges
    ("numerical_reference", {"gpu_backend", "torch", "conformance"}),
])
def test_package_does_not_import(package, forbidden):
    modules = imported_top_levels(package)
    assert modules, f"{package}/ has no modules"
    offenders = {f: sorted(names & forbidden) for f, names in modules.items() if names & forbidden}
    assert not offenders, f"{package}/ must not import {sorted(forbidden)}: {offenders}"


# The `hf` tokenizer profile is the one module of reference/ allowed third-party code (spec/hf-tokenizer.md TOK-HF-1).
# JPEG pixels are decoded by Pillow (reference/jpeg.py, spec/tokenizer.md section 3).
THIRD_PARTY = {"reference/hf_tokenizer.py": {"tokenizers", "jinja2"}, "reference/jpeg.py": {"PIL"}}


def test_reference_is_stdlib_only():
    allowed = set(sys.stdlib_module_names) | {"reference", "__future__"}
    offenders = {f: sorted(n - allowed - THIRD_PARTY.get(f, set()))
                 for f, n in imported_top_levels("reference").items() if n - allowed - THIRD_PARTY.get(f, set())}
    assert not offenders, f"reference/ imports outside the standard library: {offenders}"
