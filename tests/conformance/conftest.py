"""Shared fixtures for the runner's tests: adapters over the reference oracle."""
from __future__ import annotations

import pytest

from conformance.adapters import make_adapter


@pytest.fixture(scope="session")
def reference_adapter():
    return make_adapter("reference")


@pytest.fixture(scope="session")
def reference_manifest(reference_adapter):
    return reference_adapter.capabilities()
