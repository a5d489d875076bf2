"""The one-way dependencies of docs/ARCHITECTURE.md section 2.

Differential testing is worthless if the backend and the oracle share code, and the oracle
must run anywhere Python runs. Each top-level room has one rule, checked here by reading the
import statements of every module (so imports inside functions count too; relative imports are
resolved to the module they name):

    reference/            the standard library only (two named modules: tokenizers/jinja2, Pillow)
    gpu_backend/          never reference/, conformance/ or the rooms built on them
    numerical_reference/  numpy, safetensors, threadpoolctl, Pillow, the standard library and
                          reference/ only: never gpu_backend/, torch or conformance/
    faulty_backends/      gpu_backend/, torch, numpy and the standard library only: never
                          reference/ (a faulty backend is a mutated bundled backend, independent
                          of the oracle) and never conformance/
    conformance/          reaches the bundled backend only through its adapters
                          (conformance/adapters/), as it reaches any backend
    conformance/peers/    imported only by conformance/commands/ (a runner for servers on the
                          runner's verdicts, report and run loop, not a part the runner depends on)

Within conformance/, each room (subpackage) imports only what its row of the rooms table of
docs/ARCHITECTURE.md names; only judge/ imports reference/; nothing outside commands/ imports a
command; nothing but the package's entry points sits directly in conformance/. And no module of
the kit is in an import circle.
"""
import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_nodes(tree: ast.AST):
    """Every node of `tree` but those under `if TYPE_CHECKING:` (an import for annotations only
    runs no code, so it is no dependency)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and getattr(child.test, "id", getattr(child.test, "attr", None)) == "TYPE_CHECKING":
                todo.extend(child.orelse)
                continue
            todo.append(child)


def imported_modules(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """{module file: absolute names of the modules it imports} for every .py file of `package`.
    `from . import x` counts as importing both the package and `package.x`."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        here = module_name(path, root).split(".")
        package_parts = here if path.name == "__init__.py" else here[:-1]
        names = set()
        for node in runtime_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package_parts[:len(package_parts) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                names.add(target)
                names.update(f"{target}.{alias.name}" for alias in node.names)
        out[str(path.relative_to(root))] = names
    return out


def imported_top_levels(package: str) -> dict[str, set[str]]:
    """{module file: top-level names it imports} for every .py file of `package`."""
    return {f: {n.split(".")[0] for n in names} for f, names in imported_modules(package).items()}


def outside(allowed: set[str], package: str, exceptions: dict | None = None) -> dict:
    """{file: imported top-level names outside `allowed`} of the files of `package`."""
    exceptions = exceptions or {}
    found = {f: sorted(n - allowed - exceptions.get(f, set())) for f, n in imported_top_levels(package).items()}
    return {f: names for f, names in found.items() if names}


@pytest.mark.parametrize("package, forbidden", [
    ("gpu_backend", {"reference", "conformance", "numerical_reference", "faulty_backends"}),
    ("reference", {"gpu_backend", "conformance", "numerical_reference", "faulty_backends", "torch", "numpy"}),
    # the numerical reference is written from the spec, apart from the backend it judges
    ("numerical_reference", {"gpu_backend", "torch", "conformance", "faulty_backends"}),
    ("faulty_backends", {"reference", "conformance", "numerical_reference"}),
])
def test_package_does_not_import(package, forbidden):
    modules = imported_top_levels(package)
    assert modules, f"{package}/ has no modules"
    offenders = {f: sorted(names & forbidden) for f, names in modules.items() if names & forbidden}
    assert not offenders, f"{package}/ must not import {sorted(forbidden)}: {offenders}"


# The `hf` tokenizer profile is the one module of reference/ allowed third-party code (spec/hf-tokenizer.md TOK-HF-1).
# JPEG pixels are decoded by Pillow (reference/jpeg.py, spec/tokenizer.md section 3).
THIRD_PARTY = {"reference/hf_tokenizer.py": {"tokenizers", "jinja2"}, "reference/jpeg.py": {"PIL"}}


def test_reference_is_stdlib_only():
    offenders = outside(STDLIB | {"reference"}, "reference", THIRD_PARTY)
    assert not offenders, f"reference/ imports outside the standard library: {offenders}"


def test_the_numerical_reference_uses_only_numpy_its_file_readers_and_the_oracle():
    """Its images are decoded by Pillow (numerical_reference/media.py), checked against the oracle's
    identity digest, with the oracle's own decoder as the fallback."""
    offenders = outside(STDLIB | {"numerical_reference", "reference", "numpy", "safetensors", "threadpoolctl"},
                        "numerical_reference", {"numerical_reference/media.py": {"PIL"}})
    assert not offenders, f"numerical_reference/ imports beyond its rule: {offenders}"


def test_the_faulty_backends_derive_only_from_the_bundled_backend():
    offenders = outside(STDLIB | {"faulty_backends", "gpu_backend", "torch", "numpy"}, "faulty_backends")
    assert not offenders, f"faulty_backends/ imports beyond its rule: {offenders}"


def test_the_runner_reaches_the_bundled_backend_only_through_its_adapters():
    """An external runtime plugs in exactly like the bundled one: nothing of the runner but an
    adapter knows it is Python."""
    found = importers_of("gpu_backend", ["conformance"])
    offenders = sorted(f for f in found if not f.startswith("conformance/adapters/"))
    assert not offenders, f"only conformance/adapters/ may import gpu_backend: {offenders}"
    assert found, "the inprocess adapter no longer imports the bundled backend"


PEERS = "conformance.peers"


def importers_of(target: str, packages: list[str], root: Path = ROOT) -> set[str]:
    """The files of `packages` that import `target` or a module inside it."""
    return {f for package in packages for f, names in imported_modules(package, root).items()
            if any(n == target or n.startswith(target + ".") for n in names)}


def test_only_the_commands_import_the_peer_suite():
    """The peer suite shares the runner's verdicts, report and openai adapter, so it lives in
    conformance/; nothing of the runner depends on it but the command that starts it."""
    found = importers_of(PEERS, ["conformance", "tools", "benchmarks", "gpu_backend", "reference",
                                 "numerical_reference", "faulty_backends"])
    offenders = sorted(f for f in found if not f.startswith(("conformance/peers/", "conformance/commands/")))
    assert not offenders, f"only conformance/commands/ may import {PEERS}: {offenders}"
    assert any(f.startswith("conformance/commands/") for f in found), "the peer suite lost its command"


def test_only_the_judge_imports_the_oracle():
    """conformance/judge/ is the one way into reference/ (judge/oracle.py, judge/peer_oracle.py):
    what the runner expects of a backend has one source, and a change of the oracle's API
    touches one room."""
    found = importers_of("reference", ["conformance"])
    offenders = sorted(f for f in found if not f.startswith("conformance/judge/"))
    assert not offenders, f"only conformance/judge/ may import reference: {offenders}"
    assert "conformance/judge/oracle.py" in found, "the oracle facade no longer imports the oracle"


PRODUCT = ["conformance", "reference", "gpu_backend", "numerical_reference", "faulty_backends", "tools"]


def test_nothing_imports_the_commands():
    """A command is a thin face over the rooms (options in, printing out): `kvconform` starts it
    by name (conformance/cli.py), and nothing of the kit outside conformance/commands/ imports one
    (the benchmarks may: they time the commands). What two commands share lives in a room."""
    found = importers_of("conformance.commands", PRODUCT)
    offenders = sorted(f for f in found if not f.startswith("conformance/commands/"))
    assert not offenders, f"nothing outside conformance/commands/ may import a command: {offenders}"


def test_relative_imports_are_resolved(tmp_path):
    """The rules above see a relative import for the module it names, at any depth."""
    (tmp_path / "conformance" / "report").mkdir(parents=True)
    (tmp_path / "conformance" / "__init__.py").write_text("")
    (tmp_path / "conformance" / "report" / "__init__.py").write_text("from . import page\n")
    (tmp_path / "conformance" / "report" / "page.py").write_text("def f():\n    from ..peers.judge import x\n")
    found = imported_modules("conformance", tmp_path)
    assert "conformance.peers.judge" in found["conformance/report/page.py"]
    assert "conformance.report.page" in found["conformance/report/__init__.py"]
    assert importers_of(PEERS, ["conformance"], tmp_path) == {"conformance/report/page.py"}


# --- no import circle ---------------------------------------------------------------------------

PACKAGES = ["conformance", "reference", "gpu_backend", "numerical_reference", "faulty_backends", "tools",
            "benchmarks"]


def import_graph(packages: list[str], root: Path = ROOT) -> dict[str, set[str]]:
    """{module: the modules of `packages` it imports}. `from p import x` is an arrow to the module
    p.x when there is one, else to p (the name is p's); imports under `if TYPE_CHECKING:` are no
    arrows (they run no code)."""
    paths = {module_name(p, root): p for package in packages for p in sorted((root / package).rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in runtime_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - (node.level - 1)] + ([node.module] if node.module else [])) \
                    if node.level else node.module or ""
                candidates = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names]
            else:
                continue
            for c in candidates:
                while c and c not in paths:             # `import a.b.c` of a function-free name: its module
                    c = c.rpartition(".")[0]
                if c and c != name:
                    targets.add(c)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_import_circle_anywhere():
    """A circle of imports means no part of it can be understood, tested or moved alone. Checked
    between modules, so a circle inside one package counts as much as one between packages."""
    found = circles(import_graph(PACKAGES))
    assert not found, "import circles (each a set of modules that import each other): " + "; ".join(
        " <-> ".join(c) for c in found)


def test_a_circle_is_found(tmp_path):
    """The circle finder sees a circle through a lazy import and a `from package import module`."""
    (tmp_path / "conformance" / "report").mkdir(parents=True)
    (tmp_path / "conformance" / "__init__.py").write_text("")
    (tmp_path / "conformance" / "report" / "__init__.py").write_text("")
    (tmp_path / "conformance" / "report" / "page.py").write_text("from . import table\n")
    (tmp_path / "conformance" / "report" / "table.py").write_text("def f():\n    from .page import x\n")
    (tmp_path / "conformance" / "report" / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .page import x\n")
    graph = import_graph(["conformance"], tmp_path)
    assert circles(graph) == [["conformance.report.page", "conformance.report.table"]]
    assert graph["conformance.report.typed"] == set()


# --- the rooms of conformance/ --------------------------------------------------------------------

ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
ENTRY_POINTS = {"__init__.py", "cli.py", "numerics.py", "faulty_backends.py"}
"""The only modules directly in conformance/: the package (its versions and its error type), the
`kvconform` command, and two one-release aliases of `python -m` names (numerics.py,
faulty_backends.py) that manifests and wrapper scripts still name."""
GUARDED = {"reference", "gpu_backend", "faulty_backends", "numerical_reference"}
"""The kit's other top-level packages: a room's rule names each one it may import."""


def room_rules() -> dict[str, set[str]]:
    """{room: what it may import besides itself and the package}, read from the rooms table of
    docs/ARCHITECTURE.md (the rules are written there once): rows `| `room/` | ... | `a/`, `b` | ...`
    between the markers `<!-- rooms -->` and `<!-- /rooms -->`, the third column the allowed names."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert "<!-- rooms -->" in text and "<!-- /rooms -->" in text, f"{ARCHITECTURE}: the rooms table lost its markers"
    table = text.split("<!-- rooms -->", 1)[1].split("<!-- /rooms -->", 1)[0]
    rules = {}
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        room = cells[0].strip("`").rstrip("/")
        rules[room] = {name.strip("`/ ") for name in cells[2].split(",") if name.strip("`/ ") not in ("", "nothing")}
    return rules


def room_of(module: str) -> str | None:
    """conformance.judge.oracle -> judge; the package or a module directly in conformance/ -> None."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "conformance" or not (ROOT / "conformance" / parts[1]).is_dir():
        return None
    return parts[1]


def test_conformance_has_no_loose_modules():
    loose = sorted(p.name for p in (ROOT / "conformance").glob("*.py"))
    assert set(loose) <= ENTRY_POINTS, (f"modules directly in conformance/ that belong in a room "
                                        f"(docs/ARCHITECTURE.md section 2): {sorted(set(loose) - ENTRY_POINTS)}")


def test_every_room_has_one_rule():
    rooms, rules = set(ROOMS), room_rules()
    assert set(rules) == rooms, (f"docs/ARCHITECTURE.md's rooms table and conformance/ disagree: rooms without "
                                 f"a rule {sorted(rooms - set(rules))}, rules without a room {sorted(set(rules) - rooms)}")
    for room, allowed in rules.items():
        assert allowed <= rooms | GUARDED, f"the rule of {room}/ names what is no room: {sorted(allowed - rooms - GUARDED)}"


def imports_outside_rule(room: str, allowed: set[str]) -> dict[str, list[str]]:
    """{file of the room: the rooms and guarded packages it imports that its rule does not allow}."""
    out = {}
    for f, names in imported_modules(f"conformance/{room}").items():
        wrong = set()
        for n in names:
            target = room_of(n) if n.startswith("conformance.") else (n.split(".")[0] if n.split(".")[0] in GUARDED else None)
            if target and target != room and target not in allowed:
                wrong.add(target)
        if wrong:
            out[f] = sorted(wrong)
    return out


ROOMS = sorted(p.name for p in (ROOT / "conformance").iterdir() if (p / "__init__.py").exists())


@pytest.mark.parametrize("room", ROOMS)
def test_each_room_keeps_its_rule(room):
    """Each room of conformance/ imports only what its row of docs/ARCHITECTURE.md's rooms table
    names (the package itself, the standard library and third-party packages are free)."""
    assert room in room_rules(), f"conformance/{room}/ has no row in docs/ARCHITECTURE.md's rooms table"
    offenders = imports_outside_rule(room, room_rules()[room])
    assert not offenders, f"conformance/{room}/ may import only {sorted(room_rules()[room])}: {offenders}"


def test_the_room_rule_sees_a_wrong_import():
    """The check above is not vacuous: report/ importing run/ is caught, by a lazy import too."""
    assert "conformance/report/document.py" not in imports_outside_rule("report", room_rules()["report"])
    assert imports_outside_rule("report", set()), "report/ imports judge/ and cases/ and the check saw nothing"


RUNTIMES = {"vllm", "sglang", "tensorrt_llm"}
RUN_BY_A_RUNTIME = ("tools/crosscheck/drive_", "tools/vllm_cpu_launcher.py")
"""Scripts that a runtime's own venv runs (the cross-check's drivers, tools/real-vllm.sh's launcher)."""


def test_the_crosscheck_drivers_import_only_their_runtime():
    """tools/crosscheck/drive_<runtime>.py run in the runtime's own venv (docs/crosscheck.md):
    the runtime, torch, the standard library and their folder's driver_loop.py (itself standard
    library only), never the kit."""
    modules = imported_top_levels("tools/crosscheck")
    assert modules["tools/crosscheck/driver_loop.py"] <= STDLIB, sorted(modules["tools/crosscheck/driver_loop.py"])
    for runtime in ("vllm", "sglang"):
        names = modules[f"tools/crosscheck/drive_{runtime}.py"]
        assert runtime in names and names <= STDLIB | {runtime, "torch", "driver_loop"}, (runtime, sorted(names - STDLIB))


def test_the_kit_never_imports_a_runtime():
    """A runtime is installed into .kvconform-cache/ and run as its own process, never imported:
    only the scripts its own interpreter runs do."""
    for package in ("conformance", "reference", "gpu_backend", "numerical_reference", "faulty_backends",
                    "benchmarks", "tools"):
        offenders = {f: sorted(n & RUNTIMES) for f, n in imported_top_levels(package).items()
                     if n & RUNTIMES and not f.startswith(RUN_BY_A_RUNTIME)}
        assert not offenders, f"{package}/ imports a runtime: {offenders}"


def test_the_crosscheck_reaches_the_oracle_only_through_judge():
    """The rooms table's rule for crosscheck/ (docs/ARCHITECTURE.md) forbids `reference`; this
    checks it reaches the peer oracle at all, through judge/peer_oracle.py."""
    found = imported_modules("conformance/crosscheck")
    assert any("conformance.judge.peer_oracle" in names for names in found.values())
