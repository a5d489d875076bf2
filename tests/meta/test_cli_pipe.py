"""A reader that goes away (`kvconform parity | head -1`) ends any command quietly: exit 141 (as a
command stopped by SIGPIPE), nothing on stderr, never a BrokenPipeError traceback."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import cli

ROOT = Path(__file__).resolve().parents[2]


def run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """The command with its stdout on a pipe whose reader has already gone."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "conformance.cli", *args], stdout=write,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [
    ("parity", "--runtime", "vLLM", "--verbose"),                    # more than a buffer: fails in print
    ("validate", "cases/golden/batch-overlap.json"),     # one line: fails at the last flush
])
def test_a_closed_pipe_ends_the_command_quietly(args):
    done = run_into_closed_pipe(*args)
    assert done.stderr == "" and done.returncode == 141 == cli.EXIT_BROKEN_PIPE
