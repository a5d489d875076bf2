"""The triage's keys (conformance/mutation/operators.py stable_key) outlive unrelated edits.

A triage entry argues about one change to one line of code. Its key must find that change again
after lines are added above it, comments change or other definitions move, and must stop
matching when the mutated line itself is edited (the argument was about the old text).
"""
from __future__ import annotations

import pytest

pytest.importorskip("cosmic_ray", reason="the mutation campaign needs the mutate extra: pip install -e '.[mutate]'")

from conformance.mutation import triage  # noqa: E402
from conformance.mutation.operators import mutants_of  # noqa: E402

BEFORE = '''class Pool:
    def take(self, n):
        if n < self.free:
            return n
        return 0
'''
AFTER = '''import os


def helper(x):
    return x < 3   # a new definition with a mutant of the same operator


class Pool:
    """Docs added."""

    def take(self, n):
        # a comment above
        if n < self.free:     # and one beside
            return n
        return 0
'''


def keys(root, text):
    (root / "m.py").write_text(text)
    return {m.key: m for m in mutants_of(root, "m.py")}


def test_a_key_survives_edits_elsewhere_and_changes_with_its_own_line(tmp_path):
    before, after = keys(tmp_path, BEFORE), keys(tmp_path, AFTER)
    boundary = "m.py::Pool.take ReplaceComparisonOperator_Lt_LtE#0: if n < self.free:"
    assert boundary in before and boundary in after
    assert (before[boundary].line, after[boundary].line) == (3, 13)        # the line moved, the key did not
    assert set(before) <= set(after)                                        # every old key is found again
    assert "m.py::helper ReplaceComparisonOperator_Lt_LtE#0: return x < 3" in after
    edited = keys(tmp_path, BEFORE.replace("if n < self.free:", "if n < self.free - 1:"))
    assert boundary not in edited


def test_two_mutants_of_one_constant_are_told_apart_by_their_index(tmp_path):
    found = keys(tmp_path, BEFORE)
    zero = sorted(k for k in found if "NumberReplacer" in k and "return 0" in k)
    assert zero == ["m.py::Pool.take NumberReplacer#0: return 0", "m.py::Pool.take NumberReplacer#1: return 0"]


def test_line_keyed_entries_explain_nothing_and_migrate_by_their_change(tmp_path):
    (tmp_path / "m.py").write_text(AFTER)
    old = {"m.py:3:ReplaceComparisonOperator_Lt_LtE:0": {"equivalent": "stand-in", "change": "-if n < self.free:  +if n <= self.free:"},
           "m.py:9:AddNot:0": {"equivalent": "stand-in", "change": "-if gone:  +if not gone:"}}
    assert triage.line_keyed(old) == list(old)
    row = {"status": "survived", "id": "m.py:13:ReplaceComparisonOperator_Lt_LtE:1",
           "key": "m.py::Pool.take ReplaceComparisonOperator_Lt_LtE#0: if n < self.free:"}
    assert triage.unexplained([row], old) == [row]
    new, lost = triage.migrate(old, tmp_path)
    assert lost == ["m.py:9:AddNot:0"]
    assert row["key"] in new and triage.unexplained([row], new) == []
