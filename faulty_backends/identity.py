"""Identity defects: what goes into a page key (CR-ID).

Each class is a `gpu_backend.identity.SequenceIdentity` with one thing left out of, or weakened
in, the key material; the runtime uses it through `Runtime.identity_class`. The merged-run
variant is a scheduler that hands the identity other media items.
"""
from __future__ import annotations

import hashlib
import struct

import numpy as np

from gpu_backend.identity import ROOT, MediaSpan, SequenceIdentity, adapter_material
from gpu_backend.scheduler import Scheduler

from .registry import variant


@variant("lora-not-in-key", "identity")
class LoraNotInKey(SequenceIdentity):
    """The LoRA adapter is left out of every page key: adapters share pages.

    Bug class: lora-missing-from-key. Violates: CR-ID-3, CR-ID-1.
    Mirrors: llama.cpp #26207 (prompt cache reused across requests with different LoRA) and
    vLLM #44250 (LMCache connector key omits the LoRA identity: cross-adapter KV hits).
    """

    def __init__(self, input_ids, spans, P, lora_name):
        super().__init__(input_ids, spans, P, lora_name)
        self.adapter = adapter_material(None)                                         # DEFECT


@variant("media-placeholders-only", "identity")
class MediaPlaceholdersOnly(SequenceIdentity):
    """Media content is left out of the key: a page is keyed by its placeholder tokens only.

    Every image of the same placeholder count at the same positions gets the same key, so a
    request reuses the KV computed for another picture.
    Bug class: media-identity-omitted. Violates: CR-ID-4, CR-MEDIA-1.
    Mirrors: LMCache #690 (keyed only on `<image_pad>` tokens: all images share KV) and ROCm ATOM
    PR #1358 (placeholder-only block hashes: a later image reuses an earlier image's KV).
    """

    def _material(self, a: int, b: int) -> bytes:
        return struct.pack("<Q", b - a) + self._ids_slice(a, b) + struct.pack("<Q", 0)   # DEFECT: no runs


@variant("media-position-omitted", "identity")
class MediaPositionOmitted(SequenceIdentity):
    """A page's media material is the set of item digests it overlaps, without where each run
    sits in the page or its offset in the item: two images in swapped order key alike.

    Bug class: media-position-omitted. Violates: CR-ID-4, CR-ID-1.
    Mirrors: vLLM PR #11646 (the media offset removed from the block extra keys as
    "redundant") and PR #36708 (restored for an edge case).
    """

    def _material(self, a: int, b: int) -> bytes:
        digests = sorted({s.digest for s in self.spans if max(a, s.start) < min(b, s.end)})   # DEFECT
        return (struct.pack("<Q", b - a) + self._ids_slice(a, b) + struct.pack("<Q", len(digests))
                + b"".join(digests))


@variant("media-hash-without-geometry", "identity")
class MediaHashWithoutGeometry(SequenceIdentity):
    """A media item is hashed over its raw sample bytes only: no modality, no geometry, so equal
    bytes as a 16x32 and a 32x16 image are one item.

    Bug class: media-hash-preimage-ambiguous. Violates: CR-ID-4.
    Mirrors: ai-dynamo/dynamo PR #8340 (hashing `tobytes()` without shape or mode), vLLM
    GHSA-c65p-x677-fgj6 (image hash collision); Edge-LLM 0.10 hashes raw bytes (Appendix B).
    """

    def __init__(self, input_ids, spans, P, lora_name):
        # DEFECT: the digest covers the sample bytes only
        raw = [MediaSpan(s.start, s.count, hashlib.blake2b(np.ascontiguousarray(s.data).tobytes()).digest(),
                         s.modality, s.data) for s in spans]
        super().__init__(input_ids, raw, P, lora_name)


@variant("adjacent-media-merged", "identity")
class AdjacentMediaMerged(SequenceIdentity):
    """A run of adjacent placeholders is one item carrying the first item's digest: an image
    directly after another is keyed as the continuation of the first.

    Bug class: media-identity (merged runs). Violates: CR-ID-4 ("two items are never merged").
    Mirrors: Edge-LLM 0.10 `buildPerPositionMediaHash` (each maximal run of media tokens is one
    item and gets the first image's hash; edge-llm-0.10-semantics.md section 3.1 quirk).
    """

    def __init__(self, input_ids, spans, P, lora_name):
        merged: list = []
        for s in spans:
            if merged and merged[-1].end == s.start and merged[-1].modality == s.modality:   # DEFECT
                m = merged[-1]
                merged[-1] = MediaSpan(m.start, m.count + s.count, m.digest, m.modality, m.data)
            else:
                merged.append(s)
        super().__init__(input_ids, merged, P, lora_name)


@variant("weak-16bit-digest", "identity")
class Weak16BitDigest(SequenceIdentity):
    """Page keys are 16-bit digests (BLAKE2b truncated to 2 bytes): distinct pages collide.

    With k distinct pages in the index the chance that none collide is about
    exp(-k^2 / 2^17); the kit cannot know a backend's hash, so it cannot craft a collision and
    relies on the birthday bound instead: the case sections/id/distinct-pages-birthday keys
    about 2,000 distinct pages in one cache (no collision with probability ~1e-14), and any
    collision is observable (a false hit, an `existing` publication, or a record that maps a
    page of another prefix, which changes the pool's free count). A digest of 32 bits or more
    survives that case; CR-ID-6 asks for 128.
    Bug class: media-hash-truncated / weak-hash. Violates: CR-ID-6, CR-ID-1.
    Mirrors: LMCache #4086 (media hash reduced to 16 bits: different images collide), SGLang
    #2151 (image hash used as a token value), vLLM CVE-2025-25183 (predictable hash chains).
    """

    def page_keys(self, num_pages: int) -> list[bytes]:
        assert num_pages * self.P <= self.length
        P = self.P
        for i in range(len(self.keys), num_pages):
            h = hashlib.blake2b(digest_size=2, person=b"kvc-page-v1")                  # DEFECT: 16 bits
            h.update(self.keys[i - 1] if i else ROOT)
            h.update(self.adapter)
            h.update(self._material(i * P, (i + 1) * P))
            self.keys.append(h.digest())
        return self.keys[:num_pages]


@variant("checkpoint-partial-page-ignored", "identity")
class CheckpointPartialPageIgnored(SequenceIdentity):
    """A checkpoint's key covers its length and its complete pages but not the positions of its
    partial last page: two inputs of the same length that differ only after the last page
    boundary share a checkpoint, and the later one restores the other's recurrent state.

    Bug class: partial-block reuse (exact-length identity). Violates: CR-HYB-5, CR-ID-1, CR-OUT-1.
    Mirrors: vLLM #57267 (hybrid prefix caching keyed on whole blocks: a Mamba state restored
    for a prompt that differs within the last block) and SGLang's radix cache for hybrid models
    (MambaRadixCache matches on token prefixes, and a state is valid only at its exact length).
    """

    def exact_key(self, L: int) -> bytes:
        full = L // self.P
        h = hashlib.blake2b(digest_size=32, person=b"kvc-ckpt-v1")
        h.update(struct.pack("<Q", L))
        h.update(self.page_keys(full)[-1] if full else ROOT)
        h.update(self.adapter)                                     # DEFECT: no material of [full*P, L)
        return h.digest()


@variant("merged-run-own-first-digest", "identity", profile="edge-llm-0.10")
class MergedRunOwnFirstDigest(Scheduler):
    """As edge-llm-0.10, each merged run of adjacent images carries the digest of its own first
    image, where 0.10 gives the k-th run the k-th item's digest (after a run of two images the
    next run takes the second image's).

    Bug class: media-identity (merged runs). Violates: CR-ID-4, CR-MEDIA-1.
    Mirrors: Edge-LLM 0.10 `buildPerPositionMediaHash` (edge-llm-0.10-semantics.md section 3.1:
    the k-th maximal run of media positions takes the hash of the k-th media item, a quirk); a
    re-implementation that reads it as "a run is its first image" agrees with it on every run
    of one image and on a first run, and no case had two runs of two images.
    """

    def _identity_spans(self, spans: list) -> list:
        if not self.semantics.merged_media_runs:
            return super()._identity_spans(spans)
        out = []
        for s in spans:
            digest = s.content if self.semantics.raw_media_digest else s.digest
            if out and out[-1].end == s.start and out[-1].modality == s.modality:
                run = out[-1]
                out[-1] = MediaSpan(run.start, run.count + s.count, run.digest, s.modality, None)   # DEFECT
            else:
                out.append(MediaSpan(s.start, s.count, digest, s.modality, None))
        return out
