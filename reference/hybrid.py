"""Recurrent and hybrid models (spec/context-reuse.md section 8, CR-HYB-1 .. CR-HYB-7).

Recurrent state summarizes a whole prefix, so it is reused only at exact lengths where it was
captured: checkpoint records at sequence endpoints, keyed by the exact identity of [0, L).
"""

from .capacity import PARTIAL_KV, RECURRENT, Record
from .planning import NO_REUSABLE_PREFIX, STANDARD, Plan, ceil_div
from .publication import COMMITTED, DECODE_END, EXISTING

STATE_BYTES = {"fp32": 4, "fp16": 2}


def slot_sizes(engine) -> tuple[int, int]:
    """CR-HYB-1: bytes of one recurrent snapshot slot (S_r) and one partial-KV slot (S_p),
    from the engine's `snapshot_slot_bytes` when it states them."""
    stated = engine.snapshot_slot_bytes or {}
    s_r = stated.get("recurrent")
    if s_r is None and engine.recurrent is not None:
        r = engine.recurrent
        b = STATE_BYTES[r["state_dtype"]]
        s_r = engine.recurrent_layers * (r["num_heads"] * r["head_dim"] * r["state_size"] * b
                                         + r["conv_dim"] * r["conv_kernel"] * b)
    s_p = stated.get("partial_kv")
    if s_p is None:
        s_p = engine.attention_layers * engine.num_kv_heads * engine.head_dim * 2 * engine.tokens_per_page * 2
    return s_r or 0, s_p


def snapshot_slots(engine, flags) -> tuple[int, int]:
    """CR-HYB-1: (recurrent slots, partial-KV slots) = floor(budget / slot size); vanilla
    deployments have neither pool, pure recurrent ones no partial-KV pool."""
    if engine.kind == "vanilla":
        return 0, 0
    s_r, s_p = slot_sizes(engine)
    recurrent = flags.recurrent_snapshot_bytes // s_r if s_r else 0
    partial = flags.partial_kv_snapshot_bytes // s_p if engine.kind == "hybrid" and s_p else 0
    return recurrent, partial


def required_pools_message(engine, flags) -> str | None:
    """CR-HYB-2: the start-up refusal when a required snapshot pool has 0 slots."""
    if engine.kind == "vanilla":
        return None
    recurrent, partial = snapshot_slots(engine, flags)
    if recurrent == 0:
        return "Hybrid context reuse requires at least one recurrent snapshot slot"
    if engine.kind == "hybrid" and partial == 0:
        return "Hybrid attention context reuse requires at least one partial-KV snapshot slot"
    return None


def plan_checkpoint(cache, history, n: int, page_size: int, pure: bool) -> Plan:
    """CR-HYB-5: reuse the longest checkpoint length L < n whose record has exactly the identity
    of [0, L); matched = reused = L, kind standard; no full-input rewind. CR-HYB-6: the hit pins
    the record's floor(L/P) pages and needs ceil(n/P) - floor(L/P) private pages (none when
    pure recurrent). CR-HYB-7: no media trim; a checkpoint never splits an item."""
    total = 0 if pure else ceil_div(n, page_size)
    for length in sorted((L for L in cache.lengths if L < n), reverse=True):
        record = cache.records.get((history.exact_digest(length), length))
        if record is not None:
            return Plan(STANDARD, length, length, list(record.pages), total - len(record.pages), record)
    return Plan(NO_REUSABLE_PREFIX, 0, 0, [], total)


def restore_pins(record) -> list:
    """CR-HYB-6: the snapshot slots a hybrid hit pins until the end of prefill, after its batch's
    prefill-end captures are reserved."""
    pins = [(RECURRENT, record.recurrent_slot)]
    if record.partial_kv_slot is not None:
        pins.append((PARTIAL_KV, record.partial_kv_slot))
    return pins


def capture_checkpoints(cache, wanted: list, point: str, page_size: int, pure: bool, metrics) -> None:
    """Capture the checkpoints of one step, `wanted` = [(sequence, L)] in slot order: reserve
    every capture, then publish every staged one (CR-HYB-4)."""
    publish_captures(cache, reserve_captures(cache, wanted, point, page_size, pure, metrics), point, page_size,
                     pure, metrics)


def reserve_captures(cache, wanted: list, point: str, page_size: int, pure: bool, metrics) -> list:
    """The first pass of CR-HYB-4, `wanted` = [(sequence, L)] in slot order; returns the staged
    captures [(sequence, L, slots)].

    CR-HYB-3: a capture at a length the sequence already published is skipped.
    CR-HYB-4: in slot order, reserve one recurrent slot and, in a hybrid deployment when
    L % P != 0, one partial-KV slot, evicting with the planner; an infeasible reservation is a
    snapshot-pressure skip (not an attempt). Prefill-end captures are reserved during the
    prefill, while the snapshot slots of restored records are still pinned (CR-HYB-6; Edge-LLM
    0.10 `enqueuePrefillCaptures` runs before `finalizePrefillPublication` releases them).
    A decode step with a staged capture counts one capture synchronization; prefill-end captures
    ride the prefill's own synchronization and count none (CR-MET-11; Edge-LLM 0.10 increments
    hybridCaptureSynchronizations only in ContextCacheCoordinator::completeDecodeStep).
    """
    staged = []
    for seq, length in wanted:
        if length <= seq.checkpoint_length:
            continue
        partial = not pure and length % page_size != 0
        if cache.trace is not None:
            cache.trace.actor = seq
        if not cache.reserve((0, 1, 1 if partial else 0)):
            seq.pressure_skips += 1
            metrics.pressure_skips += 1
            if cache.trace is not None:
                cache.trace.pressure_skip(seq, length)
            continue
        slots = [(RECURRENT, cache.pools[RECURRENT].allocate())]
        if partial:
            slots.append((PARTIAL_KV, cache.pools[PARTIAL_KV].allocate()))
        staged.append((seq, length, slots))
    if staged and point == DECODE_END:
        metrics.capture_synchronizations += 1
    return staged


def publish_captures(cache, staged: list, point: str, page_size: int, pure: bool, metrics) -> None:
    """The second pass of CR-HYB-4, in slot order: publish each staged capture. An existing
    (digest, L) record is touched and the reserved slots are freed again; otherwise a new record
    holds the canonical pages of floor(L/P) complete pages and the reserved slots."""
    for seq, length, slots in staged:
        key = (seq.history.exact_digest(length), length)
        full = 0 if pure else length // page_size
        record = cache.records.get(key)
        seq.checkpoint_length = length
        publication = {"point": point, "tokens": length, "pages": full,
                       "status": EXISTING if record is not None else COMMITTED}
        seq.publications.append(publication)
        metrics.published(publication)
        if record is not None:
            _traced(cache, seq, publication, key)
            cache.touch(record)
            for pool, r in slots:
                cache.pools[pool].unpin(r)
        else:
            truth = seq.history.truth
            pages = cache.canonical_pages(seq.history.keys(full), seq.pages, truth.keys(full) if truth else None)
            slot = dict(slots)
            _traced(cache, seq, publication, key)      # before the insertion, which may evict (CR-CAP-6)
            cache.insert(Record(key, pages, length, slot[RECURRENT], slot.get(PARTIAL_KV),
                                truth.exact_digest(length) if truth else None), transfer=slots)


def _traced(cache, seq, publication: dict, key) -> None:
    """Record the capture in the cache's trace, if it has one (reference/trace.py)."""
    if cache.trace is not None:
        cache.trace.checkpoint_publication(seq, publication, key, cache)
