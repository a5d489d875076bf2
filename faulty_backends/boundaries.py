"""Defects at boundaries the catalogue's other variants never stand on: a checkpoint shorter
than one page, a media trim that must repeat, a sequence that ends on a stop string.

Each was the shape of a faulty backend written outside the project that the default run let
through; the curated cases of `tools/make_cases.py` `reach_cases()` stand on each boundary.
"""
from __future__ import annotations

import hashlib
import struct

from gpu_backend.identity import ROOT, SequenceIdentity
from gpu_backend.page_planner import PagePlanner
from gpu_backend.scheduler import Scheduler

from .registry import variant


@variant("sub-page-checkpoint-without-lora", "identity")
class SubPageCheckpointWithoutLora(SequenceIdentity):
    """A checkpoint's exact-length key leaves out the LoRA adapter, which only the page keys
    carry: a checkpoint shorter than one page (no complete page) is shared across adapters, and
    a request under another adapter restores a recurrent state computed with different weights.

    Bug class: lora-missing-from-key (exact-length checkpoint keys). Violates: CR-ID-3, CR-HYB-5.
    Mirrors: llama.cpp #26207 (prompt cache reused across requests with different LoRA), here
    only where a hybrid checkpoint key does not chain through a page key (a faulty backend of the
    kit's power study written outside the project).
    """

    def exact_key(self, L: int) -> bytes:
        full = L // self.P
        h = hashlib.blake2b(digest_size=32, person=b"kvc-ckpt-v1")
        h.update(struct.pack("<Q", L))
        h.update(self.page_keys(full)[-1] if full else ROOT)       # DEFECT: no adapter material
        h.update(self._material(full * self.P, L))
        return h.digest()


@variant("media-trim-once", "planning")
class MediaTrimOnce(PagePlanner):
    """The page-boundary media trim gives back one page, not as many as it takes: an item that
    spans several page boundaries is still split after the trim, and its first placeholders are
    reused while the rest are computed without them.

    Bug class: media-span-partial-reuse-mismatch (trim not repeated). Violates: CR-MEDIA-3,
    CR-MEDIA-4. Mirrors: TensorRT-LLM #14125 (multimodal token count mismatch under block reuse);
    Edge-LLM 0.10's `trimMediaBoundaryPages` loop written as a single test (a faulty backend of
    the kit's power study, caught before only at a larger generated budget).
    """

    def trim_media(self, ident, r: int, matched: int, kind: str, splits_media):
        if r > 0 and ident.spans:
            if splits_media(r - 1, r):                                 # DEFECT: `if`, not `while`
                r -= self.P
            matched, kind = r, ("standard" if r > 0 else "no_reusable_prefix")
        return r, matched, kind


@variant("stop-string-end-not-published", "publication")
class StopStringEndNotPublished(Scheduler):
    """A sequence that ends on a stop string is not published at decode end (only end-of-
    sequence and max-length are), so a later turn that sends the answer back finds only the
    prefill-end record.

    Bug class: finish-reason-gated commit. Violates: CR-PUB-2. Mirrors: a faulty backend of the
    kit's power study written outside the project (a decode-end commit gated on "finished
    normally", which a stop-string finish, whose text is truncated, was not); Edge-LLM 0.10
    publishes at decode end for end-of-sequence, max-length and stop strings alike (CR-PUB-2).
    """

    def _publishing(self, seqs, point, bypass):
        seqs = super()._publishing(seqs, point, bypass)
        if point == "decode_end":
            seqs = [s for s in seqs if s.finish != "stop-words"]    # DEFECT
        return seqs
