"""The semantics profiles this runtime can behave as (`--semanticsProfile NAME`).

Shipped Edge-LLM 0.10 and the documented promise of its context reuse part ways at a few points;
the runtime implements both readings and is told which one to follow. This table is the
runtime's own (it reads nothing of the kit's spec/profiles data): the kit's differential run
then checks that the two agree.

    kvconform-1     per-item media identity over content, geometry and modality; a page
                    boundary is given back only where it splits one item; tensor parallelism
                    with reuse refused; the prefill section only with --dumpProfile.
    edge-llm-0.10   0.10.0 as shipped: each run of adjacent placeholders is one item, the k-th
                    run hashed as the k-th item over its raw samples; the boundary is given back
                    while both positions are media, for checkpoint hits too; no tensor-parallel
                    refusal; the prefill section whenever a profile file is written.
"""
from dataclasses import dataclass

from .identity import MediaSpan


@dataclass(frozen=True)
class Semantics:
    name: str
    merged_media_runs: bool
    raw_media_digest: bool
    trim_any_media: bool
    trim_checkpoint_hits: bool
    tp_refusal: bool
    prefill_with_profile_file: bool


PROFILES = {
    "kvconform-1": Semantics("kvconform-1", merged_media_runs=False, raw_media_digest=False, trim_any_media=False,
                             trim_checkpoint_hits=False, tp_refusal=True, prefill_with_profile_file=False),
    "edge-llm-0.10": Semantics("edge-llm-0.10", merged_media_runs=True, raw_media_digest=True, trim_any_media=True,
                               trim_checkpoint_hits=True, tp_refusal=False, prefill_with_profile_file=True),
}
DEFAULT = "kvconform-1"


def identity_spans(spans: list, sem: Semantics) -> list:
    """The media items the page keys see. Under merged runs a run of adjacent placeholders of one
    modality is one item, and the k-th run of a modality carries the k-th item's digest (0.10's
    per-position media hash); under raw digests an item is known by its samples alone."""
    if not (sem.merged_media_runs or sem.raw_media_digest):
        return spans
    def digest(s):
        return s.content if sem.raw_media_digest else s.digest
    if not sem.merged_media_runs:
        return [MediaSpan(s.start, s.count, digest(s), s.modality, s.data) for s in spans]
    runs = []
    for s in spans:
        if runs and runs[-1][1] == s.start and runs[-1][2] == s.modality:
            runs[-1][1] = s.end
        else:
            runs.append([s.start, s.end, s.modality])
    by_modality = {}
    for s in spans:
        by_modality.setdefault(s.modality, []).append(digest(s))
    taken = dict.fromkeys(by_modality, 0)
    out = []
    for start, end, modality in runs:
        out.append(MediaSpan(start, end - start, by_modality[modality][taken[modality]], modality, None))
        taken[modality] += 1
    return out
