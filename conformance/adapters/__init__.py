"""Backend adapters (spec/RUNNING.md section 1), chosen by name.

`inprocess` (the bundled backend's Python API, the default), `command` (any
llm_inference-compatible executable; by default the bundled CLI), `reference` (the oracle
itself: a self-check of the kit that tests no backend), `broken` (every call raises: a check
of the runner) and `openai` (an OpenAI-compatible server, judged against a peer profile by
conformance/peers with the HTTP client of openai.py).

The oracle is never a fallback: when the bundled backend cannot be imported, `inprocess` fails
to start and the run stops with the import error, because a run that quietly tested the oracle
against itself would print CONFORMANT for a backend nobody ran.
"""
from __future__ import annotations

from .. import KvconformError
from .base import Adapter, AdapterError, BuildRefused, Engine, RunResult, Session

NAMES = ("inprocess", "command", "reference", "broken", "openai")
DEFAULT = "inprocess"
SELF_CHECKS = frozenset({"reference"})
"""Adapters that run the oracle in place of a backend: their reports test no backend."""

# Which adapter each adapter-specific option of `kvconform run` belongs to. An option given to
# another adapter is refused: silently ignoring `--executable` once tested the bundled backend
# and printed CONFORMANT for an executable that never ran.
OPTION_ADAPTERS = {
    "executable": {"command"}, "engine_dir": {"command", "inprocess"}, "engine_config": {"command"},
    "build_command": {"command"}, "capabilities": {"command"}, "backend_arg": {"command"},
    "device": {"inprocess", "command"},
    # `--backend openai` (an OpenAI-compatible server, judged by the peer suite: conformance/peers)
    "base_url": {"openai"}, "api_key_env": {"openai"}, "model": {"openai"}, "peer_setting": {"openai"},
    "tokenizer": {"openai"},
}


def option_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def choose_backend(backend: str | None, given: dict) -> str:
    """The adapter a run uses, from `--backend` and the adapter options actually given.

    Without `--backend`, a command-adapter option (`--executable`, `--engine-dir`, ...) selects
    the command adapter, else the default is `inprocess`. An option that does not apply to the
    chosen adapter is bad input (KvconformError), never ignored.
    """
    present = {k for k, v in given.items() if v not in (None, [], False)}
    if backend is None:
        if any(OPTION_ADAPTERS[k] == {"openai"} for k in present):
            backend = "openai"
        else:
            backend = "command" if any(OPTION_ADAPTERS[k] == {"command"} for k in present) else DEFAULT
    for key in sorted(present):
        if backend not in OPTION_ADAPTERS[key]:
            users = " or ".join(f"--backend {a}" for a in sorted(OPTION_ADAPTERS[key]))
            raise KvconformError(f"{option_flag(key)} applies to {users}, not to --backend {backend}")
    if backend == "command" and "device" in present and given.get("executable"):
        raise KvconformError("--device applies to the bundled backend; pass an external executable's own "
                             "device option with --backend-arg")
    return backend


def make_adapter(name: str, *, device: str | None = None, timeout: float = 120.0, executable: str | None = None,
                 engine_dir: str | None = None, engine_config: str | None = None,
                 build_command: str | None = None, capabilities: str | None = None,
                 extra_args: list[str] | None = None, workdir: str | None = None) -> Adapter:
    if name == "inprocess":
        from .inprocess import InprocessAdapter
        return InprocessAdapter(device=device or "auto", timeout=timeout, engine_dir=engine_dir)
    if name == "command":
        from .command import CommandAdapter
        extra = list(extra_args or [])
        if executable is None and device not in (None, "auto"):
            extra += ["--device", device]
        return CommandAdapter(executable, engine_dir, engine_config, build_command, capabilities,
                              timeout, extra, workdir)
    if name == "reference":
        from .reference import ReferenceAdapter
        return ReferenceAdapter()
    if name == "broken":
        from .broken import BrokenAdapter
        return BrokenAdapter()
    if name == "openai":
        raise KvconformError("--backend openai drives a server through the peer suite (conformance/peers), "
                             "not through the request-file adapter interface")
    raise KvconformError(f"unknown backend {name!r} (one of {', '.join(NAMES)})")


__all__ = ["Adapter", "AdapterError", "BuildRefused", "Engine", "RunResult", "Session", "NAMES", "DEFAULT",
           "SELF_CHECKS", "choose_backend", "make_adapter"]
