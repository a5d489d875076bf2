"""The bundled backend's chat-template process: `python template_worker.py`, run by
chat_template.py. It compiles and renders templates one request at a time (JSON lines on stdin
and stdout), with its address space limited and its output counted, so that a template which
loops or allocates without end is stopped from outside (spec/hf-tokenizer.md TOK-HF-4, "Bounds").

The environment is transformers' `apply_chat_template(tokenize=False)` one: jinja2's immutable
sandbox with `trim_blocks` and `lstrip_blocks`, the loop-controls extension (and transformers'
`{% generation %}` block, which renders its body unchanged), transformers' `tojson` (plain
`json.dumps`, non-ASCII kept), `raise_exception` and `strftime_now`.

Kept free of package imports: it runs as a script.
"""
import json
import os
import resource
import sys
from datetime import datetime


def environment():
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlock(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def answer(env, templates: dict, request: dict, most_chars: int) -> dict:
    if "source" in request:
        try:
            templates[request["key"]] = env.from_string(request["source"])
        except Exception as e:
            return {"error": f"the chat template does not compile: {type(e).__name__}: {e}"}
    if request.get("compile_only"):
        return {"text": ""}
    out, size = [], 0
    for chunk in templates[request["key"]].generate(**json.loads(request["variables"])):
        size += len(chunk)
        if size > most_chars:
            return {"error": f"the chat template writes more than {most_chars} characters"}
        out.append(chunk)
    return {"text": "".join(out)}


def main() -> None:
    memory, most_chars = (int(x) for x in sys.argv[1:3])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    env, templates = environment(), {}
    for line in sys.stdin:
        try:
            reply = answer(env, templates, json.loads(line), most_chars)
        except MemoryError:
            reply = {"error": f"the chat template needs more than {memory >> 20} MiB of memory"}
        except Exception as e:
            reply = {"error": f"the chat template cannot render this conversation: {type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    sys.path[:0] = [p for p in os.environ.get("KVCONFORM_WORKER_PATH", "").split(os.pathsep) if p]
    main()
