"""What the runtimes' own tests read of a peer cache itself, beside the counts a server reports
(docs/parity.md section 2): vLLM's block pool (reference counts, which blocks hold a key and of
which group, the hash map's size, the KV events, spec/peer-profiles.md after PEER-VLLM-5, and
the extra keys each block hashes, PEER-VLLM-2) and SGLang's tree sizes (after PEER-SGL-5).

`snapshot` copies what a step leaves (the peer scenario keeps one per step); `pool_value`,
`event_value` and `extra_keys` answer an observation from the snapshots. Every value is the
oracle's own state, read, never recomputed here.
"""
from __future__ import annotations

from ..judge import peer_oracle as peers

from .engine import NotExpressible

POOL_VALUES = ("ref_cnt", "keyed", "key_group", "same_keys", "cached_keys")
EVENT_VALUES = ("kv_events", "kv_event_count", "kv_event", "removed_stored_at")


def snapshot(sim, events_seen: int) -> tuple[dict, int]:
    """(what the step leaves, the events read so far). vLLM's block pool as its own tests read it
    (vllm/v1/core/kv_cache_utils.py `KVCacheBlock.ref_cnt` and `block_hash`, block_pool.py
    `cached_block_hash_to_block` and `take_events`): each block's reference count (the running
    requests holding it, PEER-VLLM-5), the (group, key) each keyed block holds (a block without
    one: absent), how many keys the hash map holds, and the KV events the step queued; SGLang's
    tree sizes."""
    if isinstance(sim, peers.RadixCache):
        return tree_sizes(sim), events_seen
    if isinstance(sim, peers.VllmBlockPool):
        keys = {block: (0, key) for block, key in sim.block_key.items()}
    elif isinstance(sim, peers.GroupedPool):
        keys = {block: held[0] for block, held in sim.block_keys.items() if held}
    else:
        return {}, events_seen
    events = None
    if sim.__dict__.get("events") is not None:
        events, events_seen = sim.events[events_seen:], len(sim.events)
    return {"pool": {"refs": dict(sim.refs), "keys": keys, "cached_keys": len(sim.key_blocks)},
            "kv_events": events}, events_seen


def pool_value(what: dict, steps: list, value: str):
    """`ref_cnt` (per named block; `distinct`: the set, sorted, as a test's `{b.ref_cnt for
    ...}`), `keyed` (whether each named block holds a key: `block_hash is not None`; `any`:
    whether any does), `key_group` (the group of each named block's key, `get_group_id`; None
    without one), `same_keys` with `as: {"step": s, "blocks": ...}` (whether the named blocks
    hold the same keys, position by position, as the blocks `as` names held after step s: a
    test comparing a request's `block_hash` list with one it saved; equality only, PEER-VLLM-1),
    `cached_keys` (`len(cached_block_hash_to_block)`)."""
    step = steps[what["step"]]
    pool = step.get("pool")
    if pool is None:
        raise NotExpressible(f"step {what['step']}: the simulator is not vLLM's block pool")
    if value == "cached_keys":
        return pool["cached_keys"]
    blocks = named_blocks(what, steps, step)
    if value == "ref_cnt":
        counts = [pool["refs"].get(b, 0) for b in blocks]
        return sorted(set(counts)) if what.get("distinct") else counts
    if value == "keyed":
        keyed = [b in pool["keys"] for b in blocks]
        return any(keyed) if what.get("any") else keyed
    if value == "same_keys":
        then = steps[what["as"]["step"]]          # the other list's keys as they were after its step
        other = named_blocks(what["as"], steps, then)
        return [pool["keys"].get(b) for b in blocks] == [then["pool"]["keys"].get(b) for b in other]
    return [pool["keys"][b][0] if b in pool["keys"] else None for b in blocks]


def event_value(what: dict, steps: list, value: str):
    """What `take_events()` returns after the step: `kv_events` (their kinds, in order: `stored`,
    `removed`, `cleared`; `from`/`to` slice them), `kv_event_count`, `kv_event` with `index` and
    `field` (`kind`; a stored event's `hashes` and `tokens`, the lengths of its block_hashes and
    token_ids, its `block_size` and `lora`), `removed_stored_at: s` (every key this step's removed
    events name is one step s stored). A step's request must sample at most one id: vLLM caches a
    decode's blocks one `allocate_slots` call at a time, and the profile's held request computes
    its sampled ids at admission."""
    step = steps[what["step"]]
    events = step.get("kv_events")
    if events is None:
        raise NotExpressible(f"step {what['step']}: KV events are recorded where the scenario sets kv_events")
    if step.get("sampled_many"):
        raise NotExpressible(f"step {what['step']}: its request samples several ids, which vLLM caches one "
                             "allocate_slots call at a time")
    if value == "kv_events":
        return [e.kind for e in events][what.get("from", 0):what.get("to")]
    if value == "kv_event_count":
        return len(events)
    if value == "removed_stored_at":
        stored = {key for e in steps[what["at"]]["kv_events"] if e.kind == "stored" for key in e.keys}
        return all(key in stored for e in events if e.kind == "removed" for key in e.keys)
    event = events[what.get("index", -1)]
    return {"kind": event.kind, "hashes": len(event.keys), "tokens": event.tokens,
            "block_size": event.block_size, "lora": event.lora}[what.get("field", "kind")]


def tree_sizes(cache) -> dict:
    """SGLang's radix tree as its own tests read it (python/sglang/srt/mem_cache/radix_cache.py
    `total_size`, `evictable_size`, `protected_size`): the KV slots the tree holds, and those
    on nodes a request has locked (`inc_lock_ref`: a running request's matched path, PEER-SGL-5)
    apart from the rest, which eviction may free."""
    locked = sum(len(node.key) for node in cache._nodes() if node.locks > 0 and node is not cache.root)
    return {"total_size": cache.tree_tokens, "protected_size": locked, "evictable_size": cache.tree_tokens - locked}


def named_blocks(what: dict, steps: list, step: dict) -> list:
    """The blocks an observation names: `blocks` as ids, as the name of one of the step's own
    block lists (`free_queue`, `blocks`, `hit_blocks`, `new_blocks`), as `{"step": s, "value":
    LIST, "from": a, "to": b}`, a slice of step s's list (a test's `block_part1[:3]`), or as
    `{"cached": [g, i], "request": s}` (`_holders`)."""
    named = what.get("blocks")
    if isinstance(named, dict) and "cached" in named:     # get_cached_block(block_hashes[i], [g])
        return _holders(named, steps, step)
    if isinstance(named, str):
        named = {"step": None, "value": named}
    if isinstance(named, dict):
        source = step if named.get("step") is None else steps[named["step"]]
        if source.get(named["value"]) is None:
            raise NotExpressible(f"observation {what}: the step has no {named['value']}")
        return source[named["value"]][named.get("from", 0):named.get("to")]
    if not isinstance(named, list):
        raise NotExpressible(f"observation {what}: `blocks` names block ids, a block list or a slice of one")
    return named


def extra_keys(step: dict, what: dict):
    """PEER-VLLM-2's extra keys of block `block` of the step's request (or of the tokens `tokens`:
    [start, end)), in the order vLLM's `generate_block_hash_extra_keys` lists them: the adapter
    (the kit's key: [name, path]), each image overlapping the range as [hash, offset from its
    start], a non-empty salt where the range starts at token 0; None when there are none. What
    they hash to is the kit's own (PEER-VLLM-1)."""
    request = step.get("request")
    if request is None:
        raise NotExpressible(f"observation {what}: the step sends no request")
    if "tokens" in what:
        start, end = what["tokens"]
        block, size = (0, 1) if start == 0 else (1, start)   # vllm_extra_keys reads blocks: block 1 of size `start`
    else:
        block, size = what["block"], what["block_size"]
        end = (block + 1) * size
    keys = peers.vllm_extra_keys(request, block, size, end)
    form = {"lora": lambda k: [k[1], k[2]], "mm": lambda k: [k[1], k[2]], "cache_salt": lambda k: k[1]}
    out = [form[kind](k) for kind in ("lora", "mm", "cache_salt") for k in keys if k[0] == kind]
    return out or None


def same_unit_key(what: dict, steps: list) -> bool:
    """`{"step": s, "value": "same_unit_key", "unit": i, "as": t}`: whether the requests of steps
    s and t have the same key for hash unit i (a test comparing `block_hashes[i]` of two
    requests; PEER-VLLM-1 says which blocks share a key, not its bits)."""
    mine, theirs = steps[what["step"]].get("unit_keys"), steps[what["as"]].get("unit_keys")
    unit = what["unit"]
    if mine is None or theirs is None or unit >= min(len(mine), len(theirs)):
        raise NotExpressible(f"observation {what}: both requests need a key for hash unit {unit}")
    return mine[unit] == theirs[unit]


def _holders(named: dict, steps: list, step: dict) -> list:
    """`{"cached": [g, i], "request": s}`: the block that holds group g's key of hash unit i of
    step s's request after the step (vLLM's `get_cached_block(req.block_hashes[i], [g])[0]`)."""
    (g, unit), request = named["cached"], steps[named["request"]].get("request")
    keys = step["pool"]["keys"]
    units = steps[named["request"]]["unit_keys"] if request is not None else []
    if unit >= len(units):
        raise NotExpressible(f"step {named['request']}'s request has no hash unit {unit}")
    holders = [block for block, key in keys.items() if key == (g, units[unit])]
    if len(holders) != 1:
        raise NotExpressible(f"{len(holders)} blocks hold group {g}'s key of hash unit {unit}: get_cached_block "
                             "returns the one cached first, which the snapshot does not order")
    return holders
