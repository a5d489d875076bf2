"""`kvconform selftest`: the suite must catch every faulty backend of the catalogue, pass the
bundled backend and the oracle, fail the broken adapter everywhere and the broken-judging adapter
wherever log-probabilities are judged, within the default budget on this repository's 2-core
machine.

The whole catalogue at the default budget takes two to three minutes of both cores: it is
`-m slow`. The default run checks the gate on two variants with its two cheap baselines at a
short budget here (the bundled backend's own runs over the suite are other default tests), and
each variant's kill on the case that killed it in the last full run in
tests/conformance/test_catalogue_rules.py."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.cli import main as kvconform
from conformance.commands.selftest import BASELINES, check_of, narrowed, observable_of
from faulty_backends import CATALOGUE
from faulty_backends.registry import variant
from conformance.judge.verdicts import Failure, Verdict
from gpu_backend.prefix_cache import ContextCache

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_selftest_kills_every_variant_at_the_default_budget(tmp_path):
    started = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "conformance.cli", "selftest", "--no-progress",
                        "--report", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - started
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert p.stdout.rstrip().splitlines()[-1] == "SELFTEST PASSED" and "kill rate" in p.stdout
    doc = json.loads((tmp_path / "selftest.json").read_text())
    assert [v["name"] for v in doc["variants"]] == list(CATALOGUE)
    survivors = [v["name"] for v in doc["variants"] if not v["killed"]]
    assert not survivors and doc["kill_rate"]["percent"] == 100.0
    for v in doc["variants"]:
        assert v["kill"]["verdict"] in ("FAIL", "ERROR", "TIMEOUT"), v
        assert v["kill"]["check"] and v["kill"]["observable"], v
        assert v.get("profile") == CATALOGUE[v["name"]].profile, v       # judged under the profile it breaks
    assert set(doc["baselines"]) == {"inprocess", "reference", "broken", "broken-judging"}
    assert all(b["ok"] for b in doc["baselines"].values()), {k: b["problems"] for k, b in doc["baselines"].items()}
    assert doc["baselines"]["reference"]["verdicts"] == {"PASS": doc["baselines"]["reference"]["cases_run"]}
    assert doc["baselines"]["broken"]["verdicts"] == {"ERROR": doc["baselines"]["broken"]["cases_run"]}
    # malformed log-probabilities: ERROR in the curated cases that compare them and in all 3 families
    assert doc["baselines"]["broken-judging"]["verdicts"]["ERROR"] >= 3 + 60
    matrix = (tmp_path / "kill-matrix.md").read_text()
    assert all(f"`{name}`" in matrix for name in CATALOGUE)
    assert wall < 600, f"the selftest took {wall:.0f} s"


def test_the_gate_on_two_variants_and_the_cheap_baselines_at_a_short_budget(tmp_path):
    """Two variants of different classes (cache identity, capacity) killed, and the oracle and
    broken baselines over every curated case and family: the oracle passes, broken errs
    everywhere; the headline says the run was a selection. The two baselines that run the
    bundled backend over the whole suite are judged where the default tests already run it:
    inprocess in tests/conformance/test_suite.py (every curated case and each family),
    broken-judging in tests/conformance/test_trust.py; all four together under -m slow above."""
    names = ["lora-not-in-key", "evicts-mru"]
    p = subprocess.run([sys.executable, "-m", "conformance.cli", "selftest", "--no-progress", "--examples", "2",
                        "--budget-seconds", "3", *[a for n in names for a in ("--variant", n)],
                        "--baseline", "reference", "--baseline", "broken", "--report", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert p.stdout.rstrip().splitlines()[-1] == (f"SELFTEST PASSED (a selection: 2 of {len(CATALOGUE)} variants; "
                                                  "baselines: reference, broken)")
    doc = json.loads((tmp_path / "selftest.json").read_text())
    assert [v["name"] for v in doc["variants"]] == names and doc["kill_rate"]["percent"] == 100.0
    assert all(v["kill"]["verdict"] in ("FAIL", "ERROR", "TIMEOUT") for v in doc["variants"])
    base = doc["baselines"]
    assert set(base) == {"reference", "broken"} and doc["settings"]["baselines"] == ["reference", "broken"]
    assert all(b["ok"] for b in base.values()), {k: b["problems"] for k, b in base.items()}
    assert base["reference"]["verdicts"] == {"PASS": base["reference"]["cases_run"]}
    assert base["broken"]["verdicts"] == {"ERROR": base["broken"]["cases_run"]}
    assert base["reference"]["cases_run"] == base["broken"]["cases_run"] >= 160 + 3   # curated + the families


def test_the_headline_of_a_selection_says_what_it_left_out():
    assert narrowed(52, 52, list(BASELINES)) == ""
    assert narrowed(2, 52, list(BASELINES)) == " (a selection: 2 of 52 variants)"
    assert narrowed(52, 52, []) == " (a selection: baselines: none)"


def test_a_surviving_variant_fails_the_selftest(tmp_path, capsys):
    """The gate can fail: a 'variant' without a defect survives, and the selftest says so."""
    @variant("no-defect-for-test", "planning")
    class NoDefect(ContextCache):
        """A variant that changes nothing (a check of the gate itself).

        Bug class: none. Violates: CR-PLAN-1. Mirrors: nothing (an equivalent mutant, #0).
        """
        def plan(self, ident, n, *, bypass, splits_media):
            return super().plan(ident, n, bypass=bypass, splits_media=splits_media)
    try:
        code = kvconform(["selftest", "--variant", "no-defect-for-test", "--no-baselines", "--jobs", "1",
                          "--examples", "2", "--no-progress", "--report", str(tmp_path)])
    finally:
        del CATALOGUE["no-defect-for-test"]
    out = capsys.readouterr().out
    assert code == 1 and "SURVIVED: no-defect-for-test" in out and "SELFTEST FAILED" in out
    doc = json.loads((tmp_path / "selftest.json").read_text())
    assert doc["kill_rate"] == {"killed": 0, "total": 1, "percent": 0.0}
    assert doc["variants"][0]["cases_run"] > 100, "a survivor ran the whole suite, generated families included"


def test_selftest_bad_input_and_list(capsys):
    assert kvconform(["selftest", "--variant", "no-such-variant"]) == 2
    capsys.readouterr()
    assert kvconform(["selftest", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in CATALOGUE)


def test_kill_evidence_is_classified():
    counter = Failure("CR-MET-2", "profile.context_cache.hit_sequences", 1, 2, "why")
    facts = Failure("CR-PLAN-2", "responses[1].context_cache.plan", "a", "b", "why", 1)
    output = Failure("CR-OUT-1", "responses[2].output_ids", [1], [2], "why", 2)
    refused = Failure("CR-SUP-2", "deployment", "refused", "ok", "why")
    assert [observable_of(f, "FAIL", "") for f in (counter, facts, output, refused)] == \
        ["counter", "per-request", "output", "rejection"]
    assert observable_of(None, "ERROR", "run: Runtime.infer raised IndexError") == "crash"
    ids = ("golden/x", "sections/id/y", "generated/text", "regressions/gen-1", "vlm_context_reuse")
    assert [check_of(i) for i in ids] == ["golden case", "curated case", "generated set", "regression case",
                                          "curated case"]
    assert Verdict.TIMEOUT < Verdict.FAIL
