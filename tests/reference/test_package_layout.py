"""The oracle's package docstring lists every module of reference/ (a newcomer looks there first)."""
from pathlib import Path

import reference

ROOT = Path(reference.__file__).parent


def test_the_package_docstring_names_every_module():
    modules = {p.name for p in ROOT.glob("*.py") if p.name != "__init__.py"}
    missing = sorted(m for m in modules if m not in reference.__doc__)
    assert not missing, f"reference/__init__.py does not list {missing}"
