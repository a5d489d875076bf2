"""The adapters that let the oracle's simulators replay a trace (spec/trace-replay.md SIM-KEY-2,
SIM-ORDER-1) without a change to their rules. Stdlib only; used by reference/replay.py.

- On keys instead of tokens: a hash-id request gives `BatchRunner` a `KeyedHistory` (its page
  keys, computed per page from the trace's ids) through a one-line hook (reference/batching.py
  `BatchRunner._sequence`); a `KeyedEdgeLlmRequest` has no tokens to fall back on. A
  `KeyedPeerRequest` gives `VllmBlockPool` the same keys through the hook in
  reference/peer_vllm_keys.py `vllm_block_keys` (the replay's own vllm-apc pool,
  reference/replay_vllm.py, takes them directly; the oracle takes them this way where it is
  checked against that pool).
- At real pool sizes: a `FreeQueue`, vLLM's free block queue in O(1) per operation instead of
  the list's O(K), and the K blocks of a fresh pool a range, not a list (a pool of 10^9 tokens
  would otherwise be a 60M-item list): the free queue of `trtllm-kv-reuse`'s pool
  (reference/replay_vllm.py keeps vllm-apc's free queue in a layout of its own, its tail
  carrying each block's key).

tests/reference/test_replay.py checks that none of them changes a count: keyed traffic equals
the same traffic as tokens, and `trtllm-kv-reuse` with a `FreeQueue` equals its pool request
by request; tests/reference/test_replay_vllm.py checks the vllm-apc replay pool against
`VllmBlockPool`.
"""
from __future__ import annotations

from array import array
from collections import OrderedDict, deque
from dataclasses import dataclass
from itertools import chain, compress, count as numbers_from
from operator import eq

from .peer_common import ImageItem, PeerRequest


# --- the Edge-LLM profiles: BatchRunner on page keys --------------------------------------------

class KeyedHistory:
    """The identity material of one hash-id sequence as BatchRunner reads a TokenHistory
    (reference/identity.py): its prompt's page keys (SIM-KEY-2), then, once its sampled tokens
    are appended (at decode end), a key of its own for every page that holds one (SIM-GEN-1).
    Text only: no media, no adapter."""
    media_aware = False
    truth = None
    spans = ()

    def __init__(self, request, page_size: int):
        self.request, self.P = request, page_size
        self._keys = request.page_keys(page_size)
        self._length = request.n

    def __len__(self) -> int:
        return self._length

    def keys(self, count: int) -> list:
        if count > len(self._keys):
            if count * self.P > self._length:
                raise IndexError(f"page {count - 1} of a {self._length}-token history is not complete")
            new = self.request.new_key
            self._keys.extend(new(i) for i in range(len(self._keys), count))
        return self._keys[:count]

    def key(self, i: int):
        return self.keys(i + 1)[i]

    def extend(self, generated) -> None:
        self._length += len(generated)


class EdgeLlmRequest:
    """A traffic request as BatchRunner reads a parsed request (reference/requests.py Request):
    one request, no legacy capture, no stop strings."""
    legacy_capture = False
    stop = ()
    disable_spec_decode = False

    def __init__(self, traffic, index: int):
        self.traffic, self.index, self.n = traffic, index, traffic.n
        self.spans = traffic.spans
        self.lora_name = traffic.lora

    @property
    def tokens(self) -> array:
        return self.traffic.tokens

    @property
    def has_audio(self) -> bool:
        return any(s.modality == "audio" for s in self.spans)


class KeyedEdgeLlmRequest(EdgeLlmRequest):
    """A hash-id request: BatchRunner takes its KeyedHistory through the hook in `_sequence`."""
    spans: list = []                  # never written: a request without media
    lora_name = None

    def __init__(self, traffic, index: int):
        self.traffic, self.index, self.n = traffic, index, traffic.n

    def history(self, page_size: int) -> KeyedHistory:
        return KeyedHistory(self.traffic, page_size)

    @property
    def tokens(self):
        raise RuntimeError("reference/batching.py built a TokenHistory for a hash-id request: the hook in "
                           "BatchRunner._sequence that takes `request.history` is missing")


# --- vllm-apc and trtllm-kv-reuse: the free queue, the pool, block keys -------------------------

class FreeQueue:
    """vLLM's free block queue (spec/peer-profiles.md section 3) as `VllmBlockPool` uses its list, in O(1) per
    operation: `pop(0)` from the head, `remove`, `in`, `len`, iteration from head to tail, and
    `fresh + queue + cached` (blocks without a key to the head, with one to the tail), which
    moves the blocks in place and returns the queue itself. The order is `front` + the blocks
    never handed out (`lo..hi`, kept as a range) + the tail; `append` adds at the tail (the
    queue of `trtllm-kv-reuse`).

    The tail, where every cached block goes when it is freed (PEER-VLLM-5) and whence a hit
    takes it back, is a plain dict `back` (block -> its place in `_order`) and the list `_order`
    of the blocks in the order they joined: removing a block only deletes it from `back`, and its
    entry in `_order` is passed over once the head reaches it (an entry counts only while
    `back` gives its place), which costs a dict's operations, not an OrderedDict's linked nodes.
    `_order` is rebuilt from the live entries once most of its entries are dead, so it stays
    O(queue)."""
    COMPACT_SLACK = 64
    """Dead entries allowed beyond the live ones before `_order` is rebuilt."""

    def __init__(self, blocks: int, first: int = 1):
        self.front: OrderedDict = OrderedDict()
        self.back: dict = {}
        self._order: list = []
        self._head = 0                                # _order[:_head] are passed (all dead)
        self.lo, self.hi = first, first + blocks - 1

    def __len__(self) -> int:
        return len(self.front) + len(self.back) + max(0, self.hi - self.lo + 1)

    def __bool__(self) -> bool:
        return bool(self.front) or self.lo <= self.hi or bool(self.back)

    def __contains__(self, block) -> bool:
        return block in self.front or block in self.back or self.lo <= block <= self.hi

    def __iter__(self):
        if self.front or self.lo <= self.hi:
            return chain(self.front, range(self.lo, self.hi + 1), self._tail())
        return self._tail()

    def _tail(self):
        """The tail's blocks from its head, lazily (`next(iter(queue))` is the head in O(1)
        amortized): the entries of `_order` that `back` still places there. Dead entries at the
        head are passed for good: an entry, once dead, never lives again (a block that rejoins
        gets a new place)."""
        order, back = self._order, self.back
        while self._head < len(order) and back.get(order[self._head]) != self._head:
            self._head += 1
        i = self._head
        while i < len(order):
            block = order[i]
            if back.get(block) == i:
                yield block
            i += 1

    def _pop_tail(self):
        order, back = self._order, self.back
        while True:                                   # back is not empty: a live entry lies ahead
            i = self._head
            block = order[i]
            self._head = i + 1
            if back.get(block) == i:
                del back[block]
                return block

    def _take_tail(self, wanted: int) -> list:
        """The tail's first `wanted` blocks, head first, out of it (`wanted` `_pop_tail`s in one):
        a slice of `_order` at a time, its live entries picked by C-level iterators."""
        order, back, out = self._order, self.back, []
        i = self._head
        while len(out) < wanted:
            segment = order[i:i + wanted - len(out)]
            if not segment:
                raise IndexError("take from a free queue's tail shorter than the count")
            out += compress(segment, map(eq, map(back.get, segment), numbers_from(i)))
            i += len(segment)
        deque(map(back.__delitem__, out), 0)
        self._head = i
        return out

    def _compact(self) -> None:
        if len(self._order) > 2 * len(self.back) + self.COMPACT_SLACK:
            self._order = sorted(self.back, key=self.back.__getitem__)        # the live entries, in place order
            self._head = 0
            self.back = dict(zip(self._order, range(len(self._order))))

    def pop(self, index: int = -1):
        assert index == 0, "the free queue is only taken from its head"
        if self.front:
            return self.front.popitem(last=False)[0]
        if self.lo <= self.hi:
            self.lo += 1
            return self.lo - 1
        if self.back:
            return self._pop_tail()
        raise IndexError("pop from an empty free queue")

    def remove(self, block) -> None:
        if block in self.front:
            del self.front[block]
        elif block in self.back:
            del self.back[block]
        elif self.lo <= block <= self.hi:          # never handed out: split the range (not reached by the pools)
            self.front.update(dict.fromkeys(range(self.lo, block)))
            self.lo = block + 1
        else:
            raise ValueError(f"block {block} is not in the free queue")

    def discard(self, blocks) -> None:
        """Those of `blocks` that are in the queue leave it (`remove` of each that is `in` it;
        a touched cached block sits in the tail)."""
        back = self.back
        for block in blocks:
            if block in back:
                del back[block]
            elif block in self:
                self.remove(block)

    def append(self, block) -> None:
        """`block` to the tail (`extend` of one)."""
        if block in self.back:
            raise ValueError("a block freed twice: it is in the free queue's tail already")
        self.back[block] = len(self._order)
        self._order.append(block)
        self._compact()

    def extend(self, blocks) -> None:
        """`blocks` to the tail, in their order (`append` of each). A pool frees a block only
        while it is out of the queue, and once: a block already in the tail, or twice in
        `blocks`, is a bug in the caller, refused."""
        back, order = self.back, self._order
        size, start = len(back), len(order)
        order += blocks
        back.update(zip(order[start:], range(start, len(order))))
        if len(back) != size + len(order) - start:
            raise ValueError("a block freed twice: it is in the free queue's tail already")
        self._compact()

    def popleft(self):
        """The head (peer_vllm_keys.FreeQueue's name for `pop(0)`)."""
        return self.pop(0)

    def take(self, count: int) -> list:
        """The `count` blocks at the head, head first (`count` pops in one: the range of blocks
        never handed out is sliced, not popped block by block)."""
        if count > len(self):
            raise IndexError("take from a free queue shorter than the count")
        front = self.front
        out = [front.popitem(last=False)[0] for _ in range(min(count, len(front)))]
        fresh = min(count - len(out), max(0, self.hi - self.lo + 1))
        out += range(self.lo, self.lo + fresh)
        self.lo += fresh
        if count > len(out):
            out += self._take_tail(count - len(out))
        return out

    def prepend(self, blocks: list) -> None:
        """`blocks` to the head, in their order (peer_vllm_keys.FreeQueue's interface)."""
        self.__radd__(list(blocks))

    def __add__(self, blocks):
        self.extend(blocks)
        return self

    def __radd__(self, blocks):
        front = self.front
        for block in reversed(blocks):
            front[block] = None
            front.move_to_end(block, last=False)
        return self


@dataclass
class KeyedPeerRequest(PeerRequest):
    """A hash-id request as `VllmBlockPool` sees it: `ids` only sized, the keys of its blocks
    from the trace (SIM-KEY-2, then SIM-GEN-1 past the prompt) through the hook in
    `vllm_block_keys`."""
    traffic: object = None
    prompt_keys: list | None = None

    def block_keys(self, count: int) -> list:
        keys = self.prompt_keys
        if count <= len(keys):
            return keys[:count]
        return keys + [self.traffic.new_key(i) for i in range(len(keys), count)]


def peer_request(traffic, ids=None) -> PeerRequest:
    """A token request as a peer pool sees it: ids, adapter and images (reference/peer_common.py)."""
    images = [ImageItem(s.digest.hex(), s.start, s.end - s.start) for s in traffic.spans if s.modality == "image"]
    return PeerRequest(traffic.prompt_tokens() if ids is None else ids, lora=traffic.lora, images=images)
