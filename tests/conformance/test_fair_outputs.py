"""Outputs compared like with like, and the observable each comparison used (spec/RUNNING.md
section 5): a backend that prints text only is judged on its text, never against its replay's ids."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli import main as kvconform
from conformance.judge.compare import NEAR_TIE_NATS, compare_outputs
from conformance.judge.verdicts import Verdict
from tests.helpers import HELPERS

TEXT_ONLY = HELPERS / "text_only_backend.py"


class Bytes:
    """An Explainer for outputs on a bytes-v1 engine."""

    def output(self, i, detail):
        return detail

    def decode(self, ids):
        return bytes(t for t in ids if t < 256).decode("latin-1")


def text_only(text, finish="max-length"):
    return {"request_idx": 0, "batch_idx": 0, "output_text": text, "finish_reason": finish}


def with_logprobs(text, steps, finish="max-length"):
    r = text_only(text, finish)
    r["output_ids"] = [max(s, key=lambda c: c[1])[0] for s in steps]
    r["logprobs"] = [[{"token_id": t, "token": chr(t), "bytes": [t], "logprob": lp} for t, lp in s] for s in steps]
    return r


def test_a_text_is_compared_with_the_replays_text_not_its_ids():
    """The replay always asks two candidates (so it has token ids); the run asked none: both are
    compared on output_text, and the comparison says so."""
    replay = with_logprobs("#", [[(35, -0.1), (36, -3.0)]])
    used: dict = {}
    assert compare_outputs([text_only("#")], [replay], Bytes(), ids=False, used=used) == []
    assert used == {"output_text": [0]}


def test_ids_are_compared_where_both_runs_have_them():
    a = with_logprobs("ab", [[(97, -0.1), (98, -2.0)], [(98, -0.2), (99, -3.0)]])
    used: dict = {}
    assert compare_outputs([a], [dict(a)], Bytes(), ids=True, used=used) == []
    assert used == {"output_ids": [0]}
    used = {}
    assert compare_outputs([a], [dict(a)], Bytes(), ids=False, used=used) == []
    assert used == {"logprobs": [0]}


def test_a_different_text_is_a_fail_naming_the_text():
    replay = with_logprobs("ab", [[(97, -0.1), (98, -3.0)], [(98, -0.1), (99, -3.0)]])
    [f] = compare_outputs([text_only("ax")], [replay], Bytes(), ids=False)
    assert f.verdict == Verdict.FAIL and f.what == "responses[0].output_text" and "character 1" in f.why


def test_a_text_that_took_the_replays_runner_up_at_a_near_tie_is_a_warning():
    gap = NEAR_TIE_NATS / 2
    replay = with_logprobs("ab", [[(97, -0.1), (98, -3.0)], [(98, -0.69), (99, -0.69 - gap)]])
    [f] = compare_outputs([text_only("ac")], [replay], Bytes(), ids=False)
    assert f.verdict == Verdict.QUALITY_WARNING and "near-tie" in f.why


@pytest.fixture(scope="module")
def p4_engine(tmp_path_factory):
    folder = tmp_path_factory.mktemp("p4") / "engine"
    subprocess.run([sys.executable, "-m", "gpu_backend", "build", "--engineDir", str(folder), "--maxInputLen", "64",
                    "--maxKVCacheCapacity", "128", "--maxKVPoolPages", "0", "--tokensPerPage", "4",
                    "--maxBatchSize", "4"], check=True, capture_output=True)
    return folder


def test_the_bundled_cli_without_output_ids_is_conformant(p4_engine, tmp_path, capsys):
    """The release blocker as reported: the bundled backend's own CLI behind a wrapper that drops
    `output_ids`, a bytes-v1 engine at P = 4, no manifest. Its texts equal its replay's texts."""
    code = kvconform(["run", "--backend", "command", "--executable", f"{sys.executable} {TEXT_ONLY}",
                      "--engine-dir", str(p4_engine), "-k", "golden/plan-kinds-p4", "--no-generated",
                      "--no-progress", "--report", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == 0, out
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    [case] = doc["cases"]
    assert case["verdict"] == "PASS", case
    judged = case["details"]["judged"]
    assert judged["outputs_compared_on"] == {"output_text": [0, 1, 2, 3, 4]}
    assert judged["generated_ids_from"] == {"output_text": [0, 1, 2, 3, 4]}, "bytes-v1 text is exact"
    assert judged["counts"] > 0 and judged["aggregates"] is True


def test_a_text_only_cli_with_a_build_command_is_conformant(tmp_path, capsys, monkeypatch):
    """The same through `--build-command` (an engine built per case, at the case's P = 4)."""
    monkeypatch.setenv("KVCONFORM_CACHE", str(tmp_path / "cache"))
    code = kvconform(["run", "--backend", "command", "--executable", f"{sys.executable} {TEXT_ONLY}",
                      "--build-command", f"{sys.executable} -m gpu_backend build", "-k", "golden/plan-kinds-p4",
                      "--no-generated", "--no-progress", "--report", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == 0, out
    [case] = json.loads((tmp_path / "r" / "report.json").read_text())["cases"]
    assert case["verdict"] == "PASS" and case["details"]["judged"]["outputs_compared_on"] == {"output_text": [0, 1, 2, 3, 4]}
