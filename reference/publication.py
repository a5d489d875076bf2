"""Publication of page records (spec/context-reuse.md section 4, CR-PUB-1 .. CR-PUB-8).

Vanilla deployments publish page records; recurrent and hybrid deployments publish checkpoint
records instead (hybrid.py, CR-HYB-3). While tracing, each publication records its step and its
status (CR-PUB-4), and each publication not attempted says why (reference/trace.py).
"""

from .capacity import Record
from .identity import another_identity

COMMITTED, EXISTING = "committed", "existing"
PREFILL_END, DECODE_END = "prefill_end", "decode_end"


def prefill_end_pages(seq, page_size: int, steps=None) -> int:
    """CR-PUB-1: a sequence that did not bypass lookup publishes its floor(n/P) complete pages,
    if at least 1. CR-PUB-7: a bypass sequence never publishes. 0 means no attempt. `steps`:
    the sequence's trace recorder, or None; the pages a bypass sequence computed are withheld."""
    if seq.lookup_bypass:
        if steps is not None:
            why = ("it was forced cold (CR-CAP-7): a sequence that bypassed lookup never publishes" if seq.forced_cold
                   else "a sequence that bypassed lookup never publishes" + (" (a warmup run, CR-POL-4)"
                                                                              if seq.warmup else ""))
            step = not_published(steps, PREFILL_END, "CR-PUB-7", why)
            steps.cache.withhold(seq.history.keys(seq.n // page_size), step)
        return 0
    if seq.n < page_size and steps is not None:
        not_published(steps, PREFILL_END, "CR-PUB-1", f"n = {seq.n} < P = {page_size}: no complete page to publish")
    return seq.n // page_size


def attempts_decode_end(seq, including_generated: bool, steps=None) -> bool:
    """CR-PUB-7: a sequence that bypassed lookup attempts no decode-end publication; CR-PUB-3:
    nor any sequence under prefill_state_only."""
    if seq.lookup_bypass:
        if steps is not None:
            not_published(steps, DECODE_END, "CR-PUB-7", "a sequence that bypassed lookup never publishes")
        return False
    if not including_generated:
        if steps is not None:
            not_published(steps, DECODE_END, "CR-PUB-3",
                          "under prefill_state_only no decode-end publication is attempted")
        return False
    return True


def decode_end_pages(seq, page_size: int, including_generated: bool, steps=None) -> int:
    """CR-PUB-2: a sequence finishing in a decode step holds n + g - 1 tokens of KV and
    publishes floor((n + g - 1) / P) pages if that is more than it has published.
    CR-PUB-3: none under prefill_state_only. CR-PUB-7: none after bypass. 0 means no attempt."""
    if not attempts_decode_end(seq, including_generated, steps):
        return 0
    held = seq.n + seq.generated_count - 1
    count = held // page_size
    if count > seq.published_pages:
        return count
    if steps is not None:
        not_published(steps, DECODE_END, "CR-PUB-2", f"n + g - 1 = {held} tokens of KV make "
                      f"floor({held}/{page_size}) = {count} page(s), no more than the {seq.published_pages} it published")
    return 0


def publish_pages(cache, seq, count: int, point: str, page_size: int) -> dict:
    """Publish the first `count` pages of the sequence's token history as one record.

    CR-PUB-4: the record key is the endpoint (last page key, page count); an existing key is
    touched and counts `existing`, else a new record is inserted and counts `committed`.
    CR-PUB-5: each page of a new record is the indexed page for its key, else the publisher's
    own page (which enters the index). CR-PUB-6: the record holds one cache reference per page.
    CR-PUB-8: every call is one attempt ending committed or existing.
    """
    keys = seq.history.keys(count)
    key = (keys[-1], count)
    record = cache.records.get(key)
    reason = _reason(seq, count, point, page_size) if seq.steps is not None else None
    seq.published_pages = count
    publication = {"point": point, "tokens": count * page_size, "pages": count,
                   "status": EXISTING if record is not None else COMMITTED}
    seq.publications.append(publication)
    if record is not None:
        if reason is not None:
            traced(seq, publication, record, key, *reason)
        cache.touch(record)
    else:
        truths = seq.history.truth.keys(count) if seq.history.truth is not None else None
        pages = cache.canonical_pages(keys, seq.pages, truths)
        step = None
        if reason is not None:                      # before the insertion, which may evict (CR-CAP-6)
            step = traced(seq, publication, record, key, *reason)
        cache.insert(Record(key, pages, count * page_size, step=step))
    return publication


def _reason(seq, count: int, point: str, page_size: int) -> tuple:
    """(rule, how, ids-only key) of a page publication about to be made (CR-PUB-1, CR-PUB-2)."""
    ids_key = seq.history.ids_keys(count)[-1] + count.to_bytes(8, "little")
    if point == PREFILL_END:
        return "CR-PUB-1", (f"n = {seq.n}, P = {page_size}: the prefill-end record holds floor(n/P) = {count} "
                            "complete page(s)"), ids_key
    held = seq.n + seq.generated_count - 1
    return "CR-PUB-2", (f"n = {seq.n} and g = {seq.generated_count}: the sequence holds n + g - 1 = {held} tokens "
                        f"of KV, floor({held}/{page_size}) = {count} page(s), more than the {seq.published_pages} "
                        "published at prefill end"), ids_key


def not_published(steps, point: str, rule: str, why: str):
    """The step of a publication not attempted at `point` (CR-PUB-1/2/3/7, CR-HYB-3, CR-SPEC-4)."""
    return steps(rule, f"publications.{point}", None, why, refs={"by": steps.name})


def traced(seq, publication: dict, record, key, rule: str, how: str, ids_key: bytes):
    """While tracing, before the record is touched, upgraded or inserted: the publication's step
    (`rule`, `how`) and its status: the record that holds the endpoint (existing, CR-PUB-4; a
    base-only one upgraded, CR-SPEC-4), or why none does (an eviction, CR-CAP-4/6; the same ids
    under another identity, CR-ID-3/4). The cache keeps where the pages came from and the
    publisher's partial last page (CR-ID-2). Returns the publication step."""
    steps, request = seq.steps, seq.request
    cache, k = steps.cache, len(seq.publications) - 1
    step = steps(rule, f"publications[{k}]", {x: publication[x] for x in ("point", "tokens", "pages")}, how,
                 refs={"by": steps.name})
    status = f"publications[{k}].status"
    if record is None:
        gone = cache.gone.get(key)
        other = cache.same_ids(ids_key, key, cache.records.__contains__)
        if gone is not None:
            rule, why, causes = gone.rule, f"the record that held this endpoint is gone: {gone.why}", (gone,)
        elif other is not None:
            rule, why = another_identity(steps.name, request.lora_name, request.spans, other, publication["tokens"],
                                         "records")
            why, causes = f"a new endpoint: {why}", ()
        else:
            rule, why, causes = "CR-PUB-4", "no record holds this endpoint: a new record is inserted", ()
        steps(rule, status, COMMITTED, why, causes=(*causes, step))
    elif publication["status"] == EXISTING:
        by = record.step.by if record.step is not None and record.step.by else "an earlier publication"
        steps("CR-PUB-4", status, EXISTING, f"the record of {by} already holds this endpoint: it is touched, nothing "
                                            "new is inserted", causes=(record.step, step))
    else:
        steps("CR-SPEC-4", status, COMMITTED, "a base-only record holds this endpoint: it is upgraded with the draft "
                                              "path, a new pair", causes=(record.step, step))
    cache.by_ids.setdefault(ids_key, {})[key] = (steps.name, request.lora_name)
    if not seq.warmup:
        _kept_tail(cache, seq, publication)
        cache.indexed(step, seq.history, publication["pages"], request.lora_name)
    return step


def _kept_tail(cache, seq, publication: dict) -> None:
    """The publisher's partial page past its record, which has no identity (CR-ID-2): a later
    miss on the same ids says so."""
    history, pages = seq.history, publication["pages"]
    P = history.P
    held = min(len(history.tokens), seq.n if publication["point"] == PREFILL_END
               else seq.n + seq.generated_count - 1)
    if held % P and held // P == pages:
        parent = history.key(pages - 1) if pages else history.root
        cache.tails.setdefault(parent, []).append((history.tokens[pages * P:held], seq.steps.name))
