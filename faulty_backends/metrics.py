"""Metrics defects: the counters of the profile (CR-MET)."""
from __future__ import annotations

from gpu_backend.prefix_cache import ContextCache
from gpu_backend.runtime import Runtime
from gpu_backend.scheduler import Scheduler

from .registry import variant


@variant("hit-counted-at-lookup", "metrics")
class HitCountedAtLookup(ContextCache):
    """A hit is counted from the lookup, before the plan is final: a sequence whose lookup found
    pages counts in hit_sequences even when its final plan reuses nothing (forced cold after a
    failed acquisition, or a media trim down to 0).

    Forced cold itself (CR-CAP-7) is unreachable with one page pool under valid engines (spec
    Appendix A), so this is the forced-cold-counted-as-hit class made reachable the way the
    same code reaches it in this profile: a lookup that matched and a final plan that went cold
    by the media trim (CR-MEDIA-3/4), e.g. sections/media/trim-split.
    Bug class: stats-recorded-before-commit. Violates: CR-MET-2.
    Mirrors: vLLM #43736 / PR #39566 (prefix stats recorded at lookup; an allocation failure and
    retry double-counts) and vLLM #25780 (recomputation counted as prefix hits).
    """

    def admit(self, ident, n, *, bypass, media_aware, splits_media):
        looked_up = self.enabled and not bypass and self.kind == "vanilla"
        found = len(self.store.lookup(ident, n // self.P)) if looked_up else 0
        hits = self.metrics.hits
        got = super().admit(ident, n, bypass=bypass, media_aware=media_aware, splits_media=splits_media)
        if got is not None and found and self.metrics.hits == hits:
            self.metrics.hits += 1                                                           # DEFECT
        return got


class _PerBatchMediaCache(ContextCache):
    batch_counted = False

    def admit(self, ident, n, *, bypass, media_aware, splits_media):
        count = media_aware and not self.batch_counted                                 # DEFECT
        self.batch_counted = self.batch_counted or media_aware
        return super().admit(ident, n, bypass=bypass, media_aware=count, splits_media=splits_media)


class _PerBatchMediaScheduler(Scheduler):
    def run_batch(self, batch, rf, *, warmup):
        self.cache.batch_counted = False
        return super().run_batch(batch, rf, warmup=warmup)


@variant("media-aware-per-batch", "metrics")
class MediaAwarePerBatch(Runtime):
    """media_aware_sequences counts batches that hold a media-aware sequence, not sequences.

    Bug class: hit-counter-not-wired (a counter at the wrong granularity). Violates: CR-MET-3.
    Mirrors: vllm-ascend #16639 (a prefix-cache counter not wired where the events happen:
    prefix_cache_hits_total stays 0 under hybrid + MTP); Edge-LLM counts media-aware sequences at
    admission, once per sequence.
    """
    cache_class = _PerBatchMediaCache
    scheduler_class = _PerBatchMediaScheduler


@variant("prefill-section-only-with-reuse", "metrics", profile="edge-llm-0.10")
class PrefillSectionOnlyWithReuse(Runtime):
    """As edge-llm-0.10, the prefill section is written only when context reuse is on or
    --dumpProfile is given, where 0.10 writes it into every profile file.

    Bug class: profile-section-presence. Violates: CR-MET-12.
    Mirrors: Edge-LLM 0.10's profile formatter writes `prefill` with every profile file (the
    reading of the seed's VLM example and 0.10's own pytest, spec/profiles.md M8); the kit checked
    its presence only on runs without --dumpProfile, and every reuse-off case set --dumpProfile
    (a class the kit's power study found unreached).
    """

    def profile(self) -> dict:
        out = super().profile()
        if not (self.reuse or self.dump_profile):
            out.pop("prefill", None)                                                    # DEFECT
        return out
