"""`trtllm-kv-reuse`: what keys a block and what a request's retention config asks of its blocks
(spec/peer-profiles.md section 5, PEER-TRT-2, PEER-TRT-8, PEER-TRT-10). Stdlib only.

A block's key is its tokens (each with its per-token extra id where the request gives them), the
request's LoRA task id, extra key and cache salt, and the multimodal items the block overlaps
(TensorRT-LLM kvCacheManager.cpp `buildBlockKeys`, `generateBlockHashExtraKeys`, `BlockKey`). A
retention config gives each context block the priority and duration of the token range its first
token falls in, and decode blocks their own (executor/kvCacheRetentionConfig.cpp
`getPerBlockRetentionPriorityDuration`).
"""
from __future__ import annotations

from dataclasses import dataclass

from .peer_common import PeerProfileError, PeerRequest

DEFAULT_PRIORITY = 35
"""KvCacheRetentionConfig::kDefaultRetentionPriority: every block a request leaves without a range."""
MIN_PRIORITY, MAX_PRIORITY = 0, 100


@dataclass(frozen=True)
class BlockKey:
    """PEER-TRT-2 / PEER-TRT-10: a block's tokens and what else keys it (every block of a request):
    `mm` holds (image digest, offset) for each image the block overlaps, the offset being how far
    into the image the block starts (0 when the image starts inside the block)."""
    tokens: tuple
    lora: str | None = None
    salt: str | None = None
    extra_key: str | None = None
    mm: tuple = ()

    def others(self) -> tuple:
        return (self.lora, self.salt, self.extra_key, self.mm)

    def partial_match(self, other: "BlockKey") -> int:
        """Leading tokens shared with `other` when every key but the tokens agrees, else 0
        (kvCacheManager.h `BlockKey::partialMatch`)."""
        if self.others() != other.others():
            return 0
        n = 0
        for a, b in zip(self.tokens, other.tokens):
            if a != b:
                break
            n += 1
        return n


def unique_tokens(request: PeerRequest, ids) -> list:
    """The request's tokens as the block key holds them: (id, extra id) pairs where the request
    gives per-token extra ids (`usesExtraIds`, which then keys every block), else the ids. Tokens
    beyond the given extra ids (generated ones) carry extra id 0, as `LlmRequest::addNewToken`."""
    extra = request.token_extra_ids
    if extra is None:
        return list(ids)
    return [(t, extra[i] if i < len(extra) else 0) for i, t in enumerate(ids)]


def mm_keys(request: PeerRequest, start: int, end: int) -> tuple:
    """PEER-TRT-10: (digest, offset into the image) of each image overlapping tokens [start, end)
    (`generateBlockHashExtraKeys`: `startPos >= startTokenIdx ? 0 : startTokenIdx - startPos`)."""
    return tuple((image.digest, 0 if image.start >= start else start - image.start) for image in request.images
                 if end > image.start and start < image.start + image.length)


def block_keys(ids, T: int, request: PeerRequest) -> list:
    """The request's keys over `ids` in blocks of T, the last one partial (possibly empty)."""
    tokens = unique_tokens(request, ids)
    return [BlockKey(tuple(tokens[i:i + T]), request.lora, request.salt, request.extra_key,
                     mm_keys(request, i, i + len(tokens[i:i + T]))) for i in range(0, len(tokens), T)]


def empty_key(request: PeerRequest) -> BlockKey:
    return BlockKey((), request.lora, request.salt, request.extra_key)


@dataclass(frozen=True)
class Retention:
    """A request's `kv_cache_retention_config` (PEER-TRT-8): token ranges (start, end or None,
    priority, duration in ms or None), sorted by start, and the decode blocks' priority and
    duration."""
    ranges: tuple = ()
    decode_priority: int = DEFAULT_PRIORITY
    decode_duration: int | None = None

    def per_block(self, T: int, n: int) -> list:
        """(priority or None, duration or None) of each of the ceil(n / T) context blocks: those of
        the range the block's first token falls in, None outside every range."""
        out = []
        for first in range(0, n, T):
            hit = next((r for r in self.ranges if r[0] <= first and (r[1] is None or first < r[1])), None)
            out.append((hit[2], hit[3]) if hit is not None else (None, None))
        return out


NO_RETENTION = Retention()


def retention_of(request: PeerRequest) -> Retention:
    """The request's retention config, checked as `KvCacheRetentionConfig`'s constructor checks
    it (ranges non-overlapping, positive length, an open end only last, priorities 0..100)."""
    doc = request.retention
    if doc is None:
        return NO_RETENTION
    if not isinstance(doc, dict):
        raise PeerProfileError("kv_cache_retention_config must be an object")
    ranges = []
    for item in doc.get("token_range_retention_configs") or []:
        if not isinstance(item, dict):
            raise PeerProfileError("each token_range_retention_configs entry must be an object")
        ranges.append((_int(item, "token_start", 0), _int(item, "token_end", None), _priority(item.get("priority")),
                       _int(item, "duration_ms", None)))
    ranges.sort(key=lambda r: r[0])
    for i, (start, end, _, _) in enumerate(ranges):
        if end is None and i != len(ranges) - 1:
            raise PeerProfileError("kv_cache_retention_config: only the last token range may have no end")
        if end is not None and start >= end:
            raise PeerProfileError("kv_cache_retention_config: a token range must have a positive length")
        if i + 1 < len(ranges) and end > ranges[i + 1][0]:
            raise PeerProfileError("kv_cache_retention_config: token ranges must not overlap")
    decode = doc.get("decode_retention_priority", DEFAULT_PRIORITY)
    return Retention(tuple(ranges), _priority(DEFAULT_PRIORITY if decode is None else decode),
                     _int(doc, "decode_duration_ms", None))


def _int(doc: dict, key: str, default):
    value = doc.get(key, default)
    if value is None or (type(value) is int and value >= 0):
        return value
    raise PeerProfileError(f"kv_cache_retention_config: {key} must be an integer >= 0, got {value!r}")


def _priority(value) -> int:
    if type(value) is not int or not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise PeerProfileError(f"kv_cache_retention_config: a priority must be an integer {MIN_PRIORITY}.."
                               f"{MAX_PRIORITY}, got {value!r}")
    return value
