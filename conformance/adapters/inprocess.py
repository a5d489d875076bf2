"""The `inprocess` adapter: the bundled backend's Python API (spec/RUNNING.md section 1).

The fast path: no process start-up per request file. One `gpu_backend.Runtime` is one session,
so a session keeps its cache between request files (used by the generated tests); `--warmup`
applies to the first request file of a session, as it would to the only file of a process.
A Python exception from the backend is a crash (ERROR), never a verdict on the contract.
"""
from __future__ import annotations

import json
import signal
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

from ..cases.schemas import schema_errors
from .base import Adapter, AdapterError, BuildRefused, Engine, RunResult, Session, check_manifest
from .engines import build_cached, fixed_engine, source_digest

RUNTIME_ARGS = {  # case runtime flag -> gpu_backend.Runtime keyword
    "enableContextReuse": "enable_context_reuse", "contextCacheMaxRecords": "max_records",
    "contextCacheRecurrentSnapshotPoolBytes": "recurrent_snapshot_bytes",
    "contextCachePartialKVSnapshotPoolBytes": "partial_kv_snapshot_bytes", "tpSize": "tp_size",
    "poisonFreshPages": "poison_fresh_pages", "outputHiddenStates": "output_hidden_states",
    "dumpProfile": "dump_profile", "semanticsProfile": "semantics_profile",
}
INFER_ARGS = {"batchSize": "batch_size", "maxGenerateLength": "max_generate_length"}


class InvocationTimeout(Exception):
    pass


@contextmanager
def time_limit(seconds: float | None):
    """Interrupt the block after `seconds` (SIGALRM; only in the main thread, else no limit).

    An alarm set by someone else (pytest-timeout) is restored afterwards with its remaining time.
    """
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise InvocationTimeout(f"exceeded {seconds:g} s")
    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, expire)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 0.001))


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


class InprocessSession(Session):
    def __init__(self, gpu_backend, engine: Engine, runtime: dict, device: str, timeout: float | None,
                 runtime_factory=None):
        self.gb, self.timeout = gpu_backend, timeout
        factory = runtime_factory or gpu_backend.Runtime
        self.warmup = runtime.get("warmup", 0)
        self.infer_args = {INFER_ARGS[k]: v for k, v in runtime.items() if k in INFER_ARGS}
        kwargs = {RUNTIME_ARGS[k]: v for k, v in runtime.items() if k in RUNTIME_ARGS}
        self.rejected, self.runtime, self.refused_input = None, None, None
        try:
            with time_limit(timeout):
                self.runtime = factory(engine.directory, device=device, **kwargs)
        except gpu_backend.DeploymentRejected as e:
            self.rejected = e.message if hasattr(e, "message") else str(e)
        except gpu_backend.BackendInputError as e:
            # refused at start-up as bad input (what the CLI reports as exit 2): an outcome to
            # judge, not a crash of the backend (a CR-SUP refusal is exit 3, DeploymentRejected)
            self.refused_input = RunResult("input_error", message=getattr(e, "message", str(e)),
                                           error_path=getattr(e, "path", None), exit_code=2)
        except InvocationTimeout as e:
            raise AdapterError(f"starting the runtime {e}") from None
        except Exception:
            raise AdapterError("gpu_backend.Runtime raised", _tail(traceback.format_exc())) from None

    def run(self, request: dict, base_dir: str) -> RunResult:
        result = self._run(request, base_dir)
        result.request = request
        return result

    def _run(self, request: dict, base_dir: str) -> RunResult:
        if self.rejected is not None:
            return RunResult("rejected", message=self.rejected, exit_code=3)
        if self.refused_input is not None:
            return RunResult("input_error", message=self.refused_input.message,
                             error_path=self.refused_input.error_path, exit_code=2)
        warmup, self.warmup = self.warmup, 0
        try:
            with time_limit(self.timeout):
                out = self.runtime.infer(request, base_dir, warmup=warmup, **self.infer_args)
                profile = self.runtime.profile()
        except self.gb.BackendInputError as e:
            return RunResult("input_error", message=getattr(e, "message", str(e)),
                             error_path=getattr(e, "path", None), exit_code=2)
        except InvocationTimeout as e:
            return RunResult("timeout", message=f"Runtime.infer {e}")
        except Exception as e:
            return RunResult("crash", message=f"Runtime.infer raised {type(e).__name__}: {e}",
                             stderr_tail=_tail(traceback.format_exc()))
        if not isinstance(out, dict):
            return RunResult("crash", message=f"Runtime.infer returned {type(out).__name__}, not a dict")
        # The same checks as the files of a command backend: garbage is an ERROR, never judged.
        for doc, schema, what in (({"responses": out.get("responses")}, "output", "responses"),
                                  (profile, "profile", "profile")):
            errors = schema_errors(doc, schema) if doc is not None else []
            if errors:
                return RunResult("crash", message=f"malformed {what} from Runtime.infer: {errors[0][0]}: "
                                                  f"{errors[0][1]}")
        failed = out.get("failed_batches")
        return RunResult("ok", out.get("responses"), profile, failed,
                         1 if failed else 0, wrote_output=True)

    def close(self) -> None:
        close = getattr(self.runtime, "close", None)
        if close:
            close()
        self.runtime = None


class InprocessAdapter(Adapter):
    name = "inprocess"
    sessions = True
    edits_descriptions = True   # the runtime reads the engine's config.json: a case may hand it an edited one

    def __init__(self, device: str = "auto", timeout: float | None = 120.0, runtime_factory=None,
                 engine_dir: str | None = None):
        """`runtime_factory(engine_dir, device=..., **flags)` builds a runtime in place of
        `gpu_backend.Runtime` (a subclass with one seeded defect: faulty_backends/).
        `engine_dir`: one bundled engine for every case (each case is materialized for it)."""
        self.runtime_factory = runtime_factory
        try:
            import gpu_backend
        except ImportError as e:
            raise AdapterError(f"the bundled backend cannot be imported: {e}") from None
        self.gb, self.device, self.timeout = gpu_backend, device, timeout
        self.salt = "gpu_backend:" + source_digest(Path(list(gpu_backend.__path__)[0]))
        self._manifest = None
        self.fixed = fixed_engine(engine_dir, bundled=True) if engine_dir else None
        self.edits_descriptions = self.fixed is None

    def capabilities(self) -> dict:
        if self._manifest is None:
            self._manifest = check_manifest(self.gb.capabilities(device=self.device),
                                            "gpu_backend.capabilities()")
        return self._manifest

    def engine(self, build_args: dict) -> Engine:
        if self.fixed:
            return self.fixed

        def build(folder: Path) -> None:
            try:
                self.gb.build_engine(str(folder), build_args)
            except self.gb.BackendInputError as e:
                raise BuildRefused(getattr(e, "message", str(e))) from None
        folder = build_cached(build_args, self.salt, build)
        config = json.loads((folder / "config.json").read_text())
        return Engine(folder.name, config, str(folder))

    def start(self, engine: Engine, runtime: dict) -> Session:
        return InprocessSession(self.gb, engine, runtime, self.device, self.timeout, self.runtime_factory)

    def fixed_engine(self) -> Engine | None:
        return self.fixed

    def describe(self) -> dict:
        return {"device": self.device, "timeout_s": self.timeout,
                "engine_dir": self.fixed.directory if self.fixed else None}
