"""The catalogue's registry: each faulty variant is one class, registered with `@variant`.

A variant subclasses exactly one component of the bundled backend (`gpu_backend`): the cache
identity (`SequenceIdentity`), the context cache (`ContextCache`), the model (`Model`) or the
runtime itself (`Runtime`). `@variant` turns it into a runtime factory: a `Runtime` subclass
whose `identity_class`, `cache_class` or `model_class` is the faulty component (the seams of
`gpu_backend/runtime.py`), or the `Runtime` subclass itself. Production code has no fault
switch: a variant exists only as its class here.

Every variant's docstring starts with a one-line summary and carries three lines the kill matrix
and the table of docs/selftest.md read back:

    Bug class: <tag from peer-systems-and-bug-classes.md section F, or an edge-llm-0.10 quirk>
    Violates: <CR-* rule ids>
    Mirrors: <the real-world issue or quirk>
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from gpu_backend.identity import SequenceIdentity
from gpu_backend.model import Model
from gpu_backend.prefix_cache import ContextCache
from gpu_backend.runtime import Runtime

GROUPS = ("identity", "planning", "publication", "capacity", "batching", "compute", "support", "metrics",
          "tokenizer")
_FIELDS = {"bug_class": "Bug class", "rules": "Violates", "mirrors": "Mirrors"}


@dataclass(frozen=True)
class Variant:
    name: str
    group: str
    summary: str
    bug_class: str
    rules: tuple
    mirrors: str
    component: str          # identity | cache | model | runtime
    cls: type               # the faulty component class
    factory: type           # a gpu_backend.Runtime subclass: the runtime factory
    profile: str | None = None
    """The semantics profile the variant is judged under (spec/profiles.md) when its defect is
    in behaviour only that profile has (edge-llm-0.10's merged media runs): None is the default."""

    @property
    def rule(self) -> str:
        return self.rules[0]


CATALOGUE: dict[str, Variant] = {}


def _docfields(cls) -> dict:
    doc = cls.__doc__ or ""
    first = " ".join(doc.strip().split("\n\n")[0].split())        # the first paragraph, on one line
    out = {"summary": re.split(r"(?<=[.:;])\s", first, maxsplit=1)[0].rstrip(".:;") if first else ""}
    text = " ".join(doc.split())
    for key, label in _FIELDS.items():
        m = re.search(rf"{label}: (.+?)(?= (?:Bug class|Violates|Mirrors): |$)", text)
        out[key] = m.group(1).strip().rstrip(".") if m else ""
    return out


def variant(name: str, group: str, profile: str | None = None):
    """Register a faulty component class under `name` in catalogue group `group`; `profile`: the
    semantics profile whose behaviour it breaks, under which `kvconform selftest` judges it."""
    assert group in GROUPS, group

    def register(cls):
        assert name not in CATALOGUE, f"duplicate variant {name}"
        fields = _docfields(cls)
        missing = [k for k in ("summary", *_FIELDS) if not fields[k]]
        assert not missing, f"{cls.__name__}: docstring lacks {missing}"
        rules = tuple(re.findall(r"(?:CR|TOK)-[A-Z]+-\d+", fields["rules"]))
        assert rules, f"{cls.__name__}: 'Violates:' names no CR-* or TOK-* rule"
        if issubclass(cls, Runtime):
            component, factory = "runtime", cls
        else:
            for base, component, attr in ((SequenceIdentity, "identity", "identity_class"),
                                          (ContextCache, "cache", "cache_class"), (Model, "model", "model_class")):
                if issubclass(cls, base):
                    break
            else:
                raise TypeError(f"{cls.__name__} subclasses no gpu_backend component")
            factory = type(f"{cls.__name__}Runtime", (Runtime,), {attr: cls, "__doc__": cls.__doc__,
                                                                  "__module__": cls.__module__})
        CATALOGUE[name] = Variant(name, group, fields["summary"], fields["bug_class"], rules, fields["mirrors"],
                                  component, cls, factory, profile)
        cls.variant_name = name
        return cls
    return register

