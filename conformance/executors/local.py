"""The local worker pool: units run in this process (one worker) or in worker processes.

The same interface as the Ray pool (`submit`, `wait`, `result`, `cancel`, `close`), so the
campaign's scheduler does not care where its units run. There are no retries here: a worker
process that dies takes its unit with it, and that unit ends ERROR with the reason.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass


class TaskFailed(Exception):
    """A unit's task returned no result; `attempts` is how often it was started."""

    def __init__(self, reason: str, attempts: int = 1):
        super().__init__(reason)
        self.reason, self.attempts = reason, attempts


@dataclass(eq=False)
class Ticket:
    key: str
    handle: object


class LocalPool:
    name = "local"

    def __init__(self, workers: int = 1):
        self.slots = workers
        ctx = multiprocessing.get_context("spawn")     # no fork after torch has started threads
        self._pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init) if workers > 1 else None

    def submit(self, key: str, fn, *args) -> Ticket:
        if self._pool is not None:
            return Ticket(key, self._pool.submit(fn, *args))
        future = Future()        # one worker: run it now, in this process (Ctrl-C reaches it directly)
        try:
            future.set_result(fn(*args))
        except Exception as e:
            future.set_exception(e)
        return Ticket(key, future)

    def wait(self, tickets: list[Ticket], timeout: float | None = None) -> list[Ticket]:
        """The tickets of `tickets` that have finished, after waiting up to `timeout` for one."""
        done, _ = wait_futures([t.handle for t in tickets], timeout=timeout, return_when=FIRST_COMPLETED)
        return [t for t in tickets if t.handle in done]

    def result(self, ticket: Ticket):
        try:
            return ticket.handle.result()
        except Exception as e:   # the unit raised, or its worker process died (BrokenProcessPool)
            raise TaskFailed(f"{type(e).__name__}: {e}") from None

    def attempts(self, ticket: Ticket) -> list[str]:
        return []

    def cancel(self, tickets: list[Ticket]) -> None:
        for t in tickets:
            t.handle.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def stop(self) -> None:
        """Stop the worker processes now, units in hand and all (SIGTERM: a unit that runs
        processes of its own stops them on it); for a driver interrupted by its user."""
        if self._pool is not None:
            for process in list(getattr(self._pool, "_processes", {}).values()):
                if process.is_alive():
                    process.terminate()
            self._pool.shutdown(wait=False, cancel_futures=True)

    def describe(self) -> dict:
        return {"name": "local", "workers": self.slots}


def _worker_init() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
