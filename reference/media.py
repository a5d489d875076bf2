"""Media spans (spec/context-reuse.md section 3, CR-MEDIA-1 .. CR-MEDIA-6).

CR-MEDIA-1 (media positions carry their item's identity) is realised by TokenHistory in
identity.py, which hashes each placeholder as (item digest, offset in item). CR-MEDIA-2
(media-aware) is `TokenHistory.media_aware`. This module holds the page-boundary trim.

CR-MEDIA-6: the reuse counts of sequences with audio input are unspecified by the spec; the
oracle predicts them as for any media item (CR-ID-4), which is one of the allowed behaviours,
and its trace marks the counts left open (reference/trace.py `unspecified`), which the runner
reports as UNSPECIFIED.
"""

from dataclasses import replace

from .errors import OutOfScope
from .planning import NO_REUSABLE_PREFIX, STANDARD, Plan


def _splits(history, r: int, test: str) -> bool:
    """Whether the boundary before position r is one the trim gives back (CR-MEDIA-3): r-1 and r
    in one media item, or under the `any-media` profile both media positions (spec/profiles.md)."""
    if test == "any-media":
        return history.is_media(r - 1) and history.is_media(r)
    return history.same_item(r - 1, r)


def trim_media_boundary(plan: Plan, history, n: int, page_size: int, test: str = "same-item",
                        given_back: list | None = None) -> Plan:
    """CR-MEDIA-3: while the boundary r splits one media item (positions r-1 and r, r < n, in
    the same item), give back a page. CR-MEDIA-4: a media-aware plan with r > 0 before the trim
    is restated (matched := r, kind standard or no_reusable_prefix) even if nothing was trimmed.
    CR-MEDIA-5: the kept pages and the private demand stay those of the untrimmed plan.
    Applies to vanilla plans only (hybrid: CR-HYB-7). `given_back`, when given, receives each
    boundary the trim gave back (for the trace)."""
    r = plan.reused
    if not history.media_aware or r == 0:
        return plan
    while r > 0 and r < n and _splits(history, r, test):
        if given_back is not None:
            given_back.append(r)
        r -= page_size
    return replace(plan, kind=STANDARD if r > 0 else NO_REUSABLE_PREFIX, matched=r, reused=r)


def trim_checkpoint_hit(plan: Plan, history, n: int, page_size: int, test: str) -> Plan:
    """CR-HYB-7 under a profile whose media trim also applies to checkpoint hits (Edge-LLM 0.10
    calls it on every media-aware plan, spec/profiles.md `hybrid_media_trim`): the reuse is first
    floored to whole pages, then trimmed as CR-MEDIA-3. A hit left at its own length L stays; one
    trimmed to 0 is restated no_reusable_prefix with nothing restored, its pins and pages those
    of the untrimmed plan (CR-MEDIA-5); one trimmed to another length is OutOfScope: 0.10 would
    restore the recurrent state at L and compute from the floor, so its outputs are not defined."""
    L = plan.reused
    r = L - L % page_size
    while r > 0 and r < n and _splits(history, r, test):
        r -= page_size
    if r == L:
        return plan
    if r == 0:
        return replace(plan, kind=NO_REUSABLE_PREFIX, matched=0, reused=0, record=None)
    raise OutOfScope(f"a media-aware checkpoint hit of {L} tokens trimmed to {r}: the recurrent state would "
                     f"be restored at {L} and the prefill start at {r} (hybrid_media_trim, spec/profiles.md)")
