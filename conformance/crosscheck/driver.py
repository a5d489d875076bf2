"""The runtime's side of a stream: a driver process in the runtime's own venv.

`tools/crosscheck/drive_<runtime>.py` imports only the runtime, the standard library and its
folder's driver_loop.py (the line protocol); it is started once with the venv's interpreter and
answers one JSON line per stream (see its docstring). The kit never imports the runtime. `FakeDriver` stands in for it in the default
tests: any function from a stream to observations.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from .. import KvconformError

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools" / "crosscheck"


class DriverError(RuntimeError):
    """The driver process failed (did not start, died, or answered something else)."""


class Driver:
    """One long-lived driver process: `observe(stream)` and `time(stream)`."""

    def __init__(self, runtime: str, python: str, env: dict | None = None, stderr=None):
        script = TOOLS / f"drive_{runtime}.py"
        if not script.is_file():
            raise KvconformError(f"no driver for runtime {runtime!r}", str(script))
        self.proc = subprocess.Popen([python, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=stderr, text=True, bufsize=1, env={**os.environ, **(env or {})})
        self.header = self._read()
        self.runtime, self.version = self.header.get("runtime"), self.header.get("version")

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise DriverError(f"the driver exited ({code}) without an answer; its stderr says why")
        return json.loads(line)

    def _ask(self, command: dict) -> dict:
        try:
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise DriverError("the driver is gone") from None
        return self._read()

    def observe(self, stream: dict) -> list:
        answer = self._ask({"stream": stream})
        if "error" in answer:
            raise DriverError(f"{stream.get('id')}: the runtime raised {answer['error']}")
        return answer["observations"]

    def time(self, stream: dict) -> float:
        return self._ask({"time": stream})["seconds"]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write('{"quit": true}\n')
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class FakeDriver:
    """A driver that is a function (stream -> observations): the default tests' runtime."""

    def __init__(self, observe, runtime: str = "fake", version: str = "0"):
        self._observe, self.runtime, self.version = observe, runtime, version

    def observe(self, stream: dict) -> list:
        return self._observe(stream)

    def time(self, stream: dict) -> float:
        import time
        start = time.perf_counter()
        self._observe(stream)
        return time.perf_counter() - start

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass
