"""The runner of a case and the generated examples depend one way: both build on
conformance/judge/judging.py, and conformance/run/execute.py (which replays a written trace batch by
batch through conformance/generate/example.py) is imported by neither.

The graph is read from the import statements of every module of conformance/, those inside
functions included, so a lazy import cannot hide a circle.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "conformance"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """{module: the modules of conformance/ it imports}."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - max(node.level - 1, 0)] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                candidates = [module] + [f"{module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                continue
            for c in candidates:
                while c and c not in modules:
                    c = c.rsplit(".", 1)[0] if "." in c else ""
                if c and c != name:
                    targets.add(c)
        graph[name] = targets
    return graph


def reachable(graph: dict, start: str) -> set:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_module_that_execute_imports_imports_execute_back():
    graph = import_graph()
    back = sorted(m for m in reachable(graph, "conformance.run.execute") if "conformance.run.execute" in reachable(graph, m))
    assert not back, f"conformance.run.execute is in an import circle with {back}"


def test_the_generated_example_judges_through_the_shared_module():
    graph = import_graph()
    assert "conformance.judge.judging" in graph["conformance.generate.example"]
    assert "conformance.run.execute" not in reachable(graph, "conformance.generate.example")
    assert "conformance.run.execute" not in reachable(graph, "conformance.judge.judging")
