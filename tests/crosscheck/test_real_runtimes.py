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


SGLANG_PYTHON = ROOT / ".kvconform-cache" / "crosscheck" / "sglang-0.5.23" / "venv" / "bin" / "python"


def test_sglang_window_and_mamba_examples_are_what_sglang_reports():
    """spec/peer-profiles.md PEER-SGL-10..13's worked examples through SGLang 0.5.23's own
    UnifiedRadixCache (tools/crosscheck/drive_sglang.py): the counts the spec and
    tests/reference/test_peer_sglang_hybrid.py state. KVCONFORM_SGLANG_PYTHON names another
    interpreter with SGLang 0.5.23."""
    import os
    python = Path(os.environ.get("KVCONFORM_SGLANG_PYTHON", SGLANG_PYTHON))
    if not python.exists():
        pytest.skip(f"no SGLang 0.5.23 at {python}: run tools/crosscheck.sh sglang==0.5.23 once")
    a, s = list(range(1000, 1040)), list(range(5000, 5160))
    seq, p17, m20 = a + s, list(range(100, 117)), list(range(1000, 1020))
    window, paged = {"sliding_window": 8}, {"page_size": 4, "sliding_window": 10, "swa_eviction_interval": 8}
    streams = {  # id: (settings, [(prompt, sampled)], the counts)
        **{f"w{k}": (window, [(a, s), (seq[:k] + [1, 2], [7]), (seq[:k] + [1, 2, 3], [7])], want)
           for k, want in ((10, [0, 0, 10]), (135, [0, 0, 135]), (136, [0, 136, 138]), (150, [0, 150, 152]))},
        **{f"p{k}": (paged, [(p17, [5, 6, 7]), (p17[:k] + [1, 2], [7])], [0, want])
           for k, want in ((15, 0), (16, 16), (17, 16))},
        "m1": ({"mamba": True}, [(m20, [5, 6, 7, 8]), ((m20 + [5, 6, 7])[:10] + [1, 2], [7]),
                                  ((m20 + [5, 6, 7])[:10] + [1, 2, 3], [7])], [0, 0, 12]),
        "m2": ({"mamba": True}, [(m20, [7]), (m20, [7]), (m20 + [3], [7])], [0, 0, 20]),
    }
    lines = [json.dumps({"stream": {"id": name, "settings": st, "steps": [{"prompt": p, "sampled": g}
                                                                           for p, g in steps]}})
             for name, (st, steps, _) in streams.items()] + [json.dumps({"quit": True})]
    done = subprocess.run([str(python), str(ROOT / "tools" / "crosscheck" / "drive_sglang.py")],
                          input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    answers = [json.loads(x) for x in done.stdout.splitlines()[1:]]
    got = {x["id"]: [o.get("cached") for o in x["observations"]] for x in answers}
    assert got == {name: want for name, (_, _, want) in streams.items()}, done.stderr[-2000:]
