"""What the bundled server's peer caches share: a request as a cache sees it, the KV of
consecutive cached pieces joined, a tree walk and the longest common prefix.
"""
from dataclasses import dataclass, field


class Refused(ValueError):
    """A request the runtime's server refuses before its cache sees it (HTTP 400): the message
    is the server's reason."""


def concat_kv(parts: list):
    """The KV of consecutive cached pieces, [layers, 2, tokens, kv heads, head dim], joined on
    tokens (torch is imported here: the command line reads SERVED without loading it)."""
    import torch
    return torch.cat(parts, dim=2)


def walk(root):
    """Every node of a tree whose nodes keep their children in `.children` (a dict), root first."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children.values())


@dataclass(frozen=True)
class ImageSpan:
    """An image in a prompt as a cache keys it: the hex digest of its decoded pixels (with its
    geometry) and the positions [start, start + length) its tokens take."""
    digest: str
    start: int
    length: int


@dataclass
class ChatRequest:
    ids: list
    lora: str | None = None
    salt: str | None = None
    extra_key: str | None = None
    extras: dict = field(default_factory=dict)
    images: tuple = ()
    """ImageSpan of each image of the prompt, in order (served only where the profile keys images)."""
    lora_path: str | None = None
    skip_prefix_cache: bool = False
    retention: dict | None = None
    """TensorRT-LLM's `kv_cache_retention_config` body field, as the request sent it."""


def shared_prefix(a, b) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
