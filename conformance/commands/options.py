"""Option spellings shared by the commands.

One spelling per option: kebab-case (`--engine-dir`), except in the commands that mirror Edge-LLM's
`llm_inference` flag for flag (`kvconform simulate`, and the bundled backend's `build` and
`infer`), which keep its camelCase (`--engineDir`). A spelling that changed keeps working for one
release as a hidden alias that says, in one line on stderr, which spelling to use.
"""
from __future__ import annotations

import argparse
import sys


class _Deprecated(argparse.Action):
    """Stores the value under the new option's name, after a one-line note on stderr."""

    def __init__(self, option_strings, dest, new: str = "", **kwargs):
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"kvconform: warning: {option_string} is deprecated and goes in the next release: use {self.new}",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def deprecated_spelling(parser, old: str, new: str) -> None:
    """Accept `old` as a hidden alias of the option `new` already added to `parser` (a parser
    or an argument group, so a mutually exclusive group keeps excluding both spellings)."""
    dest = new.lstrip("-").replace("-", "_")
    parser.add_argument(old, dest=dest, action=_Deprecated, new=new, help=argparse.SUPPRESS,
                        metavar=new.lstrip("-").upper())
