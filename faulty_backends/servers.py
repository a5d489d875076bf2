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
    select: tuple = ()
    """The cases (`-k`) the default tests judge the variant with: those of its rule (empty: all;
    the slow tests run every case at every block size)."""

    def peer(self, engine_dir: str | None = None, tokenizer: str | None = None, settings: dict | None = None):
        """The server state (gpu_backend.serve.PeerServer) with the faulty cache; `settings`
        override the variant's own (another block size, say)."""
        from gpu_backend.serve import make_peer
        return make_peer(self.profile, engine_dir, tokenizer, {**dict(self.settings), **(settings or {})},
                         cache_class=self.cache_class)


SERVER_VARIANTS: dict[str, ServerVariant] = {}


def server_variant(name: str, settings: tuple = (), select: tuple = (), vision: bool = False):
    """Register a faulty cache; its profile is the one whose bundled cache it subclasses."""
    def register(cls):
        profile = next(p for p, served in SERVED.items() if issubclass(cls, served.cache))
        doc = " ".join((cls.__doc__ or "").split())
        rules = tuple(re.findall(r"PEER-[A-Z]+-\d+", doc.split("Violates:")[1].split("Mirrors:")[0]))
        mirrors = doc.split("Mirrors:")[1].strip()
        assert rules and mirrors and "Bug class:" in doc, f"{cls.__name__}: docstring lacks its three lines"
        SERVER_VARIANTS[name] = ServerVariant(name, profile, doc.split(". ")[0], rules, mirrors, cls, settings,
                                              vision, select)
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


@server_variant("vllm-empty-salt-accepted")
class EmptySaltAccepted(BlockCache):
    """Accepts `cache_salt: ""` and keys it apart from no salt.
    Bug class: an input the runtime refuses accepted (a salt that is no salt treated as a tenant).
    Violates: PEER-VLLM-17.
    Mirrors: the kit's own reading before the cross-check against vLLM's cache manager (and
    servers that pass the field through unchecked); vLLM refuses it, protocol.py
    validate_cache_salt, and its cache would key it as unsalted (kv_cache_utils.py:647)."""

    def admits(self, req) -> None:
        return None                                        # DEFECT: "" reaches the cache

    def extras(self, req, index: int) -> tuple:
        out = () if req.lora is None else (("lora", req.lora, req.lora_path),)
        if index == 0 and req.salt is not None:
            out += (("cache_salt", req.salt),)             # DEFECT: "" keys block 0 as a salt
        return out


@server_variant("vllm-hybrid-hit-unaligned", (("block_size", 8), ("sliding_window", 20), ("swa_block_size", 16),
                                              ("retention_interval", "dense")))
class HybridHitUnaligned(BlockCache):
    """Lands a hybrid model's hits on the smallest block size, not on the lcm of the groups'.
    Bug class: a hit not aligned to every group (the KV of a half-filled block of another group reused).
    Violates: PEER-VLLM-11.
    Mirrors: hybrid allocators that align the hit to the first group's block size; vLLM aligns
    it to the least common multiple (kv_cache_coordinator.py HybridKVCacheCoordinator,
    `_cache_hit_alignment_tokens`, and test_different_block_size)."""

    def alignment(self) -> int:
        return self.B                                      # DEFECT: the full-attention block size, not the lcm


@server_variant("vllm-swa-tail-past-window", (("block_size", 16), ("sliding_window", 48)))
class SlidingWindowKeptWhole(BlockCache):
    """Keeps every sliding-window block a request computed, as full attention does.
    Bug class: a window's tail kept past what the window and the retention interval keep.
    Violates: PEER-VLLM-13, PEER-VLLM-15.
    Mirrors: hybrid caches that key a sliding-window group's blocks like full attention's; vLLM
    frees the blocks before the window as a request runs and keeps only the tails its retention
    mask names (single_type_kv_cache_manager.py SlidingWindowManager.reachable_block_mask)."""

    def kept(self, g: int, index: int, n: int, junction: int) -> bool:
        return True                                        # DEFECT: every block kept, whatever the window


@server_variant("vllm-mamba-state-every-block", (("block_size", 16), ("mamba_block_size", 16)))
class MambaStateEveryBlock(BlockCache):
    """Serves a Mamba group's prefix at every block boundary the request passed, not only where it
    wrote a state.
    Bug class: a recurrent state assumed at positions it was never saved at.
    Violates: PEER-VLLM-14.
    Mirrors: treating a Mamba group like attention in a hybrid cache; vLLM's "align" mode keeps one
    running state block and writes a reusable state only where a prefill stops or decoding crosses
    a block boundary (single_type_kv_cache_manager.py MambaManager, sched/scheduler.py
    `_mamba_block_aligned_split`)."""

    def serves(self, g: int, length: int, keys) -> bool:
        if self.groups[g][0] == "mamba":
            return all(self._prefix(keys, e) in self.held[0] for e in range(self.B, length + 1, self.B))
        return super().serves(g, length, keys)             # DEFECT: a Mamba state read off the attention blocks


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

    def touch(self, node, stamp):
        pass                                                         # DEFECT: a node keeps its creation time

    def _split(self, ns, child, k):
        upper = super()._split(ns, child, k)
        upper.used = child.used                                      # a split creates nothing: its creation time
        return upper


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


# --- sglang-radix: slots, eviction rounds, time stamps, releases, empty keys --------------------------

RADIX_POOL = (("page_size", 4), ("pool_tokens", 600))
"""A paged, bounded SGLang server: what the radix eviction cases need to judge."""


@server_variant("sglang-decode-pages-not-held", RADIX_POOL, ("radix-decode-",))
class DecodePagesNotHeld(RadixCache):
    """Asks for a page at every decode step but never takes the page a fed-back token starts.
    Bug class: a long answer's pages not held while it decodes (the pool looks freer than it is).
    Violates: PEER-SGL-7.
    Mirrors: the mutation campaign's survivors in the decode steps' slots (kvconform selftest
    --mutate, docs/mutation.md section 7: `position % P == 0` as `position // P == 0`)."""

    def decode_step(self, position):
        if self.on:
            self._slots(self.P, 0)                                    # DEFECT: the page a token starts not taken


@server_variant("sglang-decode-token-accounting", RADIX_POOL, ("radix-paged-decode",))
class DecodeTokenAccounting(RadixCache):
    """Asks for a page and a slot at every decode step and holds tokens, not pages.
    Bug class: paged allocation counted in tokens (a decode step evicts with a page still free).
    Violates: PEER-SGL-7.
    Mirrors: PEER-SGL-5's text before peer profiles 1.3.0 ("a page when P > 1; one more per
    fed-back sampled token"), which the cross-check against SGLang 0.5.23 refuted
    (allocation.py alloc_paged_token_slots_decode asks for one page)."""

    def _extend(self, n, matched):
        self._slots(n - matched + self.slack(), n - matched)          # DEFECT: tokens held, not whole pages

    def decode_step(self, position):
        if self.on:
            self._slots(1 + self.slack(), 1)                          # DEFECT: P + 1 asked, one token held


@server_variant("sglang-new-leaf-untimed", RADIX_POOL, ("radix-new-leaves",))
class NewLeafUntimed(RadixCache):
    """Gives a leaf an insert adds no access time until a later request touches it.
    Bug class: recency among new leaves (a fresh leaf looks the oldest).
    Violates: PEER-SGL-4.
    Mirrors: a TreeNode whose last_access_time defaults to 0 and is set only by
    _match_prefix_helper (radix_cache.py stamps it in TreeNode.__init__)."""

    def stamp_leaf(self, leaf):
        leaf.used = 0                                                # DEFECT: no time when made


@server_variant("sglang-childless-parent-kept", RADIX_POOL, ("radix-cascade",))
class ChildlessParentKept(RadixCache):
    """Evicts only the leaves there were when the round began; a parent they leave bare waits.
    Bug class: eviction cascades (a childless parent not evicted in the same round).
    Violates: PEER-SGL-5.
    Mirrors: radix_cache.py evict without its `heapq.heappush(eviction_heap, (new_priority,
    x.parent))` for a parent left childless and unlocked."""

    def joins(self, parent) -> bool:
        return False                                                 # DEFECT: a bare parent waits a round


@server_variant("sglang-no-page-slack", RADIX_POOL, ("radix-paged-slack",))
class NoPageSlack(RadixCache):
    """Asks for exactly the prompt's rest when paged, without the page of slack.
    Bug class: paged slack (an allocation that fits by less than a page evicts nothing).
    Violates: PEER-SGL-7.
    Mirrors: alloc_paged_token_slots_extend without `len(seq_lens_cpu) * page_size` in its
    demand (allocation.py)."""

    def slack(self) -> int:
        return 0                                                     # DEFECT: no page of slack


@server_variant("sglang-evicts-locked-path", RADIX_POOL, ("radix-locked-path",))
class EvictsLockedPath(RadixCache):
    """Lets eviction take the nodes a running request matched.
    Bug class: locks (eviction takes the locked path).
    Violates: PEER-SGL-5.
    Mirrors: an evictable-leaf set that ignores lock_ref (radix_cache.py _update_leaf_status keeps
    nodes with lock_ref > 0 out of evictable_leaves)."""

    def evictable(self, node) -> bool:
        return True                                                  # DEFECT: locks not consulted


@server_variant("sglang-no-prompt-split", RADIX_POOL, ("radix-prompt-split",))
class NoPromptSplit(RadixCache):
    """Inserts a finished request once, never splitting its node at the prompt, yet reports 0.5.23.
    Bug class: a release's rule (the prompt split of SGLang >= 0.5.20 missing).
    Violates: PEER-SGL-8.
    Mirrors: cache_finished_req of SGLang 0.5.19 (no second insert of the prompt) in a build that
    reports a later version (radix_cache.py `_insert_cache(split_prompt=True)` in 0.5.23)."""

    def split_at_prompt(self, ns, ids, n):
        pass                                                         # DEFECT: no split at the prompt


@server_variant("sglang-evicts-whole-demand", RADIX_POOL, ("radix-shortfall",))
class EvictsWholeDemand(RadixCache):
    """Evicts all an allocation asks for when it is short, not what it is short of, yet reports 0.5.23.
    Bug class: a release's rule (the shortfall eviction of SGLang >= 0.5.17 missing).
    Violates: PEER-SGL-8.
    Mirrors: mem_cache/common.py evict_from_tree_cache of SGLang 0.5.16 (`tree_cache.evict(num_tokens)`)
    in a build that reports a later version (allocator/base.py evict_to_free_tokens in 0.5.23)."""

    def to_evict(self, asked, free) -> int:
        return asked                                                 # DEFECT: the whole demand


@server_variant("sglang-empty-salt-apart", select=("empty-keys",))
class EmptySaltApart(RadixCache):
    """Keys a request with `cache_salt: ""` apart from one without a salt.
    Bug class: empty keys (an empty salt is a salt).
    Violates: PEER-SGL-2.
    Mirrors: a server that passes cache_salt on as given, where SGLang's Req and RadixKey take
    `cache_salt or None` (schedule_batch.py, radix_cache.py:77)."""

    def namespace(self, req) -> tuple:
        return ((req.extra_key or "") + (req.lora or ""), req.salt)   # DEFECT: "" is a salt of its own


@server_variant("sglang-empty-extra-key-apart", select=("empty-keys",))
class EmptyExtraKeyApart(RadixCache):
    """Keys a request with `extra_key: ""` apart from one without an extra key.
    Bug class: empty keys (an empty extra key is a key).
    Violates: PEER-SGL-2.
    Mirrors: a request that reaches the cache without io_struct.py `_normalize_extra_key`
    (`extra_key or None`), where RadixKey keys "" apart from None (radix_cache.py:247)."""

    def namespace(self, req) -> tuple:
        key = "\0none" if req.extra_key is None else req.extra_key      # DEFECT: "" is not none
        return (key + (req.lora or ""), req.salt or None)


@server_variant("sglang-eagle-keys-ids", (("eagle", True),))
class EagleKeysIds(RadixCache):
    """Keys its tree by token ids while it runs (and publishes) an EAGLE drafter.
    Bug class: EAGLE keys (one more id matched than a bigram tree matches).
    Violates: PEER-SGL-9.
    Mirrors: a radix cache built without `is_eagle` (kv_cache_builder.py passes
    `is_eagle=spec_algorithm.is_eagle()`; radix_cache.py RadixKey `is_bigram` then counts pairs)."""

    def units(self, ids):
        return list(ids)                                             # DEFECT: ids, not bigrams


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


@server_variant("trtllm-retention-unchecked", TRT_POOL, ("trt-retention-checks",))
class RetentionUncheckedTrt(TrtBlockTree):
    """Takes a retention priority above 100 (the upper bound unchecked).
    Bug class: a request field's bounds not checked (a config the runtime refuses is served).
    Violates: PEER-TRT-8.
    Mirrors: the mutation campaign's survivors in parse_retention (kvconform selftest --mutate,
    docs/mutation.md section 7: `value > high` as `value >= high` and the bound dropped)."""

    def _retention(self, req):
        import dataclasses
        doc = req.retention
        if self.retention and isinstance(doc, dict):
            ranges = [dict(r, priority=min(r["priority"], 100))                # DEFECT: clamped, never refused
                      if isinstance(r, dict) and type(r.get("priority")) is int else r
                      for r in doc.get("token_range_retention_configs") or []]
            req = dataclasses.replace(req, retention=dict(doc, token_range_retention_configs=ranges))
        return super()._retention(req)


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


# --- sglang-radix: sliding-window and Mamba models ------------------------------------------------------

SWA_MODEL = (("page_size", 4), ("sliding_window", 30), ("swa_eviction_interval", 8))
"""A paged sliding-window model whose window is freed after a few decode steps (PEER-SGL-10)."""


@server_variant("sglang-swa-tail-kept", SWA_MODEL, ("sglang-interval", "sglang-edge"))
class SlidingWindowNeverFreed(RadixCache):
    """Keeps a request's whole sliding-window KV however far it decodes past its window.
    Bug class: a window's tail kept past what the window and the eviction interval keep.
    Violates: PEER-SGL-10.
    Mirrors: a hybrid cache that never runs the decode-time free (schedule_batch.py
    `maybe_evict_swa`, mem_cache/common.py `free_swa_out_of_window_slots`) and so reuses ids
    whose window KV SGLang has freed."""

    def window_freed(self, n, decode_steps) -> int:
        return 0                                           # DEFECT: nothing freed while decoding


@server_variant("sglang-swa-tombstone-matched", SWA_MODEL, ("sglang-interval", "sglang-edge"))
class TombstoneMatched(RadixCache):
    """Lets a match end inside ids whose window KV was freed, as long as their full KV is cached.
    Bug class: a tombstoned node matched as a hit (the window before it cannot be rebuilt).
    Violates: PEER-SGL-11.
    Mirrors: a radix tree that checks only the full-attention KV when it matches (swa.py
    `create_match_validator` stops a match at a tombstone until W live ids follow it)."""

    def usable(self, path) -> int:
        if self.window is not None and path:
            at, nd = path[-1]
            return at + len(nd.key)                        # DEFECT: the tombstones are not looked at
        return super().usable(path)


@server_variant("sglang-swa-branch-whole", SWA_MODEL, ("sglang-interval", "sglang-edge"))
class BranchCachedWhole(RadixCache):
    """Caches a request's whole sequence after its match stopped at a tombstone.
    Bug class: what a request leaves cached decided without the component that cut its match.
    Violates: PEER-SGL-12.
    Mirrors: an insert that ignores `swa_branching_seqlen` (swa.py `prepare_for_caching_req`
    caps a finished request's insert at its full-attention hit when its match stopped short)."""

    def cut_short(self, length) -> int:
        return length                                      # DEFECT: the whole sequence, not the hit


@server_variant("sglang-mamba-state-off-boundary", (("mamba", True),), ("mamba/",))
class MambaStateOffBoundary(RadixCache):
    """Reuses a Mamba state at any point of a matched path, not only where a cached sequence ended.
    Bug class: a recurrent state assumed at positions it was never saved at.
    Violates: PEER-SGL-13.
    Mirrors: treating Mamba layers like attention in a radix tree (mamba.py
    `create_match_validator` accepts only a node holding a state; a split's upper part holds none)."""

    def usable(self, path) -> int:
        if self.mamba and path:
            at, nd = path[-1]
            return at + len(nd.key)                        # DEFECT: a state read off any node end
        return super().usable(path)
