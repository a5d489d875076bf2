"""The kit's own tests (the conformance cases themselves are in cases/).

A package, so that tests import their helpers by qualified names (`from tests.helpers.cases
import case`) and never edit sys.path; pytest imports each test module as `tests.<folder>.<name>`
with the repository root on sys.path (pyproject.toml `pythonpath`).
"""
