"""Rule coverage both ways, and the oracle's stdlib-only rule (docs/ARCHITECTURE.md section 2).

Every rule id defined by spec/context-reuse.md must be cited by a docstring of reference/ and
by at least one case under cases/; no docstring or case may cite an id the spec
does not define.
"""
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULE = re.compile(r"(?:CR|TOK)-[A-Z]+-\d+")
RULE_FILES = ("context-reuse.md", "hf-tokenizer.md", "media-tokens.md")


def spec_rules() -> set[str]:
    return {rule for name in RULE_FILES
            for rule in re.findall(r"\*\*((?:CR|TOK)-[A-Z]+-\d+) \(", (ROOT / "spec" / name).read_text(encoding="utf-8"))}


def reference_docstrings() -> dict[str, set[str]]:
    """{module: rule ids cited in its module, class and function docstrings}."""
    out = {}
    for path in sorted((ROOT / "reference").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        ids = set()
        for node in [tree, *ast.walk(tree)]:
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
                ids |= set(RULE.findall(ast.get_docstring(node) or ""))
        out[path.name] = ids
    return out


def case_rules() -> dict[str, list[str]]:
    out = {}
    for path in sorted((ROOT / "cases").rglob("*.json")):
        if "media" in path.relative_to(ROOT / "cases").parts:
            continue
        doc = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and "_conformance" in doc:
            out[str(path.relative_to(ROOT))] = list(doc["_conformance"].get("rules", []))
    return out


def test_spec_defines_rules():
    rules = spec_rules()
    assert len(rules) >= 70 and "CR-PLAN-2" in rules, f"parsed only {sorted(rules)} from spec/context-reuse.md"


def test_every_rule_is_cited_by_the_reference():
    cited = set().union(*reference_docstrings().values())
    missing = sorted(spec_rules() - cited)
    assert not missing, f"rules no reference/ docstring cites: {missing}"


def test_reference_cites_only_known_rules():
    known = spec_rules()
    unknown = {m: sorted(ids - known) for m, ids in reference_docstrings().items() if ids - known}
    assert not unknown, f"reference/ docstrings cite ids the spec does not define: {unknown}"


def test_every_rule_is_covered_by_a_case():
    covered = {r for rules in case_rules().values() for r in rules}
    missing = sorted(spec_rules() - covered)
    assert not missing, f"rules no case under cases/ cites: {missing}"


def test_cases_cite_only_known_rules():
    known = spec_rules()
    unknown = {case: sorted(set(rules) - known) for case, rules in case_rules().items() if set(rules) - known}
    assert not unknown, f"cases citing rule ids the spec does not define: {unknown}"


# the hf tokenizer profile (spec/hf-tokenizer.md TOK-HF-1) and JPEG pixels (spec/tokenizer.md section 3)
THIRD_PARTY = {"hf_tokenizer.py": {"tokenizers", "jinja2"}, "jpeg.py": {"PIL"}}


def test_reference_imports_only_the_standard_library():
    allowed = set(sys.stdlib_module_names)
    offenders = {}
    for path in sorted((ROOT / "reference").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = {node.module.split(".")[0]}
            else:
                continue
            bad = names - allowed - THIRD_PARTY.get(path.name, set())
            if bad:
                offenders.setdefault(path.name, set()).update(bad)
    assert not offenders, f"reference/ imports outside the standard library: {offenders}"
