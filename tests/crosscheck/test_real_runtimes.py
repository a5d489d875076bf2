"""The cross-check against the real runtimes' own cache classes (docs/crosscheck.md). Opt-in:
`python -m pytest -m external tests/crosscheck` (installs each runtime into
.kvconform-cache/crosscheck/ the first time: 3-7 min each on 2 cores; then ~1-2 min per run).

Each run must classify every disagreement (exit 0), and find only the classes docs/crosscheck.md
records for that version; the agreement counts are the committed run's
(examples/crosscheck/<runtime>-<version>/result.json) for the same seeds.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "crosscheck.sh"
EXAMPLES = ROOT / "examples" / "crosscheck"

pytestmark = [pytest.mark.external, pytest.mark.timeout(3600)]


@pytest.mark.parametrize("spec", ["vllm==0.32.0", "vllm==0.33.0", "sglang==0.5.23"])
def test_a_short_crosscheck_finds_only_the_recorded_classes(spec, tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), spec, "--requests", "5000", "--report", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=3500)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    mine = json.loads((tmp_path / "result.json").read_text())
    committed = json.loads((EXAMPLES / spec.replace("==", "-") / "result.json").read_text())
    recorded = {c["class"] for c in committed["classes"]}
    assert {c["class"] for c in mine["classes"]} <= recorded
    assert mine["requests"] >= 5000 and mine["agree"] >= 0.8 * mine["streams"]
