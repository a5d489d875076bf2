"""Comparing the runtime's observations of a stream with the oracle's, step by step."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Difference:
    """The first step where the runtime and the oracle disagree, and on what."""
    step: int
    field: str
    runtime: object
    oracle: object

    def line(self) -> str:
        return f"step {self.step}: {self.field}: runtime {self.runtime!r}, oracle {self.oracle!r}"


def first_difference(runtime: list, oracle: list) -> Difference | None:
    """None when every observation agrees. A step where either side is undefined agrees only when
    both are (the profile defines nothing there, and both streams stop)."""
    for k in range(max(len(runtime), len(oracle))):
        a = runtime[k] if k < len(runtime) else {"missing": True}
        b = oracle[k] if k < len(oracle) else {"missing": True}
        if ("undefined" in a) != ("undefined" in b):
            return Difference(k, "undefined", a.get("undefined"), b.get("undefined"))
        if "undefined" in a:
            return None
        for field in sorted(set(a) | set(b)):
            if a.get(field) != b.get(field):
                return Difference(k, field, a.get(field), b.get(field))
    return None
