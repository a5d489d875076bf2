"""vllm-apc: full blocks keyed by a hash chain with extra keys (PEER-VLLM-*), and the KV-cache
groups of sliding-window, hybrid and Mamba models (PEER-VLLM-11..16)."""
import hashlib
from math import gcd, lcm

from .common import Refused, concat_kv


class BlockCache:
    """vLLM automatic prefix caching: full blocks keyed by a hash chain with extra keys
    (PEER-VLLM-1..8).

    A key may be held by several blocks (a block beyond the N - 1 cap, or dropped under EAGLE,
    is computed and cached again); a hit uses the block that cached it first. Freed blocks go
    back last block first: a block without a key to the head of the free queue, one with a key
    to the tail (vllm/v1/core/block_pool.py free_blocks)."""
    settings = {"block_size": 16, "cache_blocks": None, "enable_prefix_caching": True, "eagle": False,
                "vllm_version": "0.32.0", "disable_lookahead_block_hashes": False, "full_attention": True,
                "sliding_window": None, "swa_block_size": None, "mamba_block_size": None, "mamba_cache_mode": "align",
                "retention_interval": 0}

    def __init__(self, block_size=16, cache_blocks=None, enable_prefix_caching=True, eagle=False,
                 vllm_version="0.32.0", disable_lookahead_block_hashes=False, full_attention=True, sliding_window=None,
                 swa_block_size=None, mamba_block_size=None, mamba_cache_mode="align", retention_interval=0):
        self.B, self.capacity = block_size, cache_blocks
        self.caching, self.eagle = enable_prefix_caching, eagle
        self.version, self.no_lookahead = str(vllm_version), disable_lookahead_block_hashes
        self.full, self.window, self.swa_B = full_attention, sliding_window, swa_block_size or block_size
        self.mamba_B, self.mamba_mode, self.retention = mamba_block_size, mamba_cache_mode, retention_interval
        release = tuple(int(x) for x in self.version.split("+")[0].split(".")[:2] if x.isdigit())
        # PEER-VLLM-10: from 0.33.0 an EAGLE block is keyed with the id after it, and none is dropped
        self.lookahead = int(bool(eagle) and release >= (0, 33) and not disable_lookahead_block_hashes)
        self.drop = bool(eagle) and not self.lookahead
        self.groups = self.kinds()
        if len(self.groups) > 1 or self.groups[0][0] != "full":
            if cache_blocks is not None or eagle:
                raise ValueError("the bundled vllm-apc server simulates KV-cache groups with an unbounded pool and "
                                 "without EAGLE: drop cache_blocks and eagle")
            if mamba_block_size is not None and any(B % mamba_block_size for _, B, _ in self.groups) or \
                    mamba_block_size not in (None, block_size):
                raise ValueError("a Mamba group's block size must be block_size (vLLM's default) and divide the others'")
        self.reset()

    def pages(self, context: int) -> dict:
        """vLLM's `/metrics` line `vllm:cache_config_info` (PEER-API-5): block size, prefix caching
        and num_gpu_blocks, the usable blocks and the null block 0."""
        labels = {"block_size": self.B, "enable_prefix_caching": self.caching,
                  "num_gpu_blocks": "None" if self.capacity is None else self.capacity + 1,
                  "sliding_window": self.window, "mamba_block_size": self.mamba_B,
                  "mamba_cache_mode": self.mamba_mode if self.mamba_B else "none",
                  "prefix_cache_retention_interval": "None" if self.retention == "dense" else self.retention}
        text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return {("GET", "/metrics"): "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
                                     "# TYPE vllm:cache_config_info gauge\n"
                                     f"vllm:cache_config_info{{{text}}} 1.0\n",
                ("GET", "/version"): {"version": self.version}}          # PEER-VLLM-10

    def reset(self):
        self.holder = {}                        # key -> block ids holding it, first cached first
        self.blocks = {}                        # block id -> [key, kv]
        self.held = [set() for _ in self.groups]    # per KV-cache group: the prefix keys it keeps
        self.unit_kv = {}                       # prefix key -> KV of the unit that ends it (every group's data)
        self.free = list(range(1, (self.capacity or 0) + 1))
        self.fresh = 1                          # next id of an unbounded cache

    # seams ---------------------------------------------------------------------------------
    def spans(self, n: int) -> list:
        """PEER-VLLM-1: the token ranges that are hashed: full blocks only (with a lookahead key,
        PEER-VLLM-10, only those whose next id exists)."""
        return [(i * self.B, (i + 1) * self.B) for i in range((n - self.lookahead) // self.B)]

    def extras(self, req, index: int) -> tuple:
        """PEER-VLLM-2: the adapter's name and path key every block, cache_salt block 0, and each
        image a block overlaps its digest and where it starts relative to the block
        (vllm/v1/core/kv_cache_utils.py `_gen_mm_extra_hash_keys`: offset - start_token_idx)."""
        a, b = index * self.B, (index + 1) * self.B
        out = tuple(("mm", img.digest, img.start - a) for img in req.images if img.start < b and img.start + img.length > a)
        out += () if req.lora is None else (("lora", req.lora, req.lora_path),)
        if index == 0 and req.salt:
            out += (("cache_salt", req.salt),)
        return out

    def reported(self, hit_spans: list, n: int) -> int:
        """PEER-VLLM-3: whole hit blocks below N - 1; PEER-VLLM-8: EAGLE one block fewer."""
        blocks = min(len(hit_spans), (n - 1) // self.B)
        return self.B * (max(0, blocks - 1) if self.drop else blocks)

    # --------------------------------------------------------------------------------------
    def keys(self, ids, req) -> list:
        out, parent = [], b""
        for index, (a, b) in enumerate(self.spans(len(ids))):
            h = hashlib.blake2b(parent, digest_size=16)
            h.update(repr((list(ids[a:b + self.lookahead]), self.extras(req, index))).encode())
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

    def admits(self, req) -> None:
        """PEER-VLLM-17: vLLM's API refuses an empty cache_salt (protocol.py validate_cache_salt)."""
        if req.salt == "":
            raise Refused("cache_salt must be a non-empty string")

    def lookup(self, req):
        self.admits(req)
        if self.grouped():
            return self.group_lookup(req)
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
        if self.grouped():
            return self.group_store(req, sequence, kv, sampled)
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
            if b + self.lookahead > computed:           # a lookahead key needs the next id computed
                break
            if self.blocks.get(held[i], [None])[0] == keys[i]:
                continue
            self.blocks[held[i]] = [keys[i], kv[:, :, a:b].clone()]
            self.holder.setdefault(keys[i], []).append(held[i])

    # KV-cache groups (PEER-VLLM-11..16) ----------------------------------------------------------
    # The engine computes full attention in every layer; these rules decide what is reused and
    # reported, as vLLM's groups would (spec/peer-profiles.md, "What the bundled server simulates").
    def kinds(self) -> list:
        """The model's groups (kind, block size, window), full attention first (PEER-VLLM-11)."""
        out = [("full", self.B, 0)] if self.full else []
        if self.window is not None:
            out.append(("swa", self.swa_B, self.window))
        if self.mamba_B is not None:
            out.append(("mamba", self.mamba_B, 0))
        if not out:
            raise ValueError("full_attention false needs sliding_window or mamba_block_size")
        return out

    def grouped(self) -> bool:
        return len(self.groups) > 1 or self.groups[0][0] != "full"

    def alignment(self) -> int:
        """PEER-VLLM-11: hits land on the least common multiple of the groups' block sizes."""
        return lcm(*(B for _, B, _ in self.groups))

    def window_blocks(self, B: int, W: int) -> int:
        """PEER-VLLM-13: the blocks a window of W tokens reaches back over, ceil((W - 1) / B)."""
        return -(-(W - 1) // B)

    def unit_keys(self, ids, req) -> list:
        """Prefix keys every gcd-of-block-sizes tokens: key j ends the prefix of (j + 1) units."""
        unit = gcd(*(B for _, B, _ in self.groups))
        out, parent = [], b""
        for index in range(len(ids) // unit):
            h = hashlib.blake2b(parent, digest_size=16)
            h.update(repr((list(ids[index * unit:(index + 1) * unit]), self.extras(req, index))).encode())
            parent = h.digest()
            out.append(parent)
        return out

    def _prefix(self, keys, end: int):
        unit = gcd(*(B for _, B, _ in self.groups))
        return keys[end // unit - 1] if 0 < end <= len(keys) * unit else None

    def serves(self, g: int, length: int, keys) -> bool:
        """Whether group g can give back the first `length` tokens: full attention every block,
        a window the blocks it reaches back over (or every block from the first), Mamba the state
        at `length` (PEER-VLLM-12..14)."""
        kind, B, W = self.groups[g]
        if length == 0:
            return True
        held = self.held[g]
        if kind == "mamba":
            return self._prefix(keys, length) in held
        ends = range(B, length + 1, B)
        if kind == "swa":                              # a window of one token still needs its block
            reach = max(1, self.window_blocks(B, W))
            tail = [e for e in ends if e > length - reach * B]
            if all(self._prefix(keys, e) in held for e in tail):
                return True
        return all(self._prefix(keys, e) in held for e in ends)

    def group_hit(self, req, keys) -> tuple:
        """(the longest prefix below N that every group serves, a multiple of the alignment; the
        first group's own reach when it is longer: the shared-prefix junction, PEER-VLLM-16)."""
        if not self.caching or req.skip_prefix_cache:
            return 0, 0
        A, top = self.alignment(), len(req.ids) - 1
        candidates = range(top // A * A, -1, -A)
        hit = next(L for L in candidates if all(self.serves(g, L, keys) for g in range(len(self.groups))))
        first = next(L for L in candidates if self.serves(0, L, keys))
        return hit, (first if first > hit else 0)

    def group_lookup(self, req):
        keys = self.unit_keys(req.ids, req)
        hit, _ = self.group_hit(req, keys)
        if hit <= 0:
            return 0, None
        unit = gcd(*(B for _, B, _ in self.groups))
        return hit, concat_kv([self.unit_kv[k] for k in keys[:hit // unit]])

    def kept(self, g: int, index: int, n: int, junction: int) -> bool:
        """PEER-VLLM-15: whether a window or Mamba group keeps its block `index` under the retention
        interval: dense every one the group can use, R one per R tokens, and always those at the
        replay boundary (N - 1) and the junction, floored to the alignment."""
        kind, B, W = self.groups[g]
        if kind == "full":
            return True
        A = self.alignment() if len(self.groups) > 1 else B
        R = self.retention
        if kind == "mamba" and R == "dense":
            return True
        reach = self.window_blocks(B, W) if kind == "swa" else 1
        segment = A if R == "dense" else R
        if segment:
            per = segment // B
            if (kind == "swa" and reach >= per) or (kind == "mamba" and per <= 1):
                return True
            if (index % per >= per - reach) if kind == "swa" else (index + 1) % per == 0:
                return True
        if R == "dense":
            return False
        for boundary in (n - 1, junction):
            end = boundary // A * A // B
            if boundary and end - reach <= index < end:
                return True
        return False

    def group_store(self, req, sequence, kv, sampled):
        """The request's steps (its prefill, split where a Mamba state must be written; one step per
        fed-back token) and what each group keeps at each: blocks that became part of the aligned
        prefix, while a window still holds them and a Mamba state exists at their end."""
        n, keys = len(req.ids), self.unit_keys(sequence, req)
        unit = gcd(*(B for _, B, _ in self.groups))
        for j, key in enumerate(keys):
            self.unit_kv.setdefault(key, kv[:, :, j * unit:(j + 1) * unit].clone())
        hit, junction = self.group_hit(req, keys)
        A = self.alignment() if len(self.groups) > 1 else self.groups[0][1]
        steps, start = [], hit
        while start < n:
            stops = [n - 1 - (n - 1) % self.B] if self.mamba_B else []
            if self.mamba_B and start < junction < n:
                stops.append(start + (junction - start) // self.B * self.B)
            end = min([s for s in stops if start < s < n] or [n])
            steps.append((start, end))
            start = end
        steps += [(c, c + 1) for c in range(n, len(sequence))]
        covered = [hit // B for _, B, _ in self.groups]
        for c0, c1 in steps:
            cacheable = c1 // A * A if len(self.groups) > 1 else c1
            for g, (kind, B, W) in enumerate(self.groups):
                for index in range(covered[g], cacheable // B):
                    end = (index + 1) * B
                    alive = (kind == "full" or (kind == "swa" and index >= max(0, c0 - W + 1) // B)
                             or (kind == "mamba" and end in (c0, c1)))
                    if alive and self.kept(g, index, n, junction):
                        self.held[g].add(self._prefix(keys, end))
                covered[g] = max(covered[g], cacheable // B)
