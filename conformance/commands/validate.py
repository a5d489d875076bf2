"""`kvconform validate FILE...`: schema and semantic checks, one line per problem.

What is checked for each kind of file (request, case, engine, output, profile, predictions,
report, capabilities): conformance/cases/validate.py. A valid request or case file with keys the
format does not know gets one warning line per key (they are ignored, and may be typos).
Exit 0 when every file is valid, 2 otherwise; never a traceback.
"""
from __future__ import annotations

import sys

from .. import KvconformError
from ..cases.validate import KINDS, check_file, load_engine, unknown_keys
from .options import deprecated_spelling


def add_arguments(parser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="files to check")
    parser.add_argument("--kind", choices=KINDS, help="the kind of every FILE (default: told from content)")
    engine = parser.add_mutually_exclusive_group()
    engine.add_argument("--engine-dir", metavar="D", help="also run the engine-dependent checks of request files")
    engine.add_argument("--engine-config", metavar="FILE", help="like --engine-dir, with a config.json file")
    deprecated_spelling(engine, "--engineDir", "--engine-dir")
    deprecated_spelling(engine, "--engineConfig", "--engine-config")


def main(args) -> int:
    engine = None
    if args.engine_dir or args.engine_config:
        engine = load_engine(args.engine_dir or args.engine_config)
    bad = 0
    for file in args.files:
        problems, kind = check_file(file, args.kind, engine)
        for path, message in problems:
            print(f"kvconform: error: {KvconformError(message, file, path)}", file=sys.stderr)
        if problems:
            bad += 1
            continue
        print(f"{file}: ok ({kind})")
        for path, message in unknown_keys(file, kind):
            print(f"kvconform: warning: {KvconformError(message, file, path)}", file=sys.stderr)
    return 2 if bad else 0
