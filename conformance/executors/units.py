"""The units of work a distributed run sends to its workers, and what comes back.

A unit is one curated case or one generated family at one seed. A worker runs it with the very
functions a local run uses (`suite.run_one_case`, `suite.run_one_family`), writing into a
folder of its own that stands in for the report folder; the files written there (reproducers,
their evidence, materialized cases) travel back with the result and are unpacked into the real
report folder, so a distributed run leaves the same files as a local one. Workers build their
own adapter from an `AdapterSpec` (adapters hold runtimes and processes, which do not travel),
once per worker process.

Nothing here imports Ray: the local worker pool runs the same units.
"""
from __future__ import annotations

import os
import shlex
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..cases.case import Case
from ..judge.verdicts import CaseResult, Verdict

PATH_OPTIONS = ("engine_dir", "engine_config", "capabilities")


@dataclass(frozen=True)
class AdapterSpec:
    """How to build the run's adapter on a worker: the adapter's name, the keyword arguments of
    `adapters.make_adapter`, and for the campaign a faulty variant of the bundled backend."""
    backend: str
    options: tuple = ()          # sorted (key, value) pairs: hashable, so workers can cache by it
    variant: str | None = None

    @classmethod
    def of(cls, backend: str, variant: str | None = None, **options) -> "AdapterSpec":
        """Paths made absolute here, on the driver: a worker's working directory is its own."""
        fixed = {}
        for key, value in options.items():
            if key in PATH_OPTIONS and value:
                value = os.path.abspath(value)
            elif key in ("executable", "build_command") and value:
                value = absolute_command(value)
            elif isinstance(value, list):
                value = tuple(value)
            fixed[key] = value
        return cls(backend, tuple(sorted(fixed.items())), variant)

    @property
    def name(self) -> str:
        return f"faulty:{self.variant}" if self.variant else self.backend

    @property
    def kwargs(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.options}

    def build(self):
        kwargs = self.kwargs
        if self.variant:
            from ..adapters.faulty import FaultyAdapter
            return FaultyAdapter(self.variant, device=kwargs.get("device") or "auto",
                                 timeout=kwargs.get("timeout", 120.0), engine_dir=kwargs.get("engine_dir"))
        from ..adapters import make_adapter
        return make_adapter(self.backend, **kwargs)

    def files(self) -> list[str]:
        """Files and folders every worker must see at the same path: the command adapter's
        executable (when named by a path), engine folder, description and manifest."""
        kwargs = self.kwargs
        out = [kwargs[k] for k in PATH_OPTIONS if kwargs.get(k)]
        for key in ("executable", "build_command"):
            if kwargs.get(key):
                out.append(shlex.split(kwargs[key])[0])
        return out


def absolute_command(command: str) -> str:
    """A command line whose program, when named by a relative path (`./llm_inference`), is made
    absolute; a bare name (`llm_inference`) is left to each node's PATH."""
    argv = shlex.split(command)
    if argv and os.sep in argv[0] and not os.path.isabs(argv[0]):
        argv[0] = os.path.abspath(argv[0])
    return shlex.join(argv)


_ADAPTERS: dict = {}


def adapter_for(spec: AdapterSpec):
    """This worker process's adapter for `spec`, built on first use and kept (engines built once
    per worker, runtimes started as the cases need them)."""
    if spec not in _ADAPTERS:
        if spec.backend == "inprocess":
            _one_torch_thread()
        _ADAPTERS[spec] = spec.build()
    return _ADAPTERS[spec]


def _one_torch_thread() -> None:
    """The kit's engines are tiny: one torch thread per worker is fastest, and workers must not
    oversubscribe the cores they share (the reason is measured in commands/run.py)."""
    if not os.environ.get("OMP_NUM_THREADS"):
        import torch
        torch.set_num_threads(1)


@dataclass
class CaseUnit:
    case: Case

    @property
    def key(self) -> str:
        return self.case.id

    def shell(self) -> CaseResult:
        """An empty result for this unit (for a unit that never came back)."""
        c = self.case
        return CaseResult(c.id, c.rules, c.mandatory, c.source(), c.section)


@dataclass
class FamilyUnit:
    family: str
    budget_s: float
    seed: int
    key: str = ""
    shrink: bool = True

    def __post_init__(self):
        self.key = self.key or f"generated/{self.family}"

    def shell(self) -> CaseResult:
        from ..generate import RULES
        return CaseResult(f"generated/{self.family}", RULES[self.family], True, "conformance/generate", None)


@dataclass
class Outcome:
    """A finished unit as it travels back: the result as report.json records it, the files
    written under the worker's stand-in report folder (relative path -> bytes), where it ran
    and for how long."""
    result: dict
    files: dict = field(default_factory=dict)
    worker: str = ""
    seconds: float = 0.0
    examples: int = 0


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_unit(spec: AdapterSpec, manifest: dict | None, manifest_error: str, plan, unit) -> Outcome:
    """Run one unit on this worker; `plan` carries the generation settings (its case and family
    lists are not needed here)."""
    from ..run.suite import run_one_case, run_one_family
    started = time.monotonic()
    adapter = adapter_for(spec)
    folder = Path(tempfile.mkdtemp(prefix="kvconform-unit-"))
    try:
        if isinstance(unit, CaseUnit):
            result = run_one_case(unit.case, adapter, manifest, manifest_error, folder)
        else:
            workdir = folder / ".work"
            workdir.mkdir()
            result = run_one_family(unit.family, plan, unit.budget_s, adapter, manifest, manifest_error, folder,
                                    workdir, seed=unit.seed, shrink=unit.shrink)
            shutil.rmtree(workdir, ignore_errors=True)
        files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return Outcome(result.to_json(), files, worker_name(), time.monotonic() - started,
                   int(result.details.get("examples", 0)) if isinstance(unit, FamilyUnit) else 0)


def unpack(outcome: Outcome, folder: Path) -> CaseResult:
    """The unit's result, its files written into the report folder `folder`."""
    root = Path(folder).resolve()
    for rel, data in outcome.files.items():
        target = (root / rel).resolve()
        if root not in target.parents:       # only paths under the report folder come back
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return CaseResult.from_json(outcome.result)


def failed_unit(unit, reason: str, attempts: int) -> CaseResult:
    """A unit whose task never returned a result (its worker died on every attempt, or the task
    itself raised): ERROR with the reason, never a verdict on the backend."""
    result = unit.shell().settle(Verdict.ERROR, reason)
    result.details["attempts"] = attempts
    return result


def kit_fingerprint() -> dict:
    """What must be equal on every worker for a distributed run to judge as a local one does:
    the kit's version and a digest of the sources of the kit, the oracle, the bundled backend, the
    numerical reference and the faulty backends (each decides verdicts)."""
    import importlib.util

    from .. import KIT_VERSION
    from ..adapters.engines import source_digest
    out = {"kit_version": KIT_VERSION}
    for package in ("conformance", "reference", "gpu_backend", "numerical_reference", "faulty_backends"):
        spec = importlib.util.find_spec(package)
        locations = list(spec.submodule_search_locations or []) if spec else []
        out[package] = source_digest(Path(locations[0])) if locations else None
    return out


def plan_files(cases: list[Case]) -> list[str]:
    """The files the plan's cases read, as absolute paths: each case file, its media and the
    tokenizer folder its engine names (those that exist here: a case may name a missing file on
    purpose)."""
    out = []
    for case in cases:
        out.append(str(case.path.resolve()))
        tokenizer = case.engine_args.get("tokenizer")
        if isinstance(tokenizer, str):
            out.append(os.path.abspath(tokenizer))
        for request in case.doc.get("requests") or []:
            for message in request.get("messages") or [] if isinstance(request, dict) else []:
                content = message.get("content") if isinstance(message, dict) else None
                for item in content if isinstance(content, list) else []:
                    kind = item.get("type") if isinstance(item, dict) else None
                    if kind in ("image", "audio") and isinstance(item.get(kind), str):
                        out.append(os.path.abspath(os.path.join(case.base_dir, item[kind])))
    return sorted(p for p in set(out) if os.path.exists(p))
