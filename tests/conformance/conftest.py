"""Shared fixtures for the runner's tests: adapters over the reference oracle, case lookup."""
from __future__ import annotations

import pytest

from conformance.adapters import make_adapter
from conformance.cases import discover

ALL_CASES = discover()
BY_ID = {c.id: c for c in ALL_CASES}


@pytest.fixture(scope="session")
def reference_adapter():
    return make_adapter("reference")


@pytest.fixture(scope="session")
def reference_manifest(reference_adapter):
    return reference_adapter.capabilities()


def case(case_id: str):
    return BY_ID[case_id]
