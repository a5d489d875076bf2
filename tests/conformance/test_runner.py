"""The runner judged by what it must do: the oracle passes everything, a backend that cannot do
anything passes nothing, and a backend that breaks one rule fails the cases about that rule,
naming the rule, the request, expected and observed values and why.
"""
from __future__ import annotations

import pytest

from conformance.adapters import make_adapter
from conformance.adapters.base import missing_capabilities, requirements
from conformance.run.execute import run_case
from conformance.judge.verdicts import Verdict

from tests.helpers.cases import ALL_CASES, case
from tests.helpers.mutants import MutantAdapter
from conformance.adapters.reference import ReferenceAdapter


def test_reference_adapter_passes_every_case(reference_adapter, reference_manifest):
    results = [run_case(c, reference_adapter, reference_manifest) for c in ALL_CASES]
    bad = [f"{r.id}: {r.verdict} {r.reason} {[f.line() for f in r.failures[:2]]}" for r in results
           if r.verdict != Verdict.PASS]
    assert not bad, "the oracle posing as a backend must pass every case:\n" + "\n".join(bad)


def test_broken_adapter_never_passes():
    adapter = make_adapter("broken")
    try:
        manifest, error = adapter.capabilities(), ""
    except Exception as e:
        manifest, error = None, str(e)
    verdicts = {c.id: run_case(c, adapter, manifest, error).verdict for c in ALL_CASES}
    assert set(verdicts.values()) == {Verdict.ERROR}, {k: str(v) for k, v in verdicts.items() if v != Verdict.ERROR}


def test_broken_session_is_error_not_pass(reference_manifest):
    """Even with a manifest and engines, a backend whose every run raises ends ERROR on every case
    that runs anything (a case about a refused build never starts a runtime)."""
    class Raising(ReferenceAdapter):
        def start(self, engine, runtime):
            raise RuntimeError("backend exploded")
    adapter = Raising()
    results = [run_case(c, adapter, reference_manifest) for c in ALL_CASES]
    verdicts = {r.verdict for r in results if "build_refused" not in r.details}
    assert verdicts == {Verdict.ERROR}


@pytest.mark.parametrize("mutant, case_id, rule, words", [
    ("no_media_trim", "sections/media/trim-split", "CR-MEDIA-3", "straddles the boundary"),
    ("no_media_trim", "sections/media/trim-offsets", "CR-MEDIA-3", "straddles the boundary"),
    ("lora_not_in_identity", "sections/id/lora-isolation", "CR-ID-3", "adapter"),
    ("no_rewind_accounting", "sections/plan/boundary-p4-k2-exact", "CR-PLAN-2", "multiple of P"),
])
def test_a_broken_rule_fails_its_case(mutant, case_id, rule, words):
    adapter = MutantAdapter(mutant)
    result = run_case(case(case_id), adapter, adapter.capabilities())
    assert result.verdict == Verdict.FAIL, (result.verdict, result.reason)
    first = result.first_failure()
    assert first.rule == rule, first.line()
    assert first.request is not None and first.expected != first.observed
    assert words in first.why, first.why


def test_trim_failure_explains_positions():
    adapter = MutantAdapter("no_media_trim")
    result = run_case(case("sections/media/trim-split"), adapter, adapter.capabilities())
    why = result.first_failure().why
    assert "image #1 at positions 2-5" in why and "boundary at 4" in why and "must stop at 0" in why, why


def test_requirements_are_decided_before_running(reference_manifest):
    c = case("sections/id/lora-isolation")
    need = requirements(c.doc, c.engine_args, c.runtime)
    assert "feature:lora" in need and "tokens_per_page:4" in need and "model:attention" in need
    manifest = dict(reference_manifest, features=[f for f in reference_manifest["features"] if f != "lora"])
    assert missing_capabilities(need, manifest) == ["feature:lora"]

    class Untouchable(ReferenceAdapter):
        def engine(self, build_args):
            raise AssertionError("a NOT_SUPPORTED case must not reach the backend")
    result = run_case(c, Untouchable(), manifest)
    assert result.verdict == Verdict.NOT_SUPPORTED and "feature:lora" in result.reason


def test_page_size_outside_the_manifest_is_not_supported(reference_adapter, reference_manifest):
    manifest = dict(reference_manifest, tokens_per_page=[128])
    result = run_case(case("sections/plan/boundary-p8-k1-exact"), reference_adapter, manifest)
    assert result.verdict == Verdict.NOT_SUPPORTED and "tokens_per_page:8" in result.reason


def test_refused_build_must_be_refused(reference_adapter, reference_manifest):
    result = run_case(case("sections/cap/pool-below-minimum"), reference_adapter, reference_manifest)
    assert result.verdict == Verdict.PASS and "CR-CAP-1" in result.details["build_refused"]

    class BuildsAnything(ReferenceAdapter):
        def engine(self, build_args):
            from conformance.adapters.base import Engine
            return Engine("x", {}, None)
    result = run_case(case("sections/cap/pool-below-minimum"), BuildsAnything(), reference_manifest)
    assert result.verdict == Verdict.FAIL and result.first_failure().rule == "CR-CAP-1"


def test_negative_case_must_be_refused(reference_manifest):
    class Accepts(ReferenceAdapter):
        """Runs bad input instead of refusing it: parses leniently by dropping the bad request."""
        def start(self, engine, runtime):
            session = super().start(engine, runtime)
            run = session.run

            def lenient(request, base_dir):
                return run(dict(request, requests=request["requests"][:1]), base_dir)
            session.run = lenient
            return session
    result = run_case(case("sections/neg/later-request-empty"), Accepts(), reference_manifest)
    assert result.verdict == Verdict.FAIL and result.first_failure().what == "exit code"


def test_oracle_self_check_is_an_error_not_a_fail(reference_adapter, reference_manifest, tmp_path):
    import json
    doc = json.loads(case("golden/id-partial-page").path.read_text())
    doc["_conformance"]["expect"]["context_cache"]["admitted_sequences"] += 5
    path = tmp_path / "wrong-expect.json"
    path.write_text(json.dumps(doc))
    from conformance.cases.case import load_case
    result = run_case(load_case(path), reference_adapter, reference_manifest)
    assert result.verdict == Verdict.ERROR and "oracle self-check" in result.reason


def test_audio_reuse_counts_are_unspecified_but_outputs_are_not(reference_manifest):
    """CR-MEDIA-6: a backend that does not reuse audio prefixes differs only in counters: UNSPECIFIED."""
    class NoAudioReuse(ReferenceAdapter):
        def start(self, engine, runtime):
            session = super().start(engine, runtime)
            run = session.run

            def patched(request, base_dir):
                got = run(request, base_dir)
                if request.get("context_cache_lookup_policy") != "bypass" and got.profile.get("context_cache"):
                    cc = got.responses[1]["context_cache"]
                    cc.update(plan="no_reusable_prefix", matched_tokens=0, reused_tokens=0)
                    got.profile["context_cache"]["hit_sequences"] -= 1
                return got
            session.run = patched
            return session
    result = run_case(case("sections/media/audio-outputs"), NoAudioReuse(), reference_manifest)
    assert result.verdict == Verdict.UNSPECIFIED, [f.line() for f in result.failures]
    assert result.conformant


def test_audio_leaves_open_only_what_it_can_touch(reference_manifest, tmp_path):
    """CR-MEDIA-6 leaves open the audio request's own counts and a later request's that shares a
    page with it; a text request after it that shares nothing is judged exactly: a wrong count
    there is a FAIL, not hidden as UNSPECIFIED."""
    import json
    from conformance.cases.case import load_case
    src = case("sections/media/audio-outputs")
    doc = json.loads(src.path.read_text())
    doc["requests"].append({"messages": [{"role": "user", "content": "wxyzwxyz"}]})
    doc["requests"].append({"messages": [{"role": "user", "content": "wxyzwxyz"}]})
    path = src.path.parent / "audio-then-text.tmp.json"          # media paths are relative to the case
    path.write_text(json.dumps(doc))

    class MissesTheTextHit(ReferenceAdapter):
        def start(self, engine, runtime):
            session = super().start(engine, runtime)
            run = session.run

            def patched(request, base_dir):
                got = run(request, base_dir)
                if request.get("context_cache_lookup_policy") != "bypass" and got.profile.get("context_cache"):
                    got.responses[4]["context_cache"].update(plan="no_reusable_prefix", matched_tokens=0,
                                                             reused_tokens=0)
                return got
            session.run = patched
            return session
    try:
        result = run_case(load_case(path), MissesTheTextHit(), reference_manifest)
    finally:
        path.unlink()
    assert result.verdict == Verdict.FAIL
    assert {f.request for f in result.failures if f.verdict == Verdict.FAIL} == {4}     # plan, matched, reused


def test_an_unreported_eagle_acceptance_leaves_decode_end_pairs_unspecified(reference_adapter, reference_manifest):
    """CR-SPEC-4: a paired sequence's decode-end publication depends on what its last verification
    accepted. A backend that does not report last_verification_accepted gets UNSPECIFIED, with
    the request and the pages at stake, where the count depends on it: never a guess, never PASS."""
    c = case("sections/spec/decode-end-feedback")
    assert run_case(c, reference_adapter, reference_manifest).verdict is Verdict.PASS
    manifest = dict(reference_manifest, observables=dict(reference_manifest["observables"],
                                                         last_verification_accepted=False))
    result = run_case(c, reference_adapter, manifest)
    assert result.verdict is Verdict.UNSPECIFIED, result.reason
    assert "last_verification_accepted" in result.reason and "request 0" in result.reason


def test_a_verification_that_accepted_nothing_is_judged_under_cr_spec_4():
    """CR-SPEC-4: a round after the prefill's first token accepts 1 .. g - 1 tokens. A backend
    that reports `last_verification_accepted: 0` breaks that rule: the run is judged against it
    (FAIL naming CR-SPEC-4 and the request), not refused as a malformed file with no rule."""
    import gpu_backend
    from conformance.adapters.inprocess import InprocessAdapter

    class AcceptsNothing(gpu_backend.Runtime):
        def infer(self, *args, **kwargs):
            out = super().infer(*args, **kwargs)
            for response in out.get("responses") or []:
                if "last_verification_accepted" in response:
                    response["last_verification_accepted"] = 0
            return out

    adapter = InprocessAdapter(device="cpu", runtime_factory=AcceptsNothing)
    c = case("sections/spec/decode-end-feedback")
    result = run_case(c, adapter, adapter.capabilities())
    adapter.close()
    first = result.first_failure()
    assert result.verdict in (Verdict.FAIL, Verdict.ERROR) and first is not None, result.reason
    assert first.rule == "CR-SPEC-4" and first.what.endswith(".last_verification_accepted"), first.line()
    assert "must be a positive integer" in str(first.observed), first.line()
