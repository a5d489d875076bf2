"""Publication and policy defects: what is offered to the cache, and when (CR-PUB, CR-POL).

Scheduler subclasses (or a cache subclass for the lookup) whose publication or policy handling
differs from the bundled `gpu_backend.scheduler.Scheduler` in the lines marked `# DEFECT`.
"""
from __future__ import annotations

import dataclasses

from gpu_backend.errors import BatchFailure
from gpu_backend.model_runner import ModelRunner
from gpu_backend.prefix_cache import ContextCache
from gpu_backend.runtime import Runtime
from gpu_backend.scheduler import PUBLISHABLE, Scheduler

from .registry import variant


@variant("prefill-only-publishes-generated", "publication")
class PrefillOnlyPublishesGenerated(Scheduler):
    """`context_cache_commit_policy: prefill_state_only` is validated but never reaches the
    decode loop, which publishes generated tokens as under `including_generated_tokens`.

    Bug class: salt-not-propagated (a policy parsed but not passed on). Violates: CR-PUB-3,
    CR-POL-5. Mirrors: kvcache-ai/ktransformers #2184 (the cache salt is computed but never
    passed to the request, so the isolation does nothing); Edge-LLM's commit policy is the
    analogous per-file switch.
    """

    def _decode(self, active, rf, bypass, state, rows):
        rf = dataclasses.replace(rf, commit_policy="including_generated_tokens")   # DEFECT
        return super()._decode(active, rf, bypass, state, rows)


@variant("bypass-publishes", "publication")
class BypassPublishes(Scheduler):
    """Sequences that bypassed lookup (explicit `bypass`, warmup, hidden-state output) still
    publish their prefill-end and decode-end records.

    Bug class: bypass path not isolated from the commit path. Violates: CR-PUB-7, CR-POL-2,
    CR-POL-4. Mirrors: the feature-requires-bypass class (vLLM #3251 / #8268: a request that
    must not use the cache handled by one half of the cache path only); Edge-LLM's `bypass`
    "never publishes" (edge-llm-0.10-semantics.md section 5).
    """

    def _publishing(self, seqs, point, bypass):
        return super()._publishing(seqs, point, False)                          # DEFECT


@variant("bypass-looks-up", "publication")
class BypassLooksUp(ContextCache):
    """A `bypass` sequence still looks up and reuses cached pages (it is only counted as a
    bypass); nothing of its own is published.

    Observable only when a bypass request file reaches a runtime instance whose cache holds
    records from an earlier `use_cache` file (CR-BATCH-3): the generated families switch the
    lookup policy between request files to reach it (the `policy switch` strategy).
    Bug class: feature-requires-bypass (lookup not skipped). Violates: CR-POL-2, CR-MET-4.
    Mirrors: vLLM #3251 / #8268 (prompt_logprobs with prefix caching: requests that need every
    position computed were still served cached positions; peer-systems section F row 25).
    """

    def plan(self, ident, n, *, bypass, splits_media):
        if not bypass or not self.enabled:
            return super().plan(ident, n, bypass=bypass, splits_media=splits_media)
        plan = super().plan(ident, n, bypass=False, splits_media=splits_media)         # DEFECT: looks up
        plan.bypass = True
        return plan


@variant("decode-end-off-by-one", "publication")
class DecodeEndOffByOne(Scheduler):
    """Decode-end publication counts the last sampled token as computed: it publishes
    floor((n + g) / P) pages, so when n + g is a multiple of P the record's last page holds a
    slot that was never written.

    Bug class: off-by-one in the committed length. Violates: CR-PUB-2, CR-OUT-3.
    Mirrors: Edge-LLM's decode-end commit of n + g - 1 tokens (the last sampled token is never
    computed; ground truth VanillaDecodePublishesOneTokenPageBoundary, spec CR-PUB-2) and vLLM
    PR #17305 (a cached-token count computed once and reused after the KV changed).
    """

    def _publish(self, seqs, point, bypass, state, rows, staged=None):
        if point != "decode_end" or self.kind != "vanilla" or not self.reuse or bypass:
            return super()._publish(seqs, point, bypass, state, rows, staged)
        for s in seqs:
            if s.finish not in PUBLISHABLE:
                continue
            k = (s.n + len(s.generated)) // self.P                                 # DEFECT: not n + g - 1
            if k >= 1 and k > s.published_pages:
                status = self.cache.publish_pages(s.ident, s.pages, k)
                s.published_pages = k
                s.publications.append({"point": point, "tokens": k * self.P, "pages": k, "status": status})


class _LateCapacityCheck(Scheduler):
    def _precheck(self, batch):
        capacity = self.cfg["max_kv_cache_capacity"]
        self.cfg["max_kv_cache_capacity"] = float("inf")      # DEFECT: no capacity check before admission
        try:
            super()._precheck(batch)
        finally:
            self.cfg["max_kv_cache_capacity"] = capacity


class _PageTableOverflow(ModelRunner):
    """Fails the batch when a sequence outgrows the page table, after its token is taken."""

    def __init__(self, engine):
        super().__init__(engine)
        self.cfg = engine.cfg

    def take(self, seqs, logits):
        super().take(seqs, logits)
        for s in seqs:
            if not s.finish and s.n + len(s.generated) > self.cfg["max_kv_cache_capacity"]:
                raise BatchFailure(f"request {s.req.idx}: page table overflow at {s.n + len(s.generated)} tokens")


@variant("errored-sequence-published", "publication")
class ErroredSequencePublished(Runtime):
    """The capacity check runs late, at the page-table overflow: a sequence whose
    n + max_generate_length exceeds max_kv_cache_capacity is admitted, prefilled and publishes,
    and its batch ends `error` only when decode overflows (or not at all), leaving the records
    of an errored batch in the cache.

    Bug class: errored / cancelled sequences published. Violates: CR-BATCH-5, CR-PUB-7, CR-CAP-8.
    Mirrors: Edge-LLM 0.10 ("n + max_generate_length > capacity: page-table overflow mid-run",
    spec Appendix B: the request fails after its prefill-end publication).
    """
    scheduler_class = _LateCapacityCheck
    runner_class = _PageTableOverflow
