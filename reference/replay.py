"""Replaying traffic through one profile's cache at one capacity, and what is summed
(spec/trace-replay.md sections 3 and 4: SIM-ORDER-1, SIM-CAP-1, SIM-CAP-2, SIM-SUM-1). Stdlib only.

    profile = TrafficProfile.make("vllm-apc", {"block_size": 16})
    replayer = profile.replayer(units=1000, requests=traffic)       # 1000 blocks; None: unbounded
    summary, counts = replay(traffic, replayer)

Every count comes from the profile's own simulator, unchanged: the Edge-LLM profiles run
`BatchRunner` (reference/batching.py) on a one-request batch, the peer profiles their pools
(reference/peer_*.py), except `vllm-apc`, whose pool for one request at a time is
reference/replay_vllm.py (the oracle's rules on lists of block ids and integer keys, checked
against `VllmBlockPool` block by block). What this module adds is only what the trace does not
say: which pool, which tokens, one request at a time, and what is summed. The adapters that let
those simulators run on keys instead of tokens and at real pool sizes are reference/replay_adapters.py.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from .batching import BatchFailed, BatchRunner
from .capacity import PAGES, ContextCache
from .engine import MAX_POOL_PAGES, EngineConfig, RuntimeFlags
from .metrics import Metrics, PrefillStats
from .peer_common import PeerProfileError, computed_sequence
from .peer_llama import LlamaSlots
from .peer_sglang import RadixCache
from .peer_trtllm import TrtllmBlockPool, trtllm_cached
from .peer_trtllm_keys import DEFAULT_PRIORITY
from .peer_vllm import lookahead_tokens
from .peer_vllm_groups import grouped
from .peer_vllm_keys import vllm_block_keys
from .peers import PROFILES as PEER_PROFILES, check_settings
from .replay_adapters import EdgeLlmRequest, FreeQueue, KeyedEdgeLlmRequest, peer_request
from .replay_vllm import ReplayVllmPool
from .requests import COMMIT_POLICIES
from .semantics import PROFILE_NAMES

EDGE_LLM_SETTINGS = {"tokens_per_page": 128, "max_records": 1024, "commit_policy": "including_generated_tokens"}
"""The settings of a semantics profile replayed on traffic, with their defaults: Edge-LLM's page
size (spec/engine.md `tokensPerPage`), record limit (`--contextCacheMaxRecords`) and the
requests' commit policy (spec/context-reuse.md section 5). The engine is attention-only, batch
size 1."""

UNIT_SETTING = {"vllm-apc": "block_size", "sglang-radix": "page_size", "trtllm-kv-reuse": "tokens_per_block"}
"""SIM-CAP-1: the setting that sizes a profile's unit (Edge-LLM profiles: tokens_per_page)."""
POOL_SETTING = {"vllm-apc": "cache_blocks", "sglang-radix": "pool_tokens", "trtllm-kv-reuse": "max_blocks"}
"""SIM-CAP-1: the setting a capacity sets (Edge-LLM profiles: the engine's kv_pool_pages)."""
PROFILES = tuple(PROFILE_NAMES) + tuple(PEER_PROFILES)
UNREPLAYED = {"trtllm-kv-reuse": {"max_attention_window": "PEER-TRT-7"},
              "llama.cpp-server": {"cache_reuse": "PEER-LCPP-7", "context_shift": "PEER-LCPP-9",
                                   "n_ctx": "PEER-LCPP-8"}}
"""SIM-CAP-1: peer settings the replay does not model, refused unless at their default (vllm-apc's
KV-cache groups and sglang-radix's window, Mamba and EAGLE are refused above)."""


class TrafficProfileError(ValueError):
    """An unknown profile or setting, a bad value, or a capacity the profile cannot take."""


@dataclass(frozen=True)
class TrafficProfile:
    """A profile and its settings, defaults filled in. `label` is how the user wrote it."""
    name: str
    settings: dict
    label: str

    @staticmethod
    def make(name: str, settings: dict | None = None, label: str | None = None) -> "TrafficProfile":
        settings = dict(settings or {})
        if name in PROFILE_NAMES:
            out = dict(EDGE_LLM_SETTINGS)
            for key, value in settings.items():
                if key not in out:
                    raise TrafficProfileError(f"{name} has no setting {key!r} (settings: {', '.join(out)})")
                out[key] = value
            for key in ("tokens_per_page", "max_records"):
                low = 1 if key == "tokens_per_page" else 0
                if type(out[key]) is not int or out[key] < low:
                    raise TrafficProfileError(f"{name} setting {key} must be an integer >= {low}, got {out[key]!r}")
            if out["commit_policy"] not in COMMIT_POLICIES:
                raise TrafficProfileError(f"{name} setting commit_policy must be one of {', '.join(COMMIT_POLICIES)}, "
                                          f"got {out['commit_policy']!r}")
        elif name in PEER_PROFILES:
            try:
                out = check_settings(name, settings)
            except PeerProfileError as e:
                raise TrafficProfileError(str(e)) from None
            if name == "vllm-apc" and (grouped(out) or lookahead_tokens(out)):      # SIM-CAP-1
                raise TrafficProfileError(
                    "the replay runs vllm-apc as one full-attention group with unshifted "
                    "block keys; KV-cache groups (full_attention false, sliding_window, mamba_block_size: "
                    "PEER-VLLM-11) and EAGLE's lookahead keys (eagle with vllm_version >= 0.33.0: PEER-VLLM-10) "
                    "are not replayed")
            if name == "sglang-radix" and (out.get("sliding_window") is not None or out.get("mamba")
                                           or out.get("eagle")):                           # SIM-CAP-1
                raise TrafficProfileError(
                    "the replay runs sglang-radix as one full-attention radix tree of token ids; a sliding "
                    "window or Mamba layers (PEER-SGL-10..13) and EAGLE's bigram keys (PEER-SGL-9) are not "
                    "replayed")
            defaults = check_settings(name, {})
            for key in UNREPLAYED.get(name, ()):                                                # SIM-CAP-1
                if out[key] != defaults[key]:
                    raise TrafficProfileError(f"the replay does not model {name}'s {key} ({UNREPLAYED[name][key]}): "
                                              f"give it its default ({defaults[key]!r}) or leave it out")
        else:
            raise TrafficProfileError(f"unknown profile {name!r} (one of {', '.join(PROFILES)})")
        return TrafficProfile(name, out, label or name)

    @property
    def edge_llm(self) -> bool:
        return self.name in PROFILE_NAMES

    @property
    def unit(self) -> int:
        """SIM-CAP-1: tokens per unit of the pool (1 for sglang-radix's pool of tokens, 0 for
        llama.cpp-server, which has no pool in tokens)."""
        if self.edge_llm:
            return self.settings["tokens_per_page"]
        if self.name == "sglang-radix":
            return 1
        return self.settings.get(UNIT_SETTING.get(self.name), 0)

    @property
    def page(self) -> int:
        """The profile's page, block or slot size in tokens (what `--capacity-unit pages` counts)."""
        if self.name == "sglang-radix":
            return self.settings["page_size"]
        return self.unit

    def pool_units(self, capacity: int | None, unit: str = "tokens") -> int | None:
        """SIM-CAP-1: the pool, in the profile's units, of a capacity in tokens or pages (None:
        unbounded). A profile whose settings already size the pool takes no capacity."""
        if self.name == "llama.cpp-server":
            if capacity is not None:
                raise TrafficProfileError("llama.cpp-server has no pool in tokens (its cache is `slots` sequences, "
                                          "PEER-LCPP-6): it takes only --capacity inf")
            return None
        own = None if self.edge_llm else self.settings[POOL_SETTING[self.name]]
        if capacity is None:
            return own
        if own is not None:
            raise TrafficProfileError(f"{self.label} sets {POOL_SETTING[self.name]} already: drop it or --capacity")
        tokens = capacity * self.page if unit == "pages" else capacity
        return tokens // self.unit

    def replayer(self, units: int | None, requests=()) -> "Replayer":
        """A fresh cache of this profile with a pool of `units` (None: unbounded). `requests`
        (the traffic) sizes the Edge-LLM engine's length limits so that no request fails them."""
        if self.edge_llm:
            return EdgeLlmReplayer(self, units, requests)
        return {"vllm-apc": VllmReplayer, "sglang-radix": SglangReplayer, "trtllm-kv-reuse": TrtllmReplayer,
                "llama.cpp-server": LlamaReplayer}[self.name](self, units)


# --- what is counted (SIM-SUM-1) -----------------------------------------------------------------

@dataclass
class Summary:
    """SIM-SUM-1 for one profile at one capacity."""
    requests: int = 0
    not_admitted: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0
    hit_requests: int = 0
    request_ratio_sum: float = 0.0
    evictions: int | None = 0
    eviction_unit: str = ""
    evicted_tokens: int | None = 0
    seconds: float = 0.0
    notes: dict = field(default_factory=dict)

    @property
    def hit_ratio_tokens(self) -> float:
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def hit_ratio_requests(self) -> float:
        return self.hit_requests / self.requests if self.requests else 0.0

    @property
    def mean_request_ratio(self) -> float:
        """The mean over requests of each one's count / n (a short request weighs as a long one)."""
        return self.request_ratio_sum / self.requests if self.requests else 0.0

    def as_dict(self) -> dict:
        return {"requests": self.requests, "not_admitted": self.not_admitted, "prompt_tokens": self.prompt_tokens,
                "reused_tokens": self.reused_tokens, "hit_requests": self.hit_requests,
                "hit_ratio_tokens": self.hit_ratio_tokens, "hit_ratio_requests": self.hit_ratio_requests,
                "mean_request_ratio": self.mean_request_ratio,
                "evictions": self.evictions, "eviction_unit": self.eviction_unit,
                "evicted_tokens": self.evicted_tokens, "seconds": self.seconds, **self.notes}


def replay(requests, replayer: "Replayer", counts: bool = False) -> tuple[Summary, list | None]:
    """SIM-ORDER-1: run the requests one at a time, in the order given (the caller sorted them
    by timestamp), each to its end. Returns the summary (SIM-SUM-1) and, with `counts`, each
    request's count (None where it was not admitted, SIM-CAP-2)."""
    s = Summary(eviction_unit=replayer.eviction_unit)
    out = [] if counts else None
    start = time.perf_counter()
    for r in requests:
        c = replayer.run(r)
        s.requests += 1
        s.prompt_tokens += r.n
        if c is None:
            s.not_admitted += 1
        else:
            s.reused_tokens += c
            s.hit_requests += c > 0
            s.request_ratio_sum += c / r.n
        if out is not None:
            out.append(c)
    s.seconds = time.perf_counter() - start
    s.evictions, s.evicted_tokens = replayer.evictions()
    s.notes.update(replayer.notes())
    return s, out


class Replayer:
    """One profile's cache at one capacity. `run(request)` replays one request to its end and
    returns its count (SIM-SUM-1), or None when the pool cannot hold it (SIM-CAP-2)."""
    eviction_unit = ""

    def run(self, request) -> int | None:
        raise NotImplementedError

    def evictions(self) -> tuple[int | None, int | None]:
        """(evictions in the profile's unit, the tokens they held)."""
        return 0, 0

    def notes(self) -> dict:
        return {}


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


# --- the Edge-LLM profiles (spec/context-reuse.md) ----------------------------------------------

@dataclass
class _Policies:
    """The file-level policies BatchRunner reads from a parsed request file."""
    lookup_policy: str = "use_cache"
    commit_policy: str = "including_generated_tokens"


class EdgeLlmReplayer(Replayer):
    """`kvconform-1` / `edge-llm-0.10` on an attention-only engine: pool `units` pages of
    `tokens_per_page` (None: the largest pool, 2^30 - 1 pages), record limit `max_records`,
    batch size 1, every request `use_cache` with the profile's commit policy. Each request is
    one batch through BatchRunner (reference/batching.py), which decides every count (SIM-SUM-1)."""
    eviction_unit = "records"

    def __init__(self, profile: TrafficProfile, units: int | None, requests=()):
        s = profile.settings
        self.P = s["tokens_per_page"]
        self.pages = MAX_POOL_PAGES if units is None else units
        longest = max((r.n for r in requests), default=1)
        total = max((r.n + r.output for r in requests), default=2)
        engine = EngineConfig(tokens_per_page=self.P, max_input_len=longest, max_kv_cache_capacity=max(total, longest + 1),
                              max_batch_size=1, kv_pool_pages=self.pages, kv_cache_dtype="fp16",
                              layer_kinds=["attention"], num_kv_heads=1, head_dim=1)
        flags = RuntimeFlags(enable_context_reuse=True, max_records=s["max_records"],
                             semantics_profile=profile.name)
        self.cache = ContextCache(self.pages, 0, 0, flags.max_records)
        self.runner = BatchRunner(engine, flags, self.cache, Metrics(), PrefillStats())
        self.policies = _Policies(commit_policy=s["commit_policy"])
        self.failed = 0

    def run(self, request) -> int | None:
        g = request.output
        if _ceil(request.n + g - 1, self.P) > self.pages:                  # SIM-CAP-2
            return None
        wrapped = (KeyedEdgeLlmRequest if request.keyed else EdgeLlmRequest)(request, request.index)
        try:
            seqs = self.runner.run([wrapped], self.policies, [request.sampled_tokens()], g)
        except BatchFailed:                  # not reached when the pool holds the request (SIM-CAP-2)
            self.failed += 1
            return None
        return seqs[0].plan.reused

    def evictions(self):
        return self.cache.evicted, self.cache.reclaimed[PAGES] * self.P

    def notes(self) -> dict:
        out = {"evicted_pages": self.cache.reclaimed[PAGES]}
        if self.failed:
            out["failed_batches"] = self.failed
        return out


# --- vllm-apc (spec/peer-profiles.md section 3) --------------------------------------------------

class VllmReplayer(Replayer):
    """`vllm-apc` with `cache_blocks` = `units` (spec/peer-profiles.md section 3), one request at a
    time on `ReplayVllmPool` (reference/replay_vllm.py): the count is B times the hits the request
    is admitted with. A hash-id request's block keys are its page keys (SIM-KEY-2), then a key of
    its own for each block a sampled token completes (SIM-GEN-1); a token request's are vLLM's
    hash chain over its computed sequence (PEER-VLLM-1, -2: `vllm_block_keys`)."""
    eviction_unit = "blocks"

    def __init__(self, profile: TrafficProfile, units: int | None):
        s = profile.settings
        self.B, self.K = s["block_size"], units
        self.pool = ReplayVllmPool(self.B, units, s["enable_prefix_caching"], s["eagle"])

    def run(self, request) -> int | None:
        n, g, B = request.n, request.output, self.B
        if self.K is not None and _ceil(n + g - 1, B) > self.K:             # SIM-CAP-2
            return None
        return B * self.pool.run(self.keys(request) if self.pool.caching else [], n, g)

    def keys(self, request) -> list:
        """The keys of the request's full blocks over its n + g - 1 computed tokens."""
        B, full = self.B, (request.n + max(0, request.output - 1)) // self.B
        if request.keyed:
            keys = request.page_keys(B)
            keys += map(request.new_key, range(len(keys), full))
            return keys
        peer = peer_request(request)
        return vllm_block_keys(computed_sequence(peer.ids, request.sampled_tokens()), B, peer)

    def evictions(self):
        return self.pool.evicted, self.pool.evicted * self.B


# --- sglang-radix and trtllm-kv-reuse (token by token), llama.cpp-server --------------------------

class SglangReplayer(Replayer):
    """`sglang-radix` with `pool_tokens` = `units` (spec/peer-profiles.md section 4) on token ids
    (SIM-KEY-1): the count is the tree's `predict`, then `commit`. Evictions are the tokens its
    `evict` frees, counted as it returns."""
    eviction_unit = "tokens"

    def __init__(self, profile: TrafficProfile, units: int | None):
        s = profile.settings
        self.pool = RadixCache(s["page_size"], units, s["radix_cache"], version=s["version"])
        self.units, self.evicted = units, 0
        evict = self.pool.evict

        def counted(*args, **kwargs) -> int:
            freed = evict(*args, **kwargs)
            self.evicted += freed
            return freed
        self.pool.evict = counted

    def run(self, request) -> int | None:
        if self.units is not None and request.n + request.output - 1 > self.units:     # SIM-CAP-2
            return None
        peer = peer_request(request)
        cached = self.pool.predict(peer)
        self.pool.commit(peer, request.sampled_tokens())
        return cached

    def evictions(self):
        return self.evicted, self.evicted


class TrtllmReplayer(Replayer):
    """`trtllm-kv-reuse` with `max_blocks` = `units` (spec/peer-profiles.md section 5) on token ids
    (SIM-KEY-1), its free queue a `FreeQueue`: the count is `trtllm_cached` of the pool's
    `predict`, then `commit`. Evictions are the blocks that leave the tree when a block is taken
    from the queue, counted as `detach` meets them (SIM-SUM-1)."""
    eviction_unit = "blocks"

    def __init__(self, profile: TrafficProfile, units: int | None):
        s = profile.settings
        self.T, self.K = s["tokens_per_block"], units
        self.pool = TrtllmBlockPool(self.T, s["enable_block_reuse"], s["enable_partial_reuse"],
                                    s["copy_on_partial_reuse"], units)
        window = self.pool.main                     # one window: full attention, one free queue
        if units is not None:
            window.queues = {DEFAULT_PRIORITY: FreeQueue(units, first=0)}
        self.evicted, self.evicted_tokens, self._taking = 0, 0, False
        take, detach = window.take, window.detach

        def taking(*args, **kwargs) -> int:
            self._taking = True
            try:
                return take(*args, **kwargs)
            finally:
                self._taking = False

        def counted(b: int, *args, **kwargs) -> None:
            block = self.pool.blocks[b]
            if self._taking and block.parent is not None:
                self.evicted += 1
                self.evicted_tokens += len(block.key.tokens)
            detach(b, *args, **kwargs)
        window.take, window.detach = taking, counted

    def run(self, request) -> int | None:
        n, g = request.n, request.output
        if self.K is not None and _ceil(n + g, self.T) > self.K:             # SIM-CAP-2
            return None
        peer = peer_request(request)
        cached = trtllm_cached(self.pool.predict(peer), n)
        self.pool.commit(peer, request.sampled_tokens())
        return cached

    def evictions(self):
        return self.evicted, self.evicted_tokens


class LlamaReplayer(Replayer):
    """`llama.cpp-server` (spec/peer-profiles.md section 2): `slots` sequences, no pool in tokens."""
    eviction_unit = "none"

    def __init__(self, profile: TrafficProfile, units: int | None):
        s = profile.settings
        try:
            self.slots = LlamaSlots(s["slots"], s["slot_prompt_similarity"], s["cache_ram_mib"])
        except PeerProfileError as e:
            raise TrafficProfileError(str(e)) from None

    def run(self, request) -> int | None:
        peer = peer_request(request)
        cached = self.slots.predict(peer)
        self.slots.commit(peer, request.sampled_tokens())
        return cached

    def evictions(self):
        return None, None
