"""The checkpoint planner: exact-length reuse on a recurrent or hybrid deployment.

A recurrent state cannot be rolled back, so reuse starts only where a state was captured: a
checkpoint record at exact length L holds a recurrent snapshot slot, and in a hybrid
deployment its complete pages plus, when L % P != 0, a partial-KV snapshot slot (CR-HYB-4). A
sequence restores the longest checkpoint L < n whose exact identity equals its first L
positions (CR-HYB-5). A capture reserves its slots first, evicting records if needed, and a
capture that cannot reserve is a snapshot-pressure skip (CR-HYB-4).
"""
from .cache_plan import Plan, cold_plan
from .cache_pools import PARTIAL, RECURRENT, Record


class CheckpointPlanner:
    def __init__(self, store, kind: str, trim_checkpoint_hits: bool = False):
        self.store, self.P, self.kind = store, store.P, kind
        self.trim_checkpoint_hits = trim_checkpoint_hits  # the edge-llm-0.10 semantics (semantics.py)

    def plan(self, ident, n: int, total: int) -> Plan:
        """CR-HYB-5: the longest checkpoint L < n whose exact identity equals [0, L)."""
        store = self.store
        for L in sorted((L for L in store.ckpt_lengths if L < n), reverse=True):
            rec = store.records.get(("ckpt", ident.exact_key(L), L))
            if rec is not None:
                return Plan("standard", L, L, list(rec.pages), total - len(rec.pages), record=rec)
        return cold_plan(total)

    def trim(self, ident, n, plan, splits_media) -> Plan:
        """Edge-LLM 0.10 runs its media trim on checkpoint hits too (applied after acquisition,
        where `trim_checkpoint_hits` says so): the reuse floored to whole pages, then given back
        while the boundary is a media one. A hit trimmed to 0 becomes a cold plan that keeps
        what it pinned (recomputed in place, as CR-MEDIA-5); a hit trimmed to another length
        keeps its exact length here, since no state exists at the floor (0.10 would restore at
        L and compute from the floor: its outputs are undefined there)."""
        if not (self.trim_checkpoint_hits and plan.restores and ident.spans):
            return plan
        r = plan.reused - plan.reused % self.P
        while 0 < r < n and splits_media(r - 1, r):
            r -= self.P
        if r == 0:
            return Plan("no_reusable_prefix", 0, 0, plan.kept, plan.demand, forced_cold=plan.forced_cold)
        return plan

    def reserve_capture(self, need_partial: bool):
        """Reserve the slots of one checkpoint capture, evicting if needed (CR-HYB-4).
        Returns (recurrent slot, partial-KV slot or None), or None for a pressure skip."""
        store = self.store
        if not store.make_room((0, 1, int(need_partial))):
            store.metrics.pressure_skips += 1
            return None
        rec = store.pools[RECURRENT].allocate(1)[0]
        pkv = store.pools[PARTIAL].allocate(1)[0] if need_partial else None
        return rec, pkv

    def publish(self, ident, page_table: list, L: int, slots) -> str:
        """Publish a staged capture at exact length L (CR-HYB-4)."""
        store = self.store
        rec_slot, pkv_slot = slots
        key = ("ckpt", ident.exact_key(L), L)
        store.metrics.attempts += 1
        if key in store.records:
            store.touch(key)
            store.metrics.existing += 1
            store.pools[RECURRENT].unpin(rec_slot)
            if pkv_slot is not None:
                store.pools[PARTIAL].unpin(pkv_slot)
            return "existing"
        full = L // self.P if self.kind == "hybrid" else 0
        rec = Record(key, store.canonical_path(ident.page_keys(full), page_table), rec_slot, pkv_slot)
        store.insert(rec, staged=[(p, i) for p, i in ((RECURRENT, rec_slot), (PARTIAL, pkv_slot)) if i is not None])
        store.metrics.committed += 1
        return "committed"
