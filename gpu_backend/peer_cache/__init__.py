"""Prefix caches of four peer runtimes, for the bundled OpenAI-compatible server (serve.py).

Each cache keeps the real KV of what it caches ([attention layers, 2, tokens, kv heads, head
dim], FP16) and hands the KV of a hit back to the engine, which then computes only the rest of
the prompt. The rules are the runtimes' own (spec/peer-profiles.md), implemented here
independently of the kit's oracle (the docstrings and comments cite the PEER rule each part
implements):

    SlotCache     llama.cpp-server  slots chosen by similarity, else LRU; min(common prefix, N - 1);
                                    chunks moved down by KV shifting; the slot's context, context shift
    BlockCache    vllm-apc          chained hashes of full blocks; B * min(hits, (N - 1) // B);
                                    freed blocks without a key reused first
    RadixCache    sglang-radix      radix tree per (extra key + adapter, salt); page-aligned; LRU leaves
    TrtBlockTree  trtllm-kv-reuse   a tree of blocks keyed by tokens, adapter and salt, one per attention
                                    window; partial reuse; eviction by retention priority

    cache.lookup(req) -> (reported count, KV of the reused tokens or None)
    cache.store(req, sequence, kv, sampled)   sequence = prompt + sampled[:-1], kv of all of it
    cache.reset()
    cache.pages(context) -> {(method, path): document}   what the real server publishes about it

SERVED (at the end) is the server's one list of the profiles it serves: each profile's cache,
settings and defaults, and the parts of its runtime's HTTP API that serve.py imitates; the
command line and the server read it. Subclasses change one method (`cap`, `spans`, `reported`,
`extras`, `namespace`, `release`, `touch`, `label`, `above`, `long_enough`, `fits`, `discard`,
`takes_leaf`, `free_order`, `queue_priority`, `expired`, `may_store`): the seams the kit's faulty
server variants use.
"""
from dataclasses import dataclass

from .common import ChatRequest, ImageSpan, Refused, walk
from .llama import SlotCache
from .sglang import RadixCache
from .trtllm import TrtBlockTree
from .vllm import BlockCache

__all__ = ["SERVED", "Served", "ChatRequest", "ImageSpan", "Refused", "walk", "SlotCache", "BlockCache", "RadixCache",
           "TrtBlockTree"]


@dataclass(frozen=True)
class Served:
    """A peer profile the bundled server serves: its cache (whose `settings` are the profile's
    settings and defaults) and what of its runtime's HTTP API serve.py imitates."""
    name: str
    cache: type
    tokenizer_loader: str
    """How the runtime reads a tokenizer folder: llama.cpp as written, the others through transformers."""
    lora_field: str | None = None
    """The request field naming a LoRA adapter: model (vLLM), lora_path (SGLang), lora_request
    (TensorRT-LLM: {"lora_name", ...}); None: no per-request adapters."""
    resets: tuple = ()
    """(method, path, answer) of each route that empties the whole cache (PEER-API-4)."""
    erases_slots: bool = False
    """POST /slots/{id}?action=erase empties one slot (llama.cpp)."""
    tokenize: str | None = None
    """POST /tokenize takes `content` (llama.cpp, with POST /apply-template) or `messages` (vLLM)."""
    lists_adapters: bool = False
    """GET /v1/models lists each adapter with its parent and path (vLLM)."""
    read_bypass: bool = False
    """prompt_logprobs or skip_reading_prefix_cache skips the cache read (vLLM, PEER-VLLM-7)."""
    timings: bool = False
    """Every completion carries the native `timings` (llama.cpp, PEER-LCPP-3)."""
    images: bool = False
    """Chat messages may carry images (`image_url` parts with data: URLs), and the cache keys each
    block by the images it overlaps (vLLM, PEER-VLLM-2; TensorRT-LLM, PEER-TRT-10); elsewhere an image is refused (HTTP 400),
    never cached as if it were text."""

    @property
    def settings(self) -> dict:
        return dict(self.cache.settings)


SERVED = {s.name: s for s in (
    Served("llama.cpp-server", SlotCache, "tokenizers-raw", erases_slots=True, tokenize="content", timings=True),
    Served("vllm-apc", BlockCache, "transformers-auto", "model", (("POST", "/reset_prefix_cache", {"success": True}),),
           tokenize="messages", lists_adapters=True, read_bypass=True, images=True),
    Served("sglang-radix", RadixCache, "transformers-auto", "lora_path",
           (("POST", "/flush_cache", {"message": "Cache flushed."}), ("GET", "/flush_cache", {"message": "Cache flushed."}))),
    Served("trtllm-kv-reuse", TrtBlockTree, "transformers-auto", "lora_request", images=True),
)}
"""Every profile the server serves, by name (the kit's peer profiles; a test holds the two lists equal)."""
