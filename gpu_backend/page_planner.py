"""The vanilla planner: whole-page reuse on an attention-only deployment, and page publication.

A sequence keeps the longest run of indexed pages from page 0 (CR-PLAN-1); when that run
covers an aligned input entirely, its last page is given back so the prefill has a token to
compute (CR-PLAN-2); a media-aware plan gives back pages while its boundary would split a
media item (CR-MEDIA-3/4), keeping what it pinned (CR-MEDIA-5). Its demand is every page it
does not keep (CR-PLAN-5). Publication turns the first k pages of a history into a record over
their canonical pages (CR-PUB-4..6).

The paired planner (paired_planner.py) runs its base lookup and media trim through this one,
so the two trim alike.
"""
from .cache_plan import Plan
from .cache_pools import Record


class PagePlanner:
    def __init__(self, store):
        self.store, self.P = store, store.P

    def plan(self, ident, n: int, total: int, splits_media) -> Plan:
        """The plan of an n-token input whose page table holds `total` pages."""
        kept = self.store.lookup(ident, n // self.P)
        matched = len(kept) * self.P
        r, kind = self._rewind(kept, n)
        demand = total - len(kept)                        # CR-PLAN-5
        r, matched, kind = self.trim_media(ident, r, matched, kind, splits_media)
        return Plan(kind, matched, r, kept, demand)       # CR-MEDIA-5: kept/demand unchanged

    def _rewind(self, kept: list, n: int) -> tuple[int, str]:
        """CR-PLAN-2: when every page of an aligned input matched, the last page is given back
        (popped from `kept`) and recomputed, so the prefill has a token to compute; returns
        (reused tokens, plan kind)."""
        m = len(kept)
        if m and n % self.P == 0 and m == n // self.P:
            kept.pop()
            return (m - 1) * self.P, "full_input_rewind"
        return m * self.P, "standard" if m else "no_reusable_prefix"

    def trim_media(self, ident, r: int, matched: int, kind: str, splits_media):
        """CR-MEDIA-3/4: a media-aware plan reusing r > 0 gives back pages while the boundary
        splits media (`splits_media`), then is restated (matched := r, kind by r); returns (r,
        matched, kind)."""
        if r > 0 and ident.spans:
            while r > 0 and splits_media(r - 1, r):
                r -= self.P
            matched, kind = r, ("standard" if r > 0 else "no_reusable_prefix")
        return r, matched, kind

    def publish(self, ident, page_table: list, k: int) -> str:
        """Publish the first k pages of a sequence's history as a record (CR-PUB-4..6)."""
        store = self.store
        keys = ident.page_keys(k)
        key = ("pages", keys[-1], k)
        store.metrics.attempts += 1
        if key in store.records:
            store.touch(key)
            store.metrics.existing += 1
            return "existing"
        store.insert(Record(key, store.canonical_path(keys, page_table)))
        store.metrics.committed += 1
        return "committed"
