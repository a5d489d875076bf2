"""The optional timing verdict (conformance/judge/reuse_timing.py): a runtime that reports reuse but
recomputes the reused prefix gets a QUALITY_WARNING, never a FAIL; the check is off by default."""
import pytest

from conformance.adapters.inprocess import InprocessAdapter
from conformance.judge.reuse_timing import CASE_ID, timing_verdict
from conformance.judge.verdicts import Verdict
from gpu_backend import Runtime


class RecomputesReusedPrefix(Runtime):
    """Counts and outputs of the bundled backend, but every request that reused a prefix is
    computed again from position 0 on a second instance (the KV it reported reusing is recomputed,
    then thrown away): what a runtime whose cache is bookkeeping only costs."""

    def infer(self, doc, base_dir, *a, **kw):
        out = super().infer(doc, base_dir, *a, **kw)
        if any((r.get("context_cache") or {}).get("reused_tokens") for r in out["responses"]):
            shadow = self.__dict__.setdefault("_shadow", Runtime(self.engine_dir, device=str(self.device)))
            shadow.infer(doc, base_dir)
        return out


def test_reuse_that_is_recomputed_is_a_quality_warning():
    adapter = InprocessAdapter(device="cpu", runtime_factory=RecomputesReusedPrefix)
    result = timing_verdict(adapter, adapter.capabilities(), reps=3, prefix=1024)
    assert result.id == CASE_ID and not result.mandatory
    assert result.verdict == Verdict.QUALITY_WARNING, result.details
    timing = result.details["timing"]
    assert timing["median_warm_over_cold"] >= 0.5 and len(timing["repetitions"]) == 3
    assert all(r["reused_tokens"] >= 512 for r in timing["repetitions"])


@pytest.mark.slow
def test_the_bundled_backend_reuses_for_real():
    """Wall-clock: slow-marked, since a loaded machine can stretch either measurement."""
    adapter = InprocessAdapter(device="cpu")
    result = timing_verdict(adapter, adapter.capabilities())
    assert result.verdict == Verdict.PASS, result.details


def test_without_sessions_the_timing_verdict_is_not_supported():
    class OneFilePerProcess:
        sessions = False
    result = timing_verdict(OneFilePerProcess(), {})
    assert result.verdict == Verdict.NOT_SUPPORTED and "several request files" in result.reason
