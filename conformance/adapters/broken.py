"""The `broken` adapter: every call raises (a check of the runner itself).

Borrowed from mutmut's forced-fail sanity check: a runner that reports PASS for a backend that
cannot do anything is not exercising the backend. Even its capability manifest raises, so no case can
escape as NOT_SUPPORTED: every case run against it must end ERROR, never PASS.
"""
from __future__ import annotations

from .base import Adapter, Engine, Session


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
