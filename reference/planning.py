"""Planning (spec/context-reuse.md section 2, CR-PLAN-1 .. CR-PLAN-5).

A plan says which prefix a sequence reuses. Planning changes nothing: no reference count, no
record recency (lookup only reads the page index).

While tracing, a lookup records its steps where it decides (reference/trace.py): the pages it
matched and where they came from, why the match stops where it does, and the rewind.
"""

from dataclasses import dataclass, field

from .trace import pages_of, positions_of

STANDARD = "standard"
NO_REUSABLE_PREFIX = "no_reusable_prefix"
FULL_INPUT_REWIND = "full_input_rewind"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class Plan:
    """kind, matched and reused as counted (CR-MET-5, CR-MET-6); `kept` are the shared pages the
    sequence pins; `private` its private page demand at admission (CR-PLAN-5)."""
    kind: str
    matched: int
    reused: int
    kept: list
    private: int
    record: object = None          # a hybrid hit's checkpoint (CR-HYB-6), an EAGLE hit's pairing record (CR-SPEC-1)
    draft_kept: list = field(default_factory=list)    # EAGLE: the kept draft pages it pins (CR-SPEC-6)
    draft_private: int = 0         # EAGLE: its private draft page demand (CR-SPEC-6)
    replay: bool = False           # EAGLE: the last paired page is replayed (CR-SPEC-2)

    @property
    def hit(self) -> bool:
        """CR-MET-2: the final matched length is greater than 0."""
        return self.matched > 0


def cold_plan(n: int, page_size: int) -> Plan:
    """No lookup or no match: every page private (CR-PLAN-3, CR-POL-2)."""
    return Plan(NO_REUSABLE_PREFIX, 0, 0, [], ceil_div(n, page_size))


def plan_vanilla(history, n: int, page_size: int, index: dict, steps=None) -> Plan:
    """CR-PLAN-1: longest run of complete pages from page 0 whose keys are in the index.
    CR-PLAN-2: an aligned input matched whole gives back its last page (full_input_rewind,
    matched stays n). CR-PLAN-3: kinds. CR-PLAN-4: reused = kept pages * P < n.
    CR-PLAN-5: private demand = ceil(n/P) - kept pages. A page hit touches no record and
    does not protect the record that supplied it (CR-CAP-5). `steps`: the sequence's trace
    recorder (reference/trace.py), or None."""
    kept = []
    for key in history.keys(n // page_size):
        page = index.get(key)
        if page is None:
            break
        kept.append(page)
    matched = len(kept) * page_size
    if steps is not None:
        _looked_up(steps, history, n, page_size, kept)
    if kept and matched == n:
        kept.pop()
        kind = FULL_INPUT_REWIND
        if steps is not None:
            why = (f"n = {n} is a multiple of P = {page_size} and all {len(kept) + 1} pages match: the last page is "
                   f"given back and recomputed, {len(kept)} page(s) kept, matched stays {n}")
            steps("CR-PLAN-2", "reused_tokens", n - page_size, why, before=n)
            steps("CR-PLAN-2", "plan", FULL_INPUT_REWIND, why, before=STANDARD)
    else:
        kind = STANDARD if kept else NO_REUSABLE_PREFIX
        if steps is not None and kept and len(kept) == n // page_size:
            why = (f"every complete page matched, but n = {n} is not a multiple of P = {page_size}: the partial last "
                   f"page leaves {n - matched} token(s) to compute, so no page is given back (kind standard)")
            steps("CR-PLAN-2", "reused_tokens", matched, why, before=matched)
            steps("CR-PLAN-2", "plan", STANDARD, why, before=STANDARD)
    reused = len(kept) * page_size
    return Plan(kind, matched, reused, kept, ceil_div(n, page_size) - len(kept))


def _looked_up(steps, history, n: int, P: int, kept: list) -> None:
    """The lookup's steps of matched, reused and kind (CR-PLAN-1): the pages found and the
    publication they came from, then why the match stops where it does (a missing page, CR-ID-2
    for an input without a complete page, or the end of the complete pages). Records each hit
    page as hit (CR-CAP-5: the hit touches no record)."""
    m, full, cache = len(kept), n // P, steps.cache
    causes, found = (), ""
    if m:
        causes = steps.trace.since(cache.origin.get(history.key(m - 1)))
        found = (f"{pages_of(0, m)} (positions 0-{m * P - 1}) {'is' if m == 1 else 'are'} in the page index"
                 + (f", first published by {causes[0].by}" if causes and causes[0].by else ""))
        for page in kept:
            cache.hits[page] = (steps.trace.now, steps.name)
        if history.truth is not None and history.spans:          # the profile's key conflates media
            runs = [s for s in history.spans if s.start < m * P][:4]
            runs = ", ".join(f"{s.modality} run at {positions_of(s.start, s.end)}" for s in runs)
            causes += (steps("CR-ID-4", "matched_tokens", m * P, f"pages 0-{m - 1} are keyed by the semantics "
                             f"profile's media identity, not per item: {runs}"),)
    if m < full:
        rule, why, stop = why_missing(steps, history, m)
        why, causes = (found + "; " if found else "") + why, causes + stop
    elif full == 0:
        rule, why = "CR-ID-2", f"n = {n} < P = {P}: the input has no complete page, so nothing is looked up"
    else:
        rule = "CR-PLAN-1"
        why = found + (f"; {positions_of(full * P, n)} of the partial last page {'are' if n - full * P > 1 else 'is'}"
                       " never keyed (CR-ID-2)" if n % P else "")
    kind = STANDARD if m else NO_REUSABLE_PREFIX
    for value, to in (("matched_tokens", m * P), ("reused_tokens", m * P), ("plan", kind)):
        steps(rule, value, to, why, causes=causes)


def why_missing(steps, history, k: int) -> tuple:
    """(rule, why, causes) of page k of a sequence not being in the page index at its lookup:
    what its batch or the cache says (`Steps.missing`)."""
    P = history.P
    rule, phrase, causes = steps.missing(k)
    return rule, f"{pages_of(k, k + 1)} ({positions_of(k * P, (k + 1) * P)}) {phrase}", causes
