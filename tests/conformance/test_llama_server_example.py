"""The committed runs of a real llama-server (examples/llama-server/) hold on any machine: they name
no path of the machine that made them (a reader's checkout differs), and each is the judged,
complete run its README's table says (folder, cases, counts). The runs themselves are checked
against a fresh real server by tests/conformance/test_real_llama_server.py (opt-in, external)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "llama-server"
FOLDERS = [".", "reuse-shift", "two-slots"]
ABSOLUTE = re.compile(r"""(?:^|[\s"'`(=])(/(?:work|tmp|home|root|usr|var|opt|mnt)/)""")


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_committed_run_names_no_path_of_the_machine(folder):
    for name in ("report.json", "summary.md"):
        text = (EXAMPLES / folder / name).read_text()
        found = [m.group(1) + text[m.end():m.end() + 40].split()[0] for m in ABSOLUTE.finditer(text)]
        assert not found, f"{folder}/{name} names absolute paths: {found[:3]}"


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_readme_table_is_the_committed_run(folder):
    """The README's row for the folder (cases, counts judged, result) is what its report.json says."""
    doc = json.loads((EXAMPLES / folder / "report.json").read_text())
    assert doc["complete"] and doc["peer"]["profile"] == "llama.cpp-server"
    counts = sum(1 for c in doc["cases"] for s in (c.get("details") or {}).get("steps", [])
                 if s.get("predicted") is not None)
    label = "`.`" if folder == "." else f"`{folder}/`"
    row = next(line for line in (EXAMPLES / "README.md").read_text().splitlines() if line.startswith(f"| {label} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[-3:] == [str(len(doc["cases"])), str(counts), doc["summary"]["headline"]], row
