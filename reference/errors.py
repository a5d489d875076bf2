"""Exceptions of the reference oracle.

Callers add file-level context ("FILE: ") themselves; these carry only a JSON path and a
message, so that one line names what is wrong and where.
"""


class InputError(Exception):
    """Bad input: a request file, engine description or build argument that the spec refuses.

    `path` is a JSON path into the offending document ("$.requests[2].messages[0]"),
    `message` says what is wrong. `str()` gives "PATH: MESSAGE".
    """

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class NeedsTranscript(Exception):
    """The counts depend on generated tokens that were not given (spec/RUNNING.md §4 step 5)."""


class OutOfScope(Exception):
    """The semantics profile leaves these counts undefined (a checkpoint hit trimmed to another
    length, spec/profiles.md `hybrid_media_trim`), so the oracle cannot predict them."""


class Unreported(Exception):
    """The counts depend on a fact the backend did not report, so the oracle does not guess them:
    the decode-end publication of a paired EAGLE sequence needs the number of tokens its last
    verification accepted (CR-SPEC-4, output field `last_verification_accepted`)."""


class DeploymentRejected(RuntimeError):
    """Raised when a simulator whose deployment was refused (CR-SUP) is asked to run."""

    def __init__(self, rejection):
        super().__init__(f"deployment rejected ({rejection.rule}): {rejection.message}")
        self.rejection = rejection
