"""Drive SGLang's own radix cache with the kit's request streams (docs/crosscheck.md).

Run by the interpreter of a venv that holds SGLang (tools/crosscheck/install.sh); imports only
SGLang, torch and the standard library, never the kit. Reads one JSON command a line on stdin and
answers one JSON line on stdout:

    {"stream": {...}}   the observations of every step: {"id", "observations": [...]}
    {"time": {...}}     the seconds the cache classes spend on the stream, observations unkept
    {"quit": true}

The first line it writes names the runtime and version. A stream is the kit's (parity peer
scenario steps, conformance/crosscheck/streams.py); settings `page_size`, `pool_tokens` (None:
a pool no stream fills), `eagle` (the tree keyed by bigrams: CacheInitParams `is_eagle`, as an
EAGLE server builds it; its decode steps still go through `alloc_for_decode_default`, so only
unbounded pools are compared). The environment's KVCONFORM_SGLANG_CACHE names the class driven:
`radix` (the default: RadixCache, the class SGLang's own radix unit tests drive) or `unified`
(UnifiedRadixCache with its Full component and the default tree core, the class a 0.5.23 server
builds for a full-attention model: mem_cache/registry.py `create_unified_radix_cache`;
SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND picks the core, `rust` by default). The first line names it.

A stream whose settings name a model that is not all full attention always drives
UnifiedRadixCache, with the components a 0.5.23 server gives that model (registry.py
`create_unified_radix_cache`): `sliding_window` W adds the SWA component (an
`SWATokenToKVPoolAllocator` with a KV pool stand-in that only maps full to window slot indices,
`swa_eviction_interval` exported as SGLANG_SWA_EVICTION_INTERVAL, and the batch's
`maybe_evict_swa` SGLang's own `ScheduleBatch.maybe_evict_swa` run on the stand-in batch, as
`alloc_for_extend` and `alloc_for_decode_default` call it); `mamba` adds the Mamba component (a
`HybridReqToTokenPool` without the extra buffer, one tiny Mamba-2 layer; the Mamba cache chunk
size, which SGLang reads from the model's config and uses only for the extra buffer's grid, is
fixed at 64 here).

A request's `extra_key` and `cache_salt` first go through what SGLang's API does to them
(io_struct.py `GenerateReqInput._normalize_extra_key` and `_normalize_cache_salt`, called here on
a one-request holder): an empty string becomes None before a request reaches the cache.

Each request goes through the path SGLang's scheduler takes for a request that runs alone,
calling SGLang's own functions with a stand-in for the batch: `Req(...)` with `extra_key`,
`lora_id` and `cache_salt`; `Req.init_next_round_input(tree)` (its `prefix_len` is the count the
server reports as `cached_tokens`: `prepare_for_extend` adds `pre_len - already_computed`);
`tree.lock(req.last_node)` (PrefillAdder `_commit_prefill_admission`); `alloc_for_extend`
(`alloc_token_slots`, or `alloc_paged_token_slots_extend` when paged: each evicts from the tree
first); one `alloc_for_decode_default` per sampled token fed back, with the token appended to
`output_ids` as `process_batch_result_decode` does; then `release_kv_cache(req, tree,
checkpoint=True)` once the last token is sampled. The allocators are SGLang's own
(`TokenToKVPoolAllocator`, `PagedTokenToKVPoolAllocator`) with no KV pool behind them
(`kvcache=None`): they hand out slot indices only. A reset is `tree.reset()` and the allocator's
`clear()` (what `flush_cache` does with nothing running).
"""
from __future__ import annotations

import os
import sys
from array import array
from types import MethodType, SimpleNamespace

from driver_loop import serve  # this folder: the line protocol, standard library only

os.environ.setdefault("SGLANG_LOG_LEVEL", "error")
# The answers get the real stdout to themselves: whatever the runtime prints or logs (vLLM logs
# to stdout) goes to stderr.
ANSWERS = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

import torch  # noqa: E402

# One intra-op thread: every tensor op here is microseconds of work, and on a shared machine a
# second OpenMP thread only waits for a core (SGLang's allocation path ran 4-5x slower with two).
torch.set_num_threads(1)

from sglang.srt.managers.io_struct import GenerateReqInput  # noqa: E402
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch  # noqa: E402
from sglang.srt.mem_cache.allocation import alloc_for_decode_default, alloc_for_extend  # noqa: E402
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.base_swa_memory_pool import BaseSWAKVPool  # noqa: E402
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.common import release_kv_cache  # noqa: E402
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixCache  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.runtime_context import SpawnRanks, publish, reset_context  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

VERSION = __import__("importlib.metadata").metadata.version("sglang")
CACHE = os.environ.get("KVCONFORM_SGLANG_CACHE", "radix")


class Undefined(Exception):
    """A state the peer profile does not define (a request that does not fit the pool)."""


class WindowSlots(BaseSWAKVPool):
    """The KV pool behind an SWATokenToKVPoolAllocator, reduced to what the allocator and the SWA
    component ask of it: the full-to-window slot mapping (no KV is stored)."""

    full_kv_pool = swa_kv_pool = full_to_swa_index_mapping = None

    def __init__(self):
        pass

    def register_mapping(self, full_to_swa_index_mapping):
        self.full_to_swa_index_mapping = full_to_swa_index_mapping

    def translate_loc_from_full_to_swa(self, kv_indices):
        return self.full_to_swa_index_mapping[kv_indices]

    def get_state_buf_infos(self):
        return [], [], []

    def get_key_buffer(self, *args):
        raise NotImplementedError

    get_value_buffer = get_kv_buffer = set_kv_buffer = get_key_buffer


class Cache:
    """One SGLang radix cache with its allocators, as the scheduler builds them."""

    def __init__(self, settings: dict, longest: int, total: int):
        self.P = settings.get("page_size", 1)
        pool = settings.get("pool_tokens")
        self.size = pool if pool is not None else total + 4 * self.P + 16
        self.context = longest + 4 * self.P + 8
        self.window, self.mamba = settings.get("sliding_window"), bool(settings.get("mamba"))
        if self.window is not None or self.mamba:
            self._hybrid(settings)
            return
        if self.P == 1:
            self.allocator = TokenToKVPoolAllocator(self.size, torch.float16, "cpu", None, False)
        else:
            self.allocator = PagedTokenToKVPoolAllocator(self.size, self.P, torch.float16, "cpu", None, False)
        self.req_pool = ReqToTokenPool(size=4, max_context_len=self.context, device="cpu",
                                       enable_memory_saver=False)
        params = CacheInitParams(disable=False, req_to_token_pool=self.req_pool,
                                 token_to_kv_pool_allocator=self.allocator, page_size=self.P,
                                 is_eagle=bool(settings.get("eagle")))
        if CACHE == "unified":
            from sglang.srt.mem_cache.unified_cache.components import ComponentType
            from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
            params.tree_components = (ComponentType.FULL,)
            self.tree = UnifiedRadixCache(params)
        else:
            self.tree = RadixCache(params)
        self.rid = 0

    def _hybrid(self, settings: dict) -> None:
        """UnifiedRadixCache with the Full component and the SWA or the Mamba one."""
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        components = [ComponentType.FULL]
        if self.window is not None:
            os.environ["SGLANG_SWA_EVICTION_INTERVAL"] = str(settings.get("swa_eviction_interval") or 128)
            self.allocator = SWATokenToKVPoolAllocator(self.size, self.size, self.P, torch.float16, "cpu",
                                                       WindowSlots(), False)
            self.req_pool = ReqToTokenPool(size=4, max_context_len=self.context, device="cpu",
                                           enable_memory_saver=False)
            components.append(ComponentType.SWA)
        else:
            self.allocator = TokenToKVPoolAllocator(self.size, torch.float16, "cpu", None, False)
            self.req_pool = mamba_request_pool(self.context)
            components.append(ComponentType.MAMBA)
        params = CacheInitParams(disable=False, req_to_token_pool=self.req_pool,
                                 token_to_kv_pool_allocator=self.allocator, page_size=self.P,
                                 sliding_window_size=self.window)
        params.tree_components = tuple(components)
        self.tree = UnifiedRadixCache(params)
        self.rid = 0

    def reset(self) -> bool:
        self.tree.reset()
        self.allocator.clear()
        return True

    def _batch(self, req, prefix_len: int, seq_len: int, decode: bool = False):
        batch = SimpleNamespace(
            reqs=[req], req_to_token_pool=self.req_pool, tree_cache=self.tree, device="cpu",
            prefix_lens=[prefix_len], extend_lens=[seq_len - prefix_len], extend_num_tokens=seq_len - prefix_len,
            seq_lens=torch.tensor([seq_len], dtype=torch.int64), seq_lens_cpu=torch.tensor([seq_len], dtype=torch.int64),
            hisparse_coordinator=None, is_dllm=lambda: False, maybe_evict_swa=lambda: None,
            model_config=SimpleNamespace(is_encoder_decoder=False))
        if self.window is not None:                     # SGLang's own: frees the window behind a decoding request
            batch.token_to_kv_pool_allocator, batch.forward_iter, batch.enable_overlap = self.allocator, 0, False
            batch.forward_mode = ForwardMode.DECODE if decode else ForwardMode.EXTEND
            for name in ("maybe_evict_swa", "_swa_eviction_trigger", "_evict_swa"):
                setattr(batch, name, MethodType(getattr(ScheduleBatch, name), batch))
        return batch

    def request(self, step: dict) -> int:
        """Run one request to its end; the count it reports."""
        self.rid += 1
        lora = step.get("lora")
        sampled = list(step.get("sampled") or [0])
        req = Req(f"r{self.rid}", "", array("q", step["prompt"]),
                  SamplingParams(max_new_tokens=len(sampled), temperature=0),
                  lora_id=None if lora is None else f"lora-id-{lora}",
                  extra_key=api_field("extra_key", step.get("extra_key")),
                  cache_salt=api_field("cache_salt", step.get("salt")))
        req.init_next_round_input(self.tree)
        cached = req.prefix_len
        n = len(step["prompt"])
        req.extend_end = n
        req.lock = self.tree.lock(req.last_node)
        batch = self._batch(req, cached, n)
        try:
            _, indices, _ = alloc_for_extend(batch)
        except RuntimeError as e:
            raise Undefined(f"prefill: {str(e).splitlines()[0]}") from None
        req.kv.req_pool_idx = int(indices[0])
        for token in sampled[:-1]:                       # each fed back: one decode step
            req.output_ids.append(token)
            seq = n + len(req.output_ids) - 1
            dec = self._batch(req, seq, seq, decode=True)
            dec.seq_lens = torch.tensor([seq], dtype=torch.int64)
            dec.seq_lens_cpu = torch.tensor([seq], dtype=torch.int64)
            dec.req_pool_indices = torch.tensor([req.kv.req_pool_idx], dtype=torch.int64)
            dec.req_pool_indices_cpu = dec.req_pool_indices
            try:
                alloc_for_decode_default(dec, 1)
            except RuntimeError as e:
                raise Undefined(f"decode: {str(e).splitlines()[0]}") from None
            req.decode_batch_idx += 1                    # prepare_for_decode, after the allocation
        req.output_ids.append(sampled[-1])
        req.finished_reason = SimpleNamespace(to_json=lambda: {"type": "length"})
        release_kv_cache(req, self.tree, checkpoint=True)
        return cached


def mamba_request_pool(context: int):
    """A HybridReqToTokenPool for one tiny Mamba-2 layer, without the extra buffer (no_buffer)."""
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
    from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
    shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=16, n_groups=1, num_heads=2, head_dim=8,
                                    state_size=4, conv_kernel=2)
    return HybridReqToTokenPool(size=4, mamba_size=64, mamba_spec_state_size=4, max_context_len=context,
                                device="cpu", enable_memory_saver=False,
                                cache_params=Mamba2CacheParams(shape=shape, layers=[0]), mamba_layer_ids=[0],
                                enable_mamba_extra_buffer=False, enable_overlap_schedule=False)


def api_field(name: str, value):
    """`value` as SGLang's API hands the field on to the scheduler: its own normaliser
    (GenerateReqInput._normalize_extra_key / _normalize_cache_salt) run on a one-request holder."""
    if value is None:
        return None
    holder = SimpleNamespace(batch_size=1, parallel_sample_num=1, **{name: value})
    getattr(GenerateReqInput, f"_normalize_{name}")(holder, 1)
    return getattr(holder, name)[0]


def run(stream: dict, observe: bool = True) -> list:
    requests = [s for s in stream["steps"] if "prompt" in s]
    longest = max((len(s["prompt"]) + len(s.get("sampled") or [0]) for s in requests), default=1)
    total = sum(len(s["prompt"]) + len(s.get("sampled") or [0]) for s in requests)
    cache = Cache(stream.get("settings") or {}, longest, total)
    out = []
    for step in stream["steps"]:
        if step.get("reset"):
            seen = {"reset": cache.reset()}
        elif "prompt" in step:
            if step.get("hold"):
                out.append({"undefined": "a held request (the profile runs one request at a time)"})
                break
            try:
                seen = {"cached": cache.request(step)}
            except Undefined as e:
                out.append({"undefined": str(e)})
                break
        else:
            out.append({"undefined": "a release (the profile runs one request at a time)"})
            break
        if observe:
            out.append(seen)
    return out


def publish_config() -> None:
    """The process-wide configuration SGLang's code reads (`get_serving()`, `get_spec()`, ...),
    published as its own tests publish it (sglang/test/test_utils.py `published_topology`): the
    default server arguments, rank zero, CPU. The Mamba component's cache chunk size comes from a
    model config there is none of: 64 (used only by the extra buffer, which no stream turns on)."""
    import sglang.srt.arg_groups.overrides as overrides      # what runtime_context.mamba_cache_chunk_size reads
    overrides.mamba_cache_chunk_size = lambda server_args: 64
    reset_context()
    publish(ServerArgs(model_path="dummy", device="cpu"), role="test",
            ranks=SpawnRanks(world_rank=0, dp_rank=None))


def main() -> int:
    publish_config()
    if CACHE not in ("radix", "unified"):
        raise SystemExit(f"KVCONFORM_SGLANG_CACHE={CACHE!r}: expected radix or unified")
    return serve(ANSWERS, {"runtime": "sglang", "version": VERSION, "torch": torch.__version__,
                          "class": "UnifiedRadixCache" if CACHE == "unified" else "RadixCache"}, run)


if __name__ == "__main__":
    sys.exit(main())
