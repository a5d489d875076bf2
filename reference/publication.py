"""Publication of page records (spec/context-reuse.md section 4, CR-PUB-1 .. CR-PUB-8).

Vanilla deployments publish page records; recurrent and hybrid deployments publish checkpoint
records instead (hybrid.py, CR-HYB-3).
"""

from .capacity import Record

COMMITTED, EXISTING = "committed", "existing"
PREFILL_END, DECODE_END = "prefill_end", "decode_end"


def prefill_end_pages(seq, page_size: int) -> int:
    """CR-PUB-1: a sequence that did not bypass lookup publishes its floor(n/P) complete pages,
    if at least 1. CR-PUB-7: a bypass sequence never publishes. 0 means no attempt."""
    if seq.lookup_bypass:
        return 0
    return seq.n // page_size


def decode_end_pages(seq, page_size: int, including_generated: bool) -> int:
    """CR-PUB-2: a sequence finishing in a decode step holds n + g - 1 tokens of KV and
    publishes floor((n + g - 1) / P) pages if that is more than it has published.
    CR-PUB-3: none under prefill_state_only. CR-PUB-7: none after bypass. 0 means no attempt."""
    if seq.lookup_bypass or not including_generated:
        return 0
    count = (seq.n + seq.generated_count - 1) // page_size
    return count if count > seq.published_pages else 0


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
    seq.published_pages = count
    publication = {"point": point, "tokens": count * page_size, "pages": count,
                   "status": EXISTING if record is not None else COMMITTED}
    seq.publications.append(publication)
    if record is not None:
        traced_publication(cache, seq, publication, key)
        cache.touch(record)
    else:
        truths = seq.history.truth.keys(count) if seq.history.truth is not None else None
        pages = cache.canonical_pages(keys, seq.pages, truths)
        traced_publication(cache, seq, publication, key)          # before the insertion, which may evict (CR-CAP-6)
        cache.insert(Record(key, pages, count * page_size))
    return publication


def traced_publication(cache, seq, publication: dict, key, upgraded: bool = False) -> None:
    """Record the publication in the cache's trace, if it has one (reference/trace.py)."""
    if cache.trace is not None:
        cache.trace.page_publication(seq, publication, key, cache, upgraded)
