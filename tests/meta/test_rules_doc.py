"""docs/rules.md, the rule map, is what tools/make_rules_doc.py finds by scanning the tree.

The map is generated, never kept by hand: the check fails when code, cases, variants or profiles
changed and the map was not re-run. The scanner is also tested on a small tree of its own, laid
out differently from this one, to show it finds things wherever they are (the packages move).
"""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("make_rules_doc", ROOT / "tools" / "make_rules_doc.py")
    tool = importlib.util.module_from_spec(spec)
    sys.modules["make_rules_doc"] = tool                 # its dataclasses look their module up
    spec.loader.exec_module(tool)
    return tool


def test_the_rule_map_is_up_to_date():
    p = subprocess.run([sys.executable, "tools/make_rules_doc.py", "--check"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_every_rule_the_spec_defines_is_in_the_map():
    tool = _tool()
    text = (ROOT / "docs" / "rules.md").read_text()
    rules = tool.spec_rules(ROOT)
    assert len(rules) > 100
    assert all(f"#### {r.id} ({r.title})" in text for r in rules.values())


def test_ranges_count_for_each_id():
    cited = _tool().cited
    assert cited("CR-PUB-4 .. CR-PUB-6") == ["CR-PUB-4", "CR-PUB-5", "CR-PUB-6"]
    assert cited("CR-MET-8 .. 10, PEER-SGL-1..3") == ["CR-MET-8", "CR-MET-9", "CR-MET-10", "PEER-SGL-1",
                                                      "PEER-SGL-2", "PEER-SGL-3"]
    assert cited("CR-ID-3/4 and CR-A-1 .. CR-B-2") == ["CR-ID-3", "CR-ID-4", "CR-A-1", "CR-B-2"]


def _tree(root: Path) -> None:
    """A tree whose parts stand elsewhere than this one's: the variants in a top-level package
    `breakers/`, the cases in `cases/`, a trace step tagged through a module constant."""
    files = {
        "spec/rules.md": "# Rules\n\n## 1. Things (CR-T)\n\n**CR-T-1 (one).** *Text.*\n\n**CR-T-2 (two).** *Text.*\n\n"
                         "## 2. More\n\n**CR-T-3 (three).** *Text.*\n",
        "spec/profiles/a.json": json.dumps({"name": "a", "switches": {"s": 1}, "excluded_rules": []}),
        "spec/profiles/b.json": json.dumps({"name": "b", "switches": {"s": 2}, "excluded_rules": ["CR-T-3"]}),
        "spec/schemas/p.schema.json": json.dumps({"properties": {"switches": {"properties": {
            "s": {"description": "CR-T-2: a switch"}}}}}),
        "reference/__init__.py": "",
        "reference/plan.py": 'TRIM = "CR-T-2"\n\n\ndef decide(trace):\n    trace.step(rule="CR-T-1", why="x")\n\n\n'
                             'def other(trace):\n    trace.step(rule=TRIM)\n\n\n'
                             'def elsewhere():\n    """Not a citation of CR-T-3 by decide."""\n',
        "gpu_backend/__init__.py": "",
        "gpu_backend/run.py": "class Runtime:\n    def go(self):\n        return 1  # CR-T-1: the same reading\n\n"
                              "    def stale(self):\n        \"\"\"CR-T-9 is cited but no longer defined.\"\"\"\n",
        "breakers/__init__.py": "",
        "breakers/faults.py": '@variant("off-by-one", "group")\nclass OffByOne:\n    """Wrong.\n\n'
                              '    Bug class: x. Violates: CR-T-1.\n    Mirrors: y.\n    """\n'
                              '    def helper(self):\n        """CR-T-3 is not decided by a variant."""\n',
        "cases/one.json": json.dumps({"_conformance": {"id": "golden/one", "rules": ["CR-T-1", "CR-T-2"]}}),
        "tests/meta/fixtures/case.json": json.dumps({"_conformance": {"id": "fixture", "rules": ["CR-T-3"]}}),
        "kvconform-report/reproducers/one.json": json.dumps({"_conformance": {"id": "x", "rules": ["CR-T-3"]}}),
        ".gitignore": "/kvconform-report*/\n",
        "my-run/report.json": "{}",
        "my-run/materialized/one.json": json.dumps({"_conformance": {"id": "y", "rules": ["CR-T-3"]}}),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_scanner_finds_each_part_wherever_it_stands(tmp_path):
    tool = _tool()
    _tree(tmp_path)
    rules = tool.collect(tmp_path)
    one, two, three = rules["CR-T-1"], rules["CR-T-2"], rules["CR-T-3"]
    assert one.oracle == {"reference/plan.py": ["decide"]}            # a rule-tagged step, no docstring
    assert two.oracle == {"reference/plan.py": ["other"]}             # through the module constant
    assert one.backend == {"gpu_backend/run.py": ["Runtime.go"]}      # a comment in the body
    assert one.cases == [("golden/one", "cases/one.json")] and two.cases == one.cases
    assert three.cases == []                                          # fixtures and report folders skipped
    assert [v[0] for v in one.variants] == ["off-by-one"] and three.kit == {}
    assert three.oracle == {"reference/plan.py": ["elsewhere"]}
    assert two.profiles == ["switch `s`: `a` 1, `b` 2"]
    assert three.profiles == ["[`b`](../spec/profiles/b.json) does not hold it"]
    text = tool.render(rules)
    gaps = text.split("## Gaps", 1)[1]
    assert "### no case (1)" in gaps and "[CR-T-3](#cr-t-3-three)" in gaps.split("### no faulty variant")[0]
    assert "### no faulty variant (2)" in gaps and "[CR-T-1]" not in gaps
    assert "[spec/rules.md, 2. More](../spec/rules.md#2-more)" in text
    assert rules.undefined == {"CR-T-9": {"gpu_backend/run.py"}}
    assert "- CR-T-9: [gpu_backend/run.py](../gpu_backend/run.py)" in text


def test_the_check_fails_when_the_map_is_stale(tmp_path, capsys):
    tool = _tool()
    _tree(tmp_path)
    (tmp_path / "docs").mkdir()
    assert tool.main([], root=tmp_path) == 0 and tool.main(["--check"], root=tmp_path) == 0
    (tmp_path / "cases" / "two.json").write_text(json.dumps({"_conformance": {"id": "two", "rules": ["CR-T-3"]}}))
    assert tool.main(["--check"], root=tmp_path) == 1
    assert "out of date" in capsys.readouterr().out
