"""The committed runs of a real vLLM (examples/vllm/, examples/vllm-sliding-window/) hold on any
machine: no file under examples/ names a path of the machine that made it (a reader's checkout
differs), and each vLLM run is the judged, complete run its README's table says (folder, cases,
counts, result). The runs themselves are checked against a fresh real server by
tests/conformance/test_real_vllm.py (opt-in, external)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# A path of the machine: an absolute path into the usual roots, at the start of a word or after a
# quote, bracket or `=` (so `a/work/b` or a URL's path is not one).
ABSOLUTE = re.compile(r"""(?:^|[\s"'`(=:])(/(?:work|tmp|home|root|usr|var|opt|mnt|srv|Users)/)""", re.MULTILINE)
RUNS = [("vllm", "block-32"), ("vllm", "block-128"), ("vllm-sliding-window", ".")]


def _example_files():
    return sorted(p for p in EXAMPLES.rglob("*") if p.is_file())


def test_the_examples_are_there():
    names = {p.relative_to(EXAMPLES).as_posix() for p in _example_files()}
    for example, folder in RUNS:
        assert f"{example}/{folder}/report.json".replace("/./", "/") in names


@pytest.mark.parametrize("path", _example_files(), ids=lambda p: p.relative_to(EXAMPLES).as_posix())
def test_no_committed_example_names_a_path_of_the_machine(path):
    text = path.read_text(errors="replace")
    found = [m.group(1) + text[m.end():m.end() + 40].split()[0] if text[m.end():m.end() + 40].split() else m.group(1)
             for m in ABSOLUTE.finditer(text)]
    assert not found, f"examples/{path.relative_to(EXAMPLES).as_posix()} names absolute paths: {found[:3]}"


def test_the_path_check_finds_what_it_must():
    """The pattern catches the paths the old vLLM examples carried, and not relative ones."""
    for bad in ('"tokenizer": "/work/wt/x/.kvconform-cache/tokenizers/qwen2.5"', "--report /tmp/vs/recipe/b",
                "cd /home/me/kit && kvconform run", "`/tmp/a`"):
        assert ABSOLUTE.search(bad), bad
    for good in ('"report": "kvconform-report-vllm/block-32"', "http://127.0.0.1:18100/v1/models",
                 ".kvconform-cache/tokenizers/qwen2.5"):
        assert not ABSOLUTE.search(good), good


@pytest.mark.parametrize("example, folder", RUNS, ids=[f"{e}/{f}" for e, f in RUNS])
def test_the_readme_table_is_the_committed_run(example, folder):
    """The README's row for the folder (cases, counts judged, result) is what its report.json says."""
    doc = json.loads((EXAMPLES / example / folder / "report.json").read_text())
    assert doc["complete"] and doc["peer"]["profile"] == "vllm-apc"
    counts = sum(1 for c in doc["cases"] for s in (c.get("details") or {}).get("steps", [])
                 if s.get("predicted") is not None)
    label = "`.`" if folder == "." else f"`{folder}/`"
    rows = [line for line in (EXAMPLES / example / "README.md").read_text().splitlines()
            if line.startswith(f"| {label} |")]
    assert len(rows) == 1, f"examples/{example}/README.md: one table row for {label} expected, found {len(rows)}"
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[-3:] == [str(len(doc["cases"])), str(counts), doc["summary"]["headline"]], rows[0]


def test_a_peer_rerun_command_keeps_the_folders_as_given(tmp_path, monkeypatch):
    """A failing peer case's re-run command (written into report.json and summary.md) names the
    tokenizer and report folders as the run was given them, and no working directory: the
    sliding-window example carries one, and a relative run names no path of the machine."""
    import argparse
    import shlex

    from conformance.peers.runner import rerun_command

    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(base_url="http://127.0.0.1:18100", profile="vllm-apc", model="tiny-gemma3",
                              api_key_env=None, tokenizer=".kvconform-cache/tokenizers/qwen2.5", peer_setting=[],
                              timeout=300.0, report="kvconform-report-vllm/sliding-window-32")
    command = rerun_command(args, "turns/feedback")
    assert str(tmp_path) not in command and not ABSOLUTE.search(command), command
    argv = shlex.split(command)
    assert argv[:2] == ["kvconform", "run"]
    assert argv[argv.index("--tokenizer") + 1] == ".kvconform-cache/tokenizers/qwen2.5"
    assert argv[argv.index("--report") + 1] == "kvconform-report-vllm/sliding-window-32/reruns/turns_feedback"
    assert argv[argv.index("-k") + 1] == "turns/feedback"
