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
    conformance/peers/    imported only by conformance/commands/ (a second runner on the
                          runner's verdicts and report, not a part the runner depends on)
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


def imported_modules(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """{module file: absolute names of the modules it imports} for every .py file of `package`.
    `from . import x` counts as importing both the package and `package.x`."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        here = module_name(path, root).split(".")
        package_parts = here if path.name == "__init__.py" else here[:-1]
        names = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
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


RUNTIMES = {"vllm", "sglang", "tensorrt_llm"}
RUN_BY_A_RUNTIME = ("tools/crosscheck/drive_", "tools/vllm_cpu_launcher.py")
"""Scripts that a runtime's own venv runs (the cross-check's drivers, tools/real-vllm.sh's launcher)."""


def test_the_crosscheck_drivers_import_only_their_runtime():
    """tools/crosscheck/drive_<runtime>.py run in the runtime's own venv (docs/crosscheck.md):
    the runtime, torch and the standard library, never the kit."""
    modules = imported_top_levels("tools/crosscheck")
    for runtime in ("vllm", "sglang"):
        names = modules[f"tools/crosscheck/drive_{runtime}.py"]
        assert runtime in names and names <= STDLIB | {runtime, "torch"}, (runtime, sorted(names - STDLIB))


def test_the_kit_never_imports_a_runtime():
    """A runtime is installed into .kvconform-cache/ and run as its own process, never imported:
    only the scripts its own interpreter runs do."""
    for package in ("conformance", "reference", "gpu_backend", "numerical_reference", "faulty_backends",
                    "benchmarks", "tools"):
        offenders = {f: sorted(n & RUNTIMES) for f, n in imported_top_levels(package).items()
                     if n & RUNTIMES and not f.startswith(RUN_BY_A_RUNTIME)}
        assert not offenders, f"{package}/ imports a runtime: {offenders}"


def test_the_crosscheck_reaches_the_oracle_only_through_conformance_oracle():
    found = {f: sorted(n for n in names if n == "reference" or n.startswith("reference."))
             for f, names in imported_modules("conformance/crosscheck").items()}
    assert found and not any(found.values()), found
    assert any("conformance.oracle" in names for names in imported_modules("conformance/crosscheck").values())
