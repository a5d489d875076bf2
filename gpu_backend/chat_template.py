"""Chat template rendering as transformers' `apply_chat_template(tokenize=False)` does (TOK-HF-4).

What the rendered text depends on, and so what the prompt ids depend on: jinja2's immutable
sandbox with `trim_blocks` and `lstrip_blocks`, the loop-controls extension (and
transformers' `{% generation %}` block, which renders its body unchanged), transformers'
`tojson` (plain `json.dumps`, non-ASCII kept, unlike jinja's HTML-escaping filter),
`raise_exception` and `strftime_now`; variables `messages`, `tools` and `documents` (none),
`add_generation_prompt`, the config's named special tokens, then the caller's keywords.

    template_source(folder, config) -> str | None
    ChatTemplate(source, config).render(messages, add_generation_prompt, kwargs) -> str
"""
import json
import os
from datetime import datetime

from .hf_loader import NAMED_SPECIALS, TEMPLATE_FILE, spelling


def template_source(folder: str, config: dict):
    """`chat_template.jinja` when the folder has one, else the config's `chat_template` (from a
    list of named templates, the one named `default`); None when there is none."""
    path = os.path.join(folder, TEMPLATE_FILE)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    source = config.get("chat_template")
    if isinstance(source, list):
        source = next((t.get("template") for t in source if isinstance(t, dict) and t.get("name") == "default"), None)
    return source if isinstance(source, str) else None


def _environment():
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlock(Extension):
        """`{% generation %}...{% endgeneration %}` marks assistant text for training masks in
        transformers; for rendering it is its body."""
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

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class ChatTemplate:
    def __init__(self, source: str, config: dict):
        self.source = source
        self.specials = {k: spelling(config.get(k)) for k in NAMED_SPECIALS if spelling(config.get(k)) is not None}
        self._compiled = None

    def render(self, messages: list, add_generation_prompt: bool, kwargs: dict) -> str:
        """`messages` are {"role", "content": str} dicts (contents already flattened, TOK-HF-5).
        Raises ValueError with the template's own message when rendering fails."""
        import jinja2
        try:
            if self._compiled is None:
                self._compiled = _environment().from_string(self.source)
            variables = {**self.specials, **kwargs}
            return self._compiled.render(messages=messages, tools=None, documents=None,
                                         add_generation_prompt=add_generation_prompt, **variables)
        except (jinja2.exceptions.TemplateError, TypeError, ValueError, KeyError, AttributeError) as e:
            raise ValueError(f"the chat template cannot render this conversation: {type(e).__name__}: {e}") from None
