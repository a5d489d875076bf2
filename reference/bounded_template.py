"""Chat templates are untrusted code: each is compiled and rendered in a worker process, bounded
in time, memory and output (spec/hf-tokenizer.md TOK-HF-4, "Bounds").

jinja2's sandbox keeps a template from reaching Python, not from running forever or filling
memory: a loop of 10**10 steps, a string doubled forty times or `"x" * 10**10` runs in the
sandbox all the same, and some of that in C, where no in-process check can interrupt it. A
separate process can be stopped from outside and given a memory limit, so every render here is
a request to one long-lived worker (`hf_tokenizer.py --template-worker`, started on first use)
that must answer within the deadline; past it, the worker is killed and the template refused.

    render(source, variables) -> str        TemplateRefused (a ValueError) for an invalid template
    check(source)                           compile only

The normal path costs one worker start per process (about 0.1 s of CPU) and a pipe round trip
per render not seen before (renders are cached).
"""

import hashlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections import OrderedDict

MAX_SOURCE_BYTES = 1 << 20          # a template's source
MAX_OUTPUT_CHARS = 16 << 20         # one rendered conversation
MAX_MEMORY_BYTES = 1 << 30          # the worker's address space
DEADLINE_S = 5.0                    # one compile or render
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_tokenizer.py")


class TemplateRefused(ValueError):
    """The template is invalid: it does not compile, raises, or exceeds a bound."""


class _Worker:
    def __init__(self):
        env = dict(os.environ, KVCONFORM_TEMPLATE_LIMITS=json.dumps(
            {"memory": MAX_MEMORY_BYTES, "output": MAX_OUTPUT_CHARS}))
        self.proc = subprocess.Popen([sys.executable, WORKER, "--template-worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                     start_new_session=True)
        self.known: set = set()

    def ask(self, request: dict) -> dict:
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        fd = self.proc.stdout.fileno()
        end = time.monotonic() + DEADLINE_S
        chunks = []
        while True:
            left = end - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                return json.loads(b"".join(chunks))

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass


_LOCK = threading.Lock()
_STATE: dict = {"worker": None}
_CACHE: "OrderedDict[tuple, str]" = OrderedDict()
_CACHE_SIZE = 4096


def _call(source: str, request: dict) -> dict:
    if not isinstance(source, str):
        raise TemplateRefused(f"the chat template must be a string, not {type(source).__name__}")
    if len(source.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:
        raise TemplateRefused(f"the chat template is larger than {MAX_SOURCE_BYTES >> 20} MiB")
    key = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    with _LOCK:
        worker = _STATE["worker"]
        if worker is None or worker.proc.poll() is not None:
            worker = _STATE["worker"] = _Worker()
        request = dict(request, id=key)
        if key not in worker.known:
            request["source"] = source
        try:
            answer = worker.ask(request)
        except TimeoutError:
            worker.kill()
            _STATE["worker"] = None
            raise TemplateRefused(f"the chat template did not finish within {DEADLINE_S:g} s") from None
        except (EOFError, OSError, ValueError):
            worker.kill()
            _STATE["worker"] = None
            raise TemplateRefused("the chat template's renderer stopped (memory above "
                                  f"{MAX_MEMORY_BYTES >> 30} GiB?)") from None
        worker.known.add(key)
    if "error" in answer:
        raise TemplateRefused(answer["error"])
    return answer


def check(source: str) -> None:
    """Compile `source` (TemplateRefused if it does not compile or exceeds a bound)."""
    _call(source, {"compile": True})


def render(source: str, variables: dict) -> str:
    """The template rendered with `variables` (JSON values), within the bounds."""
    blob = json.dumps(variables)                  # key order kept: a template may print a dict as it is
    key = (hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest() if isinstance(source, str) else None,
           blob)
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    text = _call(source, {"variables": blob})["text"]
    with _LOCK:
        _CACHE[key] = text
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return text
