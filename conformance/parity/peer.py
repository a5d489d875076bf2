"""Peer scenarios of the parity suite: request sequences through `reference.peers.simulator`.

A scenario names the profile's settings and a list of steps (docs/parity.md section 2):

- a request (its prompt ids, the ids it samples, and what keys its cache entries: LoRA adapter,
  salt, extra key, images, and the fields later profiles add). It is first predicted (the count
  the server reports, `cached`) and then, unless the step says `commit: false`, committed (what
  it leaves cached). With `hold: NAME` it is admitted and keeps its blocks until a later
  `{"release": NAME}` step, so that another request can run while it holds them (the runtimes'
  own block-pool tests do; the vLLM and TensorRT-LLM pools of the oracle define it);
- `{"release": NAME}`, optionally with `tokens`: the tokens TensorRT-LLM's `releaseBlocks` is
  given (a request released with fewer tokens than it computed);
- `{"reset": true}`: the profile's reset (on vLLM, refused while a request holds blocks);
- `{"advance_ms": N}`: N ms pass (a test's sleep; TensorRT-LLM's retention durations run out);
- `{"grow": NAME, "add_tokens": N, "sampled": [...]}`: a held TensorRT-LLM request gets the KV of N
  more tokens (`addToken` N times) and the sampled ids appended. A held request's `add_tokens`
  says how many `addToken` calls follow its admission (default: one per sampled id but the last).

Ids are the upstream test's own: a peer profile speaks of token ids as the server sees them.
What a step can be observed for (`observe.value`): `cached`, `prompt_n`, and what the profile's
pool publishes through its documented accessors, read after the step: `free_queue` (block ids,
head first), `free_blocks` (its length), `blocks` (the blocks the step's request took, in
order; on vLLM also `hit_blocks` and `new_blocks`; on TensorRT-LLM also `window_blocks`, each
attention window's), `admitted` (whether a held request
fitted), `reset` (whether the reset was accepted), `slot_tokens` (llama.cpp's slot). Where a
step gives `max_tokens` (-1 or null: no limit), `sampled` is what the model would go on to sample
and the profile cuts it (llama.cpp: at the slot's context without context shift): `predicted_n`,
`truncated` and `finish_reason` (`length` when cut, else `stop`). llama.cpp also says whether a
request is `refused` (its HTTP `status` 400, no count) and with which `error`.

vLLM's KV-cache groups (PEER-VLLM-11..16) add what their manager tests read: `group_blocks`
(each group's blocks, `get_block_ids()`), `group_hit_blocks` and `group_hit_counts` (what
`get_computed_blocks` returns per group), `junction` (its shared-prefix boundary), `first_step`
(where the scheduler ends the first prefill step) and `kept` (the hash units of the request's
prompt whose key each group holds: `get_cached_block(block_hashes[i], [g])`); `group: g` reads
one group's row, with `unit: i` whether it holds unit i. `block_keys` is `len(block_hashes)` on
any vLLM pool. A request step's `allocate` gives the new tokens of each `allocate_slots` call the
test makes after the hit, in place of the scheduler's steps; a lookup's `without_keys` (`[g, i]`:
group g's key of hash unit i) takes keys out of the pool's hash map for that lookup, as the tests
pop them by hand. A scenario with `start_only` and no steps is a start-up: `{"start":
"refused"}` observes whether the profile refuses its settings.

What vLLM's tests read of the pool itself (PEER-VLLM-4/5): `ref_cnt`, `keyed`, `key_group`,
`same_keys` and `cached_keys` of the blocks an observation names, and with `kv_events: true` the
KV events each step queues (`kv_events`, `kv_event_count`, `kv_event`, `removed_stored_at`).
SGLang's tree: `total_size`, `evictable_size`, `protected_size`. `same_as` compares two
observations of the scenario, as a test compares two of its own values; `len` reads the length
of the list an observation names (pool_views.py answers the pool's and the tree's).
"""
from __future__ import annotations

from ..judge import peer_oracle as peers

from . import pool_views as views
from .engine import NotExpressible, expand

TREE_CALLS = {"insert", "match", "lock", "unlock", "evict", "evict_mamba"}
REQUEST_FIELDS = ("lora", "lora_path", "salt", "extra_key", "skip_prefix_cache", "retention", "token_extra_ids")


class Run:
    def __init__(self, scenario: dict, profile: str, settings: dict | None):
        merged = dict(settings or {}, **(scenario.get("settings") or {}))
        self.start_error = None
        try:
            self.sim = peers.simulator(profile, merged)
        except peers.PeerProfileError as e:
            if not scenario.get("start_only"):
                raise NotExpressible(f"reference.peers.simulator: {e}") from None
            self.start_error = str(e)             # a start-up the profile refuses, as the test expects
        if scenario.get("start_only"):
            if scenario["steps"]:
                raise NotExpressible("a start_only scenario runs no step")
            self.held, self.steps = {}, []
            return
        self.held: dict = {}
        self._feedable: dict = {}
        self.steps: list[dict] = []
        self._events_seen = 0
        if scenario.get("kv_events"):
            if not isinstance(self.sim, peers.VllmBlockPool):
                raise NotExpressible("KV events are read of vLLM's block pool with one KV-cache group only")
            self.sim.events = []
        for k, step in enumerate(scenario["steps"]):
            try:
                self.steps.append(self._step(step, k))
            except peers.PeerProfileError as e:
                raise NotExpressible(f"step {k}: {e}") from None

    def _step(self, step: dict, k: int) -> dict:
        if TREE_CALLS & step.keys():
            return self._tree_call(step, k)
        if "without_keys" in step:
            return self._without_keys(step, k)
        if step.get("reset"):
            accepted = self.sim.reset_prefix_cache() if hasattr(self.sim, "reset_prefix_cache") else _reset(self.sim)
            return self._state(reset=accepted)
        if "release" in step:
            return self._release(step, k)
        if "grow" in step:
            return self._grow(step, k)
        if "advance_ms" in step:
            if not hasattr(self.sim, "advance"):
                raise NotExpressible(f"step {k}: the {type(self.sim).__name__} simulator has no clock")
            self.sim.advance(step["advance_ms"])
            return self._state()
        request = _request(step, k)
        refusal = getattr(self.sim, "refuses", None)
        error = refusal(request) if refusal is not None else None
        if error is not None:                 # HTTP 400, no count; what it leaves is the profile's
            if hasattr(self.sim, "after_refusal"):
                self.sim.after_refusal(request)
            return self._state(refused=True, status=400, error=error, length=len(request.ids))
        seen = {"cached": self.sim.predict(request), "length": len(request.ids),
                **({"refused": False, "status": 200} if refusal is not None else {}),
                **self._lookup(request)}
        driven = self._driven(step, k)
        sampled = expand(step.get("sampled", [0]))
        seen.update(sampled_many=len(sampled) > 1, request=request,
                    unit_keys=list(self.sim.keys_of(request)) if hasattr(self.sim, "keys_of") else None)
        if "max_tokens" in step:
            sampled, truncated = self._served(request, sampled, step["max_tokens"], k)
            seen.update(predicted_n=len(sampled), truncated=truncated,
                        finish_reason="length" if len(sampled) < len(expand(step.get("sampled", [0]))) else "stop")
        if "hold" in step:
            run = self._hold(request, sampled, k, step.get("add_tokens"), driven)
            if run is not None:
                self.held[step["hold"]] = run
                if driven == "prompt":             # the ids grow steps may feed: all sampled but the last
                    self._feedable[step["hold"]] = len(request.ids) + len(sampled) - 1
            return self._state(admitted=run is not None, **_blocks(run), **seen, **self._kept(request))
        if not step.get("commit", True):
            return self._state(**seen)
        if not hasattr(self.sim, "hold"):
            self.sim.commit(request, sampled)
            return self._state(**seen)
        run = self.sim.hold(request, sampled) if driven is None else self.sim.hold(request, sampled, driven)
        if run is None:
            raise NotExpressible(f"step {k}: the request does not fit the free queue (PEER-VLLM-9), "
                                 "and a committed request cannot wait")
        blocks = _blocks(run)
        self.sim.release(run)
        return self._state(**blocks, **seen, **self._kept(request))

    def _tree_call(self, step: dict, k: int) -> dict:
        """SGLang's tree called directly, as its unit tests do (reference/peer_sglang.py
        `insert_key`, `match_key`, `lock_node`, `evict`, `evict_mamba`): `{"insert": ids}`
        (observed: `prefix_len`), `{"match": ids, "as": NAME}` (`matched`, `last_node_len`:
        `len(last_device_node.key)`, `last_node_first` and `last_node_last`: its first and last
        unit, a bigram as a list; `as` keeps the node), `{"lock": NAME}` and `{"unlock":
        NAME}` (`inc_lock_ref` / `dec_lock_ref` on the kept node), `{"evict": n}` (full KV
        tokens: `evicted`; on a sliding-window tree with `window: m`, the window KV tokens too:
        `window_evicted`), `{"evict_mamba": n}` (Mamba states: `evicted`). The tree's sizes are
        read after every step (pool_views.tree_sizes)."""
        if not isinstance(self.sim, peers.RadixCache):
            raise NotExpressible(f"step {k}: tree calls are defined for SGLang's radix tree only")
        if "insert" in step:
            return self._state(prefix_len=self.sim.insert_key(expand(step["insert"])))
        if "match" in step:
            matched, last = self.sim.match_key(expand(step["match"]))
            if "as" in step:
                self.held[step["as"]] = last
            return self._state(matched=matched, last_node_len=len(last.key),
                               last_node_first=_unit(last.key[0]) if last.key else None,
                               last_node_last=_unit(last.key[-1]) if last.key else None)
        if "lock" in step or "unlock" in step:
            node = self.held.get(step.get("lock", step.get("unlock")))
            if node is None or isinstance(node, peers.PeerRequest) or not hasattr(node, "locks"):
                raise NotExpressible(f"step {k}: no node kept by a match under that name")
            self.sim.lock_node(node, 1 if "lock" in step else -1)
            return self._state()
        if "evict" in step:
            if self.sim.W is not None:
                full, window = self.sim.evict_window(step["evict"], step.get("window", 0))
                return self._state(evicted=full, window_evicted=window)
            return self._state(evicted=self.sim.evict(step["evict"]))
        return self._state(evicted=self.sim.evict_mamba(step["evict_mamba"]))

    def _without_keys(self, step: dict, k: int) -> dict:
        """A lookup with some of the request's keys taken out of the pool's hash map and put back
        after it, as vLLM's tests pop `cached_block_hash_to_block` entries by hand: `[g, i]` is
        group g's key of the request's hash unit i. The lookup is the oracle's own over that
        state (PEER-VLLM-11..14); nothing is committed."""
        if not self._grouped() or step.get("commit", True) or "hold" in step:
            raise NotExpressible(f"step {k}: keys taken out by hand are defined for a lookup (commit: false) "
                                 "of vLLM's KV-cache groups")
        request = _request(step, k)
        keys, taken = self.sim.keys_of(request), {}
        try:
            for g, unit in step["without_keys"]:
                key = (g, keys[unit]) if 0 <= unit < len(keys) else None
                if key not in self.sim.key_blocks:
                    raise NotExpressible(f"step {k}: group {g} holds no key of hash unit {unit}")
                taken[key] = self.sim.key_blocks.pop(key)
            rest = {key: value for key, value in step.items() if key != "without_keys"}
            return self._step(rest, k)
        finally:
            self.sim.key_blocks.update(taken)

    def _grouped(self) -> bool:
        return isinstance(self.sim, peers.GroupedPool)

    def _lookup(self, request) -> dict:
        """vLLM's KV-cache groups: what `get_computed_blocks` returns beside the count (each
        group's hit blocks, the shared-prefix junction) and where the scheduler ends the first
        prefill step, read before the request changes the cache."""
        if not self._grouped():
            if not isinstance(self.sim, peers.VllmBlockPool):
                return {}
            return {"block_keys": len(self.sim.keys_of(request)), "hit_count": self.sim.hit_blocks(request)}
        _, junction, hits = self.sim.lookup_blocks(request)
        return {"junction": junction, "block_keys": len(self.sim.keys_of(request)), "group_hit_blocks": hits,
                "group_hit_counts": [len(h) for h in hits], "first_step": self.sim.first_step_end(request)}

    def _kept(self, request) -> dict:
        """Which hash units of the request's prompt each group holds a key for after the step."""
        if not self._grouped():
            return {}
        return {"kept": [self.sim.kept(request, g) for g in range(len(self.sim.groups))]}

    def _driven(self, step: dict, k: int):
        """A step's `allocate`: the new tokens of each `allocate_slots` call a manager test makes
        for the request after its hit, in place of the scheduler's steps (vLLM's groups only)."""
        if "allocate" not in step:
            return None
        if isinstance(self.sim, peers.VllmBlockPool) and "hold" in step:
            if list(step["allocate"]) != [len(expand(step["prompt"]))]:
                raise NotExpressible(f"step {k}: on one full-attention group the first allocate_slots call "
                                     "computes the prompt; later ones are grow steps")
            return "prompt"
        if not self._grouped():
            raise NotExpressible(f"step {k}: allocate_slots calls given by hand are defined for vLLM's "
                                 "KV-cache groups only")
        return list(step["allocate"])

    def _served(self, request, stream, max_tokens, k: int):
        """(the ids the server samples of the model's stream, truncated) where the profile says how
        max_tokens and the context cut generation (llama.cpp, PEER-LCPP-8/9)."""
        served = getattr(self.sim, "served", None)
        if served is None:
            raise NotExpressible(f"step {k}: the {type(self.sim).__name__} simulator does not say how max_tokens "
                                 "and the context cut generation")
        return served(request, stream, max_tokens)

    def _hold(self, request, sampled, k: int, add_tokens=None, driven=None):
        if not hasattr(self.sim, "hold"):
            raise NotExpressible(f"step {k}: the {type(self.sim).__name__} simulator runs one request at a time")
        if driven == "prompt":                  # the prompt only: its sampled ids are fed by grow steps
            return self.sim.admit(request, sampled)
        if driven is not None:
            return self.sim.hold(request, sampled, driven)
        if add_tokens is None:
            return self.sim.hold(request, sampled)
        if not isinstance(self.sim, peers.TrtllmBlockPool):
            raise NotExpressible(f"step {k}: only TensorRT-LLM's pool adds KV tokens apart from sampled ids")
        return self.sim.hold(request, sampled, add_tokens)

    def _grow(self, step: dict, k: int) -> dict:
        if isinstance(self.sim, peers.VllmBlockPool) and "allocate" in step:
            return self._fed(step, k)
        run = self.held.get(step["grow"])
        if run is None or not isinstance(self.sim, peers.TrtllmBlockPool):
            raise NotExpressible(f"step {k}: no held TensorRT-LLM request named {step['grow']!r}")
        self.sim.extend(run, expand(step.get("sampled", [])), step.get("add_tokens", 0))
        return self._state(**_blocks(run))

    def _fed(self, step: dict, k: int) -> dict:
        """`{"grow": NAME, "allocate": n}` on vLLM's one-group pool: n of the held request's sampled
        ids fed back through one `allocate_slots` call, as test_decode does after
        `append_output_token_ids` (PEER-VLLM-4, -5: a block taken when a token starts one, a block
        keyed when it fills). Observed: `allocated` (the blocks the call took), the request's
        `blocks`, and `block_keys` (`len(request.block_hashes)`: the full blocks of its tokens)."""
        run = self.held.get(step["grow"])
        limit = self._feedable.get(step["grow"], 0)
        if run is None or run.computed + step["allocate"] > limit:
            raise NotExpressible(f"step {k}: no held request named {step['grow']!r} admitted with its prompt "
                                 f"alone and {step['allocate']} sampled ids left to feed")
        before = len(run.blocks)
        for _ in range(step["allocate"]):
            self.sim.feed(run)
        full = min(run.computed // self.sim.B, len(run.keys))
        return self._state(**_blocks(run), allocated=len(run.blocks) - before, block_keys=full, sampled_many=True)

    def _release(self, step: dict, k: int) -> dict:
        run = self.held.pop(step["release"], None)
        if run is None:
            raise NotExpressible(f"step {k}: no held request named {step['release']!r}")
        if "tokens" in step:
            if not isinstance(self.sim, peers.TrtllmBlockPool):
                raise NotExpressible(f"step {k}: only TensorRT-LLM releases a request with other tokens")
            self.sim.release(run, expand(step["tokens"]))
        else:
            self.sim.release(run)
        return self._state(**(self._kept(run.request) if self._grouped() else {}))

    def _state(self, **seen) -> dict:
        """What the step leaves observable beyond the count: the free queue of a bounded block
        pool (vLLM, TensorRT-LLM), the tokens llama.cpp's slot holds (what
        /slots/N?action=save reports as n_saved)."""
        bounded = hasattr(self.sim, "free_queue") and self.sim.K is not None
        queue = self.sim.free_queue() if bounded else None
        tokens = getattr(self.sim, "tokens", None)
        return dict(seen, free_queue=queue, free_blocks=None if queue is None else len(queue),
                    slot_tokens=len(tokens) if tokens is not None else None, **self._pool())

    def _pool(self) -> dict:
        """What the step leaves of the pool or tree itself (pool_views.snapshot)."""
        seen, self._events_seen = views.snapshot(self.sim, self._events_seen)
        return seen

    def observe(self, what: dict):
        if "start" in what:                     # whether the profile refuses these settings at start-up
            return self.start_error is not None
        step, value = self.steps[what["step"]], what.get("value", "cached")
        if value == "prompt_n":                 # llama.cpp timings.prompt_n: the prompt less what was cached
            return step["length"] - step["cached"]
        if what.get("len"):                     # a test's len(...) of a list it reads
            return len(self.observe({key: v for key, v in what.items() if key != "len"}))
        if "same_as" in what:                   # a test comparing two of its own observations
            mine = {key: v for key, v in what.items() if key != "same_as"}
            return self.observe(mine) == self.observe(what["same_as"])
        if value == "extra_keys":
            return views.extra_keys(step, what)
        if value == "same_unit_key":            # block_hashes1[i] == block_hashes2[i]: which keys agree
            return views.same_unit_key(what, self.steps)
        if value in views.POOL_VALUES:
            return views.pool_value(what, self.steps, value)
        if value in views.EVENT_VALUES:
            return views.event_value(what, self.steps, value)
        if value not in step or step[value] is None:
            raise NotExpressible(f"step {what['step']} of the {type(self.sim).__name__} simulator has no {value}")
        if "group" in what:                     # one KV-cache group's row of a per-group value
            row = step[value][what["group"]]
            return what["unit"] in row if "unit" in what else row
        return step[value]


def _blocks(run) -> dict:
    """The blocks a request took, in order, and (vLLM, whose pool counts its hits in blocks) which
    of them were hits and which new: what `get_computed_blocks` and `allocate_slots` return."""
    if run is None:
        return {}
    out = {"blocks": list(run.blocks)}
    if hasattr(run, "window_blocks"):
        out["window_blocks"] = {str(w): list(b) for w, b in run.window_blocks.items()}
    if hasattr(run, "hits"):
        out.update(hit_blocks=run.blocks[:run.hits], new_blocks=run.blocks[run.hits:])
    if hasattr(run, "group_blocks"):
        out["group_blocks"] = run.group_blocks()
    return out


def _unit(unit):
    """A key's unit as a test compares it: an id, or an EAGLE bigram as a list."""
    return list(unit) if isinstance(unit, tuple) else unit


def _reset(sim) -> bool:
    sim.reset()
    return True


def _request(step: dict, k: int):
    fields = {key: step[key] for key in REQUEST_FIELDS if key in step}
    if "images" in step:
        fields["images"] = [peers.ImageItem(*i) for i in step["images"]]
    try:
        return peers.PeerRequest(expand(step["prompt"]), **fields)
    except TypeError as e:
        raise NotExpressible(f"step {k}: reference.peers.PeerRequest: {e}") from None


class QueueRun:
    """A free-queue scenario: vLLM's `FreeKVCacheBlockQueue` tests drive the queue alone, so the
    oracle's own (PEER-VLLM-5: head taken first, blocks joining at either end) is driven call by
    call: `{"free_queue": [ids], "steps": [{"prepend": [...]}, {"append": [...]}, {"popleft": n},
    {"remove": id}]}`. Observed after step k: `queue` (head to tail; `prefix: n` its first n),
    `free_blocks` (its length), `popped` and `popped_count` (what the step took). A block's links
    are the queue's order; a popped block's own links are not observable."""

    def __init__(self, scenario: dict):
        queue = peers.FreeQueue(scenario["free_queue"])
        self.steps = []
        for k, step in enumerate(scenario["steps"]):
            popped = []
            if "prepend" in step:
                queue.prepend(list(step["prepend"]))
            elif "append" in step:
                queue.extend(list(step["append"]))
            elif "popleft" in step:
                if step["popleft"] > len(queue):
                    raise NotExpressible(f"step {k}: popleft of {step['popleft']} from a queue of {len(queue)}")
                popped = queue.take(step["popleft"])
            elif "remove" in step:
                if step["remove"] not in queue:
                    raise NotExpressible(f"step {k}: block {step['remove']} is not in the queue")
                queue.remove(step["remove"])
            elif step:
                raise NotExpressible(f"step {k}: no free-queue call {sorted(step)}")
            self.steps.append({"queue": list(queue), "free_blocks": len(queue), "popped": popped,
                               "popped_count": len(popped)})

    def observe(self, what: dict):
        step = self.steps[what["step"]]
        value = step[what["value"]]
        return value[:what["prefix"]] if "prefix" in what else value

