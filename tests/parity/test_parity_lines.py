"""Every assertion in parity/*.json cites a real line of its runtime's test.

`kvconform parity --verbose` prints each assertion as `file:line`; a line of 0 (not counted)
sends the reader nowhere. The upstream text is not vendored, so the span of a test is bounded
by what the suite itself states: an entry's `line` is where its test starts, and the test ends
before the next test of the same file and commit that the suite cites. An assertion must lie
inside that span: from its test's first line (an assertion that stands for the whole test, as
the Edge-LLM entries' not-expressible ones do, cites the test itself) to just before the next
cited test's first line.
"""
from collections import defaultdict
from pathlib import Path

from conformance import parity

SUITE = parity.SUITE_DIR

def _entries():
    """(suite file name, document, entry) for every entry of every suite file."""
    for doc in parity.load(SUITE):
        name = Path(doc["_path"]).name
        for entry in doc["entries"]:
            yield name, doc, entry


def line_problems(entries):
    """One message per entry or assertion whose line is 0 or outside its test's span."""
    starts = defaultdict(set)
    for name, doc, e in entries:
        if e["line"] > 0:
            starts[(name, e["file"], e.get("commit", doc["commit"]))].add(e["line"])
    problems = []
    for name, doc, e in entries:
        where = f"{name} {e['id']} ({e['file']}, {e['test']})"
        if e["line"] <= 0:
            problems.append(f"{where}: the test's first line is {e['line']}")
            continue
        later = [s for s in starts[(name, e["file"], e.get("commit", doc["commit"]))] if s > e["line"]]
        end = min(later) if later else None
        for a in e["assertions"]:
            n = a["line"]
            if n < e["line"] or (end is not None and n >= end):
                span = f"{e['line']}..{end - 1}" if end else f"from {e['line']}"
                problems.append(f"{where}: assertion {a['what']!r} cites line {n}, outside the test ({span})")
    return problems


def test_no_assertion_cites_line_zero_or_a_line_outside_its_test():
    problems = line_problems(list(_entries()))
    assert not problems, f"{len(problems)} uncounted or misplaced lines:\n" + "\n".join(problems)


def test_the_check_catches_line_zero_and_a_line_past_the_next_test():
    doc = {"commit": "a" * 40}
    first = {"id": "t/first", "file": "f.cpp", "test": "A", "line": 10,
             "assertions": [{"line": 12, "what": "inside"}, {"line": 31, "what": "past the next test"}]}
    second = {"id": "t/second", "file": "f.cpp", "test": "B", "line": 30,
              "assertions": [{"line": 0, "what": "uncounted"}, {"line": 30, "what": "the whole test"}]}
    third = {"id": "t/third", "file": "f.cpp", "test": "C", "line": 0, "assertions": [{"line": 0, "what": "x"}]}
    problems = line_problems([("x.json", doc, first), ("x.json", doc, second), ("x.json", doc, third)])
    assert len(problems) == 3, problems
    assert any("past the next test" in p and "10..29" in p for p in problems)
    assert any("'uncounted' cites line 0" in p for p in problems)
    assert any("t/third" in p and "first line is 0" in p for p in problems)
