"""Semantics profiles (spec/profiles.md): `kvconform-1` and `edge-llm-0.10` are data; the oracle,
the runner and the bundled backend follow them.

The differential check: the bundled backend configured as one profile is CONFORMANT under it,
and NOT CONFORMANT under the other, failing on exactly the cases where the oracle configured as
the first profile fails under the second (the oracle decides which cases differ, not the
backend), each of them about a rule a switch or an exclusion changes."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

import gpu_backend.semantics
import reference
from conformance.adapters.inprocess import InprocessAdapter
from conformance.adapters.reference import ReferenceAdapter
from conformance.cases.case import discover, select
from conformance.cli import main as kvconform
from conformance.report.document import Report
from conformance.run.suite import execute, make_plan
from conformance.judge.verdicts import Verdict
from reference.identity import MediaSpan
from reference.semantics import identity_spans, load_profile

from tests.helpers.cases import case

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("kvconform-1", "edge-llm-0.10")


def differing_rules() -> set[str]:
    """Rules a switch changes between the two profiles, and rules only one of them holds."""
    schema = json.loads((ROOT / "spec/schemas/semantics-profile.schema.json").read_text())
    a, b = (json.loads((ROOT / f"spec/profiles/{n}.json").read_text()) for n in NAMES)
    out = set(a["excluded_rules"]) ^ set(b["excluded_rules"])
    for name, prop in schema["properties"]["switches"]["properties"].items():
        if a["switches"][name] != b["switches"][name]:
            out |= set(re.findall(r"CR-[A-Z]+-\d+", prop["description"].partition(": ")[0]))
    return out


def test_profile_files_follow_their_schema_and_the_documents_are_generated():
    schema = json.loads((ROOT / "spec/schemas/semantics-profile.schema.json").read_text())
    for name in NAMES:
        doc = json.loads((ROOT / f"spec/profiles/{name}.json").read_text())
        jsonschema.validate(doc, schema)
        assert doc["name"] == name
    assert set(reference.PROFILE_NAMES) == set(NAMES)
    manifest = json.loads((ROOT / "spec/schemas/capabilities.schema.json").read_text())
    assert set(manifest["properties"]["semantics_profile"]["oneOf"][0]["enum"]) == set(NAMES)
    assert set(gpu_backend.semantics.PROFILES) == set(NAMES), "the backend implements every profile"
    done = subprocess.run([sys.executable, "tools/make_profiles_doc.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_merged_runs_take_the_kth_items_digest():
    """0.10's per-position media hash: A and B adjacent are one run with A's digest, and the next
    run (C, after text) takes the second image's digest, B's (edge-llm-0.10-semantics.md 3.1)."""
    a, b, c = (MediaSpan(s, e, d, "image", d + b"-raw") for s, e, d in ((2, 4, b"A"), (4, 6, b"B"), (8, 9, b"C")))
    merged = identity_spans([a, b, c], load_profile("edge-llm-0.10"))
    assert [(s.start, s.end, s.digest) for s in merged] == [(2, 6, b"A-raw"), (8, 9, b"B-raw")]
    assert identity_spans([a, b, c], load_profile("kvconform-1")) == [a, b, c]


def test_a_case_names_the_profiles_it_holds_in():
    assert case("golden/sup-9-tensor-parallel").profiles == ["kvconform-1"]       # CR-SUP-9: not in 0.10
    assert set(case("golden/media-adjacent-items").profiles) == set(NAMES)
    assert case("golden/media-adjacent-items").for_profile("edge-llm-0.10").meta["expect"]["context_cache"][
        "hit_sequences"] == 0                                                      # the 0.10 hand derivation
    assert case("golden/media-adjacent-items").for_profile("kvconform-1").meta["expect"]["context_cache"][
        "hit_sequences"] == 2


def test_conflated_media_leave_outputs_undefined():
    """Under edge-llm-0.10 r3 of id-distinct-keys reuses KV computed for the 16x32 image in place of
    its own 32x16 one (equal raw bytes): the oracle says its outputs are not a bypass run's."""
    c = case("golden/id-distinct-keys")
    engine = reference.engine_from_build_args(c.engine_args)
    for name, undefined in (("kvconform-1", []), ("edge-llm-0.10", [3])):
        flags = reference.RuntimeFlags.from_case_runtime(dict(c.runtime, semanticsProfile=name))
        responses = reference.Simulator(engine, flags).run(c.doc, c.base_dir)
        assert [r["request_idx"] for r in responses if r.get("outputs_defined") is False] == undefined


class _As:
    """The same adapter, but its runtime behaves as another profile than the one judged."""

    def __init__(self, behave_as: str):
        self.behave_as = behave_as


class BackendAs(InprocessAdapter):
    def __init__(self, behave_as: str):
        super().__init__(runtime_factory=lambda d, **kw: gpu_backend.Runtime(d, **dict(kw, semantics_profile=behave_as)))


class OracleAs(ReferenceAdapter):
    def __init__(self, behave_as: str):
        super().__init__()
        self.behave_as = behave_as

    def start(self, engine, runtime):
        return super().start(engine, dict(runtime, semanticsProfile=self.behave_as))


def _run(adapter, judged_as: str, tmp_path: Path, only: set[str] | None = None) -> dict[str, object]:
    plan = make_plan(None, None, None, None, False, generated=False, curated=True, families=None, shard=None,
                     profile=judged_as)
    if only is not None:
        plan.cases = [c for c in plan.cases if c.id in only]
    report = Report(tmp_path / f"{type(adapter).__name__}-{judged_as}", "x", adapter.capabilities(), {}, {},
                    profile=judged_as)
    return {r.id: r for r in execute(plan, adapter, report, progress=False)}


def _failing(results: dict) -> set[str]:
    return {k for k, r in results.items() if r.verdict in (Verdict.FAIL, Verdict.ERROR)}


def _conformant_as_edge_llm_0_10(tmp_path: Path, only: set[str] | None) -> None:
    results = _run(BackendAs("edge-llm-0.10"), "edge-llm-0.10", tmp_path, only)
    bad = {k: (r.verdict, r.reason) for k, r in results.items() if r.verdict not in (Verdict.PASS, Verdict.NOT_SUPPORTED)}
    assert not bad
    passed = sum(r.verdict == Verdict.PASS for r in results.values())
    assert passed >= (140 if only is None else len(only) - 2), passed


def test_the_bundled_backend_is_conformant_as_edge_llm_0_10_where_the_profiles_differ(tmp_path):
    """Every case about a rule the profiles set differently, and every case with media input,
    where most switches act whatever rule the case is about (an EAGLE case with an image once
    caught the backend applying the hybrid-hit trim to paired EAGLE hits). As kvconform-1, the
    default profile, tests/conformance/test_suite.py runs every case; every case as
    edge-llm-0.10 is -m slow."""
    differ = differing_rules()
    _conformant_as_edge_llm_0_10(tmp_path, {c.id for c in select(discover())
                                            if set(c.rules) & differ or _has_media(c.engine_args)})


def _has_media(engine_args: dict) -> bool:
    return bool(engine_args.get("vision") or engine_args.get("audio") or engine_args.get("tokenizer"))


@pytest.mark.slow
def test_the_bundled_backend_is_conformant_as_edge_llm_0_10(tmp_path):
    _conformant_as_edge_llm_0_10(tmp_path, None)


def _differential(judged_as: str, behaves_as: str, tmp_path: Path, every_case: bool) -> None:
    """The oracle, behaving as `behaves_as` and judged as `judged_as`, decides which cases fail
    (cheap: it runs every case); the backend behaving the same way must fail exactly those. The
    set differently; the default run gives the backend a sample (`_sample`), `every_case` all."""
    oracle = _run(OracleAs(behaves_as), judged_as, tmp_path)
    expected, differ = _failing(oracle), differing_rules()
    assert expected, "the profiles differ on no curated case: the differential would prove nothing"
    backend = _run(BackendAs(behaves_as), judged_as, tmp_path, None if every_case else _sample(oracle, differ))
    assert _failing(backend) == expected & set(backend)
    for key in expected & set(backend):
        named = set(backend[key].rules) | {f.rule for f in backend[key].failures}
        assert named & differ, f"{key} fails on {named}, none of which the profiles set differently"


def _sample(oracle: dict, differ: set[str], per_rule: int = 3) -> set[str]:
    """For every rule the profiles set differently, the first few cases about it that the oracle
    fails and the first few it passes: each difference is shown to fail, and not to fail wrongly."""
    out: set[str] = set()
    for rule in sorted(differ):
        about = sorted(k for k, r in oracle.items() if rule in r.rules or rule in {f.rule for f in r.failures})
        failing = [k for k in about if oracle[k].verdict in (Verdict.FAIL, Verdict.ERROR)]
        passing = [k for k in about if oracle[k].verdict == Verdict.PASS]
        out |= set(failing[:per_rule]) | set(passing[:per_rule])
    return out


@pytest.mark.parametrize("judged_as, behaves_as", [NAMES, NAMES[::-1]])
def test_the_other_profile_fails_exactly_where_the_oracle_says_they_differ(judged_as, behaves_as, tmp_path):
    _differential(judged_as, behaves_as, tmp_path, every_case=False)


@pytest.mark.slow
@pytest.mark.parametrize("judged_as, behaves_as", [NAMES, NAMES[::-1]])
def test_the_differential_over_every_curated_case(judged_as, behaves_as, tmp_path):
    _differential(judged_as, behaves_as, tmp_path, every_case=True)


def test_the_run_names_its_profile_and_refuses_one_the_backend_lacks(tmp_path, capsys):
    assert kvconform(["run", "--no-progress", "-k", "golden/plan-kinds-p4", "--profile", "edge-llm-0.10",
                      "--report", str(tmp_path / "r")]) == 0
    assert "CONFORMANT (profile edge-llm-0.10" in capsys.readouterr().out
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    assert doc["semantics_profile"] == "edge-llm-0.10"
    assert kvconform(["run", "--no-progress", "-k", "golden/plan-kinds-p4", "--profile", "kvconform-2",
                      "--report", str(tmp_path / "r2")]) == 2
    caps = tmp_path / "caps.json"
    manifest = json.loads(subprocess.run([sys.executable, "-m", "gpu_backend", "capabilities"], capture_output=True,
                                         text=True, check=True, cwd=ROOT).stdout)
    caps.write_text(json.dumps(dict(manifest, semantics_profile="kvconform-1")))
    assert kvconform(["run", "--no-progress", "--backend", "command", "--capabilities", str(caps), "-k",
                      "golden/plan-kinds-p4", "--profile", "edge-llm-0.10", "--report", str(tmp_path / "r3")]) == 2
    assert "implements kvconform-1 only" in capsys.readouterr().err
