"""The drivers' side of the line protocol (conformance/crosscheck/driver.py speaks the other):
a first line naming the runtime, then one JSON answer per JSON command read from stdin.

A command is `{"stream": ...}` (answered with the stream's observations, or the error the
runtime raised on it: the run goes on), `{"time": stream}` (answered with the seconds the runtime
took, nothing observed) or `{"quit": true}`. Standard library only: it runs in the runtime's venv,
imported by drive_<runtime>.py from this folder.
"""
from __future__ import annotations

import json
import sys
import time


def serve(answers, hello: dict, run) -> int:
    """Answer on `answers` (the real stdout, which the driver keeps to itself) until stdin ends or
    says quit; `run(stream, observe=True)` is the driver's own."""
    answers.write(json.dumps(hello) + "\n")
    answers.flush()
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("quit"):
            break
        if "time" in command:
            start = time.perf_counter()
            run(command["time"], observe=False)
            answer = {"id": command["time"].get("id"), "seconds": time.perf_counter() - start}
        else:
            stream = command["stream"]
            try:
                answer = {"id": stream.get("id"), "observations": run(stream)}
            except Exception as e:                       # the runtime itself failed: report, go on
                answer = {"id": stream.get("id"), "error": f"{type(e).__name__}: {e}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
    return 0
