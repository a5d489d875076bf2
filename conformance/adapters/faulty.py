"""The `inprocess` adapter on a faulty backend of the catalogue (faulty_backends/).

A faulty variant is a runtime factory: the bundled backend with one seeded defect. Engines are
the bundled backend's (the same build tool and cache): only the runtime differs. This glue lives
in the runner, so that faulty_backends/ depends on the bundled backend alone.
"""
from __future__ import annotations

from .inprocess import InprocessAdapter


class FaultyAdapter(InprocessAdapter):
    """The `inprocess` adapter driving a faulty variant's runtime instead of `gpu_backend.Runtime`."""

    def __init__(self, variant, device: str = "auto", timeout: float | None = 120.0,
                 engine_dir: str | None = None):
        """`variant`: a `faulty_backends.Variant`, or the name of one."""
        if isinstance(variant, str):
            from faulty_backends import CATALOGUE
            variant = CATALOGUE[variant]
        super().__init__(device=device, timeout=timeout, runtime_factory=variant.factory, engine_dir=engine_dir)
        self.variant = variant
        self.name = f"faulty:{variant.name}"

    def describe(self) -> dict:
        return dict(super().describe(), variant=self.variant.name, bug_class=self.variant.bug_class)
