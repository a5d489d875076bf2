"""Peer profiles: what an OpenAI-compatible server must report as cached (spec/peer-profiles.md).

Stdlib only. One function per rule, and one small simulator per profile that keeps the cache
state a sequence of requests leaves behind:

    sim = simulator("vllm-apc", {"block_size": 16})
    c = sim.predict(PeerRequest(ids))            # the count the server must report
    sim.commit(PeerRequest(ids), sampled_ids)    # what the request leaves cached
    sim.reset()                                  # PEER-API-4

A request's *computed sequence* is its prompt followed by every sampled id but the last
(`computed_sequence`): the last sampled token is never fed back through the model.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

PEER_PROFILES_VERSION = "1.0.0"
PROFILES = ("llama.cpp-server", "vllm-apc", "sglang-radix")
SETTINGS = {
    "llama.cpp-server": {},
    "vllm-apc": {"block_size": 16, "cache_blocks": None},
    "sglang-radix": {"page_size": 1},
}
"""Each profile's settings and their defaults (None: unset)."""


class PeerProfileError(ValueError):
    """An unknown profile or setting, or a state the profile does not define."""


@dataclass(frozen=True)
class ImageItem:
    """An image in a prompt: its content hash and the positions its tokens take."""
    digest: str
    start: int
    length: int


@dataclass
class PeerRequest:
    """One chat request as the cache sees it: prompt ids and what keys its cache entries."""
    ids: list
    lora: str | None = None
    salt: str | None = None
    extra_key: str | None = None
    images: list = field(default_factory=list)


def common_prefix(a, b) -> int:
    """LCP(a, b): the length of the longest common prefix of two id lists."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def computed_sequence(prompt, sampled) -> list:
    """PEER-LCPP-2 / PEER-VLLM-4 / PEER-SGL-3: the prompt and every sampled id but the last,
    which stops generation and is never fed back."""
    return list(prompt) + list(sampled)[:-1]


def check_settings(profile: str, settings: dict | None) -> dict:
    """The profile's settings with defaults filled in; unknown keys or bad values raise."""
    if profile not in SETTINGS:
        raise PeerProfileError(f"unknown peer profile {profile!r} (one of {', '.join(PROFILES)})")
    out = dict(SETTINGS[profile])
    for key, value in (settings or {}).items():
        if key not in out:
            known = ", ".join(out) or "none"
            raise PeerProfileError(f"{profile} has no setting {key!r} (settings: {known})")
        if value is not None and (type(value) is not int or value < 1):
            raise PeerProfileError(f"{profile} setting {key} must be an integer >= 1, got {value!r}")
        out[key] = value
    return out


# --- llama.cpp-server ------------------------------------------------------------------------------

def llama_cpp_cached(slot, prompt) -> int:
    """PEER-LCPP-1: `min(LCP(slot, prompt), N - 1)` (and 0 for an empty prompt)."""
    return max(0, min(common_prefix(slot, prompt), len(prompt) - 1))


def llama_cpp_slot_after(prompt, sampled) -> list:
    """PEER-LCPP-2 / PEER-LCPP-4: the one slot holds the request's computed sequence."""
    return computed_sequence(prompt, sampled)


# --- vllm-apc ----------------------------------------------------------------------------------------

def vllm_extra_keys(request: PeerRequest, block: int, block_size: int) -> tuple:
    """PEER-VLLM-2: LoRA (every block), cache_salt (block 0 only), and (digest, offset in the
    block) of each image overlapping the block."""
    keys = []
    start, end = block * block_size, (block + 1) * block_size
    for image in request.images:
        if image.start < end and image.start + image.length > start:
            keys.append(("mm", image.digest, image.start - start))
    if request.lora is not None:
        keys.append(("lora", request.lora))
    if block == 0 and request.salt is not None:
        keys.append(("cache_salt", request.salt))
    return tuple(keys)


def vllm_block_keys(ids, block_size: int, request: PeerRequest | None = None) -> list:
    """PEER-VLLM-1: one key per full block, each the hash of the previous key, the block's ids
    and its extra keys (PEER-VLLM-2). A partial last block has no key."""
    request = request or PeerRequest(list(ids))
    keys, parent = [], "none"
    for block in range(len(ids) // block_size):
        chunk = tuple(ids[block * block_size:(block + 1) * block_size])
        parent = hashlib.sha256(repr((parent, chunk, vllm_extra_keys(request, block, block_size)))
                                .encode()).hexdigest()
        keys.append(parent)
    return keys


def vllm_cached(hit_blocks: int, n: int, block_size: int) -> int:
    """PEER-VLLM-3: `B * min(k, floor((N - 1) / B))`."""
    return block_size * max(0, min(hit_blocks, (n - 1) // block_size))


def leading_hits(keys, cached) -> int:
    """How many leading keys are in `cached` (a chain stops at its first miss)."""
    k = 0
    for key in keys:
        if key not in cached:
            break
        k += 1
    return k


class VllmBlockPool:
    """The block cache of PEER-VLLM-4 and PEER-VLLM-5, requests one at a time.

    `cache_blocks` None: unbounded, nothing is ever evicted. Otherwise blocks 1..K start in the
    free queue; a key maps to the blocks holding it (two blocks may hold one key when a block
    beyond the N - 1 cap is computed again)."""

    def __init__(self, block_size: int, cache_blocks: int | None):
        self.B, self.K = block_size, cache_blocks
        self.reset()

    def reset(self) -> None:
        self.free = list(range(1, (self.K or 0) + 1))
        self.key_blocks: dict[str, set] = {}
        self.block_key: dict[int, str] = {}
        self.unbounded_keys: set = set()

    def cached_keys(self):
        return self.unbounded_keys if self.K is None else self.key_blocks

    def predict(self, request: PeerRequest) -> int:
        keys = vllm_block_keys(request.ids, self.B, request)
        return vllm_cached(leading_hits(keys, self.cached_keys()), len(request.ids), self.B)

    def commit(self, request: PeerRequest, sampled) -> None:
        """Run the request through the cache: touch its hits, allocate, cache, free (PEER-VLLM-4, -5)."""
        n = len(request.ids)
        seq = computed_sequence(request.ids, sampled)
        keys = vllm_block_keys(seq, self.B, PeerRequest(seq, request.lora, request.salt, request.extra_key,
                                                        request.images))
        if self.K is None:
            self.unbounded_keys.update(keys)
            return
        prompt_keys = keys[:n // self.B]
        hits = min(leading_hits(prompt_keys, self.key_blocks), (n - 1) // self.B)
        held = []
        for key in prompt_keys[:hits]:                         # touch: out of the free queue
            block = min(self.key_blocks[key])
            if block in self.free:
                self.free.remove(block)
            held.append(block)
        computed = n
        self._grow(held, -(-n // self.B))
        self._cache(held, keys, hits, computed)
        for _ in range(len(sampled) - 1):                      # each sampled id fed back
            computed += 1
            self._grow(held, -(-computed // self.B))
            self._cache(held, keys, hits, computed)
        self.free.extend(reversed(held))                       # tail blocks first to the head side

    def _grow(self, held: list, blocks: int) -> None:
        while len(held) < blocks:
            if not self.free:
                raise PeerProfileError(f"vllm-apc: a request needs more than cache_blocks={self.K} blocks; "
                                       "the profile does not define what the server does then")
            block = self.free.pop(0)
            old = self.block_key.pop(block, None)
            if old is not None:                                # PEER-VLLM-5: eviction drops the key
                self.key_blocks[old].discard(block)
                if not self.key_blocks[old]:
                    del self.key_blocks[old]
            held.append(block)

    def _cache(self, held: list, keys: list, hits: int, computed: int) -> None:
        for i in range(hits, min(computed // self.B, len(keys))):
            if self.block_key.get(held[i]) != keys[i]:
                self.block_key[held[i]] = keys[i]
                self.key_blocks.setdefault(keys[i], set()).add(held[i])


# --- sglang-radix ------------------------------------------------------------------------------------

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


class LlamaSlot:
    """PEER-LCPP-1..4: one slot."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.tokens: list = []

    def predict(self, request: PeerRequest) -> int:
        return llama_cpp_cached(self.tokens, request.ids)

    def commit(self, request: PeerRequest, sampled) -> None:
        self.tokens = llama_cpp_slot_after(request.ids, sampled)


def simulator(profile: str, settings: dict | None = None):
    """A fresh cache of the profile (reset, predict, commit)."""
    s = check_settings(profile, settings)
    if profile == "llama.cpp-server":
        return LlamaSlot()
    if profile == "vllm-apc":
        return VllmBlockPool(s["block_size"], s["cache_blocks"])
    return RadixCache(s["page_size"])


def count_rule(profile: str) -> str:
    """The rule that defines the reported count of the profile."""
    return {"llama.cpp-server": "PEER-LCPP-1", "vllm-apc": "PEER-VLLM-3", "sglang-radix": "PEER-SGL-1"}[profile]
