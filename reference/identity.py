"""Cache identity (spec/context-reuse.md section 1, CR-ID-1 .. CR-ID-6).

A page key is a SHA-256 digest (CR-ID-6) over a tagged, length-prefixed encoding of
(parent key, the page's positions, the media entries of the page). The chain root is a digest
of the LoRA adapter (CR-ID-3) and of nothing else (CR-ID-5: no salt, no sampling parameter, no
engine identity), so chaining carries the adapter into every page (CR-ID-1).

A position is its token id, or for a media placeholder the pair (item digest, offset in the
item) (CR-ID-4, CR-MEDIA-1). The encoding keeps the token id (always the placeholder id there)
and lists each media run of the page as (start in page, length, offset in item, item digest):
every field has a fixed width or a length prefix, so no two different key materials encode to
the same bytes. Python's `hash()` is never used.
"""

import hashlib
import struct
from array import array
from bisect import bisect_right
from functools import lru_cache
from typing import NamedTuple

from .trace import adapter_name, item_name, items_in, positions_of

_sha256 = hashlib.sha256
_NO_MEDIA = struct.pack("<I", 0)
_WIDTH = array("i").itemsize        # bytes per token in the page encoding (fixed width)


def _field(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


@lru_cache(maxsize=None)
def adapter_root(lora_name: str | None) -> bytes:
    """The chain root of a sequence: its LoRA adapter name, or a distinct "no adapter" tag (CR-ID-3).
    A function of the name alone, so digested once per name (not once per sequence)."""
    if lora_name is None:
        return _sha256(b"kvconform-root\x00").digest()
    return _sha256(b"kvconform-root\x01" + _field(lora_name.encode("utf-8"))).digest()


def media_item_digest(modality: str, geometry: tuple[int, ...], samples: bytes) -> bytes:
    """The identity of one media item: modality, geometry and decoded sample bytes (CR-ID-4)."""
    material = (b"kvconform-media" + _field(modality.encode("ascii"))
                + struct.pack("<Q", len(geometry)) + struct.pack(f"<{len(geometry)}Q", *geometry))
    h = _sha256(material)
    h.update(struct.pack("<Q", len(samples)))
    h.update(samples)
    return h.digest()


def media_content_digest(samples: bytes) -> bytes:
    """The digest of an item's decoded samples alone, without modality or geometry: Edge-LLM
    0.10's `opaque(bytes)` (spec/profiles.md, `media_digest: raw-bytes`)."""
    return _sha256(b"kvconform-media-bytes" + samples).digest()


class MediaSpan(NamedTuple):
    """The placeholder positions [start, end) of one media item (CR-MEDIA-1). `content`: the
    digest of its decoded samples alone, for profiles that identify items by raw bytes
    (reference/semantics.py)."""
    start: int
    end: int
    digest: bytes
    modality: str
    content: bytes = b""


class TokenHistory:
    """The identity material of one sequence: tokens (input, then generated), media spans, root.

    Page keys are computed lazily, once each, so a bypass sequence never hashes anything and a
    long input is hashed one page at a time (a C-level digest over the page's token bytes).
    """

    def __init__(self, tokens: array, spans: list[MediaSpan], root: bytes, page_size: int):
        self.tokens = tokens
        self.spans = spans
        self._span_ends = [s.end for s in spans]
        self.root = root
        self.P = page_size
        self._full_page = b"\x02" + struct.pack("<I", page_size)
        self._keys: list[bytes] = []
        self._bytes = tokens.tobytes()
        self.truth: "TokenHistory | None" = None
        """Under a semantics profile whose identity conflates media (merged runs, raw bytes), the
        same history keyed per item over content and geometry: what the KV really depends on."""

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def media_aware(self) -> bool:
        """CR-MEDIA-2: at least one position is a media position."""
        return bool(self.spans)

    def extend(self, generated) -> None:
        """Append generated tokens (never media, CR-HYB-7) to the history. The tokens given to
        the constructor are not changed (a new array), so a history can share its request's."""
        self.tokens = self.tokens + array("i", generated)
        self._bytes = self.tokens.tobytes()
        if self.truth is not None:
            self.truth.extend(generated)

    def key(self, i: int) -> bytes:
        """The key of complete page i: [iP, (i+1)P) chained on page i-1 (CR-ID-1, CR-ID-2)."""
        if i >= len(self._keys):
            self._extend_keys(i + 1)
        return self._keys[i]

    def keys(self, count: int) -> list[bytes]:
        """The keys of the first `count` complete pages."""
        if count > len(self._keys):
            self._extend_keys(count)
        return self._keys[:count]

    def _extend_keys(self, count: int) -> None:
        P, keys, data, head = self.P, self._keys, self._bytes, self._full_page
        if count * P > len(self.tokens):
            raise IndexError(f"page {count - 1} of a {len(self.tokens)}-token history is not complete")
        parent = keys[-1] if keys else self.root
        for start in range(len(keys) * P, count * P, P):           # page j starts at token jP
            media = self._media(start, start + P) if self.spans else _NO_MEDIA
            page = data[start * _WIDTH:(start + P) * _WIDTH]
            parent = _sha256(b"".join((b"\x01", parent, head, page, b"\x03", media))).digest()
            keys.append(parent)

    def exact_digest(self, length: int) -> bytes:
        """The identity of the exact prefix [0, length) (CR-HYB-3, CR-HYB-5).

        A page-aligned prefix is identified by its last page key; otherwise the partial page is
        digested with its own length field, chained on the last complete page.
        """
        full, rest = divmod(length, self.P)
        parent = self.key(full - 1) if full else self.root
        if rest == 0:
            return parent
        start = full * self.P
        return self._digest(parent, start, start + rest)

    def ids_keys(self, count: int) -> list[bytes]:
        """Explanation only, never a cache key: the first `count` page keys over the token ids
        alone (no adapter root, no media identity: a media position is its placeholder id), so
        pages that differ only by adapter or media share one (the trace's CR-ID-3/CR-ID-4
        reasons). Computed while tracing only, and kept like the page keys."""
        keys = self.__dict__.setdefault("_ids_keys", [])
        width = self.P * _WIDTH
        parent = keys[-1] if keys else b"ids"
        for j in range(len(keys), count):
            parent = _sha256(parent + self._bytes[j * width:(j + 1) * width]).digest()
            keys.append(parent)
        return keys[:count]

    def ids_digest(self, length: int) -> bytes:
        """Explanation only: the ids-only identity of the exact prefix [0, length) (CR-HYB-5)."""
        return _sha256(b"ids-prefix" + self._bytes[:length * _WIDTH]).digest() + length.to_bytes(8, "little")

    def is_media(self, i: int) -> bool:
        """Whether position i is a media placeholder."""
        j = bisect_right(self._span_ends, i)
        return j < len(self.spans) and self.spans[j].start <= i

    def same_item(self, a: int, b: int) -> bool:
        """Whether positions a < b both belong to one media item (CR-MEDIA-3)."""
        j = bisect_right(self._span_ends, a)
        return j < len(self.spans) and self.spans[j].start <= a and b < self.spans[j].end

    def _digest(self, parent: bytes, start: int, end: int) -> bytes:
        """Tag 1: parent key; tag 2: position count and token ids; tag 3: media runs."""
        tokens = self._bytes[start * _WIDTH:end * _WIDTH]
        return _sha256(b"\x01" + parent + b"\x02" + struct.pack("<I", end - start) + tokens
                       + b"\x03" + self._media(start, end)).digest()

    def _media(self, start: int, end: int) -> bytes:
        """The media runs inside [start, end): one entry per item that has positions there."""
        spans = self.spans
        j = bisect_right(self._span_ends, start)
        if j == len(spans) or spans[j].start >= end:
            return _NO_MEDIA
        entries = []
        while j < len(spans) and spans[j].start < end:
            s = spans[j]
            lo, hi = max(s.start, start), min(s.end, end)
            entries.append(struct.pack("<III", lo - start, hi - lo, lo - s.start) + s.digest)
            j += 1
        return struct.pack("<I", len(entries)) + b"".join(entries)


def another_identity(name: str, lora, spans, holder: tuple, hi: int, what: str) -> tuple[str, str]:
    """(rule, why) of ids [0, hi) that `holder` = (publisher, its adapter) holds under another
    identity than `name`'s (adapter `lora`, media `spans`): another adapter (CR-ID-3), else
    other media at those positions (CR-ID-4). `what`: pages, records or checkpoints."""
    who, their_lora = holder
    if their_lora != lora:
        return "CR-ID-3", (f"{who} holds the same ids at {positions_of(0, hi)} under {adapter_name(their_lora)}, "
                           f"{name} runs under {adapter_name(lora)}: adapters never share {what}")
    named = ", ".join(item_name(k, s) for k, s in items_in(spans, 0, hi)) or "its media"
    return "CR-ID-4", (f"{who} holds the same token ids at {positions_of(0, hi)}, but {named} is another media "
                       f"item there (pixels, geometry or position): media identity keeps them apart")
