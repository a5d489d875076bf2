"""The `kvconform` command: a thin dispatcher over conformance/commands/*.

Each command module provides `add_arguments(parser)` and `main(args) -> int`. Bad input in
any command becomes one line on stderr and exit code 2, never a traceback. A reader that goes
away (`kvconform parity | head -1`) ends the command quietly with 141, as a command the
SIGPIPE signal stopped: its output was not wanted, which is no error of the command. Ctrl-C,
SIGTERM and SIGHUP end any command with 128 + the signal's number (conformance/run/interrupts.py:
a command with a report keeps its partial report and says so).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import KvconformError
from .run import interrupts

COMMANDS = {
    "run": ("conformance.commands.run", "run the conformance suite against a backend (the main job)"),
    "validate": ("conformance.commands.validate", "check request, case, engine, output, profile and report files"),
    "simulate": ("conformance.commands.simulate", "predict a backend's profile with the reference oracle"),
    "describe": ("conformance.commands.describe", "write the engine description of a real engine folder"),
    "merge": ("conformance.commands.merge", "merge sharded report folders into one"),
    "report": ("conformance.commands.report", "write a report folder's report.html again from its report.json"),
    "selftest": ("conformance.commands.selftest", "check that the suite catches every seeded faulty backend"),
    "campaign": ("conformance.commands.campaign", "draw generated request sets seed after seed for hours, locally or on Ray"),
    "parity": ("conformance.commands.parity", "run the runtimes' own unit-test assertions through the oracle (parity/)"),
    "crosscheck": ("conformance.commands.crosscheck", "drive a runtime's own cache classes and the oracle side by side"),
}


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (`kvconform run: error: argument --timeout: ...`), exit code 2."""

    def error(self, message: str):
        raise KvconformError(f"{self.prog}: {message}")


EXIT_BROKEN_PIPE = 128 + 13
"""What a shell reports for a command stopped by SIGPIPE."""


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _dispatch(argv)
        finally:
            sys.stdout.flush()                  # a pipe closed early fails here, not at exit
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's own flush at exit finds no broken
    pipe to report."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _dispatch(argv: list[str] | None) -> int:
    parser = _Parser(prog="kvconform", description="KV-cache context-reuse conformance kit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    # Only the command asked for is imported (the others are listed by name and help): the
    # commands between them import torch, numpy and Hypothesis, which `simulate` never needs.
    asked = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), None)
    modules = {}
    for name, (module_name, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        if name == asked:
            modules[name] = importlib.import_module(module_name)
            modules[name].add_arguments(command)
    try:
        args = parser.parse_args(argv)
    except KvconformError as e:
        print(f"kvconform: error: {e}", file=sys.stderr)
        return 2
    if args.command is None:
        parser.print_help()
        return 2
    report = sys.modules.get("conformance.report.folder")   # not imported yet: it created no folder
    if report is not None:
        report.CREATED.clear()         # only this command's own folders
    try:
        with interrupts.handled():
            return int(modules[args.command].main(args) or 0)
    except KvconformError as e:
        from .adapters.secrets import mask
        report = sys.modules.get("conformance.report.folder")
        if report is not None:
            report.remove_created_folders()   # bad input leaves no empty report folder behind
        print(f"kvconform: error: {mask(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print("kvconform: interrupted", file=sys.stderr)
        return 128 + interrupts.signum_of(e)
    finally:
        report = sys.modules.get("conformance.report.folder")
        if report is not None:
            report.release_report_folders()   # the next command (in this process too) may claim them


if __name__ == "__main__":
    sys.exit(main())
