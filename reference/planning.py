"""Planning (spec/context-reuse.md section 2, CR-PLAN-1 .. CR-PLAN-5).

A plan says which prefix a sequence reuses. Planning changes nothing: no reference count, no
record recency (lookup only reads the page index).
"""

from dataclasses import dataclass, field

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


def plan_vanilla(history, n: int, page_size: int, index: dict) -> Plan:
    """CR-PLAN-1: longest run of complete pages from page 0 whose keys are in the index.
    CR-PLAN-2: an aligned input matched whole gives back its last page (full_input_rewind,
    matched stays n). CR-PLAN-3: kinds. CR-PLAN-4: reused = kept pages * P < n.
    CR-PLAN-5: private demand = ceil(n/P) - kept pages. A page hit touches no record and
    does not protect the record that supplied it (CR-CAP-5)."""
    kept = []
    for key in history.keys(n // page_size):
        page = index.get(key)
        if page is None:
            break
        kept.append(page)
    matched = len(kept) * page_size
    if kept and matched == n:
        kept.pop()
        kind = FULL_INPUT_REWIND
    else:
        kind = STANDARD if kept else NO_REUSABLE_PREFIX
    reused = len(kept) * page_size
    return Plan(kind, matched, reused, kept, ceil_div(n, page_size) - len(kept))
