"""docs/oracle-api.md runs as written: each ```python block, run from the repository root in a
fresh interpreter, prints exactly the ```text block that follows it. The printed counts are
derived by hand in the page's prose (rule by rule), so a change of the oracle that moves them
fails here and must be argued in the doc."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "oracle-api.md"
PAIR = re.compile(r"```python\n(.*?)```\s*\n\s*prints\s*\n\s*```text\n(.*?)```", re.S)


def examples() -> list[tuple[str, str]]:
    return PAIR.findall(PAGE.read_text())


def test_the_page_has_its_examples():
    # three examples: a peer stream, its trace, an Edge-LLM request file; each with what it prints
    assert len(examples()) == 3
    assert PAGE.read_text().count("```python") == 3


@pytest.mark.parametrize("code, printed", examples(), ids=["peer-stream", "peer-trace", "edge-llm-file"])
def test_each_example_prints_what_the_page_says(code, printed):
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == printed, f"docs/oracle-api.md promises\n{printed}\nthe code printed\n{run.stdout}"


def test_the_stream_example_is_five_lines_of_oracle():
    """A runtime developer's first question, answered in five lines: the first example's lines
    that are neither blank nor comments, imports apart, fit in five."""
    code = examples()[0][0]
    lines = [line for line in code.splitlines() if line.strip() and not line.startswith(("from ", "import "))]
    assert len(lines) <= 5, lines
