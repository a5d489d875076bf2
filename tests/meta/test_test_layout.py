"""tests/ is a package: every test imports its helpers by a qualified name (`tests.helpers.cases`),
no test edits sys.path, and the conformance cases live apart in cases/."""
import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def python_files(root: Path = TESTS) -> list[Path]:
    return sorted(root.rglob("*.py"))


def layout_problems(root: Path = TESTS) -> list[str]:
    """What breaks the rule: a folder of Python files without __init__.py, a `sys.path` edit, or
    an import of a module of tests/ by its bare name (which works only with sys.path edited).
    A folder named like a package of the repository (tests/conformance) is that package's name."""
    files = python_files(root)
    packages = {p.stem for p in root.parent.iterdir() if p != root}
    folders = {p.parent.name for p in files if p.parent != root}
    bare = ({p.stem for p in files if p.stem != "__init__"} | folders) - packages
    problems = [f"{folder.relative_to(root.parent)}/ has no __init__.py"
                for folder in sorted({p.parent for p in files}) if not (folder / "__init__.py").exists()]
    for path in files:
        where, found = path.relative_to(root.parent), []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
                found.append((node.lineno, "uses sys.path"))
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                     else [])
            found += [(node.lineno, f"imports {n} by its bare name (use tests.…)")
                      for n in names if n.split(".")[0] in bare]
        problems += [f"{where}:{line} {what}" for line, what in sorted(found)]
    return problems


def test_the_tests_import_their_helpers_by_qualified_names_and_never_edit_sys_path():
    assert not layout_problems()
    assert (TESTS / "helpers" / "cases.py").is_file() and not (TESTS / "test_cases").resolve().is_relative_to(TESTS)


def test_the_layout_check_sees_each_kind_of_problem(tmp_path):
    root = tmp_path / "tests"
    (root / "helpers").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "helpers" / "harness.py").write_text("X = 1\n")
    (root / "test_a.py").write_text("import sys\nsys.path.insert(0, 'helpers')\nimport harness\n"
                                    "from helpers.harness import X\nfrom tests.helpers.harness import X\n")
    assert layout_problems(root) == ["tests/helpers/ has no __init__.py",
                                     "tests/test_a.py:2 uses sys.path",
                                     "tests/test_a.py:3 imports harness by its bare name (use tests.…)",
                                     "tests/test_a.py:4 imports helpers.harness by its bare name (use tests.…)"]
