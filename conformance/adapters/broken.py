"""The `broken` adapter: every call raises (a check of the runner itself).

Borrowed from mutmut's forced-fail sanity check: a runner that reports PASS for a backend that
cannot do anything is not exercising the backend. Even its capability manifest raises, so no case can
escape as NOT_SUPPORTED: every case run against it must end ERROR, never PASS.
"""
from __future__ import annotations

from .base import Adapter, Engine, RunResult, Session


class BrokenBackend(RuntimeError):
    pass


class BrokenAdapter(Adapter):
    name = "broken"
    sessions = True

    def capabilities(self) -> dict:
        raise BrokenBackend("broken adapter: capabilities() always raises")

    def engine(self, build_args: dict) -> Engine:
        raise BrokenBackend("broken adapter: engine() always raises")

    def start(self, engine: Engine, runtime: dict) -> Session:
        raise BrokenBackend("broken adapter: start() always raises")


class BrokenJudgingAdapter(Adapter):
    """The bundled backend, with every log-probability written as a string after the adapter's
    own output checks (a check of the judging code itself).

    It runs and answers, so cases pass support and run; what breaks is the kit's comparison of
    log-probabilities. Wherever those are judged (a curated case that asks for them, a generated
    family) the verdict must be ERROR; a run that PASSes there judged nothing. (Generated
    families once swallowed such an exception and passed.)
    """
    name = "broken-judging"

    def __init__(self, device: str = "cpu", timeout: float | None = 120.0, engine_dir: str | None = None):
        from .inprocess import InprocessAdapter
        self.inner = InprocessAdapter(device=device, timeout=timeout, engine_dir=engine_dir)
        self.sessions = self.inner.sessions
        self.edits_descriptions = self.inner.edits_descriptions

    def capabilities(self) -> dict:
        return self.inner.capabilities()

    def engine(self, build_args: dict) -> Engine:
        return self.inner.engine(build_args)

    def start(self, engine: Engine, runtime: dict) -> Session:
        return _StringLogprobs(self.inner.start(engine, runtime))

    def fixed_engine(self) -> Engine | None:
        return self.inner.fixed_engine()

    def describe(self) -> dict:
        return dict(self.inner.describe(), defect="log-probabilities written as strings")


class _StringLogprobs(Session):
    def __init__(self, inner: Session):
        self.inner = inner

    def run(self, request: dict, base_dir: str) -> RunResult:
        got = self.inner.run(request, base_dir)
        for response in got.responses or []:
            for step in response.get("logprobs") or []:
                for candidate in step:
                    candidate["logprob"] = str(candidate["logprob"])
        return got

    def close(self) -> None:
        self.inner.close()

