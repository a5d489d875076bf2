"""Media spans (spec/context-reuse.md section 3, CR-MEDIA-1 .. CR-MEDIA-6).

CR-MEDIA-1 (media positions carry their item's identity) is realised by TokenHistory in
identity.py, which hashes each placeholder as (item digest, offset in item). CR-MEDIA-2
(media-aware) is `TokenHistory.media_aware`. This module holds the page-boundary trim.

CR-MEDIA-6: the reuse counts of sequences with audio input are unspecified by spec 1.0.0; the
oracle predicts them as for any media item (CR-ID-4), which is one of the allowed behaviours,
and the runner reports differences on such requests as UNSPECIFIED.
"""

from dataclasses import replace

from .planning import NO_REUSABLE_PREFIX, STANDARD, Plan


def trim_media_boundary(plan: Plan, history, n: int, page_size: int) -> Plan:
    """CR-MEDIA-3: while the boundary r splits one media item (positions r-1 and r, r < n, in
    the same item), give back a page. CR-MEDIA-4: a media-aware plan with r > 0 before the trim
    is restated (matched := r, kind standard or no_reusable_prefix) even if nothing was trimmed.
    CR-MEDIA-5: the kept pages and the private demand stay those of the untrimmed plan.
    Applies to vanilla plans only (hybrid: CR-HYB-7)."""
    r = plan.reused
    if not history.media_aware or r == 0:
        return plan
    while r > 0 and r < n and history.same_item(r - 1, r):
        r -= page_size
    return replace(plan, kind=STANDARD if r > 0 else NO_REUSABLE_PREFIX, matched=r, reused=r)
