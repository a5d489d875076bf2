"""The `command` adapter: any `llm_inference`-compatible executable (spec/RUNNING.md section 2).

Each request file is one process: the adapter writes the file, runs the executable with the
documented flags under a timeout, and reads back the output and profile files. Anything that
is not a well-formed result (a signal, a timeout, a missing or malformed file) becomes a crash
or timeout result carrying the tail of stderr, and the run goes on.

Engines come either from a build command (the bundled `python -m gpu_backend build`, or any
tool taking the same flags) or from one fixed engine folder given by the user; with a fixed
engine, every case is materialized for it (conformance/materialize).
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import KvconformError
from ..cases.schemas import read_json, schema_errors
from .base import (Adapter, AdapterError, BuildRefused, Engine, RunResult, Session, backend_runtime,
                   check_manifest)
from .engines import build_cached, fixed_engine, source_digest

BUNDLED = [sys.executable, "-m", "gpu_backend"]
VALUE_FLAGS = ("contextCacheMaxRecords", "contextCacheRecurrentSnapshotPoolBytes",
               "contextCachePartialKVSnapshotPoolBytes", "warmup", "batchSize",
               "maxGenerateLength", "tpSize", "semanticsProfile")
SWITCH_FLAGS = ("enableContextReuse", "dumpProfile", "poisonFreshPages")


def build_flags(build_args: dict) -> list[str]:
    """`python -m gpu_backend build` flags for a case's build arguments (spec/engine.md)."""
    out = []
    for key, value in sorted(build_args.items()):
        if isinstance(value, bool):
            out += [f"--{key}"] if value else []
        elif isinstance(value, list):
            out += [f"--{key}", ",".join(value)] if value else []
        elif value is not None:
            out += [f"--{key}", str(value)]
    return out


def runtime_flags(runtime: dict, hidden_states_file: str) -> list[str]:
    """The infer flags a case's runtime block sets; flags it does not set are not passed."""
    out = []
    for key in SWITCH_FLAGS:
        if runtime.get(key):
            out.append(f"--{key}")
    for key in VALUE_FLAGS:
        if key in runtime:
            out += [f"--{key}", str(runtime[key])]
    if runtime.get("outputHiddenStates"):
        out += ["--outputHiddenStates", hidden_states_file]
    return out


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


TAIL_BYTES = 64 * 1024


def run_process(argv: list[str], timeout: float, cwd: str, env: dict | None = None,
                live: set | None = None) -> tuple[int | None, str]:
    """(exit code or None on timeout, stderr+stdout tail).

    The process runs in its own session; when it ends (or on timeout) its whole process group
    is killed, so a child it left behind (a server, a `sleep &`) neither outlives the case nor
    holds anything open. While it runs it is in `live`, so that a run interrupted on another
    thread can kill it (`kill_all`). Only the last TAIL_BYTES of its output are read back: a
    backend that floods stderr costs disk, not the kit's memory."""
    with open(os.path.join(cwd, "stderr.txt"), "w+b") as err:
        try:
            proc = subprocess.Popen(argv, cwd=cwd, stdout=err, stderr=subprocess.STDOUT, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:               # not found, not executable: the kit cannot run the case
            raise AdapterError(f"cannot start {argv[0]}: {e.strerror or e}") from None
        if live is not None:
            live.add(proc)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:                           # also on Ctrl-C: the backend must not outlive the kit
            _kill_group(proc)
            proc.wait()
            if live is not None:
                live.discard(proc)
        size = err.seek(0, os.SEEK_END)
        err.seek(max(0, size - TAIL_BYTES))
        return rc, tail(err.read().decode("utf-8", "replace"))


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class CommandSession(Session):
    """One runtime instance is one process: a session takes exactly one request file."""

    def __init__(self, adapter: "CommandAdapter", engine: Engine, runtime: dict):
        self.adapter, self.engine, self.used = adapter, engine, False
        self.runtime = backend_runtime(runtime, adapter.manifest)

    def run(self, request: dict, base_dir: str) -> RunResult:
        if self.used:
            raise AdapterError("a command session runs one request file (one process per runtime instance)")
        self.used = True
        work = tempfile.mkdtemp(prefix="run-", dir=self.adapter.workdir)
        files = {name: os.path.join(work, name) for name in
                 ("input.json", "output.json", "profile.json", "hidden_states.safetensors")}
        Path(files["input.json"]).write_text(json.dumps(request, indent=1))
        argv = (self.adapter.executable + ["--engineDir", self.engine.directory,
                                           "--inputFile", files["input.json"],
                                           "--outputFile", files["output.json"],
                                           "--profileOutputFile", files["profile.json"]]
                + runtime_flags(self.runtime, files["hidden_states.safetensors"]) + self.adapter.extra_args)
        rc, err = run_process(argv, self.adapter.timeout, work, self.adapter.child_env, self.adapter.live)
        result = self.read(rc, err, files["output.json"], files["profile.json"], argv)
        result.request = request
        result.files = {"request": files["input.json"], "output": files["output.json"],
                        "profile": files["profile.json"], "stderr": os.path.join(work, "stderr.txt"),
                        "command": " ".join(shlex.quote(a) for a in argv)}
        return result

    def read(self, rc, err, output_file, profile_file, argv) -> RunResult:
        command = " ".join(shlex.quote(a) for a in argv)
        if rc is None:
            return RunResult("timeout", message=f"no exit within {self.adapter.timeout:g} s: {command}",
                             stderr_tail=err)
        wrote = os.path.exists(output_file)
        if rc < 0:
            return RunResult("crash", message=f"killed by signal {-rc}", exit_code=rc, stderr_tail=err,
                             wrote_output=wrote)
        if rc == 2:
            return RunResult("input_error", message=(err.splitlines() or [""])[-1], exit_code=2,
                             stderr_tail=err, wrote_output=wrote)
        output, problem = _read_checked(output_file, "output") if wrote else (None, None)
        if problem:
            return RunResult("crash", message=problem, exit_code=rc, stderr_tail=err, wrote_output=True)
        responses = output["responses"] if output else None
        if rc != 0 and not responses:
            return RunResult("rejected", message=(err.splitlines() or [""])[-1], exit_code=rc,
                             stderr_tail=err, wrote_output=wrote)
        if not wrote:
            return RunResult("crash", message=f"exit {rc} but no output file was written",
                             exit_code=rc, stderr_tail=err)
        profile = None
        if os.path.exists(profile_file):
            profile, problem = _read_checked(profile_file, "profile")
            if problem:
                return RunResult("crash", message=problem, exit_code=rc, stderr_tail=err, wrote_output=True)
        return RunResult("ok", responses, profile, None, rc, stderr_tail=err, wrote_output=True)


def _split(command: str, flag: str) -> list[str]:
    """A command line as argv (shell quoting rules); bad quoting is bad input, not a traceback."""
    try:
        argv = shlex.split(command)
    except ValueError as e:
        raise KvconformError(f"{flag}: cannot split {command!r} into arguments: {e}") from None
    if not argv:
        raise KvconformError(f"{flag}: empty command")
    _startable(argv[0], flag)
    return argv


def _startable(program: str, flag: str) -> None:
    """A backend that cannot start is bad input (exit 2), decided before any case runs: the program
    of a command line must be an executable file (a path), or be found on PATH (a bare name)."""
    found = shutil.which(program) if os.sep not in program else (
        program if os.path.isfile(program) and os.access(program, os.X_OK) else None)
    if found is None:
        why = ("not found on PATH" if os.sep not in program else "no such file" if not os.path.exists(program)
               else "a folder" if os.path.isdir(program) else "not executable")
        raise KvconformError(f"{flag}: cannot start {program!r}: {why}")


def _read_checked(path: str, schema: str) -> tuple[dict | None, str | None]:
    try:
        doc = read_json(path)
    except KvconformError as e:
        return None, f"malformed {schema} file: {e}"
    errors = schema_errors(doc, schema)
    if errors:
        return None, f"malformed {schema} file: {errors[0][0]}: {errors[0][1]}"
    return doc, None


class CommandAdapter(Adapter):
    """Drives an executable; by default the bundled backend's CLI (`python -m gpu_backend`)."""
    name = "command"
    sessions = False

    def __init__(self, executable: str | None = None, engine_dir: str | None = None,
                 engine_config: str | None = None, build_command: str | None = None,
                 capabilities: str | None = None, timeout: float = 120.0,
                 extra_args: list[str] | None = None, workdir: str | None = None):
        bundled = executable is None
        self.executable = BUNDLED + ["infer"] if bundled else _split(executable, "--executable")
        self.build_command = (_split(build_command, "--build-command") if build_command
                              else BUNDLED + ["build"] if bundled and not engine_dir else None)
        self.timeout, self.extra_args = timeout, list(extra_args or [])
        # The kit's engines are tiny: one torch thread is fastest, and --jobs workers must not
        # oversubscribe the cores (benchmarks/README.md, item 4). External runtimes keep theirs.
        self.child_env = ({**os.environ, "OMP_NUM_THREADS": "1"}
                          if bundled and "OMP_NUM_THREADS" not in os.environ else None)
        self.live: set = set()              # backend processes running now, on any thread
        self.own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="kvconform-command-")
        os.makedirs(self.workdir, exist_ok=True)
        try:
            self._setup(bundled, engine_dir, engine_config, capabilities)
        except BaseException:      # an adapter that never started leaves no temporary folder
            self.close()
            raise

    def _setup(self, bundled: bool, engine_dir: str | None, engine_config: str | None,
               capabilities: str | None) -> None:
        self.fixed = fixed_engine(engine_dir, engine_config, bundled=bundled) if engine_dir else None
        if not self.fixed and not self.build_command:
            raise KvconformError("the command adapter needs --engine-dir or --build-command")
        self.manifest = self._manifest(capabilities, bundled)

    def _manifest(self, source: str | None, bundled: bool) -> dict:
        if source:
            return check_manifest(read_json(source), source)
        if bundled:
            rc, out = self._capture(BUNDLED + ["capabilities"])
            try:
                return check_manifest(json.loads(out), "python -m gpu_backend capabilities")
            except ValueError:
                if rc is None:
                    raise AdapterError(f"`python -m gpu_backend capabilities` did not finish within --timeout "
                                       f"{self.timeout:g} s", out) from None
                if rc < 0:
                    raise AdapterError(f"`python -m gpu_backend capabilities` was killed by signal {-rc}", out) from None
                raise AdapterError(f"`python -m gpu_backend capabilities` exited {rc}", out) from None
        pages = [self.fixed.config["tokens_per_page"]] if self.fixed else "any"
        return {"format": "kvconform-capabilities-v1", "backend": Path(self.executable[0]).name,
                "semantics_profile": "any", "observables": {}, "model_kinds": ["attention"],
                "media": [], "features": [], "tokens_per_page": pages}

    def _capture(self, argv: list[str]) -> tuple[int | None, str]:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            return None, ""
        return p.returncode, p.stdout if p.returncode == 0 else tail(p.stderr)

    def capabilities(self) -> dict:
        return self.manifest

    def engine(self, build_args: dict) -> Engine:
        if self.fixed:
            return self.fixed

        def build(folder: Path) -> None:
            argv = self.build_command + ["--engineDir", str(folder)] + build_flags(build_args)
            rc, err = run_process(argv, self.timeout, str(self.workdir), self.child_env)
            if rc is None:
                raise AdapterError(f"the build command did not finish within {self.timeout:g} s", err)
            if rc == 2:
                raise BuildRefused((err.splitlines() or ["build refused"])[-1])
            if rc < 0:
                raise AdapterError(f"the build command was killed by signal {-rc}", err)
            if rc != 0:
                raise AdapterError(f"the build command exited {rc}", err)
            # checked before the folder is cached: a bad build must not be reused by later runs
            config, problem = _read_checked(str(folder / "config.json"), "engine")
            if problem:
                raise AdapterError(f"the build command exited 0 but its engine is unusable: {problem}", err)
        salt = "command:" + " ".join(self.build_command)
        if self.build_command[:3] == BUNDLED:  # the bundled builder: its code is part of the key
            salt += ":" + source_digest(Path(__file__).resolve().parents[2] / "gpu_backend")
        folder = build_cached(build_args, salt, build)
        return Engine(folder.name, json.loads((folder / "config.json").read_text()), str(folder))

    @property
    def edits_descriptions(self) -> bool:
        """Whether a case may hand the runtime an edited description: only engines of the bundled
        builder, whose config.json is the description (another runtime may read its own files)."""
        return not self.fixed and bool(self.build_command) and self.build_command[:3] == BUNDLED

    def start(self, engine: Engine, runtime: dict) -> Session:
        return CommandSession(self, engine, runtime)

    def fixed_engine(self) -> Engine | None:
        return self.fixed

    def close(self) -> None:
        for proc in list(self.live):       # an interrupted run: no backend outlives the kit
            _kill_group(proc)
        if self.own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def describe(self) -> dict:
        return {"executable": self.executable, "build_command": self.build_command,
                "engine_dir": self.fixed.directory if self.fixed else None,
                "timeout_s": self.timeout, "extra_args": self.extra_args}
