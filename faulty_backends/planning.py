"""Planning defects: which prefix a sequence reuses (CR-PLAN, CR-MEDIA-3/4).

Each class is a `gpu_backend.page_planner.PagePlanner` (the vanilla planner of the context
cache) that differs from the bundled one in the line marked `# DEFECT`, in the one step it
overrides (`_rewind`, the CR-PLAN-2 rewind, or `plan` around the media trim); the partial-page
variant is a runtime whose planner matches partial pages, whose cache pins the donor page and
whose scheduler copies the partially matched positions.
"""
from __future__ import annotations

import bisect

import numpy as np
import torch

from gpu_backend.cache_plan import Plan
from gpu_backend.cache_pools import PAGES
from gpu_backend.identity import ROOT
from gpu_backend.page_planner import PagePlanner
from gpu_backend.prefix_cache import ContextCache
from gpu_backend.runtime import Runtime
from gpu_backend.scheduler import Scheduler

from .registry import variant


def _media_positions(ident):
    starts = [s.start for s in ident.spans]

    def item(p):
        i = bisect.bisect_right(starts, p) - 1
        return i if i >= 0 and ident.spans[i].start <= p < ident.spans[i].end else None
    return item


@variant("full-hit-zero-token-prefill", "planning")
class FullHitZeroTokenPrefill(PagePlanner):
    """No full-input rewind: an aligned input whose pages all match keeps every page, so prefill
    has zero tokens to compute (and no logits for the first generated token).

    Bug class: full-hit-zero-token-prefill. Violates: CR-PLAN-2, CR-PLAN-4.
    Mirrors: InfiniTensor/InfiniLM PR #381 (a 100% prefix hit gives empty input_ids and a crash;
    the fix caps the match at len - 1 as SGLang does).
    """

    def _rewind(self, kept, n):
        m = len(kept)
        return m * self.P, "standard" if m else "no_reusable_prefix"    # DEFECT: no CR-PLAN-2 rewind


@variant("full-hit-replays-last-token", "planning")
class FullHitReplaysLastToken(PagePlanner):
    """On a full aligned hit every page is kept and only the last token is recomputed, on top of
    the shared cached page (reused = n - 1 instead of n - P).

    Bug class: full-hit-duplicate-last-token / full-hit-boundary. Violates: CR-PLAN-2, CR-PLAN-4,
    CR-PLAN-5. Mirrors: lablup/mlxcel #1760 (a full-prompt hit restored all KV, then re-ran the
    last token on top) and vLLM PR #11186 (recomputing only the last token on a full hit broke
    the block-hash chain; fixed by recomputing the whole last block).
    """

    def _rewind(self, kept, n):
        m = len(kept)
        if m and n % self.P == 0 and m == n // self.P:
            return n - 1, "full_input_rewind"                 # DEFECT: one token, not one page
        return m * self.P, "standard" if m else "no_reusable_prefix"


@variant("rewind-non-aligned", "planning")
class RewindNonAligned(PagePlanner):
    """The full-input rewind is applied whenever every complete page matched, also when n is not
    a multiple of P (the partial last page already leaves a suffix to compute).

    Bug class: full-hit-boundary (over-eager rewind). Violates: CR-PLAN-2, CR-PLAN-3.
    Mirrors: vLLM PR #11186 / SGLang's "cap the match at len - 1" applied to the page count
    instead of the token count (related: vLLM #54607, alignment floors on hits).
    """

    def _rewind(self, kept, n):
        m = len(kept)
        if m and m == n // self.P:                            # DEFECT: `n % P == 0` dropped
            kept.pop()
            return (m - 1) * self.P, "full_input_rewind"
        return m * self.P, "standard" if m else "no_reusable_prefix"


@variant("media-trim-missing", "planning")
class MediaTrimMissing(PagePlanner):
    """The page-boundary media trim is missing: a reused prefix may end inside an image, whose
    remaining placeholders are then computed without the rest of the item.

    Bug class: media-span-partial-reuse-mismatch. Violates: CR-MEDIA-3, CR-MEDIA-4.
    Mirrors: TensorRT-LLM #14125 (the second identical multimodal request fails with
    "Multimodal token count mismatch" under block reuse); Edge-LLM's next version removed
    `trimMediaBoundaryPages` (edge-llm-0.10-semantics.md section 3.2).
    """

    def plan(self, ident, n, total, splits_media) -> Plan:
        return super().plan(ident, n, total, lambda a, b: False)            # DEFECT: never splits


@variant("trim-at-text-boundaries", "planning")
class TrimAtTextBoundaries(PagePlanner):
    """The media trim also fires at text|text boundaries of a media-aware sequence: its per-
    position hash vector holds the token id (not 0) at text positions, so "both sides hashed"
    is true for text too, and the plan gives back pages until the boundary touches an image.

    Bug class: key-gen / trim test on the wrong positions. Violates: CR-MEDIA-3, CR-PLAN-1.
    Mirrors: Edge-LLM 0.10 `trimMediaBoundaryPages` tests "mediahash[b] != 0 and
    mediahash[b-1] != 0" (edge-llm-0.10-semantics.md section 3.2); a non-zero fill of text
    positions turns it into a trim of every boundary.
    """

    def plan(self, ident, n, total, splits_media) -> Plan:
        item = _media_positions(ident)

        def splits(a, b):                                     # DEFECT: text|text counts as a split
            return splits_media(a, b) or (item(a) is None and item(b) is None)
        return super().plan(ident, n, total, splits)


@variant("trim-any-media-pair", "planning")
class TrimAnyMediaPair(PagePlanner):
    """The media trim fires when both sides of the boundary are placeholders, even of two
    different items, so a boundary between two adjacent images is given back.

    Bug class: media trim test without item identity. Violates: CR-MEDIA-3 (same item only).
    Mirrors: Edge-LLM 0.10 `trimMediaBoundaryPages` ("both positions media", spec Appendix B).
    """

    def plan(self, ident, n, total, splits_media) -> Plan:
        item = _media_positions(ident)
        return super().plan(ident, n, total,                  # DEFECT: any two media positions
                            lambda a, b: item(a) is not None and item(b) is not None)


# --- partial page reuse -------------------------------------------------------------------------

class _PartialReusePlanner(PagePlanner):
    """Remembers the tokens of every indexed text page by parent key, and after the page-aligned
    match looks for an indexed page under the same parent that shares a token prefix with the
    next (partial or full) page of the input."""

    def __init__(self, store):
        super().__init__(store)
        self.children: dict = {}         # (parent key, adapter) -> {page key: tokens (int32 array)}

    def publish(self, ident, page_table, k):
        status = super().publish(ident, page_table, k)
        keys = ident.page_keys(k)
        for i, key in enumerate(keys):
            if not any(max(i * self.P, s.start) < min((i + 1) * self.P, s.end) for s in ident.spans):
                tokens = np.frombuffer(ident._ids_slice(i * self.P, (i + 1) * self.P), "<i4")
                self.children.setdefault((keys[i - 1] if i else ROOT, ident.adapter), {})[key] = tokens
        return status

    def plan(self, ident, n, total, splits_media) -> Plan:
        plan = super().plan(ident, n, total, splits_media)
        plan.donor = None
        if plan.kind == "full_input_rewind" or ident.spans:
            return plan
        P, m = self.P, len(plan.kept)
        a, b = m * P, min((m + 1) * P, n - 1)                 # leave at least one token to compute
        if b <= a:
            return plan
        want = np.frombuffer(ident._ids_slice(a, b), "<i4")
        parent = ident.page_keys(m)[-1] if m else ROOT
        best = (0, None)
        for key, tokens in self.children.get((parent, ident.adapter), {}).items():
            page = self.store.index.get(key)
            if page is None:
                continue
            t = int(np.argmin(np.append(tokens[:len(want)] == want, False)))   # common prefix length
            if t > best[0]:
                best = (t, page)
        if best[1] is not None:                               # DEFECT: reuse t tokens of a page
            t, page = best
            plan.donor = (page, t)
            plan.matched = plan.reused = a + t
            plan.kind = "standard"
        return plan


class _PartialReuseCache(ContextCache):
    """Pins a plan's donor page until the scheduler has copied it."""
    page_planner_class = _PartialReusePlanner

    def _acquire(self, plan):
        donor = getattr(plan, "donor", None)
        if donor:
            self.pools[PAGES].pin(donor[0])                    # keep the donor until it is copied
        got = super()._acquire(plan)
        if got is None and donor:
            self.pools[PAGES].unpin(donor[0])
        return got


class _PartialReuseScheduler(Scheduler):
    """Copies the donor's matched positions into the sequence's private page at admission."""

    def _admit(self, r, bypass, warmup):
        s = super()._admit(r, bypass, warmup)
        donor = getattr(s.plan, "donor", None)
        if donor:
            kv, device = self.runner.kv, self.runner.device
            page, t = donor
            m = len(s.plan.kept)
            src = torch.as_tensor(page * self.P + np.arange(t), device=device)
            dst = torch.as_tensor(s.pages[m] * self.P + np.arange(t), device=device)
            kv.write_positions(dst, kv.read_positions(src).clone())
            self.cache.pools[PAGES].unpin(page)
        return s


@variant("partial-page-reuse", "planning")
class PartialPageReuse(Runtime):
    """Partial pages are matched: after the aligned match, the first tokens of the next page are
    reused from an indexed page with the same parent that shares them (copied into the
    sequence's private page), so reuse is not page aligned.

    Outputs stay right (the copied KV is that of the same prefix); the counts do not.
    Bug class: partial-block reuse (alignment). Violates: CR-ID-2, CR-PLAN-1, CR-PLAN-4.
    Mirrors: TensorRT-LLM `enable_partial_reuse` / `copy_on_partial_reuse` (on by default) and
    SGLang PR #35635 (reuse part of a page by copying the matched tokens); the Edge-LLM contract
    reuses whole pages only.
    """
    cache_class = _PartialReuseCache
    scheduler_class = _PartialReuseScheduler
