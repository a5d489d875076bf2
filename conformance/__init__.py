"""kvconform's conformance runner: adapters, cases, verdicts and reports.

It talks to backends only through adapters (spec/RUNNING.md section 1), and takes every
expected count from the oracle in `reference/`. Its rooms and their import rules:
docs/ARCHITECTURE.md section 2. The package itself holds the kit's versions and the one error
type the command line turns into a one-line message and exit code 2.
"""

KIT_VERSION = "2026.11.0"
RUNNING_VERSION = "1.4.0"


class KvconformError(Exception):
    """Bad input: a file, an optional JSON path inside it, and what is wrong.

    `str()` is the one line the user sees, e.g.
    ``cases/x.json: $.requests[0].messages: missing required property 'messages'``.
    """

    def __init__(self, message: str, file: str | None = None, json_path: str | None = None):
        super().__init__(message)
        self.message = message
        self.file = file
        self.json_path = json_path

    def __str__(self) -> str:
        parts = [p for p in (self.file, self.json_path) if p]
        return ": ".join(parts + [self.message]).translate(_ONE_LINE)


# Control characters (a newline in a media path, a NUL in a JSON string) are escaped so the
# message stays one line whatever the input held.
_ONE_LINE = {i: f"\\x{i:02x}" for i in list(range(32)) + [127]}
_ONE_LINE.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
