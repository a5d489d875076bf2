"""`python -m gpu_backend build`: its help documents every flag and points to spec/engine.md, and a
build says what it built."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_help_documents_every_flag_and_the_spec():
    out = subprocess.run([sys.executable, "-m", "gpu_backend", "build", "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60).stdout
    flags = set(re.findall(r"\[?(--[A-Za-z]+)", out.split("options:")[0]))
    entries = re.split(r"\n  (?=-)", out.split("options:")[1])
    described = {e.split()[0].rstrip(","): " ".join(e.split()[1:]) for e in entries if e.strip().startswith("-")}
    assert len(flags) >= 30
    for flag in flags - {"--help"}:
        words = described.get(flag, "").split()
        assert len([w for w in words if not w.isupper()]) >= 2, f"{flag} is not documented: {words}"
    assert "spec/engine.md" in out


def test_a_build_says_what_it_built(tmp_path):
    p = subprocess.run([sys.executable, "-m", "gpu_backend", "build", "--engineDir", str(tmp_path / "e"),
                        "--maxInputLen", "40", "--maxKVCacheCapacity", "64", "--maxKVPoolPages", "0", "--tokensPerPage",
                        "8", "--model", "hybrid", "--numLayers", "4"], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert p.returncode == 0
    line = p.stderr.strip()
    assert line.startswith("gpu_backend: built ") and "\n" not in line
    for fact in (str(tmp_path / "e"), "hybrid model of 4 layers", "P = 8", "max_input_len 40", "capacity 64"):
        assert fact in line, fact
