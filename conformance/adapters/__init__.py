"""Backend adapters (spec/RUNNING.md section 1), chosen by name.

`inprocess` (the bundled backend's Python API), `command` (any llm_inference-compatible
executable; by default the bundled CLI), `reference` (the oracle itself: a self-check) and
`broken` (every call raises: a check of the runner).
"""
from __future__ import annotations

from ..errors import KvconformError
from .base import Adapter, AdapterError, BuildRefused, Engine, RunResult, Session

NAMES = ("inprocess", "command", "reference", "broken")


def default_backend() -> str:
    """`inprocess` where the bundled backend and torch import, else `reference`."""
    try:
        import gpu_backend  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        return "reference"
    return "inprocess"


def make_adapter(name: str, *, device: str = "auto", timeout: float = 120.0, executable: str | None = None,
                 engine_dir: str | None = None, engine_config: str | None = None,
                 build_command: str | None = None, capabilities: str | None = None,
                 extra_args: list[str] | None = None, workdir: str | None = None) -> Adapter:
    if name == "inprocess":
        from .inprocess import InprocessAdapter
        return InprocessAdapter(device=device, timeout=timeout)
    if name == "command":
        from .command import CommandAdapter
        extra = list(extra_args or [])
        if executable is None and device != "auto":
            extra += ["--device", device]
        return CommandAdapter(executable, engine_dir, engine_config, build_command, capabilities,
                              timeout, extra, workdir)
    if name == "reference":
        from .reference import ReferenceAdapter
        return ReferenceAdapter()
    if name == "broken":
        from .broken import BrokenAdapter
        return BrokenAdapter()
    raise KvconformError(f"unknown backend {name!r} (one of {', '.join(NAMES)})")


__all__ = ["Adapter", "AdapterError", "BuildRefused", "Engine", "RunResult", "Session", "NAMES",
           "default_backend", "make_adapter"]
