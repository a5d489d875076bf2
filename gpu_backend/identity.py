"""Cache identity: media item digests, chained page keys and exact-prefix digests.

Every key is a 256-bit BLAKE2b digest over a tagged, length-prefixed encoding (CR-ID-6), so
no two different key materials serialize to the same bytes, and nothing depends on Python's
per-process `hash()`. The three digest kinds use distinct BLAKE2b personalization strings, so
a page key can never equal a media digest or a checkpoint key.

Identity of a position (CR-ID-1, CR-ID-4, CR-MEDIA-1): its token id, or for a media
placeholder the (item digest, offset in the item) pair. A page key chains the previous page's
key, the adapter (CR-ID-3) and its P position identities; nothing else enters (CR-ID-5).
"""
import hashlib
import struct

import numpy as np

DIGEST_BYTES = 32
ROOT = bytes(DIGEST_BYTES)  # parent of page 0 and of every exact prefix shorter than P
_MODALITY = {"image": 1, "audio": 2}


def media_digest(modality: str, geometry: tuple[int, ...], data: bytes) -> bytes:
    """Identity of one media item: modality, geometry and decoded sample bytes (CR-ID-4)."""
    h = hashlib.blake2b(digest_size=DIGEST_BYTES, person=b"kvc-media-v1")
    h.update(struct.pack("<BQ", _MODALITY[modality], len(geometry)))
    h.update(struct.pack(f"<{len(geometry)}Q", *geometry))
    h.update(struct.pack("<Q", len(data)))
    h.update(data)
    return h.digest()


def content_digest(data: bytes) -> bytes:
    """An item's decoded samples alone, without modality or geometry (the `edge-llm-0.10`
    semantics profile keys media this way, semantics.py)."""
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES, person=b"kvc-bytes-v1").digest()


def adapter_material(lora_name: str | None) -> bytes:
    """Tagged encoding of the batch's adapter: absent, or present with its name (CR-ID-3)."""
    if lora_name is None:
        return b"\x00"
    name = lora_name.encode("utf-8")
    return b"\x01" + struct.pack("<Q", len(name)) + name


class MediaSpan:
    """One media item placed in a prompt: positions [start, start + count) all carry `digest`."""

    __slots__ = ("start", "count", "digest", "modality", "data", "content")

    def __init__(self, start: int, count: int, digest: bytes, modality: str, data, content: bytes = b""):
        self.start, self.count, self.digest = start, count, digest
        self.modality, self.data = modality, data  # data: decoded samples for the encoder
        self.content = content                     # digest of the samples alone (semantics.py)

    @property
    def end(self) -> int:
        return self.start + self.count


class SequenceIdentity:
    """Page keys of one sequence's token history (input, then generated tokens).

    Keys are computed lazily and memoized, so a sequence hashes each page once over its life:
    O(pages) per request. `ids` holds token ids with media positions replaced by -1; the media
    runs of a page are encoded after its ids, each as (position in page, offset in item,
    run length, item digest).
    """

    def __init__(self, input_ids: np.ndarray, spans: list[MediaSpan], P: int, lora_name: str | None):
        self.P = P
        self.spans = spans
        self.adapter = adapter_material(lora_name)
        ids = np.asarray(input_ids, dtype=np.int64).copy()
        for s in spans:
            ids[s.start:s.end] = -1
        self._ids = ids.astype("<i4")
        self._extra: list[int] = []  # generated tokens, appended as they are sampled
        self.keys: list[bytes] = []

    @property
    def length(self) -> int:
        return len(self._ids) + len(self._extra)

    def append(self, token_id: int) -> None:
        self._extra.append(token_id)

    def _ids_slice(self, a: int, b: int) -> bytes:
        n = len(self._ids)
        if b <= n:
            return self._ids[a:b].tobytes()
        head = self._ids[a:n].tobytes() if a < n else b""
        tail = np.asarray(self._extra[max(a - n, 0):b - n], dtype="<i4").tobytes()
        return head + tail

    def _material(self, a: int, b: int) -> bytes:
        """Encoding of positions [a, b): count, ids, then the media runs that overlap them."""
        runs = []
        for s in self.spans:
            lo, hi = max(a, s.start), min(b, s.end)
            if lo < hi:
                runs.append(struct.pack("<QQQ", lo - a, lo - s.start, hi - lo) + s.digest)
        return (struct.pack("<Q", b - a) + self._ids_slice(a, b)
                + struct.pack("<Q", len(runs)) + b"".join(runs))

    def page_keys(self, num_pages: int) -> list[bytes]:
        """Keys of the first `num_pages` complete pages (CR-ID-1, CR-ID-2)."""
        assert num_pages * self.P <= self.length
        P = self.P
        for i in range(len(self.keys), num_pages):
            h = hashlib.blake2b(digest_size=DIGEST_BYTES, person=b"kvc-page-v1")
            h.update(self.keys[i - 1] if i else ROOT)
            h.update(self.adapter)
            h.update(self._material(i * P, (i + 1) * P))
            self.keys.append(h.digest())
        return self.keys[:num_pages]

    def exact_key(self, L: int) -> bytes:
        """Identity of exactly the prefix [0, L): checkpoint record key (CR-HYB-4, CR-HYB-5)."""
        full = L // self.P
        h = hashlib.blake2b(digest_size=DIGEST_BYTES, person=b"kvc-ckpt-v1")
        h.update(struct.pack("<Q", L))
        h.update(self.page_keys(full)[-1] if full else ROOT)
        h.update(self.adapter)
        h.update(self._material(full * self.P, L))
        return h.digest()
