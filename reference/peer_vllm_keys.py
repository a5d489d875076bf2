"""`vllm-apc`'s block keys and free queue, which the one-group pool (peer_vllm.py) and the grouped
pool (peer_vllm_groups.py) share (spec/peer-profiles.md section 3: PEER-VLLM-1, -2, -5, -10, -17).
Stdlib only.
"""
from __future__ import annotations

from array import array
from collections import OrderedDict
from hashlib import blake2b

from .peer_common import PeerRequest


def vllm_extra_keys(request: PeerRequest, block: int, block_size: int, end: int | None = None) -> tuple:
    """PEER-VLLM-2: (digest, offset in the block) of each image overlapping the block (up to `end`,
    which a lookahead key extends past the block), the LoRA adapter's name and path (every block),
    and a non-empty cache_salt (block 0 only: the empty salt is no salt, PEER-VLLM-17)."""
    keys = []
    start = block * block_size
    end = (block + 1) * block_size if end is None else end
    for image in request.images:
        if image.start < end and image.start + image.length > start:
            keys.append(("mm", image.digest, image.start - start))
    if request.lora is not None:
        keys.append(("lora", request.lora, request.lora_path))
    if block == 0 and request.salt:
        keys.append(("cache_salt", request.salt))
    return tuple(keys)


def _id_bytes(ids) -> tuple[bytes, int] | None:
    """The ids as 8-byte integers (the fast key path), or None when they are not all integers
    (the parity suite's letters)."""
    try:
        return array("q", ids).tobytes(), 8
    except (TypeError, OverflowError):
        return None


def vllm_block_keys(ids, block_size: int, request: PeerRequest | None = None, lookahead: int = 0,
                    keys: list | None = None) -> list:
    """PEER-VLLM-1: one key per full block, each the hash of the previous key, the block's ids
    and its extra keys (PEER-VLLM-2). A partial last block has no key. With `lookahead` L
    (PEER-VLLM-10), block i's key also covers the L ids after it, and exists only once they do.
    `keys`: keys already computed for a prefix of `ids`, extended in place (a request's keys are
    computed once: its prompt's, then its computed sequence's)."""
    keys = [] if keys is None else keys
    if hasattr(request, "block_keys"):       # hook: keys a trace replay computed (reference/replay.py, SIM-KEY-2)
        keys[len(keys):] = request.block_keys(max(0, (len(ids) - lookahead) // block_size))[len(keys):]
        return keys
    keyed_extras = request is not None and (request.lora is not None or request.salt or request.images)
    packed = _id_bytes(ids)
    parent = keys[-1] if keys else b"none"
    B, count = block_size, (len(ids) - lookahead) // block_size
    for block in range(len(keys), max(0, count)):
        h = blake2b(parent, digest_size=16)
        a, b = block * B, (block + 1) * B + lookahead
        if packed is not None:
            data, width = packed
            h.update(data[a * width:b * width])
        else:
            h.update(repr(tuple(ids[a:b])).encode())
        if keyed_extras:
            h.update(repr(vllm_extra_keys(request, block, B, b)).encode())
        parent = h.digest()
        keys.append(parent)
    return keys


class FreeQueue:
    """vLLM's free block queue (block_pool.py `FreeKVCacheBlockQueue`, a doubly linked list): the
    head is allocated first, a block a request touches leaves from the middle, freed blocks join
    at either end; each in O(1), as in vLLM."""

    def __init__(self, blocks=()):
        self._q = OrderedDict.fromkeys(blocks)

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self):
        return iter(self._q)

    def __contains__(self, block) -> bool:
        return block in self._q

    def popleft(self):
        return self._q.popitem(last=False)[0]

    def take(self, count: int) -> list:
        """The `count` blocks at the head, head first (`count` popleft calls in one)."""
        popitem = self._q.popitem
        return [popitem(last=False)[0] for _ in range(count)]

    def remove(self, block) -> None:
        del self._q[block]

    def discard(self, blocks) -> None:
        """Those of `blocks` that are in the queue leave it (`remove` of each that is `in` it)."""
        pop = self._q.pop
        for block in blocks:
            pop(block, None)

    def append(self, block) -> None:
        self._q[block] = None

    def extend(self, blocks) -> None:
        """`blocks` to the tail, in their order (`append` of each)."""
        self._q.update(dict.fromkeys(blocks))

    def prepend(self, blocks: list) -> None:
        """`blocks` to the head, in their order (the first of them becomes the head)."""
        for block in reversed(blocks):
            self._q[block] = None
            self._q.move_to_end(block, last=False)


EMPTY_SALT = "cache_salt must be a non-empty string"
"""vLLM's answer to `cache_salt: ""` (entrypoints/generate/base/protocol.py `validate_cache_salt`)."""


def refuses_empty_salt(request: PeerRequest, trace=None) -> str | None:
    """PEER-VLLM-17: the server refuses a request whose cache_salt is the empty string (HTTP 400),
    before any cache sees it; the reason, or None."""
    if request.salt != "":
        return None
    if trace is not None:
        trace.add("PEER-VLLM-17", "refused", True, "cache_salt is the empty string: vLLM's server refuses the "
                  f"request with HTTP 400 ({EMPTY_SALT!r}) before its cache sees it")
    return EMPTY_SALT
