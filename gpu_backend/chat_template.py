"""Chat template rendering as transformers' `apply_chat_template(tokenize=False)` does (TOK-HF-4).

What the rendered text depends on, and so what the prompt ids depend on: jinja2's immutable
sandbox with `trim_blocks` and `lstrip_blocks`, the loop-controls extension (and
transformers' `{% generation %}` block, which renders its body unchanged), transformers'
`tojson` (plain `json.dumps`, non-ASCII kept, unlike jinja's HTML-escaping filter),
`raise_exception` and `strftime_now`; variables `messages`, `tools` and `documents` (none),
`add_generation_prompt`, the config's named special tokens, then the caller's keywords.

    template_source(folder, config) -> str | None
    ChatTemplate(source, config).render(messages, add_generation_prompt, kwargs) -> str
    check_template(source)                    ValueError unless it compiles within the bounds

Templates are untrusted code: jinja2's sandbox does not bound loops or memory, so each template
runs in a worker process (template_worker.py) with a memory limit, an output limit and a
deadline per compile or render; past the deadline the worker is killed.
"""
import hashlib
import json
import os
import select
import subprocess
import sys
import threading
import time

from .hf_loader import NAMED_SPECIALS, TEMPLATE_FILE, spelling


def template_source(folder: str, config: dict):
    """`chat_template.jinja` when the folder has one, else the config's `chat_template` (from a
    list of named templates, the one named `default`); None when there is none. A value that is
    not a string is returned as it is, for check_template to refuse."""
    path = os.path.join(folder, TEMPLATE_FILE)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    source = config.get("chat_template")
    if isinstance(source, list):
        source = next((t.get("template") for t in source if isinstance(t, dict) and t.get("name") == "default"), None)
    return source                  # anything but a string is refused when it is compiled


# Bounds on untrusted template code (spec/hf-tokenizer.md TOK-HF-4, "Bounds"): the same numbers
# as the kit's oracle, so that both refuse the same templates.
SOURCE_BYTES = 1 << 20
OUTPUT_CHARS = 16 << 20
MEMORY_BYTES = 1 << 30
SECONDS = 5.0
_WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "template_worker.py")


class TemplateProcess:
    """The worker process all templates of this process render in, started on first use and
    replaced after it was stopped. One request at a time (a lock)."""
    lock = threading.Lock()
    proc = None
    keys: set = set()

    @classmethod
    def ask(cls, source: str, request: dict) -> str:
        key = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
        with cls.lock:
            if cls.proc is None or cls.proc.poll() is not None:
                cls.proc = subprocess.Popen([sys.executable, _WORKER_SCRIPT, str(MEMORY_BYTES), str(OUTPUT_CHARS)],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                            start_new_session=True)
                cls.keys = set()
            request = dict(request, key=key, **({} if key in cls.keys else {"source": source}))
            try:
                reply = cls._exchange(request)
            except (TimeoutError, EOFError, OSError, ValueError) as e:
                cls.proc.kill()
                cls.proc.wait()
                cls.proc = None
                raise ValueError(f"the chat template did not finish within {SECONDS:g} s" if isinstance(e, TimeoutError)
                                 else f"the chat template's process stopped (more than {MEMORY_BYTES >> 20} MiB "
                                      "of memory?)") from None
            cls.keys.add(key)
        if "error" in reply:
            raise ValueError(reply["error"])
        return reply["text"]

    @classmethod
    def _exchange(cls, request: dict) -> dict:
        cls.proc.stdin.write(json.dumps(request).encode() + b"\n")
        cls.proc.stdin.flush()
        deadline, got = time.monotonic() + SECONDS, b""
        fd = cls.proc.stdout.fileno()
        while not got.endswith(b"\n"):
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise EOFError
            got += chunk
        return json.loads(got)


def _check_source(source) -> None:
    if not isinstance(source, str):
        raise ValueError(f"the chat template must be a string, not {type(source).__name__}")
    if len(source.encode("utf-8", "surrogatepass")) > SOURCE_BYTES:
        raise ValueError(f"the chat template is larger than {SOURCE_BYTES} bytes")


def check_template(source) -> None:
    """ValueError unless `source` is a template that compiles within the bounds."""
    _check_source(source)
    TemplateProcess.ask(source, {"compile_only": True})


class ChatTemplate:
    def __init__(self, source: str, config: dict):
        self.source = source
        self.specials = {k: spelling(config.get(k)) for k in NAMED_SPECIALS if spelling(config.get(k)) is not None}
        self._seen: dict = {}

    def render(self, messages: list, add_generation_prompt: bool, kwargs: dict) -> str:
        """`messages` are {"role", "content": str} dicts (contents already flattened, TOK-HF-5).
        Raises ValueError with the template's own message when it fails to compile or render,
        or exceeds a bound (it runs in TemplateProcess)."""
        variables = json.dumps({**self.specials, **kwargs, "messages": messages, "tools": None, "documents": None,
                                "add_generation_prompt": add_generation_prompt})      # key order kept (tojson)
        if variables not in self._seen:
            _check_source(self.source)
            if len(self._seen) > 1024:
                self._seen.clear()
            self._seen[variables] = TemplateProcess.ask(self.source, {"variables": variables})
        return self._seen[variables]
