"""`kvconform selftest --mutate`: the mutation campaign on one small definition, resumed.

`PagePlanner.plan` (gpu_backend/page_planner.py) has three mutants under the campaign's
operators: `n // P` as `n * P` (the lookup asks for pages the input does not have), `len(kept) *
P` as `len(kept) + P` (matched tokens), and `total - len(kept)` as `total + len(kept)` (the page
demand of CR-PLAN-5). Judged by `golden/plan-full-input-rewind-128` alone, the first two fail it
(its counts are hand-derived) and the third survives: that case never runs out of pages, so the
demand is never read. `golden/cap-two-record-eviction` fills the pool, so it catches the third:
the survivor is killed by a case, as the triage asks.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from conformance.cli import main as kvconform

pytest.importorskip("cosmic_ray", reason="the mutation campaign needs the mutate extra: pip install -e '.[mutate]'")

ROOT = Path(__file__).resolve().parents[2]
MODULE = "gpu_backend/page_planner.py::plan"
REWIND = str(ROOT / "cases/golden/plan-full-input-rewind-128.json")
EVICTION = str(ROOT / "cases/golden/cap-two-record-eviction.json")
DEMAND = "gpu_backend/page_planner.py:26:ReplaceBinaryOperator_Sub_Add:0"
DEMAND_KEY = "gpu_backend/page_planner.py::PagePlanner.plan ReplaceBinaryOperator_Sub_Add#0: demand = total - len(kept)"


def campaign(store: Path, *extra: str) -> int:
    return kvconform(["selftest", "--mutate", str(ROOT / MODULE), "--profile", "kvconform-1", "--jobs", "1",
                      "--store", str(store), "--no-progress", "--case", REWIND, *extra])


def rows(store: Path) -> dict:
    db = sqlite3.connect(store)
    db.row_factory = sqlite3.Row
    return {r["id"]: dict(r) for r in db.execute("SELECT * FROM mutants")}


def test_a_small_campaign_records_each_mutant_resumes_and_checks_its_survivors(tmp_path, capsys):
    store = tmp_path / "store.sqlite"
    # 1. two of the three mutants, then stop: each verdict is in the store with its case, rule and diff
    assert campaign(store, "--limit", "2") == 0
    first = rows(store)
    assert len(first) == 3
    judged = {k: r for k, r in first.items() if r["status"] != "pending"}
    assert set(judged) == {"gpu_backend/page_planner.py:23:ReplaceBinaryOperator_FloorDiv_Mul:0",
                           "gpu_backend/page_planner.py:24:ReplaceBinaryOperator_Mul_Add:0"}
    for r in judged.values():
        assert r["status"] == "killed" and r["case_id"] == "golden/plan-full-input-rewind-128", r
        assert r["rule"] and r["rule"].startswith("CR-") and r["verdict"] in ("FAIL", "ERROR"), r
        assert r["diff"].startswith("--- a/gpu_backend/page_planner.py") and r["line"] in (23, 24)
    assert "-        matched = len(kept) * self.P" in judged["gpu_backend/page_planner.py:24:"
                                                            "ReplaceBinaryOperator_Mul_Add:0"]["diff"]

    # 2. resumed with --check: only the pending mutant is judged; it survives, and --check fails on it
    capsys.readouterr()
    assert campaign(store, "--check") == 1
    out = capsys.readouterr().out
    second = rows(store)
    assert all(second[k]["judged_at"] == r["judged_at"] for k, r in judged.items())     # not judged again
    assert second[DEMAND]["status"] == "survived" and second[DEMAND]["case_id"] is None
    assert DEMAND_KEY in out and "MUTATION CHECK FAILED: 1 survivor(s) without a triage entry" in out
    assert "66.7%" in out                                        # 2 killed of 3 that could be
    assert second[DEMAND]["key"] == DEMAND_KEY

    # 3. a triage keyed by line number explains nothing (any edit above the line moves it) ...
    triage = tmp_path / "triage.json"
    triage.write_text(json.dumps({DEMAND: {"equivalent": "stand-in argument for this test"}}))
    assert campaign(store, "--check", "--triage", str(triage)) == 1
    assert "keyed by line number and explain nothing" in capsys.readouterr().err
    # ... one keyed by the stable key passes the check (nothing is judged again)
    triage.write_text(json.dumps({DEMAND_KEY: {"equivalent": "stand-in argument for this test"}}))
    assert campaign(store, "--check", "--triage", str(triage)) == 0
    assert "MUTATION CHECK PASSED" in capsys.readouterr().out
    assert rows(store)[DEMAND]["judged_at"] == second[DEMAND]["judged_at"]

    # 4. better: a case that reads the demand kills it (the survivors are judged again)
    assert campaign(store, "--case", EVICTION, "--rejudge", "survived", "--check") == 0
    last = rows(store)[DEMAND]
    assert last["status"] == "killed" and last["case_id"] == "golden/cap-two-record-eviction", last


def test_bad_mutation_options_are_one_line(tmp_path, capsys):
    assert kvconform(["selftest", "--mutate", "README.md", "--store", str(tmp_path / "s")]) == 2
    assert "README.md: no such Python module" in capsys.readouterr().err
    assert kvconform(["selftest", "--mutate", "gpu_backend/page_planner.py::nothing_here",
                      "--store", str(tmp_path / "s")]) == 2
    assert "defines no 'nothing_here'" in capsys.readouterr().err
    assert kvconform(["selftest", "--check"]) == 2
    assert "--check applies to --mutate" in capsys.readouterr().err


@pytest.mark.ray
def test_the_campaign_on_ray_judges_as_locally(tmp_path, capsys):
    """`--executor ray`: each unit (a batch of mutants) is a Ray task of a local cluster; the
    verdicts are the local run's (the two kills by their case and rule, the one survivor)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, object_store_memory=200 * 1024 * 1024, include_dashboard=False, log_to_driver=False)
    try:
        store = tmp_path / "store.sqlite"
        assert campaign(store, "--executor", "ray", "--batch", "1") == 0
    finally:
        ray.shutdown()
    got = {k: (r["status"], r["case_id"]) for k, r in rows(store).items()}
    assert got == {"gpu_backend/page_planner.py:23:ReplaceBinaryOperator_FloorDiv_Mul:0":
                   ("killed", "golden/plan-full-input-rewind-128"),
                   "gpu_backend/page_planner.py:24:ReplaceBinaryOperator_Mul_Add:0":
                   ("killed", "golden/plan-full-input-rewind-128"),
                   DEMAND: ("survived", None)}
    assert "ray executor" in capsys.readouterr().err


def test_a_script_of_its_own_process_is_judged_by_the_cases_that_call_it():
    """Coverage.py in the measuring process never sees the template worker's lines (a process of
    its own, started once and kept), so its mutants take the cases that execute the first
    statement of each function that names the script: here `ask` (line 4 by hand), not `other`,
    and not the `Popen` line, which runs only for the first case that renders a template."""
    from conformance.mutation.casemap import merge_selections, script_users
    source = ("SCRIPT = 'worker.py'\n"
              "def ask(request):\n"
              "    '''Talk to the worker.'''\n"
              "    key = hash(request)\n"
              "    if PROC is None:\n"
              "        start(SCRIPT)\n"
              "def other():\n"
              "    return 1\n")
    assert script_users(source, "SCRIPT") == [4]
    assert merge_selections([{"p": ["a", "b"]}, {"p": ["b", "c"], "q": ["d"]}]) == {"p": ["a", "b", "c"], "q": ["d"]}
