"""Recurrent and hybrid models (spec/context-reuse.md section 8, CR-HYB-1 .. CR-HYB-7).

Recurrent state summarizes a whole prefix, so it is reused only at exact lengths where it was
captured: checkpoint records at sequence endpoints, keyed by the exact identity of [0, L).
While tracing, the lookup, the captures and the skips record their steps (reference/trace.py).
"""

from .capacity import PARTIAL_KV, RECURRENT, Record
from .identity import another_identity
from .planning import NO_REUSABLE_PREFIX, STANDARD, Plan, ceil_div
from .publication import COMMITTED, DECODE_END, EXISTING, PREFILL_END, attempts_decode_end, not_published, traced

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


def plan_checkpoint(cache, history, n: int, page_size: int, pure: bool, steps=None) -> Plan:
    """CR-HYB-5: reuse the longest checkpoint length L < n whose record has exactly the identity
    of [0, L); matched = reused = L, kind standard; no full-input rewind. CR-HYB-6: the hit pins
    the record's floor(L/P) pages and needs ceil(n/P) - floor(L/P) private pages (none when
    pure recurrent). CR-HYB-7: no media trim; a checkpoint never splits an item. `steps`: the
    sequence's trace recorder, or None."""
    total = 0 if pure else ceil_div(n, page_size)
    held = sorted((L for L in cache.lengths if L < n), reverse=True)
    for length in held:
        record = cache.records.get((history.exact_digest(length), length))
        if record is not None:
            plan = Plan(STANDARD, length, length, list(record.pages), total - len(record.pages), record)
            if steps is not None:
                by = f", captured by {record.step.by}" if record.step is not None and record.step.by else ""
                _planned(steps, plan, "CR-HYB-5", f"the longest checkpoint length L < n = {n} recorded for exactly "
                                                  f"positions 0-{length - 1} is L = {length}{by}", (record.step,))
            return plan
    plan = Plan(NO_REUSABLE_PREFIX, 0, 0, [], total)
    if steps is not None:
        _planned(steps, plan, *_no_checkpoint(steps, history, n, held))
    return plan


def _planned(steps, plan: Plan, rule: str, why: str, causes: tuple) -> None:
    for value, to in (("matched_tokens", plan.matched), ("reused_tokens", plan.reused), ("plan", plan.kind)):
        steps(rule, value, to, why, causes=causes)
    steps(rule, "hybrid_restore", plan.record is not None,
          f"a checkpoint hit restores its recurrent state (CR-HYB-6): {why}", causes=causes)


def _no_checkpoint(steps, history, n: int, held: list) -> tuple:
    """(rule, why, causes) of a lookup that finds no checkpoint: the same ids are held under
    another identity (CR-ID-3, CR-ID-4), the checkpoint was evicted (CR-CAP-4/6), or none was
    captured for a prefix of this input (CR-HYB-5)."""
    cache, request = steps.cache, steps.seq.request
    lengths = ", ".join(map(str, held[:8][::-1])) or "none"
    for L in held:
        other = cache.same_ids(history.ids_digest(L), None, cache.records.__contains__)
        if other is not None:
            rule, why = another_identity(steps.name, request.lora_name, request.spans, other, L, "checkpoints")
            return rule, f"no checkpoint of exactly this prefix (lengths held below n = {n}: {lengths}): {why}", ()
    for key, step in cache.gone.items():
        L = key[1] if isinstance(key[1], int) else None
        if L is not None and L < n and key == (history.exact_digest(L), L):
            return step.rule, f"the checkpoint of positions 0-{L - 1} is gone: {step.why}", (step,)
    return "CR-HYB-5", (f"no checkpoint recorded for exactly a prefix of this input (lengths held below n = {n}: "
                        f"{lengths}): nothing is reused"), ()


def restore_pins(record) -> list:
    """CR-HYB-6: the snapshot slots a hybrid hit pins until the end of prefill, after its batch's
    prefill-end captures are reserved."""
    pins = [(RECURRENT, record.recurrent_slot)]
    if record.partial_kv_slot is not None:
        pins.append((PARTIAL_KV, record.partial_kv_slot))
    return pins


def decode_end_length(seq, including_generated: bool, steps=None) -> int:
    """CR-HYB-3: a sequence finishing in a decode step captures the checkpoint at its endpoint
    L = n + g - 1, unless it has captured there already; none after bypass (CR-PUB-7) or under
    prefill_state_only (CR-PUB-3). 0: none."""
    if not attempts_decode_end(seq, including_generated, steps):
        return 0
    length = seq.n + seq.generated_count - 1
    if length > seq.checkpoint_length:
        return length
    if steps is not None:
        not_published(steps, DECODE_END, "CR-HYB-3", f"its endpoint L = n + g - 1 = {length} was already captured")
    return 0


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
        if seq.steps is not None:
            cache.trace.actor = seq.steps
        if not cache.reserve((0, 1, 1 if partial else 0)):
            seq.pressure_skips += 1
            metrics.pressure_skips += 1
            if seq.steps is not None:
                seq.steps("CR-HYB-4", "snapshot_pressure_skips", seq.pressure_skips,
                          f"the capture at L = {length} cannot reserve its snapshot slot(s), even by evicting every "
                          "record: skipped (not an attempt)", before=seq.pressure_skips - 1)
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
            if seq.steps is not None:
                _traced(seq, publication, record, key)
            cache.touch(record)
            for pool, r in slots:
                cache.pools[pool].unpin(r)
        else:
            truth = seq.history.truth
            pages = cache.canonical_pages(seq.history.keys(full), seq.pages, truth.keys(full) if truth else None)
            slot = dict(slots)
            step = None
            if seq.steps is not None:                 # before the insertion, which may evict (CR-CAP-6)
                step = _traced(seq, publication, record, key)
            cache.insert(Record(key, pages, length, slot[RECURRENT], slot.get(PARTIAL_KV),
                                truth.exact_digest(length) if truth else None, step=step), transfer=slots)


def _traced(seq, publication: dict, record, key):
    """The capture's step (CR-HYB-3) and its status (CR-PUB-4)."""
    length = publication["tokens"]
    how = (f"a checkpoint at the endpoint L = {length} ({'n' if publication['point'] == PREFILL_END else 'n + g - 1'})"
           f" with {publication['pages']} complete page(s)")
    return traced(seq, publication, record, key, "CR-HYB-3", how, seq.history.ids_digest(length))
