"""The paired planner: base and draft pages reused together on an EAGLE deployment.

The draft head's KV of a page's last position was computed from the producer's next token,
so draft KV is reusable only with the base pages it was computed over and the record that
holds both. A record may carry a draft path beside its base pages (CR-SPEC-4); draft pages are
not indexed: two records over the same base pages may hold different draft KV. A *paired*
sequence (the batch decodes speculatively, CR-SPEC-7) reuses a base page only together with
the draft page of one record's path, and always recomputes the last pair it matched
(CR-SPEC-1, CR-SPEC-2).

Its base lookup and media trim are the page planner's (`pages`), so the two trim alike.
"""
from .cache_plan import Plan, cold_plan
from .cache_pools import Record


class PairedPlanner:
    def __init__(self, store, pages):
        self.store, self.pages, self.P = store, pages, store.P

    def plan(self, ident, n: int, total: int, splits_media) -> Plan:
        """CR-SPEC-1: the base match, paired with the longest prefix one record's draft path
        covers (the most recently used record of those pairing as many); base-only pages are
        not reused. CR-SPEC-2: keep all but the last pair, which is recomputed. CR-SPEC-6: the
        draft demand mirrors the base demand. CR-SPEC-8: the media trim applies after that.
        A pairing of one page keeps nothing, so the plan carries no record: admission neither
        protects nor touches it (CR-SPEC-1; Edge-LLM 0.10 drops `draftRecord` when no base page
        is kept, reusePlan.cpp:241-244)."""
        base, record, k = self.pairing(ident, n)
        if k == 0:
            return cold_plan(total, draft_kept=[], draft_demand=total)
        kept = base[:k - 1]
        kind = "full_input_rewind" if k * self.P == n else ("standard" if kept else "no_reusable_prefix")
        r, matched, kind = self.pages.trim_media(ident, len(kept) * self.P, k * self.P, kind, splits_media)
        bound = record if kept else None
        return Plan(kind, matched, r, kept, total - len(kept), record=bound, draft_kept=record.draft[:k - 1],
                    draft_demand=total - len(kept), replayed=True)

    def pairing(self, ident, n: int):
        """(base pages matched, the record pairing the most of them, how many it pairs): of
        records pairing as many, the most recently used; (base, None, 0) when none pairs any."""
        base = self.store.lookup(ident, n // self.P)
        record, k = None, 0
        for rec in reversed(self.store.records.values()):
            if not rec.draft:
                continue
            j = min(len(rec.draft), len(rec.pages), len(base))
            while j > k and rec.pages[j - 1] != base[j - 1]:
                j -= 1
            if j > k:
                record, k = rec, j
        return base, record, k

    def publish(self, ident, page_table: list, draft_table: list, k: int) -> str:
        """CR-SPEC-4: publish the first k pages of a paired sequence with its draft pages. A new
        endpoint is a new record (committed); a base-only one is upgraded with the draft path and
        touched (committed); a paired one is touched (existing). Both commits are pair publications."""
        store = self.store
        keys = ident.page_keys(k)
        key = ("pages", keys[-1], k)
        store.metrics.attempts += 1
        rec = store.records.get(key)
        if rec is not None and rec.draft is not None:
            store.touch(key)
            store.metrics.existing += 1
            return "existing"
        store.metrics.committed += 1
        store.metrics.pair_publications += 1
        if rec is not None:
            store.add_draft_path(rec, draft_table[:k])
            return "committed"
        store.insert(Record(key, store.canonical_path(keys, page_table), draft=list(draft_table[:k])))
        return "committed"
