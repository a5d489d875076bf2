"""Case lookup for the runner's tests (a unique module name, unlike `conftest`)."""
from __future__ import annotations

from conformance.cases.case import discover

ALL_CASES = discover()
BY_ID = {c.id: c for c in ALL_CASES}


def case(case_id: str):
    return BY_ID[case_id]
