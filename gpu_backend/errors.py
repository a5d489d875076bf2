"""Exceptions of the bundled backend.

The CLI maps them to exit codes (docs/ARCHITECTURE.md section 4, spec/RUNNING.md section 2):
`BackendInputError` -> 2 (bad input or usage, nothing run), `DeploymentRejected` -> 3
(CR-SUP / CR-HYB-2, nothing run). A batch that fails at run time is not an exception: its
responses say `finish_reason: "error"` and the run goes on (CR-CAP-8).
"""


class BackendInputError(Exception):
    """Bad input: a request file, an engine directory, a media file or a flag.

    `path` is a JSON path into the offending file (`$.requests[0].messages[1].content`) or a
    flag name (`--batchSize`); `file` names the file when there is one.
    """

    def __init__(self, path: str, message: str, file: str | None = None):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
        self.file = file

    def one_line(self) -> str:
        text = f"{self.path}: {self.message}"
        if self.file:
            text = f"{self.file}: {text}"
        return " ".join(text.split())


class DeploymentRejected(Exception):
    """The runtime refuses to start with context reuse on this deployment (CR-SUP, CR-HYB-2)."""

    def __init__(self, message: str, rule: str):
        super().__init__(message)
        self.message = message
        self.rule = rule


class BatchFailure(Exception):
    """A batch fails as a whole at run time (CR-CAP-8); caught by the runtime, never escapes."""
