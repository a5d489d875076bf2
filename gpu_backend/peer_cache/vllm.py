"""vllm-apc: full blocks keyed by a hash chain with extra keys (PEER-VLLM-*)."""
import hashlib

from .common import concat_kv


class BlockCache:
    """vLLM automatic prefix caching: full blocks keyed by a hash chain with extra keys
    (PEER-VLLM-1..8).

    A key may be held by several blocks (a block beyond the N - 1 cap, or dropped under EAGLE,
    is computed and cached again); a hit uses the block that cached it first. Freed blocks go
    back last block first: a block without a key to the head of the free queue, one with a key
    to the tail (vllm/v1/core/block_pool.py free_blocks)."""
    settings = {"block_size": 16, "cache_blocks": None, "enable_prefix_caching": True, "eagle": False}

    def __init__(self, block_size=16, cache_blocks=None, enable_prefix_caching=True, eagle=False):
        self.B, self.capacity = block_size, cache_blocks
        self.caching, self.eagle = enable_prefix_caching, eagle
        self.reset()

    def pages(self, context: int) -> dict:
        """vLLM's `/metrics` line `vllm:cache_config_info` (PEER-API-5): block size, prefix caching
        and num_gpu_blocks, the usable blocks and the null block 0."""
        labels = {"block_size": self.B, "enable_prefix_caching": self.caching,
                  "num_gpu_blocks": "None" if self.capacity is None else self.capacity + 1}
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return {("GET", "/metrics"): "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
                                     "# TYPE vllm:cache_config_info gauge\n"
                                     f"vllm:cache_config_info{{{text}}} 1.0\n"}

    def reset(self):
        self.holder = {}                        # key -> block ids holding it, first cached first
        self.blocks = {}                        # block id -> [key, kv]
        self.free = list(range(1, (self.capacity or 0) + 1))
        self.fresh = 1                          # next id of an unbounded cache

    # seams ---------------------------------------------------------------------------------
    def spans(self, n: int) -> list:
        """PEER-VLLM-1: the token ranges that are hashed: full blocks only."""
        return [(i * self.B, (i + 1) * self.B) for i in range(n // self.B)]

    def extras(self, req, index: int) -> tuple:
        """PEER-VLLM-2: the adapter's name and path key every block, cache_salt block 0, and each
        image a block overlaps its digest and where it starts relative to the block
        (vllm/v1/core/kv_cache_utils.py `_gen_mm_extra_hash_keys`: offset - start_token_idx)."""
        a, b = index * self.B, (index + 1) * self.B
        out = tuple(("mm", img.digest, img.start - a) for img in req.images if img.start < b and img.start + img.length > a)
        out += () if req.lora is None else (("lora", req.lora, req.lora_path),)
        if index == 0 and req.salt is not None:
            out += (("cache_salt", req.salt),)
        return out

    def reported(self, hit_spans: list, n: int) -> int:
        """PEER-VLLM-3: whole hit blocks below N - 1; PEER-VLLM-8: EAGLE one block fewer."""
        blocks = min(len(hit_spans), (n - 1) // self.B)
        return self.B * (max(0, blocks - 1) if self.eagle else blocks)

    # --------------------------------------------------------------------------------------
    def keys(self, ids, req) -> list:
        out, parent = [], b""
        for index, (a, b) in enumerate(self.spans(len(ids))):
            h = hashlib.blake2b(parent, digest_size=16)
            h.update(repr((list(ids[a:b]), self.extras(req, index))).encode())
            parent = h.digest()
            out.append(parent)
        return out

    def _hits(self, keys, req) -> int:
        """Leading cached keys; none with caching off (PEER-VLLM-6) or a read bypass (PEER-VLLM-7)."""
        if not self.caching or req.skip_prefix_cache:
            return 0
        k = 0
        while k < len(keys) and self.holder.get(keys[k]):
            k += 1
        return k

    def lookup(self, req):
        n, spans, keys = len(req.ids), self.spans(len(req.ids)), self.keys(req.ids, req)
        hits = self._hits(keys, req)
        c = self.reported(spans[:hits], n)
        use = min(c, n - 1)
        if use <= 0:
            return c, None
        parts = [self.blocks[self.holder[k][0]][1] for k in keys[:hits]]
        return c, concat_kv(parts)[:, :, :use]

    def store(self, req, sequence, kv, sampled):
        """PEER-VLLM-4: the request runs through the pool, the full blocks of its computed
        sequence cached as they fill; then its blocks are freed (PEER-VLLM-5)."""
        n = len(req.ids)
        keys, spans = self.keys(sequence, req), self.spans(len(sequence))
        used = self.reported(spans[:self._hits(keys[:len(self.spans(n))], req)], n) // self.B
        held = []
        for key in keys[:used]:
            block = self.holder[key][0]
            if block in self.free:
                self.free.remove(block)
            held.append(block)
        computed = n
        self._take(held, -(-n // self.B))
        self._keep(held, keys, spans, kv, used, computed)
        for _ in range(len(sampled) - 1):
            computed += 1
            self._take(held, -(-computed // self.B))
            self._keep(held, keys, spans, kv, used, computed)
        if self.capacity is not None:
            self.release(held)

    def release(self, held: list) -> None:
        """PEER-VLLM-5: free a finished request's blocks, last first: unkeyed to the head, keyed
        to the tail."""
        unkeyed = [b for b in reversed(held) if b not in self.blocks]
        self.free = unkeyed + self.free + [b for b in reversed(held) if b in self.blocks]

    def _take(self, held, blocks):
        while len(held) < blocks:
            if self.capacity is None:
                block, self.fresh = self.fresh, self.fresh + 1
            elif not self.free:
                raise RuntimeError(f"out of KV blocks ({self.capacity})")
            else:
                block = self.free.pop(0)                # PEER-VLLM-5: the head of the free queue
                old = self.blocks.pop(block, [None])[0]
                if old is not None:                     # evicted: its key goes
                    self.holder[old].remove(block)
            held.append(block)

    def _keep(self, held, keys, spans, kv, used, computed):
        if not self.caching:
            return
        for i in range(used, len(keys)):
            a, b = spans[i]
            if b > computed:
                break
            if self.blocks.get(held[i], [None])[0] == keys[i]:
                continue
            self.blocks[held[i]] = [keys[i], kv[:, :, a:b].clone()]
            self.holder.setdefault(keys[i], []).append(held[i])
