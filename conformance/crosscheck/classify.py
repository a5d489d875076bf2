"""Naming a disagreement: which known causes a stream's disagreement comes from.

A class is decided by counterfactuals on the oracle's side (conformance/crosscheck/hypotheses.py):
the smallest set of known causes under which the oracle, with the stream's empty salts or extra
keys removed or a copy of its cache changed in that one way, observes exactly what the runtime
did. Its label is the causes' labels joined by ` + `; where the stream cannot tell two such sets
apart, both labels joined by ` | ` (the shrinker keeps a stream's label, so such a class stays
ambiguous; another stream of one of the sets alone shows it apart). A disagreement no set
explains is `unclassified (<field>)`, the field of its first difference.
"""
from __future__ import annotations

from . import hypotheses
from .compare import first_difference


def classify(stream: dict, difference, runtime: list) -> str:
    found = hypotheses.explain(stream, runtime, first_difference)
    if found:
        return " | ".join(" + ".join(hypotheses.LABELS[c] for c in causes) for causes in found)
    return f"unclassified ({difference.field})"
