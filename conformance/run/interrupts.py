"""Signals that end a command like Ctrl-C, and are never lost.

While a command runs (conformance/cli.py), SIGINT, SIGTERM and SIGHUP raise `Interrupted` in
the main thread: the command keeps its partial report, says so, and exits 128 + the signal's
number. Python runs a signal's handler in whatever Python code the main thread runs next. When
that code is a garbage-collector callback (Hypothesis installs one, to time the collector) or a
finalizer, the exception is printed as "Exception ignored in: ..." and dropped, and the command
would go on as if nothing had happened: a campaign interrupted so ran for another 31 units. The
handler therefore also records the signal, and the commands' loops call `raise_pending()`
between units of work (a case, a generated example, a campaign unit).

A SIGINT that is ignored when the command starts (a background job of a non-interactive shell)
stays ignored.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_received: list[int] = []


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signum_of(e: KeyboardInterrupt) -> int:
    """The signal that raised `e` (a plain KeyboardInterrupt is a SIGINT)."""
    return getattr(e, "signum", signal.SIGINT)


def _handler(signum, frame):
    _received.append(signum)
    raise Interrupted(signum)


def raise_pending() -> None:
    """Raise `Interrupted` if a signal arrived whose exception was swallowed on its way."""
    if _received:
        raise Interrupted(_received[0])


@contextmanager
def handled():
    """Handle SIGINT, SIGTERM and SIGHUP in the block (main thread only; elsewhere, and inside
    a block already handling them, nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in SIGNALS:
        current = signal.getsignal(sig)
        if current is _handler or (sig == signal.SIGINT and current is not signal.default_int_handler):
            continue
        previous[sig] = signal.signal(sig, _handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if previous:
            _received.clear()
