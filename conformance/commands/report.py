"""`kvconform report DIR`: write DIR/report.html again from DIR/report.json.

The page is a function of report.json alone (conformance/report/html.py), so a report folder
from another machine, a merged one, or one written by an earlier kit gets its page back without
running anything. report.json must be a valid report (spec/schemas/report.schema.json): anything
else is bad input (exit 2, one line naming the file and JSON path), and nothing is written.
"""
from __future__ import annotations

from pathlib import Path

from .. import KvconformError
from ..cases.schemas import read_json
from ..report.document import check_report
from ..report.folder import lock_report_folder, write_text_atomic
from ..report.html import render


def add_arguments(parser) -> None:
    parser.add_argument("folder", metavar="DIR", help="a report folder holding report.json")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write the page here instead of DIR/report.html (e.g. when DIR is read-only)")


def main(args) -> int:
    folder = Path(args.folder)
    source = folder / "report.json"
    if not folder.is_dir():
        raise KvconformError("not a report folder", str(folder))
    if not source.is_file():
        raise KvconformError("no report.json in this folder", str(folder))
    if not args.output:
        lock_report_folder(folder, "report")       # never while a run is writing the folder
    doc = read_json(source)
    problems = check_report(doc)
    if problems:
        raise KvconformError(problems[0][1], str(source), problems[0][0])
    out = Path(args.output) if args.output else folder / "report.html"
    if out.is_dir():
        raise KvconformError("is a folder: --output names the page's file", str(out))
    try:
        write_text_atomic(out, render(doc))
    except OSError as e:
        raise KvconformError(f"cannot write the page: {e.strerror or e}", str(out)) from None
    print(f"kvconform report: {out} ({doc['summary']['headline']}, {len(doc['cases'])} case(s))")
    return 0
