"""Judging one mutant, in the child process the host forked for it (host.py).

The mutated module is served by an import hook at the front of `sys.meta_path`, with the original
file's name, so everything else (data files found next to the code, the engine cache's key) is
what the unmutated kit sees. The one module that runs as a script in its own process, the
template worker, is written to a file and the template process is pointed at it.

Each judge returns {"status": "killed" | "survived", and for a kill: "verdict", "profile",
"case_id", "rule", "failure"}. What catches a mutant is what catches a runtime: a run that is not
CONFORMANT (some case FAIL, ERROR or TIMEOUT), or, for the kit's own code, a failing test.
"""
from __future__ import annotations

import builtins
import importlib.abc
import importlib.util
import json
import sys
from pathlib import Path

SCRIPTS = {"gpu_backend/template_worker.py": ("gpu_backend.chat_template", "_WORKER_SCRIPT")}
"""Modules that run as scripts in a process of their own: (the module that names the script, the name)."""
LOADED: dict = {}
"""The server's engines (engine kind -> PeerEngine) the judging host loaded before forking
(host.preload): every child serves the same unmutated model, read from disk once per host."""
KIT_PACKAGES = ("conformance", "reference", "gpu_backend", "numerical_reference", "faulty_backends", "tests")


class CosmicRayTestingException(Exception):
    """What Cosmic Ray's ExceptionReplacer writes into an `except` clause: nothing raises it."""


def module_name(relpath: str) -> tuple[str, bool]:
    """gpu_backend/peer_cache/__init__.py -> ("gpu_backend.peer_cache", True)."""
    parts = relpath[:-3].split("/")
    package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if package else parts), package


class MutantFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves `source` for the module `name`, under the original file's name."""

    def __init__(self, name: str, origin: str, source: str, package: bool):
        self.name, self.origin, self.source, self.package = name, origin, source, package

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        spec = importlib.util.spec_from_loader(fullname, self, origin=self.origin, is_package=self.package)
        spec.has_location = True
        if self.package:
            spec.submodule_search_locations = [str(Path(self.origin).parent)]
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__file__ = self.origin
        exec(compile(self.source, self.origin, "exec"), module.__dict__)


def install(root: Path, relpath: str, source: str, workdir: Path, purge: tuple[str, ...] = ()) -> None:
    """Make `source` the text of the module at `relpath` for every import from now on."""
    builtins.CosmicRayTestingException = CosmicRayTestingException
    for name in [n for n in sys.modules if n.split(".")[0] in purge]:
        if not name.startswith("conformance.mutation"):
            del sys.modules[name]
    if relpath in SCRIPTS:
        script = workdir / Path(relpath).name
        script.write_text(source, encoding="utf-8")
        owner, attribute = SCRIPTS[relpath]
        setattr(importlib.import_module(owner), attribute, str(script))
        return
    name, package = module_name(relpath)
    if name in sys.modules:
        raise RuntimeError(f"{name} was imported before its mutant was installed")
    sys.meta_path.insert(0, MutantFinder(name, str(root / relpath), source, package))


# --- reading a run's report ------------------------------------------------------------------------

def outcome_of(report: Path, rc: int, profile: str, log: Path) -> dict:
    """A `kvconform run`'s verdict on the mutant, from its report folder and exit code."""
    path = report / "report.json"
    if not path.exists():
        tail = log.read_text(errors="replace")[-400:].strip() if log.exists() else ""
        return {"status": "killed", "verdict": "ERROR", "profile": profile, "case_id": None, "rule": None,
                "failure": f"kvconform run ended with exit code {rc} before judging any case: {tail.splitlines()[-1:]}"}
    doc = json.loads(path.read_text())
    if doc["summary"].get("conformant") and rc == 0:
        return {"status": "survived"}
    bad = next((c for c in doc["cases"] if c["verdict"] in ("FAIL", "ERROR", "TIMEOUT")), None)
    if bad is None:
        return {"status": "killed", "verdict": doc["summary"].get("headline"), "profile": profile, "case_id": None,
                "rule": None, "failure": f"headline {doc['summary'].get('headline')} (exit {rc})"}
    first = (bad.get("failures") or [{}])[0]
    return {"status": "killed", "verdict": bad["verdict"], "profile": profile, "case_id": bad["id"],
            "rule": first.get("rule") or (bad.get("rules") or [None])[0],
            "failure": (f"{first.get('what')}: expected {first.get('expected')!r}, observed {first.get('observed')!r}"
                        if first else bad.get("reason") or "")[:400]}


def _kvconform(argv: list[str]) -> int:
    from conformance.cli import main
    try:
        return main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1


# --- the judges --------------------------------------------------------------------------------------

def judge_edge(selection: dict, settings: dict, workdir: Path, log: Path) -> dict:
    """`kvconform run --backend inprocess --fail-fast` over the selected cases, profile by profile.
    Where the campaign names the cases likeliest to kill (settings["first"]: those that killed most
    mutants of the module so far), they run first, as a run of their own, then the rest: the same
    cases, each with a runtime of its own, so the verdict is the one run's over all of them; a
    mutant they kill costs their time, not the whole selection's."""
    first = settings.get("first") or {}
    for profile, cases in selection.items():
        likely = [c for c in first.get(profile, []) if c in cases]
        for k, part in enumerate((likely, [c for c in cases if c not in likely]) if likely else (cases,)):
            if not part:
                continue
            report = workdir / f"report-{profile}-{k}"
            argv = ["run", "--backend", "inprocess", "--device", "cpu", "--profile", profile, "--no-generated",
                    "--fail-fast", "--no-progress", "--force", "--timeout", str(settings.get("timeout", 60)),
                    "--report", str(report)]
            for case in part:
                argv += ["--case", case]
            got = outcome_of(report, _kvconform(argv), profile, log)
            if got["status"] == "killed":
                return got
    return {"status": "survived"}


def judge_peer(selection: dict, settings: dict, workdir: Path, log: Path) -> dict:
    """The mutated server in a thread, `kvconform run --backend openai --fail-fast`, deployment by
    deployment (targets.PEER_DEPLOYMENTS: the profile, its settings and model folder)."""
    from conformance.adapters.bundled_server import serving
    from .targets import PEER_DEPLOYMENTS, peer_setting_args
    for k, (name, cases) in enumerate(selection.items()):
        if not cases:
            continue
        d = PEER_DEPLOYMENTS[name]
        engine = settings["engines"][d["engine"]]
        report = workdir / f"report-{k}"
        try:
            with serving(d["profile"], engine["engine"], d["settings"], engine=LOADED.get(d["engine"])) as url:
                argv = ["run", "--backend", "openai", "--base-url", url, "--profile", d["profile"], "--fail-fast",
                        "--tokenizer", engine["tokenizer"], "--report", str(report), "--force", "--no-progress",
                        "--timeout", str(settings.get("timeout", 60)), *peer_setting_args(d["settings"])]
                rc = _kvconform(argv)
        except Exception as e:          # the mutated server does not start: what its user would see
            return {"status": "killed", "verdict": "ERROR", "profile": name, "case_id": None, "rule": None,
                    "failure": f"the server does not start: {type(e).__name__}: {e}"[:400]}
        got = outcome_of(report, rc, name, log)
        if got["status"] == "killed":
            return got
    return {"status": "survived"}


def judge_kit(selection: dict, settings: dict, workdir: Path, log: Path) -> dict:
    """The kit's own tests that guard the module (pytest, in process, stopping at the first failure)."""
    import pytest

    class FirstFailure:
        nodeid = None
        message = ""

        def pytest_runtest_logreport(self, report):
            if report.failed and self.nodeid is None:
                self.nodeid = report.nodeid
                self.message = str(report.longrepr)[-400:]

    seen = FirstFailure()
    tests = selection.get("tests") or []
    rc = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0", "-o", "addopts=",
                      "-m", "not slow and not ray and not external and not gpu", "--timeout",
                      str(settings.get("timeout", 300)), "--rootdir", settings["root"], *tests], plugins=[seen])
    if rc == 0:
        return {"status": "survived"}
    return {"status": "killed", "verdict": "FAIL" if seen.nodeid else f"pytest exit {int(rc)}", "profile": None,
            "case_id": seen.nodeid, "rule": None, "failure": seen.message or f"pytest exit {int(rc)}"}


JUDGES = {"edge": judge_edge, "peer": judge_peer, "kit": judge_kit}
