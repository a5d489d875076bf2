"""`sglang-radix`: SGLang's radix cache of token ids (spec/peer-profiles.md section 4). Stdlib only."""
from __future__ import annotations

from .peer_common import PeerRequest, common_prefix, computed_sequence


def sglang_namespace(request: PeerRequest) -> tuple:
    """PEER-SGL-2: (extra_key with the LoRA adapter, cache_salt)."""
    return ((request.extra_key or "") + "|" + (request.lora or ""), request.salt)


def sglang_cached(lcp: int, n: int, page_size: int) -> int:
    """PEER-SGL-1: `P * floor(min(L, N - 1) / P)`."""
    return page_size * (max(0, min(lcp, n - 1)) // page_size)


class RadixCache:
    """PEER-SGL-1..3 without eviction: the computed sequences cached per namespace. The longest
    prefix a radix tree matches is the longest common prefix with any sequence inserted."""

    def __init__(self, page_size: int):
        self.P = page_size
        self.reset()

    def reset(self) -> None:
        self.sequences: dict[tuple, list] = {}

    def predict(self, request: PeerRequest) -> int:
        cached = self.sequences.get(sglang_namespace(request), [])
        lcp = max((common_prefix(s, request.ids) for s in cached), default=0)
        return sglang_cached(lcp, len(request.ids), self.P)

    def commit(self, request: PeerRequest, sampled) -> None:
        seq = computed_sequence(request.ids, sampled)
        seq = seq[:self.P * (len(seq) // self.P)]
        self.sequences.setdefault(sglang_namespace(request), []).append(seq)
