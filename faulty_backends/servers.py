"""Faulty variants of the bundled OpenAI-compatible server (`python -m gpu_backend serve`).

Each variant is the bundled server with one realistic defect in how it counts or keys cached
prompt tokens: a subclass of one cache of gpu_backend/peer_cache/, injected through
`gpu_backend.serve.make_peer(cache_class=...)`, never through a switch in production code. The
lines that differ from the bundled code are marked `# DEFECT`. Servers have their own registry
(the request-file catalogue of registry.py drives runtimes, not servers); the default tests run
the peer suite against every variant here and require each to be caught
(tests/conformance/test_peer_profiles.py).

Every docstring carries the same three lines as the catalogue's: Bug class, Violates (PEER-*
rules), Mirrors.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from gpu_backend.peer_cache import SERVED, BlockCache, RadixCache, SlotCache, TrtBlockTree


@dataclass(frozen=True)
class ServerVariant:
    name: str
    profile: str
    summary: str
    rules: tuple
    mirrors: str
    cache_class: type
    settings: tuple = ()
    """`--peer-setting` pairs the variant's server runs with (both sides use them)."""
    vision: bool = False
    """The defect shows on image requests only: its server runs a vision engine (a tokenizer
    folder with an image processor), so that the peer suite's image cases run."""

    def peer(self, engine_dir: str | None = None, tokenizer: str | None = None, settings: dict | None = None):
        """The server state (gpu_backend.serve.PeerServer) with the faulty cache; `settings`
        override the variant's own (another block size, say)."""
        from gpu_backend.serve import make_peer
        return make_peer(self.profile, engine_dir, tokenizer, {**dict(self.settings), **(settings or {})},
                         cache_class=self.cache_class)


SERVER_VARIANTS: dict[str, ServerVariant] = {}


def server_variant(name: str, settings: tuple = (), vision: bool = False):
    """Register a faulty cache; its profile is the one whose bundled cache it subclasses."""
    def register(cls):
        profile = next(p for p, served in SERVED.items() if issubclass(cls, served.cache))
        doc = " ".join((cls.__doc__ or "").split())
        rules = tuple(re.findall(r"PEER-[A-Z]+-\d+", doc.split("Violates:")[1].split("Mirrors:")[0]))
        mirrors = doc.split("Mirrors:")[1].strip()
        assert rules and mirrors and "Bug class:" in doc, f"{cls.__name__}: docstring lacks its three lines"
        SERVER_VARIANTS[name] = ServerVariant(name, profile, doc.split(". ")[0], rules, mirrors, cls, settings, vision)
        return cls
    return register


@server_variant("lcpp-cap-off-by-one")
class CapOffByOne(SlotCache):
    """Reports the whole prompt as cached when it matches the slot completely.
    Bug class: off-by-one at the N-1 cap (the count taken before the last token is given back).
    Violates: PEER-LCPP-1.
    Mirrors: llama-server's `n_past--` for a fully matched prompt (server-context.cpp:3631-3636)
    applied to the KV but not to the reported count."""

    def cap(self, n: int) -> int:
        return n                                          # DEFECT: the N - 1 cap is not applied to the count


@server_variant("vllm-partial-block")
class PartialBlockCounted(BlockCache):
    """Hashes and counts the prompt's partial last block as if it were a block.
    Bug class: a block counted when partial.
    Violates: PEER-VLLM-1, PEER-VLLM-3.
    Mirrors: block hashers that hash the trailing partial block (vLLM hashes full blocks only,
    kv_cache_utils.py:999 "We only hash full blocks")."""

    def spans(self, n: int) -> list:
        full = super().spans(n)
        end = full[-1][1] if full else 0
        return full + ([(end, n)] if n > end else [])    # DEFECT: the partial tail is a block

    def reported(self, hit_spans: list, n: int) -> int:
        return min(sum(b - a for a, b in hit_spans), n - 1)   # DEFECT: counts tokens of partial blocks


@server_variant("vllm-salt-ignored")
class SaltIgnoredBlocks(BlockCache):
    """Leaves `cache_salt` out of the first block's key.
    Bug class: salt ignored (cache isolation between tenants broken).
    Violates: PEER-VLLM-2.
    Mirrors: vLLM's `cache_salt` (kv_cache_utils.py generate_block_hash_extra_keys), whose
    purpose is to stop prefix-timing attacks across users."""

    def extras(self, req, index: int) -> tuple:
        return () if req.lora is None else (("lora", req.lora),)   # DEFECT: no ("cache_salt", salt)


@server_variant("vllm-image-ignored", vision=True)
class ImageIgnoredBlocks(BlockCache):
    """Keys blocks by their token ids alone, leaving out the images they hold.
    Bug class: an image left out of the cache key (another image of the same size reuses its KV).
    Violates: PEER-VLLM-2.
    Mirrors: a block hasher without vLLM's multimodal extra keys (kv_cache_utils.py
    `_gen_mm_extra_hash_keys`): every image of one size expands to the same placeholder ids, so
    the blocks that hold them hash alike."""

    def extras(self, req, index: int) -> tuple:
        return tuple(k for k in super().extras(req, index) if k[0] != "mm")   # DEFECT: images key nothing


@server_variant("sglang-salt-ignored")
class SaltIgnoredRadix(RadixCache):
    """Puts requests of every `cache_salt` in one radix tree.
    Bug class: salt ignored (cache isolation between tenants broken).
    Violates: PEER-SGL-2.
    Mirrors: SGLang's RadixKey(token_ids, extra_key, cache_salt), radix_cache.py:245-247."""

    def namespace(self, req) -> tuple:
        return ((req.extra_key or "") + (req.lora or ""), None)   # DEFECT: the salt is dropped


@server_variant("vllm-free-append", (("cache_blocks", 24),))
class FreedBlocksAppended(BlockCache):
    """Returns every freed block to the tail of the free queue, partial blocks included.
    Bug class: eviction order (a block without a key kept as long as a cached one).
    Violates: PEER-VLLM-5.
    Mirrors: vLLM before BlockPool.free_blocks split freed blocks by hash (block_pool.py:
    "LIFO reuse of non-cached blocks"), and the kit's own reading until a real vLLM
    contradicted it."""

    def release(self, held: list) -> None:
        self.free += list(reversed(held))                  # DEFECT: blocks without a key go to the tail too


@server_variant("vllm-reports-zero")
class ReportsZeroBlocks(BlockCache):
    """Reuses blocks but reports no cached tokens.
    Bug class: a count that is always 0 (the observable broken, the cache working).
    Violates: PEER-VLLM-3.
    Mirrors: servers started without --enable-prompt-tokens-details that fill the field with 0
    instead of leaving it out."""

    def reported(self, hit_spans: list, n: int) -> int:
        return 0                                           # DEFECT: the hit is never reported


@server_variant("sglang-reports-zero")
class ReportsZeroRadix(RadixCache):
    """Matches prefixes but reports no cached tokens.
    Bug class: a count that is always 0 (the observable broken, the cache working).
    Violates: PEER-SGL-1.
    Mirrors: SGLang's cached_tokens when --enable-cache-report is off and a proxy fills 0."""

    def reported(self, matched: int, n: int) -> int:
        return 0                                           # DEFECT: the match is never reported


@server_variant("trtllm-salt-ignored")
class SaltIgnoredTrt(TrtBlockTree):
    """Keys blocks by tokens and LoRA task id only.
    Bug class: salt ignored (cache isolation between tenants broken).
    Violates: PEER-TRT-2.
    Mirrors: TensorRT-LLM before cacheSaltID joined BlockKey (kvCacheManager.h), where only the
    hash of the first block carried the salt."""

    def label(self, req, start: int, end: int) -> tuple:
        lora, _, extra_key, images = super().label(req, start, end)
        return (lora, None, extra_key, images)                # DEFECT: the salt keys nothing


@server_variant("trtllm-image-ignored", vision=True)
class ImageIgnoredTrt(TrtBlockTree):
    """Keys blocks by their tokens, adapter and salt alone, leaving out the images they overlap.
    Bug class: an image left out of the cache key (another image of the same size reuses its KV).
    Violates: PEER-TRT-10.
    Mirrors: buildBlockKeys without generateBlockHashExtraKeys (kvCacheManager.cpp), the profile's
    old reading that predicted an image request as text."""

    def label(self, req, start: int, end: int) -> tuple:
        lora, salt, extra_key, _ = super().label(req, start, end)
        return (lora, salt, extra_key, ())                     # DEFECT: images key nothing


@server_variant("trtllm-whole-blocks")
class WholeBlocksReported(TrtBlockTree):
    """Reuses blocks in part but reports whole blocks only.
    Bug class: a count rounded to the block size (partial reuse not reported).
    Violates: PEER-TRT-3.
    Mirrors: reporting matched blocks times tokens_per_block instead of
    LlmRequest::getPrepopulatedPromptLen."""

    def reported(self, matched: int, n: int) -> int:
        return self.T * (matched // self.T)                  # DEFECT: the partial block is not counted


@server_variant("trtllm-leaf-kept")
class PartlyReusedLeafKept(TrtBlockTree):
    """Copies every partly reused block, leaves included, so the old leaf stays in the tree.
    Bug class: what a partial reuse leaves behind.
    Violates: PEER-TRT-4.
    Mirrors: loadOrAllocateBlocks' "Leaf block that nobody is using. Make block private and reuse"
    (freeLeafBlock) replaced by a copy."""

    def takes_leaf(self, node) -> bool:
        return False                                           # DEFECT: the leaf is copied, so it stays


@server_variant("vllm-salt-dropped-on-adapters")
class SaltDroppedOnAdapters(BlockCache):
    """Keys block 0 by the adapter alone when the request names one, dropping its salt.
    Bug class: combined keys (one extra key replaces another).
    Violates: PEER-VLLM-2.
    Mirrors: generate_block_hash_extra_keys built as `lora_keys or salt_keys` instead of their
    concatenation (kv_cache_utils.py)."""

    def extras(self, req, index: int) -> tuple:
        if req.lora is not None:
            return (("lora", req.lora, req.lora_path),)              # DEFECT: the salt is dropped
        return super().extras(req, index)


@server_variant("sglang-adapter-hides-extra-key")
class AdapterHidesExtraKey(RadixCache):
    """Namespaces a request on an adapter by the adapter alone, dropping its extra_key.
    Bug class: combined keys (one extra key replaces another).
    Violates: PEER-SGL-2.
    Mirrors: schedule_batch.py setting extra_key to the lora_id instead of concatenating them."""

    def namespace(self, req) -> tuple:
        if req.lora is not None:
            return (req.lora, req.salt)                              # DEFECT: extra_key ignored
        return super().namespace(req)


@server_variant("sglang-prompt-only")
class PromptOnlyRadix(RadixCache):
    """Inserts a finished request's prompt into the tree but not the tokens it generated.
    Bug class: generated tokens not cached.
    Violates: PEER-SGL-3.
    Mirrors: cache_finished_req keyed on origin_input_ids instead of origin_input_ids +
    output_ids (radix_cache.py)."""

    def store(self, req, sequence, kv, sampled):
        super().store(req, sequence[:len(req.ids)], kv, sampled)    # DEFECT: the sampled tokens are dropped


@server_variant("vllm-bypass-ignored")
class ReadBypassIgnored(BlockCache):
    """Reads the cache for requests that ask for prompt log-probabilities.
    Bug class: a per-request cache bypass ignored.
    Violates: PEER-VLLM-7.
    Mirrors: vLLM's skip_reading_prefix_cache (sampling_params.py), which defaults to
    `prompt_logprobs is not None` so that every prompt position gets its log-probability."""

    def _hits(self, keys, req) -> int:
        req.skip_prefix_cache = False                                # DEFECT: the bypass is ignored
        return super()._hits(keys, req)


@server_variant("sglang-evicts-oldest-inserted", (("pool_tokens", 600),))
class EvictsOldestInserted(RadixCache):
    """Evicts the leaf inserted first, whatever touched it since.
    Bug class: eviction order (FIFO instead of least recently used).
    Violates: PEER-SGL-5.
    Mirrors: an eviction heap keyed on creation_time (radix_cache.py FIFOStrategy) while the
    server runs with the default LRU policy."""

    def touch(self, node):
        pass                                                         # DEFECT: a node keeps its creation time


@server_variant("lcpp-similarity-ignored", (("slots", 2),))
class SimilarityIgnored(SlotCache):
    """Gives every request the least recently used slot, whatever its prompt shares.
    Bug class: slot choice (a similar prompt sent to another slot).
    Violates: PEER-LCPP-5.
    Mirrors: get_available_slot with --slot-prompt-similarity 0 while the server reports the
    default 0.1 (server-context.cpp)."""

    def pick(self, ids) -> int:
        best = 0
        for i, slot in enumerate(self.slots):                     # DEFECT: no similarity pass
            if slot["used"] <= self.slots[best]["used"]:
                best = i
        return best


@server_variant("lcpp-chunk-shorter-than-n", (("cache_reuse", 8),))
class ChunkShorterThanN(SlotCache):
    """Moves down a chunk one token shorter than --cache-reuse.
    Bug class: chunk reuse below its minimum (a run counted from one before it is compared).
    Violates: PEER-LCPP-7.
    Mirrors: update_slots' `n_match` counted as if the token at head_c matched before the
    comparison loop ran, so `n_match >= n_cache_reuse` passes for runs of n - 1 (server-context.cpp)."""

    def long_enough(self, run: int) -> bool:
        return run + 1 >= self.min_chunk                           # DEFECT: a run of n - 1 is reused


@server_variant("lcpp-similarity-at-threshold", (("slots", 2),))
class SimilarityAtThreshold(SlotCache):
    """Takes a slot whose share of the prompt equals the threshold.
    Bug class: slot choice at the threshold's boundary (>= for >).
    Violates: PEER-LCPP-5.
    Mirrors: get_available_slot's own comment, "find the slot that has at least n% prompt
    similarity", where the code compares `f_sim_cur > slot_prompt_similarity`."""

    def above(self, sim, threshold) -> bool:
        return sim >= threshold                                     # DEFECT: a share equal to it counts


@server_variant("lcpp-prompt-of-n-ctx-served", (("n_ctx", 512),))
class PromptOfContextServed(SlotCache):
    """Serves a prompt exactly as long as the slot's context instead of refusing it.
    Bug class: off-by-one at the context bound.
    Violates: PEER-LCPP-8.
    Mirrors: update_slots' bound for prompts that cannot be split, `n_tokens() > slot.n_ctx`,
    applied where llama-server refuses `n_tokens() >= slot.n_ctx` (server-context.cpp)."""

    def fits(self, n: int, n_ctx: int) -> bool:
        return n <= n_ctx                                           # DEFECT: n == n_ctx is served


@server_variant("lcpp-shift-discards-half-the-context", (("context_shift", True), ("n_keep", 32), ("n_ctx", 512)))
class ShiftDiscardsHalfTheContext(SlotCache):
    """Discards half the slot's context in a context shift, not half of what follows n_keep.
    Bug class: context shift (the discarded range).
    Violates: PEER-LCPP-9.
    Mirrors: pre_decode's `n_discard = n_left / 2` with `n_left` taken as the slot's context
    instead of the tokens it holds after n_keep (server-context.cpp:3146-3150); the two agree
    only for a slot of n_ctx tokens and n_keep 0."""

    def discard(self, held: int, n_ctx: int) -> tuple[int, int]:
        kept = min(self.keep, n_ctx - 4)
        return kept, n_ctx // 2                                     # DEFECT: half of n_ctx, not of n_left


TRT_POOL = (("max_blocks", 12), ("retention_config", True))
"""A bounded TensorRT-LLM pool whose server takes retention configs: the eviction cases run."""


@server_variant("trtllm-frees-first-block-first", TRT_POOL)
class FreesFirstBlockFirstTrt(TrtBlockTree):
    """Frees a finished request's blocks first block first, so its prompt's head is evicted first.
    Bug class: eviction order (a sequence's first blocks evicted before its last).
    Violates: PEER-TRT-6.
    Mirrors: WindowBlockManager::releaseBlocks walking allocatedBlocks from begin() instead of
    rbegin() (kvCacheManager.cpp)."""

    def free_order(self, blocks: list) -> list:
        return list(blocks)                                    # DEFECT: first block first


@server_variant("trtllm-priority-ignored", TRT_POOL)
class PriorityIgnoredTrt(TrtBlockTree):
    """Frees every block into the default priority's queue, whatever its retention priority.
    Bug class: a retention priority ignored (eviction in plain LRU order).
    Violates: PEER-TRT-8.
    Mirrors: LRUEvictionPolicy::releaseBlock queueing by the default priority, as before the
    per-priority free queues (evictionPolicy.cpp mFreeQueues[cacheLevel][priorityIdx])."""

    def queue_priority(self, node) -> int:
        return 35                                              # DEFECT: the block's priority is not used


@server_variant("trtllm-duration-ignored", TRT_POOL)
class DurationIgnoredTrt(TrtBlockTree):
    """Keeps a block's retention priority after its duration has run out.
    Bug class: a retention duration ignored (a priority held forever).
    Violates: PEER-TRT-9.
    Mirrors: a scheduler that never calls refreshBlocks, so LRUEvictionPolicy::refresh never
    moves expired blocks back to the default queue."""

    def expired(self, node, now) -> bool:
        return False                                           # DEFECT: durations never run out


@server_variant("trtllm-window-cyclic", (("max_attention_window", [96, 160]),))
class CyclicWindowTrt(TrtBlockTree):
    """Stores nothing of a sequence that reaches its smallest attention window.
    Bug class: a sliding window that throws away what it could store (the cyclic KV cache).
    Violates: PEER-TRT-7.
    Mirrors: TensorRT-LLM's cyclic KV cache before sliding-window blocks were detached
    (BlockManager::releaseBlocks: no store once `sequence.isCyclic()`, numTokens >= the smallest
    window)."""

    def may_store(self, run, window, sequence) -> bool:
        return run.may_store and len(sequence) < min(self.window_sizes)   # DEFECT: cyclic sequences drop out
