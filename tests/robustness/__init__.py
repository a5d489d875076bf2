"""Robustness tests of issue 7 (a package, so its conftest never shadows the `conftest` module
other test folders import by name)."""
