"""Media spans (spec/context-reuse.md section 3, CR-MEDIA-1 .. CR-MEDIA-6).

CR-MEDIA-1 (media positions carry their item's identity) is realised by TokenHistory in
identity.py, which hashes each placeholder as (item digest, offset in item). CR-MEDIA-2
(media-aware) is `TokenHistory.media_aware`. This module holds the page-boundary trim.

CR-MEDIA-6: the reuse counts of sequences with audio input are unspecified by the spec; the
oracle predicts them as for any media item (CR-ID-4), which is one of the allowed behaviours,
and while tracing marks the counts left open (`OpenCounts`), which the runner reports as
UNSPECIFIED.
"""

from array import array
from dataclasses import replace

from .errors import OutOfScope
from .identity import TokenHistory, adapter_root
from .planning import NO_REUSABLE_PREFIX, STANDARD, Plan
from .policy import includes_generated
from .trace import item_name, items_in


def _splits(history, r: int, test: str) -> bool:
    """Whether the boundary before position r is one the trim gives back (CR-MEDIA-3): r-1 and r
    in one media item, or under the `any-media` profile both media positions (spec/profiles.md)."""
    if test == "any-media":
        return history.is_media(r - 1) and history.is_media(r)
    return history.same_item(r - 1, r)


def trim_media_boundary(plan: Plan, history, n: int, page_size: int, test: str = "same-item",
                        steps=None) -> Plan:
    """CR-MEDIA-3: while the boundary r splits one media item (positions r-1 and r, r < n, in
    the same item), give back a page. CR-MEDIA-4: a media-aware plan with r > 0 before the trim
    is restated (matched := r, kind standard or no_reusable_prefix) even if nothing was trimmed.
    CR-MEDIA-5: the kept pages and the private demand stay those of the untrimmed plan.
    Applies to vanilla plans only (hybrid: CR-HYB-7). `steps`: the sequence's trace recorder
    (reference/trace.py), or None; its trim step names each boundary given back."""
    r = plan.reused
    if not history.media_aware or r == 0:
        return plan
    given_back = [] if steps is not None else None
    while r > 0 and r < n and _splits(history, r, test):
        if given_back is not None:
            given_back.append(r)
        r -= page_size
    trimmed = replace(plan, kind=STANDARD if r > 0 else NO_REUSABLE_PREFIX, matched=r, reused=r)
    if steps is not None:
        _trimmed(steps, plan, trimmed, (history.truth or history).spans, given_back, n)
    return trimmed


def _trimmed(steps, plan: Plan, trimmed: Plan, spans, given_back: list, n: int) -> None:
    """The trim's steps: reused (CR-MEDIA-3) with the item each boundary given back splits (two
    items meeting there under `any-media`), else why the boundary splits no item; then matched
    and kind restated (CR-MEDIA-3 after a trim, else CR-MEDIA-4). `spans`: the items
    themselves, not the runs a profile keys them by."""
    r = plan.reused
    if given_back:
        splits = [items_in(spans, b - 1, b + 1) for b in given_back]
        why = "; ".join(f"{' and '.join(item_name(k, s) for k, s in inside) or 'media'} "
                        f"{'straddles' if len(inside) == 1 else 'meet at'} the boundary at {b}"
                        for b, inside in zip(given_back, splits))
        why += f", so reuse must stop at {trimmed.reused} ({len(given_back)} page(s) given back)"
        if any(len(inside) > 1 for inside in splits):
            why += " (the profile trims where both positions are media)"
    else:
        inside = items_in(spans, r - 1, r + 1)
        if r >= n:
            why = f"the boundary at {r} is the end of the input: nothing to give back"
        elif len(inside) == 2:
            why = (f"the boundary at {r} lies between {item_name(*inside[0])} and {item_name(*inside[1])}, "
                   "two items: it splits neither, nothing given back")
        elif inside:
            why = f"the boundary at {r} is at an edge of {item_name(*inside[0])}: it splits no item"
        else:
            why = f"the boundary at {r} lies between text positions: it splits no media item, nothing given back"
    trim = steps("CR-MEDIA-3", "reused_tokens", trimmed.reused, why, before=r,
                 refs={"boundaries": given_back or [r]})
    restated = (f"a media-aware plan is restated after the trim: kind {trimmed.kind}, matched = the kept "
                f"length {trimmed.matched}")
    rule = "CR-MEDIA-3" if given_back else "CR-MEDIA-4"
    if given_back:
        restated = f"{why}; {restated}"
    steps(rule, "matched_tokens", trimmed.matched, restated, before=plan.matched, causes=(trim,))
    steps(rule, "plan", trimmed.kind, restated, before=plan.kind, causes=(trim,))


def trim_checkpoint_hit(plan: Plan, history, n: int, page_size: int, test: str, steps=None) -> Plan:
    """CR-HYB-7 under a profile whose media trim also applies to checkpoint hits (Edge-LLM 0.10
    calls it on every media-aware plan, spec/profiles.md `hybrid_media_trim`): the reuse is first
    floored to whole pages, then trimmed as CR-MEDIA-3. A hit left at its own length L stays; one
    trimmed to 0 is restated no_reusable_prefix with nothing restored, its pins and pages those
    of the untrimmed plan (CR-MEDIA-5); one trimmed to another length is OutOfScope: 0.10 would
    restore the recurrent state at L and compute from the floor, so its outputs are not defined.
    `steps`: the sequence's trace recorder, or None."""
    L = plan.reused
    r = L - L % page_size
    while r > 0 and r < n and _splits(history, r, test):
        r -= page_size
    if r == L:
        return plan
    if r == 0:
        if steps is not None:
            why = (f"the profile trims a media-aware checkpoint hit: L = {L} floored to pages and trimmed at media "
                   "items to 0")
            for value, to, before in (("reused_tokens", 0, L), ("matched_tokens", 0, plan.matched),
                                      ("plan", NO_REUSABLE_PREFIX, plan.kind), ("hybrid_restore", False, True)):
                steps("CR-HYB-7", value, to, why, before=before)
        return replace(plan, kind=NO_REUSABLE_PREFIX, matched=0, reused=0, record=None)
    raise OutOfScope(f"a media-aware checkpoint hit of {L} tokens trimmed to {r}: the recurrent state would "
                     f"be restored at {L} and the prefill start at {r} (hybrid_media_trim, spec/profiles.md)")


class OpenCounts:
    """CR-MEDIA-6 on one runtime instance, while tracing: the counts of an audio request, and of
    what could depend on one, are unspecified: a later request that shares a full first page
    with an audio request (under the same adapter), and once records were evicted every request
    after the first audio one. Its steps mark them (`Trace.unspecified`)."""

    def __init__(self, trace, page_size: int):
        self.trace, self.P = trace, page_size
        self.first = None                        # the ordinal of the first request with audio input
        self.first_pages: dict[bytes, int] = {}  # first-page key of an audio request's history -> it

    def _first_page(self, tokens, request) -> bytes:
        return TokenHistory(tokens, request.spans, adapter_root(request.lora_name), self.P).key(0)

    def started(self, parsed, first: int, generated: list) -> None:
        """A file's audio requests, before it runs: the first page each may publish."""
        including = includes_generated(parsed.commit_policy)
        for request in parsed.requests:
            if not request.has_audio:
                continue
            if self.first is None:
                self.first = first + request.index
            tokens = array("i", request.tokens)
            gen = generated[request.index]
            if including and gen:
                tokens.extend(gen[:-1])
            if len(tokens) >= self.P:
                self.first_pages.setdefault(self._first_page(tokens, request), first + request.index)

    def done(self, parsed, first: int, evicted: bool) -> None:
        """The steps of the file's requests whose counts are open, and of its counters."""
        start = self.first
        for request in parsed.requests:
            ordinal = first + request.index
            if start is None or ordinal < start:
                continue
            if request.has_audio:
                why = f"request {ordinal} has audio input"
            elif evicted:
                why = (f"records were evicted on this runtime instance, and which ones depends on what audio "
                       f"request {start} left in the cache")
            else:
                shared = None
                if request.n >= self.P:
                    shared = self.first_pages.get(self._first_page(array("i", request.tokens), request))
                if shared is None or shared >= ordinal:
                    continue
                why = f"its first page equals one that audio request {shared} may have published"
            self.trace.add(ordinal, "CR-MEDIA-6", "counts", "unspecified",
                           f"{why}: the spec leaves the reuse counts of audio input open")
        if start is not None:
            self.trace.add(None, "CR-MEDIA-6", "aggregates", "unspecified",
                           f"the counters add up the counts of audio request {start}, which the spec leaves open")
