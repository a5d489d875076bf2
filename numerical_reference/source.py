"""Where reference results come from: the kit's float64 forward over the engine's weights, or a
reference command the backend's manifest names (spec/RUNNING.md section 5, spec/schemas/
capabilities.schema.json `numerical_reference`).

    weights   the engine folder is in the reference layout (spec/engine.md section 5): the kit
              computes teacher-forced log-probabilities itself; results are cached on disk.
    command   `CMD --engineDir D --inputFile IN --outputFile OUT`: IN is the request file as the
              backend received it, each request to score carrying `teacher_forced_ids`; OUT holds,
              per scored request, one entry per generated token (spec/RUNNING.md section 5).
              `python -m numerical_reference` is such a command (the kit's forward).
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from . import store
from .layout import LayoutError, load_weights
from .scoring import Scored, Step, emission_mask, inputs_of, score

TEACHER_FORCED_FORMAT = "kvconform-teacher-forced-v1"


class ReferenceUnavailable(Exception):
    """The declared reference cannot answer (weights missing or misshapen, the command failed):
    the kit cannot judge the outputs, an ERROR, never a PASS."""


@lru_cache(maxsize=1)
def _blas():
    from threadpoolctl import ThreadpoolController
    return ThreadpoolController()


def one_blas_thread():
    """The forward's matrices are small: BLAS threads only contend (measured on 2 shared cores: a
    [260, 64] x [64, 64] product took 13 ms with OpenBLAS's threads and 0.2 ms with one)."""
    return _blas().limit(limits=1, user_api="blas")


SCORING_MODULES = ("forward.py", "layout.py", "media.py", "scoring.py")


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of the code that decides a scored value (the forward, the layout reader, media
    decoding, the scoring): a changed forward never reads an old cached result, while a change
    to the judging or the timing keeps the cache."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for name in SCORING_MODULES:
        h.update(name.encode() + b"\0" + (here / name).read_bytes() + b"\0")
    return h.hexdigest()[:16]


class WeightsReference:
    """The kit's own float64 forward over an engine folder in the reference layout."""
    kind = "weights"
    label = "float64 reference"

    def score_all(self, engine_dir: str, engine, items: list, doc: dict, base_dir: str) -> list:
        """items: [(parsed request, request dict, forced tokens)] -> [Scored]."""
        try:
            weights = load_weights(engine_dir)
        except LayoutError as e:
            raise ReferenceUnavailable(str(e)) from None
        name, mask = emission_mask(weights, engine)
        out = []
        for parsed, request, forced in items:
            inputs = inputs_of(parsed, request, doc, base_dir, forced)
            try:
                key = code_digest() + ":" + inputs.key(weights, name)
            except LayoutError as e:
                raise ReferenceUnavailable(str(e)) from None
            cached = store.get(key)
            if cached is not None:
                out.append(Scored([Step.from_json(s) for s in cached]))
                continue
            try:
                with one_blas_thread():
                    scored = score(weights, inputs, mask)
            except LayoutError as e:
                raise ReferenceUnavailable(str(e)) from None
            store.put(key, [s.to_json() for s in scored.steps])
            out.append(scored)
        return out


class CommandReference:
    """A reference command named by the backend's manifest (one process per request file)."""
    kind = "command"
    label = "reference command"

    def __init__(self, command: str, timeout: float = 300.0):
        self.argv = shlex.split(command)
        self.timeout = timeout
        self.memo: dict = {}

    def score_all(self, engine_dir: str, engine, items: list, doc: dict, base_dir: str) -> list:
        scored_doc = {k: v for k, v in doc.items() if k != "_conformance"}
        scored_doc["requests"] = [dict(r) for r in doc["requests"]]
        wanted = {}
        for parsed, request, forced in items:
            scored_doc["requests"][parsed.index]["teacher_forced_ids"] = list(forced)
            wanted[parsed.index] = list(forced)
        key = json.dumps([engine_dir, scored_doc], sort_keys=True)
        if key not in self.memo:
            self.memo[key] = self._run(engine_dir, scored_doc, base_dir)
        answers = self.memo[key]
        out = []
        for parsed, _, forced in items:
            steps = answers.get(parsed.index)
            if steps is None or [s.token for s in steps] != list(forced):
                raise ReferenceUnavailable(f"the reference command answered no entry per generated token for "
                                           f"request {parsed.index}")
            out.append(Scored(steps))
        return out

    def _run(self, engine_dir: str, doc: dict, base_dir: str) -> dict:
        with tempfile.TemporaryDirectory(prefix="kvconform-ref-") as tmp:
            src, dst = os.path.join(tmp, "teacher-forced.json"), os.path.join(tmp, "reference.json")
            with open(src, "w") as f:
                json.dump(doc, f)
            argv = self.argv + ["--engineDir", str(engine_dir), "--inputFile", src, "--outputFile", dst]
            try:
                done = subprocess.run(argv, cwd=base_dir, capture_output=True, text=True, timeout=self.timeout)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise ReferenceUnavailable(f"the reference command {shlex.join(self.argv)} did not run: {e}") from None
            if done.returncode != 0:
                tail = "\n".join(done.stderr.strip().splitlines()[-3:])
                raise ReferenceUnavailable(f"the reference command exited {done.returncode}: {tail}")
            try:
                with open(dst) as f:
                    answer = json.load(f)
                return parse_answer(answer)
            except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
                raise ReferenceUnavailable(f"the reference command wrote no valid {TEACHER_FORCED_FORMAT} file: "
                                           f"{type(e).__name__}: {e}") from None


def parse_answer(answer: dict) -> dict:
    """{request index: [Step]} from a reference command's output file (ValueError if malformed)."""
    if answer.get("format") != TEACHER_FORCED_FORMAT:
        raise ValueError(f"format must be {TEACHER_FORCED_FORMAT!r}")
    out = {}
    for entry in answer["responses"]:
        steps = []
        for s in entry["steps"]:
            step = Step.from_json(s)
            if len(step.top) < 2 or step.top[0][1] < step.top[1][1]:
                raise ValueError("each step needs its two most likely tokens, most likely first")
            steps.append(step)
        out[int(entry["request_idx"])] = steps
    return out


def reference_for(manifest: dict | None):
    """The reference the manifest declares (`numerical_reference`), or None: outputs are then
    compared with the bypass replay only."""
    declared = (manifest or {}).get("numerical_reference")
    if not isinstance(declared, dict):
        return None
    if declared.get("source") == "weights":
        return _WEIGHTS
    if declared.get("source") == "command" and declared.get("command"):
        key = declared["command"]
        if key not in _COMMANDS:
            _COMMANDS[key] = CommandReference(key, float(declared.get("timeout_s", 300.0)))
        return _COMMANDS[key]
    return None


_WEIGHTS = WeightsReference()
_COMMANDS: dict = {}
