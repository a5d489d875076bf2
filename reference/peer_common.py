"""What every peer profile shares (spec/peer-profiles.md section 0): a request as a cache sees it,
the longest common prefix, and a request's computed sequence. Stdlib only.
"""
from __future__ import annotations

from dataclasses import dataclass, field


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
    """One chat request as the cache sees it: prompt ids and what keys its cache entries.

    `lora` names the adapter (vLLM, SGLang) or the LoRA task id (TensorRT-LLM); `lora_path` is
    the folder vLLM loaded that adapter from (PEER-VLLM-2 keys blocks by name and path);
    `skip_prefix_cache` is vLLM's per-request read bypass (PEER-VLLM-7); `retention` is the
    request's TensorRT-LLM `kv_cache_retention_config` (PEER-TRT-8) and `token_extra_ids` its
    per-token extra ids (PEER-TRT-10)."""
    ids: list
    lora: str | None = None
    salt: str | None = None
    extra_key: str | None = None
    images: list = field(default_factory=list)
    lora_path: str | None = None
    skip_prefix_cache: bool = False
    retention: dict | None = None
    token_extra_ids: list | None = None


def common_prefix(a, b) -> int:
    """LCP(a, b): the length of the longest common prefix of two id lists."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def computed_sequence(prompt, sampled) -> list:
    """PEER-LCPP-2 / PEER-VLLM-4 / PEER-SGL-3 / PEER-TRT-4: the prompt and every sampled id but
    the last, which stops generation and is never fed back."""
    return list(prompt) + list(sampled)[:-1]
