"""`vllm-apc` with KV-cache groups (spec/peer-profiles.md section 3, PEER-VLLM-11..16). Stdlib only.

A hybrid model (full attention beside sliding-window or Mamba layers), and a model whose every
layer slides or is Mamba, keeps one KV-cache group per layer kind, each with its own block size,
all drawing blocks from one pool (vllm/v1/core/kv_cache_coordinator.py). A request's hit is the
longest prefix every group can serve (PEER-VLLM-11: `HybridKVCacheCoordinator.
find_longest_cache_hit`, a fixed point over the groups, full attention first); each group answers
by its own rule (single_type_kv_cache_manager.py): full attention the leading run of cached
blocks (PEER-VLLM-12), a sliding window the `ceil((W - 1) / B)` blocks before the hit point
(PEER-VLLM-13), Mamba the one state block that ends there (PEER-VLLM-14). Hits land on the least
common multiple of the groups' block sizes. What each group caches is masked by the retention
interval (PEER-VLLM-15) and pinned at the shared-prefix junction a lookup detects (PEER-VLLM-16).

The pool is simulated as vLLM runs it for one request at a time, step by step: a prefill (split
where Mamba states must be written, `Scheduler._mamba_block_aligned_split`), one step per fed-back
sampled token; each step frees what the window no longer needs, takes new blocks from the head
of the free queue (evicting their keys), and caches the full blocks the group's mask keeps. Block
ids and the free queue follow PEER-VLLM-5, so the cross-check compares them with vLLM's own.

Not defined here (PeerProfileError): a Mamba group whose block size differs from `block_size`,
or a sliding-window group whose block size is not a multiple of a Mamba group's (vLLM then hashes
finer than a Mamba block and hits inside it, `prefix_match_unit`); a retention interval that is
not a multiple of the hit alignment (vLLM refuses it at start-up).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import gcd, lcm

from .peer_common import PeerProfileError, PeerRequest, computed_sequence
from .peer_profile import version_tuple
from .peer_vllm_keys import FreeQueue, refuses_empty_salt, vllm_block_keys
from .peer_trace import keyed

NULL = 0
"""vLLM's null block: what a group's table holds where a block was skipped or freed."""


@dataclass(frozen=True)
class Group:
    """One KV-cache group: `kind` full, swa or mamba, its block size `B`, a window `W` (swa)."""
    kind: str
    B: int
    W: int = 0

    def describe(self) -> str:
        return {"full": f"full attention (B = {self.B})", "swa": f"sliding window {self.W} (B = {self.B})",
                "mamba": f"Mamba (B = {self.B})"}[self.kind]


def groups_of(settings: dict) -> tuple:
    """PEER-VLLM-11: the model's groups, in vLLM's lookup order (full attention first)."""
    B = settings["block_size"]
    out = []
    if settings["full_attention"]:
        out.append(Group("full", B))
    if settings["sliding_window"] is not None:
        out.append(Group("swa", settings["swa_block_size"] or B, settings["sliding_window"]))
    if settings["mamba_block_size"] is not None:
        out.append(Group("mamba", settings["mamba_block_size"]))
    if not out:
        raise PeerProfileError("vllm-apc: full_attention false with neither sliding_window nor mamba_block_size: "
                               "the model has no KV-cache group")
    mamba = next((g for g in out if g.kind == "mamba"), None)
    if mamba is not None and settings["mamba_cache_mode"] != "align":
        raise PeerProfileError("vllm-apc: a Mamba group caches by prefix only in mamba_cache_mode align (vLLM 0.33.0 "
                               "refuses prefix caching otherwise); the profile does not define mode "
                               f"{settings['mamba_cache_mode']}")
    window = any(g.kind == "swa" for g in out)
    if mamba is not None and window and settings["eagle"] and settings["cache_blocks"] is not None:
        raise PeerProfileError("vllm-apc: a Mamba and a sliding-window group with eagle and cache_blocks set: the "
                               "order in which vLLM places and frees such a request's blocks is not the profile's "
                               "reading (the cross-check: block ids and free-queue order differ, every count "
                               "agrees); the profile defines EAGLE beside both only with an unbounded pool")
    if mamba is not None and (mamba.B != B or any(g.B % mamba.B for g in out)):
        raise PeerProfileError(f"vllm-apc: a Mamba group of {mamba.B}-token blocks beside groups of "
                               f"{', '.join(str(g.B) for g in out if g is not mamba)} (block_size {B}): vLLM then hashes "
                               "finer than a Mamba block and hits inside it (prefix_match_unit); the profile defines "
                               "mamba_block_size equal to block_size, other groups' blocks multiples of it")
    return tuple(out)


def grouped(settings: dict) -> bool:
    """True when the settings name any group but one full-attention group (peer_vllm's pool)."""
    return not settings["full_attention"] or settings["sliding_window"] is not None or \
        settings["mamba_block_size"] is not None


def swa_need(group: Group, eagle: bool) -> int:
    """PEER-VLLM-13: the contiguous blocks a sliding-window hit needs, `ceil((W - 1) / B)`, one
    more under EAGLE's drop (`SlidingWindowManager._contiguous_blocks_for_hit`)."""
    return -(-(group.W - 1) // group.B) + (1 if eagle else 0)


def mamba_checkpoint(n: int, B: int, eagle: bool) -> int:
    """The last block boundary a prefill of n tokens writes a reusable Mamba state at: below
    n - 1 (the last token is computed again on a resend), one block lower under EAGLE's drop
    (kv_cache_interface.py `get_mamba_prefill_checkpoint_position`)."""
    limit = n if eagle else n - 1
    return max(limit // B * B - (B if eagle else 0), 0)


@dataclass
class Table:
    """One group's blocks for a running request: block ids, NULL where skipped or freed; how many
    of them were looked at for caching; Mamba's running-state bookkeeping."""
    blocks: list = field(default_factory=list)
    cached: int = 0
    retired: int = 0
    last_state: int | None = None
    allocated: bool = False


@dataclass
class GroupedRun:
    """A request holding blocks in every group."""
    request: PeerRequest
    seq: list
    keys: list
    n: int
    hit: int
    junction: int
    computed: int
    tables: list

    @property
    def blocks(self) -> list:
        """The first group's table (vLLM's `get_block_ids` of group 0, null blocks as 0)."""
        return list(self.tables[0].blocks)

    def group_blocks(self) -> list:
        return [list(t.blocks) for t in self.tables]


class GroupedPool:
    """The block pool of a model with KV-cache groups (PEER-VLLM-11..16, and PEER-VLLM-5's free
    queue, PEER-VLLM-9's admission, PEER-API-4's reset, over every group's blocks)."""

    def __init__(self, settings: dict, trace=None, lookahead: int = 0):
        self.groups = groups_of(settings)
        self.K, self.caching = settings["cache_blocks"], settings["enable_prefix_caching"]
        self.lookahead = lookahead
        self.eagle = settings["eagle"] and not lookahead
        self.B = settings["block_size"]
        sizes = [g.B for g in self.groups]
        self.hybrid = len(self.groups) > 1
        self.align = lcm(*sizes)
        self.unit = gcd(*sizes)
        self.retention = None if settings["retention_interval"] == "dense" else settings["retention_interval"]
        local = any(g.kind != "full" for g in self.groups)
        if local and self.retention and self.retention % self.align:
            raise PeerProfileError(f"vllm-apc: retention_interval {self.retention} is not a multiple of the hit "
                                   f"alignment {self.align} (lcm of the groups' block sizes): vLLM refuses to start")
        self.mamba = any(g.kind == "mamba" for g in self.groups)
        self.later = version_tuple(settings["vllm_version"]) >= (0, 33)
        self.trace = None
        self._memo = (None, None)
        self.reset()
        self.trace = trace

    # --- state -------------------------------------------------------------------------------------
    def reset(self) -> None:
        self.free = FreeQueue(range(1, (self.K or 0) + 1))
        self.fresh = (self.K or 0) + 1
        self.key_blocks: dict = {}                    # (group, key) -> blocks holding it, first cached first
        self.block_keys: dict = {}                    # block -> the (group, key)s it holds
        self.refs: dict = {}
        self._why: dict = {}                          # traced: (group, key) -> the step that cached it
        if self.trace is not None:
            self.trace.add("PEER-API-4", "reset", True, "the cache was emptied: a fresh pool, no block keyed")

    def free_queue(self) -> list:
        return list(self.free)

    def refuses(self, request: PeerRequest) -> str | None:
        return refuses_empty_salt(request, self.trace)

    def reset_prefix_cache(self) -> bool:
        """PEER-API-4: refused while a request holds a block; else every key dropped."""
        if any(self.refs.values()):
            if self.trace is not None:
                self.trace.add("PEER-API-4", "reset", False, "a reset is refused while a request holds blocks: "
                               "nothing changed")
            return False
        self.key_blocks.clear()
        self.block_keys.clear()
        self._why.clear()
        if self.trace is not None:
            self.trace.add("PEER-API-4", "reset", True, "every key dropped; the free queue keeps its order")
        return True

    # --- keys --------------------------------------------------------------------------------------
    def keys_of(self, request: PeerRequest, ids=None) -> list:
        """The prefix keys of `ids` at the hash unit (the gcd of the groups' block sizes): key j is
        the prefix of (j + 1) units; a group's block i is keyed by the prefix it ends."""
        ids = request.ids if ids is None else ids
        memo, keys = self._memo
        if memo is not request:
            keys = []
            self._memo = (request, keys)
        needed = max(0, (len(ids) - self.lookahead) // self.unit)
        if len(keys) >= needed:
            return keys[:needed]
        return vllm_block_keys(ids, self.unit, request, self.lookahead, keys)

    def _cached(self, g: int, keys: list, i: int) -> bool:
        """Is block i of group g cached: its prefix key is held by the group."""
        end = (i + 1) * self.groups[g].B // self.unit
        return end <= len(keys) and (g, keys[end - 1]) in self.key_blocks

    def _block(self, g: int, keys: list, i: int) -> int:
        return self.key_blocks[(g, keys[(i + 1) * self.groups[g].B // self.unit - 1])][0]

    # --- the lookup (PEER-VLLM-11..14) -------------------------------------------------------------
    def _find(self, g: int, keys: list, max_length: int, drop: bool, align: int) -> int:
        group = self.groups[g]
        B = group.B
        if group.kind == "full":                       # PEER-VLLM-12: the leading run
            k = 0
            while k < max_length // B and self._cached(g, keys, k):
                k += 1
            hit = k * B
            if drop and hit > 0:
                hit -= min(align, B)
            return hit - hit % align
        if group.kind == "mamba":                      # PEER-VLLM-14: the last state ending on a boundary
            for i in range(max_length // B - 1, -1, -1):
                if self._cached(g, keys, i) and ((i + 1) * B) % align == 0:
                    return (i + 1) * B
            return 0
        need = swa_need(group, drop)                   # PEER-VLLM-13: the window's blocks before the hit
        run, found = 0, None
        for i in range(max_length // B - 1, -1, -1):
            if not self._cached(g, keys, i):
                run = 0
                continue
            if run == 0 and B != align and (((i if drop else i + 1) * B) % align):
                continue
            run += 1
            if run >= need:
                found = i + run
                break
        blocks = found if found is not None else run
        if found is None:
            while B != align and blocks * B % align:
                blocks -= 1
        if drop and blocks:
            blocks -= 1
            while B != align and blocks * B % align:
                blocks -= 1
        return blocks * B

    def lookup(self, request: PeerRequest, keys: list) -> tuple[int, int]:
        """(hit tokens, the shared-prefix junction or 0): PEER-VLLM-11's fixed point."""
        max_length = len(request.ids) - 1
        if not self.hybrid:
            return self._find(0, keys, max_length, self.eagle, self.groups[0].B), 0
        hit, longest, verified = max_length, 0, set()
        found: dict = {}
        simple = len(self.groups) == 2 and self.groups[0].kind == "full"
        while True:
            current = hit
            for g, group in enumerate(self.groups):
                if group.kind == "full" and g in found:
                    current = min(current, found[g])
                    continue
                drop = self.eagle and g not in verified
                limit = current
                if drop and group.kind != "mamba":
                    limit = min(current + group.B, len(keys) * self.unit)
                new = self._find(g, keys, limit, drop, self.align)
                if drop:
                    verified.add(g)
                elif new < current:
                    verified.clear()
                current = found[g] = new
                longest = max(longest, current)
            if current >= hit:
                break
            hit = current
            if simple:
                break
        uncached = longest - hit
        return hit, (hit + uncached if uncached else 0)

    def predict(self, request: PeerRequest) -> int:
        return self._hit(request)[0]

    def _hit(self, request: PeerRequest) -> tuple[int, int]:
        if not self.caching or request.skip_prefix_cache:
            if self.trace is not None:
                rule, why = (("PEER-VLLM-6", "prefix caching is off (enable_prefix_caching false): nothing is reused")
                             if not self.caching else ("PEER-VLLM-7", "the request asks for prompt log-probabilities, "
                                                       "so it reads no cached block"))
                self.trace.add(rule, "cached_tokens", 0, why)
            return 0, 0
        keys = self.keys_of(request)
        hit, junction = self.lookup(request, keys)
        if self.trace is not None:
            self._traced_hit(request, keys, hit, junction)
        return hit, junction

    # --- a request through the pool ----------------------------------------------------------------
    def commit(self, request: PeerRequest, sampled) -> None:
        run = self.hold(request, sampled)
        if run is None:
            raise PeerProfileError(f"vllm-apc: a request needs more than cache_blocks={self.K} blocks; "
                                   "the profile does not define what the server does then")
        self.release(run)

    def hold(self, request: PeerRequest, sampled=(), steps=None) -> GroupedRun | None:
        """Admit the request, compute its prompt (in the chunks vLLM's scheduler cuts for Mamba)
        and its fed-back sampled tokens; None, nothing changed, when its first step does not fit.
        `steps` instead names the new tokens of each `allocate_slots` call after the hit, as a
        test that drives the manager without the scheduler makes them (none sampled; what they
        leave uncomputed stays so)."""
        trace, self.trace = self.trace, None
        try:
            hit, junction = self._hit(request)
        finally:
            self.trace = trace
        seq = computed_sequence(request.ids, sampled) if sampled and steps is None else list(request.ids)
        keys = list(self.keys_of(request, seq))
        run = GroupedRun(request, seq, keys, len(request.ids), hit, junction, 0, [Table() for _ in self.groups])
        if junction and self.trace is not None:
            self.trace.add("PEER-VLLM-16", "junction", junction, f"a group could serve {junction} tokens, more than "
                           f"the {hit} every group serves: the request keeps its window tails and Mamba state at "
                           f"{junction} too, for the next request that shares them")
        if steps is not None:
            return self._driven(run, steps)
        start, first = hit, True
        while start < run.n or first:
            end = self._chunk_end(run, start) if start < run.n else start
            if not self._step(run, start, end - start, first):
                if first:
                    return None
                raise PeerProfileError(f"vllm-apc: a request's prefill needs more than cache_blocks={self.K} blocks")
            first, start = False, end
            if start >= run.n:
                break
        for _ in range(len(sampled) - 1):
            if not self._step(run, run.computed, 1, False):
                raise PeerProfileError(f"vllm-apc: a decode step needs more than cache_blocks={self.K} blocks; "
                                       "the profile does not define what the server does then")
        return run

    def _driven(self, run: GroupedRun, steps) -> GroupedRun | None:
        """The prefill as the given `allocate_slots` calls compute it (new tokens each)."""
        start = run.hit
        for k, new in enumerate(steps):
            if new < 0 or start + new > run.n:
                raise PeerProfileError(f"vllm-apc: allocate_slots of {new} new tokens after {start} computed, for a "
                                       f"prompt of {run.n}")
            if not self._step(run, start, new, k == 0):
                if k == 0:
                    return None
                raise PeerProfileError(f"vllm-apc: a request's prefill needs more than cache_blocks={self.K} blocks")
            start += new
        return run

    def lookup_blocks(self, request: PeerRequest) -> tuple[int, int, list]:
        """What `get_computed_blocks` returns for the request now: the hit, the shared-prefix
        junction, and each group's hit blocks (null blocks as 0) - changing nothing."""
        hit, junction = self._hit(request)
        keys = self.keys_of(request)
        run = GroupedRun(request, list(request.ids), keys, len(request.ids), hit, junction, 0, [])
        return hit, junction, self._hit_blocks(run)

    def first_step_end(self, request: PeerRequest) -> int:
        """Where the scheduler ends the request's first prefill step (PEER-VLLM-14's split)."""
        hit, junction = self._hit(request)
        run = GroupedRun(request, list(request.ids), [], len(request.ids), hit, junction, hit, [])
        return self._chunk_end(run, hit) if hit < run.n else hit

    def kept(self, request: PeerRequest, g: int) -> list:
        """The hash units i of the request's prompt whose key group g holds (vLLM's
        `get_cached_block(block_hashes[i], [g])` is not None): PEER-VLLM-12 and -15."""
        keys = self.keys_of(request)
        return [i for i, key in enumerate(keys) if (g, key) in self.key_blocks]

    def _chunk_end(self, run: GroupedRun, start: int) -> int:
        """Where the scheduler ends a prefill chunk: with a Mamba group, at the last block boundary
        below N - 1 and at the shared-prefix junction, floored to a block (PEER-VLLM-14; sched/
        scheduler.py `_mamba_block_aligned_split`); else the whole prompt in one step."""
        end = run.n
        if not self.mamba:
            return end
        B = self.B
        stops = [mamba_checkpoint(run.n, B, self.eagle)]
        if start % B:
            stops.append((start // B + 1) * B)
        if start < run.junction < end:
            stops.append(start + (run.junction - start) // B * B)
        return min((s for s in stops if start < s < end), default=end)

    def _step(self, run: GroupedRun, start: int, new: int, first: bool) -> bool:
        """One `allocate_slots`: free what no longer counts, check room, touch the hits, take new
        blocks group by group, cache what each group's mask keeps."""
        computed = start
        for g in range(len(self.groups)):
            self._skip(run, g, computed)
        hits = self._hit_blocks(run) if first else None
        end = computed + new
        if self.K is not None:
            need = sum(self._to_allocate(run, g, end, hits[g] if hits else None) for g in range(len(self.groups)))
            if need > len(self.free):
                if first and self.trace is not None:
                    self.trace.add("PEER-VLLM-9", "admitted", False, f"its first step needs {need} blocks of the "
                                   f"{len(self.free)} free (every group's): it waits, and nothing changes")
                return False
        if hits is not None:
            for g, table in enumerate(run.tables):
                self._adopt(run, g, table, hits[g])
        for g in range(len(self.groups)):
            self._allocate(run, g, end)
        run.computed = end
        if self.caching:
            for g in range(len(self.groups)):
                self._cache(run, g, self._cacheable(g, end))
        return True

    def _hit_blocks(self, run: GroupedRun) -> list:
        """Each group's blocks of the hit, as vLLM's coordinator hands them to the request."""
        out = []
        for g, group in enumerate(self.groups):
            count = run.hit // group.B
            if not run.hit:
                out.append([])
            elif group.kind == "full":
                out.append([self._block(g, run.keys, i) for i in range(count)])
            elif group.kind == "mamba":
                out.append([NULL] * (count - 1) + [self._block(g, run.keys, count - 1)])
            else:
                need = swa_need(group, False)
                first = max(0, count - need)
                out.append([NULL] * first + [self._block(g, run.keys, i) for i in range(first, count)])
        return out

    def _skipped(self, g: int, computed: int) -> int:
        group = self.groups[g]
        if group.kind == "swa":
            return max(0, computed - group.W + 1)
        return computed - 1 if group.kind == "mamba" else 0

    def _to_allocate(self, run: GroupedRun, g: int, end: int, hit: list | None) -> int:
        """`get_num_blocks_to_allocate` of one group: new blocks, plus hit blocks sitting free."""
        group, table = self.groups[g], run.tables[g]
        hit = hit or []
        if group.kind == "mamba":
            new = -(-end // group.B) - len(hit) - len(table.blocks)
            new = min(new, 1) if new > 0 else new
            return new + sum(1 for b in hit if b != NULL and self.refs.get(b, 0) == 0)
        required = -(-end // group.B)
        if run.tables[g].cached or table.blocks and not hit:
            return max(required - len(table.blocks), 0)
        skipped = self._skipped(g, run.computed + run.hit if hit else run.computed) // group.B
        local = len(hit) + len(table.blocks)
        new = max(required - max(skipped, local), 0)
        skip_new = max(0, skipped - len(table.blocks))
        return new + sum(1 for b in hit[skip_new:] if b != NULL and self.refs.get(b, 0) == 0)

    def _adopt(self, run: GroupedRun, g: int, table: Table, hit: list) -> None:
        """`add_local_computed_blocks`: the hit blocks the window still needs are touched (out of
        the free queue when free); those before it are null."""
        skipped = self._skipped(g, run.hit) // self.groups[g].B
        kept = hit[skipped:]
        for block in kept:
            if block == NULL:
                continue
            held = self.refs.get(block, 0)
            if held == 0 and block in self.free:
                self.free.remove(block)
            self.refs[block] = held + 1
        table.blocks = [NULL] * min(skipped, len(hit)) + kept
        table.cached = len(table.blocks)

    def _take(self, count: int) -> list:
        out = []
        for _ in range(count):
            if self.K is None:
                block, self.fresh = self.fresh, self.fresh + 1
            else:
                if not self.free:
                    raise PeerProfileError(f"vllm-apc: a request needs more than cache_blocks={self.K} blocks; the "
                                           "profile does not define what the server does then")
                block = self.free.popleft()
                for key in self.block_keys.pop(block, ()):        # PEER-VLLM-5: eviction drops its keys
                    holders = self.key_blocks[key]
                    holders.remove(block)
                    if not holders:
                        del self.key_blocks[key]
            self.refs[block] = 1
            out.append(block)
        return out

    def _allocate(self, run: GroupedRun, g: int, end: int) -> None:
        group, table = self.groups[g], run.tables[g]
        required = -(-end // group.B)
        if group.kind != "mamba":
            table.blocks += self._take(max(0, required - len(table.blocks)))
            return
        if required <= len(table.blocks):              # Mamba keeps one running state block
            table.allocated = True
            return
        previous = len(table.blocks)
        if table.allocated or previous > 0:
            table.last_state = previous - 1
        if previous < required - 1:
            table.blocks += [NULL] * (required - 1 - previous)
        table.blocks += self._take(required - len(table.blocks))
        table.allocated = True

    def _skip(self, run: GroupedRun, g: int, computed: int) -> None:
        """`remove_skipped_blocks`: a sliding window frees the blocks before it, Mamba every state
        but the running one (freed blocks join the free queue by PEER-VLLM-5)."""
        group, table = self.groups[g], run.tables[g]
        if group.kind == "full":
            return
        skipped = self._skipped(g, computed)
        if skipped > 0:
            last = min(skipped // group.B, len(table.blocks))
            freed = []
            if group.kind == "swa":
                for i in range(last - 1, -1, -1):
                    if table.blocks[i] == NULL:
                        break
                    freed.append(table.blocks[i])
                    table.blocks[i] = NULL
            elif max(0, table.retired) < last:
                for i in range(last - 1, table.retired - 1, -1):
                    if table.blocks[i] != NULL:
                        freed.append(table.blocks[i])
                        table.blocks[i] = NULL
                table.retired = last
            self._free(freed)
        if group.kind == "mamba" and table.last_state is not None and \
                table.last_state < -(-computed // group.B) - 1 and table.blocks[table.last_state] != NULL:
            self._free([table.blocks[table.last_state]])
            table.blocks[table.last_state] = NULL

    def _free(self, blocks: list) -> None:
        """`BlockPool.free_blocks`: in the given order, blocks without a key to the head of the free
        queue, blocks with one to the tail."""
        first, last = [], []
        for block in blocks:
            if block == NULL:
                continue
            self.refs[block] -= 1
            if self.refs[block] == 0 and self.K is not None:
                (last if block in self.block_keys else first).append(block)
        self.free.prepend(first)
        for block in last:
            self.free.append(block)

    def release(self, run: GroupedRun) -> None:
        """The request's blocks freed group by group, each group's last block first."""
        for table in run.tables:
            self._free(list(reversed(table.blocks)))
            table.blocks = []

    # --- caching (PEER-VLLM-15, -16) -----------------------------------------------------------------
    def _cacheable(self, g: int, computed: int) -> int:
        """The prefix a group may cache: hybrid groups to the hit alignment, one block past it
        under EAGLE's drop (`HybridKVCacheCoordinator.get_num_cacheable_tokens`)."""
        if not self.hybrid:
            return computed
        aligned = computed // self.align * self.align
        if self.eagle and aligned > 0:
            return min(computed, aligned + self.groups[g].B)
        return aligned

    def _boundaries(self, run: GroupedRun) -> list:
        """Where a later request can resume (`replay_boundaries`), and the junction."""
        align = self.align if self.hybrid else self.groups[0].B
        if not self.eagle:
            out = [run.n - 1]
        else:
            resend, extension = (run.n - 1) // align * align, run.n // align * align
            out = sorted({max(resend - align, 0), max(extension - align, 0)})
        return out + ([run.junction] if run.junction else [])

    def _group_boundaries(self, g: int, run: GroupedRun) -> list:
        """0.33.0 also keeps, under EAGLE's drop, the tail one block below the junction (a sibling
        that diverges right after it cannot use the block past it as EAGLE's peek)."""
        out = self._boundaries(run)
        if self.later and self.eagle and run.junction:
            out.append(run.junction - self.groups[g].B)
        return out

    def _mask(self, g: int, start: int, end: int, boundaries: list) -> list | None:
        """PEER-VLLM-15: which of blocks start..end - 1 a sliding-window or Mamba group caches (None:
        all), by the retention interval and the reachable boundaries."""
        group = self.groups[g]
        align = self.align if self.hybrid else group.B
        B, R = group.B, self.retention
        if group.kind == "full":
            return None
        if group.kind == "mamba":
            if R is None:
                return None
            mask = [False] * (end - start)
            if R:
                per = R // B
                if per <= 1:
                    return None
                for i in range((start + per) // per * per - 1 - start, len(mask), per):
                    mask[i] = True
            for b in boundaries:
                block = b // align * align // B - 1
                if start <= block < end:
                    mask[block - start] = True
            return mask
        if align % B:
            return None
        need, shift = swa_need(group, self.eagle), (1 if self.eagle else 0)
        mask = [False] * (end - start)
        segment = align if R is None else (R or None)
        if segment is not None:
            per = segment // B
            if need >= per:
                return None
            for i in range(start, end):
                if i >= shift and (i - shift) % per >= per - need:
                    mask[i - start] = True
        if R is not None:
            for b in boundaries:
                tail_end = b // align * align // B + shift
                for j in range(max(start, tail_end - need), min(end, tail_end)):
                    mask[j - start] = True
        return mask

    def _cache(self, run: GroupedRun, g: int, tokens: int) -> None:
        """`cache_blocks`: the group's blocks that became full, kept by its mask and not null,
        are keyed; a block that holds a key already (a partial prompt tail) gets the full one."""
        group, table = self.groups[g], run.tables[g]
        full = tokens // group.B
        if self.lookahead:                             # 0.33.0: no block beyond the request's keys
            full = min(tokens, self._keyed_tokens(run)) // group.B
        if table.cached < full:
            mask = self._mask(g, table.cached, full, self._group_boundaries(g, run))
            kept = []
            for i in range(table.cached, full):
                block = table.blocks[i]
                if block == NULL or (mask is not None and not mask[i - table.cached]):
                    continue
                self._key(block, (g, run.keys[(i + 1) * group.B // self.unit - 1]), replace=True)
                kept.append(i)
            if self.trace is not None:
                self._traced_cache(run, g, table.cached, full, kept)
            table.cached = full
        if group.kind == "full" and group.B != self.unit:
            self._partial_tail(run, g, tokens)

    def _partial_tail(self, run: GroupedRun, g: int, tokens: int) -> None:
        """Full attention with blocks larger than the hash unit also keys the prompt's last hash
        boundary inside its block (`FullAttentionManager._cache_partial_tail_block`): no lookup
        here asks for it, but the block then holds a key when it is freed (PEER-VLLM-5)."""
        group = self.groups[g]
        limit = run.n if self.eagle else run.n - 1
        units = limit // self.unit
        if self.later:
            units = min(units, self._keyed_tokens(run) // self.unit)
        boundary = units * self.unit
        if boundary == 0 or boundary > tokens or boundary % group.B == 0:
            return
        index = boundary // group.B
        table = run.tables[g]
        if index < len(table.blocks) and table.blocks[index] != NULL:
            self._key(table.blocks[index], (g, ("partial", run.keys[boundary // self.unit - 1])), replace=False)

    def _keyed_tokens(self, run: GroupedRun) -> int:
        """The tokens the request's keys cover: its keys need `lookahead` ids past them."""
        tokens = max(run.n, run.computed)
        return (tokens - self.lookahead) // self.unit * self.unit

    def _key(self, block: int, key: tuple, replace: bool) -> None:
        held = self.block_keys.get(block)
        if held is not None and key in held:
            return
        if held and replace:                           # a partial entry promoted to the full block's
            for old in held:
                holders = self.key_blocks[old]
                holders.remove(block)
                if not holders:
                    del self.key_blocks[old]
            held = None
        if held is None:
            held = self.block_keys[block] = []
        held.append(key)
        self.key_blocks.setdefault(key, []).append(block)

    # --- the trace -----------------------------------------------------------------------------------
    def _traced_cache(self, run: GroupedRun, g: int, lo: int, hi: int, kept: list) -> None:
        """PEER-VLLM-12 (full attention) or PEER-VLLM-15 (the mask of a window or Mamba group): which
        of the blocks that became full the group keyed."""
        group = self.groups[g]
        rule = "PEER-VLLM-12" if group.kind == "full" else "PEER-VLLM-15"
        dropped = hi - lo - len(kept)
        why = (f"{group.describe()}: blocks {lo}-{hi - 1} became full, "
               + (f"{len(kept)} keyed ({', '.join(map(str, kept[:8]))}{', ...' if len(kept) > 8 else ''})"
                  if kept else "none keyed")
               + (f", {dropped} left unkeyed (freed by the window, or not a tail the retention interval "
                  f"{'dense' if self.retention is None else self.retention} keeps)" if dropped else ""))
        step = self.trace.add(rule, "cached", len(kept), why)
        for i in kept:
            self._why[(g, run.keys[(i + 1) * group.B // self.unit - 1])] = step

    def _traced_hit(self, request: PeerRequest, keys: list, hit: int, junction: int) -> None:
        """The lookup's steps: each group's own reach (citing the step that cached its last block),
        then the count every group can serve."""
        tr = self.trace
        reach = []
        for g, group in enumerate(self.groups):
            alone = self._find(g, keys, len(request.ids) - 1, self.eagle,
                               self.align if self.hybrid else group.B)
            origin = self._why.get((g, keys[alone // self.unit - 1])) if alone else None
            rule = {"full": "PEER-VLLM-12", "swa": "PEER-VLLM-13", "mamba": "PEER-VLLM-14"}[group.kind]
            why = {"full": "its leading run of cached blocks",
                   "swa": f"the {swa_need(group, self.eagle)} block(s) of {group.B} tokens its window of {group.W} "
                          "needs, cached right before the hit point",
                   "mamba": "the cached state block that ends at the hit point"}[group.kind]
            causes = ((origin,) if origin is not None else ()) + tr.background(alone > 0)
            reach.append(tr.add(rule, "group_hit", alone, f"{group.describe()} alone serves {alone} tokens: {why}"
                                + keyed(request), causes=causes))
        n = len(request.ids)
        why = (f"c = the longest prefix every group serves, a multiple of {self.align} (lcm of the block sizes "
               f"{', '.join(str(g.B) for g in self.groups)}), at most N - 1 = {n - 1}: {hit}"
               if self.hybrid else f"c = what the one group serves, at most N - 1 = {n - 1}: {hit}")
        if junction:
            why += (f"; the groups disagree beyond it: the shared prefix of {junction} tokens is this request's "
                    "junction, cached by it for the next (PEER-VLLM-16)")
        tr.add("PEER-VLLM-11", "cached_tokens", hit, why, causes=reach)
