"""EAGLE reuse defects: paired base and draft pages (spec/context-reuse.md section 12, CR-SPEC).

Subclasses of the context cache's paired planner (`gpu_backend.paired_planner.PairedPlanner`)
whose pairing or paired publication differs from the bundled one in the lines marked `# DEFECT`.

`golden/eagle-*` catch both (FAIL, not a crash).
"""
from __future__ import annotations

from gpu_backend.cache_plan import Plan
from gpu_backend.cache_pools import DRAFT
from gpu_backend.paired_planner import PairedPlanner

from .registry import variant


@variant("draft-page-without-base", "publication")
class DraftPageWithoutBase(PairedPlanner):
    """A paired publication also publishes the draft page that follows its last base page: the
    record holds one draft page more than base pages.

    The draft head runs ahead of the committed base KV (its page for the next positions already
    exists), and the publication takes the draft table's extent instead of the boundary both
    caches have materialized. The extra draft page is held by the record, so the draft pool
    loses a page to every such record, and a later pair would find a draft page with no base
    page under it.
    Bug class: spec-state publication out of step (draft and target caches committed to different
    boundaries). Violates: CR-SPEC-4, CR-MET-9. Mirrors: Edge-LLM 0.10 `publishSpecEndpoint`,
    which caps a publication at the boundary materialized in both base and draft (edge-llm-0.10
    semantics section 9.3); a publication that follows the draft table's extent is the quirk it
    guards against.
    """

    def publish(self, ident, page_table, draft_table, k):
        status = super().publish(ident, page_table, draft_table, k)
        rec = self.store.records.get(("pages", ident.page_keys(k)[-1], k))
        if status == "committed" and rec is not None and len(draft_table) > k and len(rec.draft) == k:
            rec.draft.append(draft_table[k])                                          # DEFECT
            self.store.pools[DRAFT].add_cache(draft_table[k])
        return status


@variant("last-paired-page-not-replayed", "planning")
class LastPairedPageNotReplayed(PairedPlanner):
    """An EAGLE hit keeps every pair it matched instead of recomputing the last one (except
    when the whole input matched, where the vanilla rewind still applies).

    The draft KV of a page's last position was conditioned on the producer's next token, which
    the consumer need not share, so the last paired page must be replayed.
    Bug class: full-hit-boundary (spec future-dependency token ignored). Violates: CR-SPEC-2,
    CR-SPEC-3. Mirrors: Edge-LLM 0.10 `makeSpecReusePlan` ("always drop the last paired page",
    edge-llm-0.10 semantics section 9.3); for vanilla pages the same boundary class is vLLM PR
    #11186 (the last page of a full hit is recomputed whole).
    """

    def plan(self, ident, n, total, splits_media):
        plan = super().plan(ident, n, total, splits_media)
        if not plan.replayed or plan.kind == "full_input_rewind" or ident.spans:
            return plan
        base, record, k = self.pairing(ident, n)
        kept = base[:k]                                                                # DEFECT: all k pairs
        return Plan("standard", k * self.P, k * self.P, kept, total - k, record=record,
                    draft_kept=record.draft[:k], draft_demand=total - k, replayed=False)


@variant("one-pair-record-bound", "planning")
class OnePairRecordBound(PairedPlanner):
    """An EAGLE hit that pairs one page (and so keeps nothing) still binds its pairing record:
    the admission protects it from eviction and touches it to most-recently-used.

    The binding is kept for every hit instead of only for a hit that keeps a pair, so a record
    whose pages the consumer does not hold survives the next eviction in place of a record that
    was used more recently.
    Bug class: LRU recency on hit (a record refreshed by a hit that reuses none of it).
    Violates: CR-SPEC-1, CR-CAP-4. Mirrors: Edge-LLM 0.10 `makeSpecReusePlan`, which resets
    `draftRecord` when no base page is kept (reusePlan.cpp:241-244; unit test
    `SpecPlanningExactInputRewindsOneFullPage`, reusePlanTests.cpp:421), so
    the manager neither protects nor touches it (contextCacheManager.cpp:443, 468-471).
    """

    def plan(self, ident, n, total, splits_media):
        plan = super().plan(ident, n, total, splits_media)
        if plan.replayed and plan.record is None:
            _, record, _ = self.pairing(ident, n)
            plan.record = record                                                       # DEFECT
        return plan
