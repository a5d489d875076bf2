"""The catalogue's registry: each faulty variant is one class, registered with `@variant`.

A variant subclasses exactly one component of the bundled backend (`gpu_backend`), one of the
seams in `SEAMS`: the cache identity, a part of the context cache (its store of pools, index
and records, one of its three planners, or the cache itself), the model, the model runner,
the scheduler, or the runtime itself (`Runtime`, for a defect that spans components).
`@variant` turns it into a runtime factory: a `Runtime` subclass whose seam class attribute
(`identity_class`, `cache_class`, `model_class`, `runner_class`, `scheduler_class`; a cache
part through a `ContextCache` subclass's `store_class` or `*_planner_class`) is the faulty
component, or the `Runtime` subclass itself. Production code has no fault switch: a variant
exists only as its class here.

Every variant's docstring starts with a one-line summary and carries three lines the kill matrix
and the table of docs/selftest.md read back:

    Bug class: <tag from peer-systems-and-bug-classes.md section F, or an edge-llm-0.10 quirk>
    Violates: <CR-* rule ids>
    Mirrors: <the real-world issue or quirk>
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from gpu_backend.cache_store import CacheStore
from gpu_backend.checkpoint_planner import CheckpointPlanner
from gpu_backend.identity import SequenceIdentity
from gpu_backend.model import Model
from gpu_backend.model_runner import ModelRunner
from gpu_backend.page_planner import PagePlanner
from gpu_backend.paired_planner import PairedPlanner
from gpu_backend.prefix_cache import ContextCache
from gpu_backend.runtime import Runtime
from gpu_backend.scheduler import Scheduler

GROUPS = ("identity", "planning", "publication", "capacity", "batching", "compute", "support", "metrics",
          "tokenizer")
_FIELDS = {"bug_class": "Bug class", "rules": "Violates", "mirrors": "Mirrors"}
# component -> (its production class, the seam path from Runtime to it: class attributes)
SEAMS = {
    "identity": (SequenceIdentity, ("identity_class",)),
    "cache-store": (CacheStore, ("cache_class", "store_class")),
    "page-planner": (PagePlanner, ("cache_class", "page_planner_class")),
    "checkpoint-planner": (CheckpointPlanner, ("cache_class", "checkpoint_planner_class")),
    "paired-planner": (PairedPlanner, ("cache_class", "paired_planner_class")),
    "cache": (ContextCache, ("cache_class",)),
    "model": (Model, ("model_class",)),
    "runner": (ModelRunner, ("runner_class",)),
    "scheduler": (Scheduler, ("scheduler_class",)),
}


@dataclass(frozen=True)
class Variant:
    name: str
    group: str
    summary: str
    bug_class: str
    rules: tuple
    mirrors: str
    component: str          # a key of SEAMS, or runtime
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


def _factory(cls, path: tuple) -> type:
    """A Runtime subclass whose seam `path` leads to `cls` (a cache part through a ContextCache
    subclass of its own)."""
    attrs = {"__doc__": cls.__doc__, "__module__": cls.__module__}
    if len(path) == 2:
        cls = type(f"{cls.__name__}Cache", (ContextCache,), {path[1]: cls, **attrs})
    return type(f"{cls.__name__}Runtime", (Runtime,), {path[0]: cls, **attrs})


def injected(factory: type, component: str) -> type:
    """The class a runtime factory injects at `component`'s seam."""
    out = factory
    for attr in SEAMS[component][1]:
        out = getattr(out, attr)
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
            component = next((c for c, (base, _) in SEAMS.items() if issubclass(cls, base)), None)
            if component is None:
                raise TypeError(f"{cls.__name__} subclasses no gpu_backend component")
            factory = _factory(cls, SEAMS[component][1])
        CATALOGUE[name] = Variant(name, group, fields["summary"], fields["bug_class"], rules, fields["mirrors"],
                                  component, cls, factory, profile)
        cls.variant_name = name
        return cls
    return register

