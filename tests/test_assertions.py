"""A test that asserts nothing cannot fail: every test function in tests/ must contain an
assertion (`assert`, `raise`, `pytest.raises`/`pytest.fail`/`pytest.warns`) or call a helper
defined in tests/ that does, directly or through other helpers.

A call counts when it names a function of the same module, or one the module imports from a
helper module of tests/ (`from tests.helpers.backend import run`); a test that only calls the code
under test and hopes it raises is caught.
"""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CHECKING_CALLS = {"raises", "fail", "warns", "deprecated_call"}


Key = tuple  # (module path, function name)


def _modules() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8"), str(path)) for path in sorted(TESTS.rglob("*.py"))}


def _helper_file(module: str | None, level: int, here: Path) -> Path | None:
    """The file in tests/ an import names (`tests.helpers.cases`, `.harness`)."""
    if not module:
        return None
    parts = module.split(".")
    if parts[0] == "tests":
        parts = parts[1:]
    for base in ([here.parent] if level else [here.parent, TESTS]):
        candidate = base.joinpath(*parts).with_suffix(".py")
        if candidate.exists():
            return candidate
    return None


def _scope(path: Path, tree: ast.Module) -> dict[str, Key]:
    """Names a module can call that are functions of tests/: its own, and those it imports."""
    names = {n.name: (path, n.name) for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _helper_file(node.module, node.level, path)
            if source is not None:
                names.update({a.asname or a.name: (source, a.name) for a in node.names})
    return names


def _called_name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _checks_itself(fn: ast.AST) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, (ast.Assert, ast.Raise)):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "pytest" \
                and node.func.attr in CHECKING_CALLS:
            return True
    return False


def _asserting(modules: dict[Path, ast.Module]) -> tuple[set[Key], dict[Key, ast.AST]]:
    """The functions of tests/ that assert, directly or through other such functions."""
    defs: dict[Key, list[ast.AST]] = {}
    calls: dict[Key, set[Key]] = {}
    for path, tree in modules.items():
        scope = _scope(path, tree)
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = (path, fn.name)
                defs.setdefault(key, []).append(fn)
                calls.setdefault(key, set()).update(
                    scope[name] for c in ast.walk(fn) if isinstance(c, ast.Call)
                    if (name := _called_name(c)) in scope)
    asserting = {key for key, fns in defs.items() if any(_checks_itself(fn) for fn in fns)}
    changed = True
    while changed:
        changed = False
        for key, called in calls.items():
            if key not in asserting and called & asserting:
                asserting.add(key)
                changed = True
    return asserting, defs


def test_every_test_function_can_fail():
    asserting, defs = _asserting(_modules())
    silent = [f"{path.relative_to(TESTS)}:{fns[0].lineno} {name}"
              for (path, name), fns in defs.items() if name.startswith("test_") and (path, name) not in asserting]
    assert not silent, "test functions that assert nothing (and call no helper that does):\n" + "\n".join(silent)


def test_the_check_itself_catches_a_silent_test(tmp_path):
    (tmp_path / "helpers.py").write_text("def helper(x):\n    assert x\n\ndef quiet(x):\n    return x\n")
    test = tmp_path / "test_x.py"
    test.write_text("from helpers import helper, quiet\n\n"
                    "def test_ok():\n    helper(1)\n\n"
                    "def test_silent():\n    quiet(1)\n    len([1])\n")
    global TESTS
    saved, TESTS = TESTS, tmp_path
    try:
        asserting, _ = _asserting({p: ast.parse(p.read_text()) for p in (tmp_path / "helpers.py", test)})
    finally:
        TESTS = saved
    assert (test, "test_ok") in asserting and (test, "test_silent") not in asserting
