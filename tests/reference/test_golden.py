"""Every golden case's hand-derived `expect` block, reproduced exactly by the oracle.

The expectations were derived by hand from spec/context-reuse.md (each case's description
holds the derivation); a mismatch means the oracle or the derivation is wrong, and the message
names the case, the field, the expected and the observed value.
"""
import json
from pathlib import Path

import pytest

import reference
from reference.requests import parse_generated

GOLDEN = Path(__file__).resolve().parents[2] / "cases" / "golden"
CASES = sorted(GOLDEN.glob("*.json"))
FACT_FIELDS = ("status", "input_tokens")


def load(path):
    doc = json.loads(path.read_text())
    return doc, doc["_conformance"]


def diff(expected, observed, where, out):
    """Append (field, expected, observed) for every stated field that differs."""
    if isinstance(expected, dict):
        if not isinstance(observed, dict):
            out.append((where, expected, observed))
            return
        for key, value in expected.items():
            diff(value, observed.get(key, "<absent>"), f"{where}.{key}", out)
    elif expected != observed:
        out.append((where, expected, observed))


def simulate_case(path):
    doc, meta = load(path)
    engine = reference.engine_from_build_args(meta["engine"])
    flags = reference.RuntimeFlags.from_case_runtime(meta.get("runtime"))
    generated = meta.get("generated")
    if generated is not None:
        generated = [parse_generated(g) for g in generated]
    sim = reference.Simulator(engine, flags)
    if sim.rejection is not None:
        return sim, None, {}
    responses = sim.run(doc, str(path.parent), generated, last_accepted=meta.get("last_accepted"))
    sim.check_invariants()
    return sim, responses, sim.profile()


def test_there_are_enough_golden_cases():
    assert len(CASES) >= 30, f"only {len(CASES)} golden cases in {GOLDEN}"


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_golden_case(path):
    doc, meta = load(path)
    assert meta["id"] == f"golden/{path.stem}", f"{path.name}: id {meta['id']!r} does not match the file name"
    assert "golden" in meta.get("flags", []), f"{path.name}: golden cases carry the 'golden' flag"
    negative = meta.get("negative")
    if negative:
        engine = reference.engine_from_build_args(meta["engine"])
        flags = reference.RuntimeFlags.from_case_runtime(meta.get("runtime"))
        with pytest.raises(reference.InputError) as raised:
            reference.parse_request_file(doc, str(path.parent), engine, flags.batch_size)
        assert raised.value.path == negative["path"], (
            f"{meta['id']}: expected an input error at {negative['path']}, got {raised.value}")
        return
    expect = meta.get("expect")
    assert expect, f"{meta['id']}: a golden case needs an expect block"
    sim, responses, profile = simulate_case(path)
    problems = []
    if "rejected" in expect:
        observed = sim.rejection.rule if sim.rejection else None
        diff(expect["rejected"]["rule"], observed, "rejected.rule", problems)
    else:
        assert sim.rejection is None, f"{meta['id']}: unexpected rejection {sim.rejection}"
        for section in ("context_cache", "prefill"):
            if section in expect:
                diff(expect[section], profile.get(section, "<absent>"), section, problems)
        if not sim.flags.enable_context_reuse:
            diff(False, "context_cache" in profile, "profile has context_cache (CR-POL-6)", problems)
            diff([None] * len(responses), [r["context_cache"] for r in responses], "requests[*].context_cache", problems)
        stated = expect.get("requests", [])
        assert len(stated) in (0, len(responses)), f"{meta['id']}: expect.requests has {len(stated)} entries for {len(responses)} requests"
        for i, (want, got) in enumerate(zip(stated, responses)):
            if want is None:
                continue
            for key, value in want.items():
                observed = got[key] if key in FACT_FIELDS else (got["context_cache"] or {}).get(key, "<absent>")
                diff(value, observed, f"requests[{i}].{key}", problems)
    assert not problems, f"{meta['id']} ({path.name}) differs from its hand derivation:\n" + "\n".join(
        f"  {field}: expected {exp!r}, observed {obs!r}" for field, exp, obs in problems)
