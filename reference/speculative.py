"""Attention-only EAGLE3 context reuse (spec/context-reuse.md section 12, CR-SPEC-1 .. CR-SPEC-8).

An EAGLE deployment keeps two KV caches: the base model's pages and the draft head's pages. The
draft KV of position t is computed from the base model's hidden state at t and the token at
t + 1, so a draft page depends on one token beyond its own positions. Hence reuse needs a base
page and its draft page together (a *pair*), taken from one record whose draft path was computed
over the same history, and the last reused pair is always recomputed (its last position was
conditioned on a token the consumer may not share).

A sequence is *paired* when it holds draft pages of the managed draft pool: an EAGLE deployment
with reuse, a greedy request file (CR-SPEC-7) and a sequence that looks up (CR-SPEC-6). Every
other sequence of an EAGLE deployment plans and publishes as a vanilla one. While tracing, the
pairing, the replay and the pair publications record their steps (reference/trace.py).
"""

from .capacity import Record
from .errors import Unreported
from .planning import FULL_INPUT_REWIND, NO_REUSABLE_PREFIX, STANDARD, Plan, ceil_div, why_missing
from .publication import COMMITTED, EXISTING, PREFILL_END, DECODE_END, attempts_decode_end, not_published, traced
from .trace import pages_of


def eagle_reuse(engine, reuse: bool) -> bool:
    """CR-SPEC-1, CR-SUP-6: context reuse on an attention-only EAGLE deployment (a hybrid one
    is refused at start-up)."""
    return reuse and engine.deployment.get("spec_decode") == "eagle" and engine.recurrent_layers == 0


def greedy_file(doc: dict) -> bool:
    """CR-SPEC-7: EAGLE decodes speculatively only under greedy sampling (temperature 0 or
    top_k 1, Edge-LLM's defaults being temperature 1 and top_k 50); other files fall back to
    vanilla decoding."""
    return doc.get("temperature", 1.0) == 0 or doc.get("top_k", 50) == 1


def pairing_record(cache, base_pages: list):
    """CR-SPEC-1: the record whose draft path pairs the longest prefix of `base_pages` (the
    pages a vanilla lookup matched, CR-PLAN-1); (record, paired pages), or (None, 0).

    A record pairs k pages when its draft path has at least k pages and its k-th base page is
    the sequence's k-th matched page (page identity covers the whole prefix, CR-ID-1, so the
    first k pages then agree). Of several records pairing the same k, the most recently used
    one is taken."""
    best, paired = None, 0
    for record in reversed(cache.records.values()):
        if not record.draft_pages:
            continue
        k = min(len(record.draft_pages), len(base_pages))
        while k > paired and record.pages[k - 1] != base_pages[k - 1]:
            k -= 1
        if k > paired:
            best, paired = record, k
    return best, paired


def paired_lookup(history, n: int, page_size: int, cache) -> tuple:
    """CR-SPEC-1: the base pages matched (CR-PLAN-1), the record whose draft path pairs the
    longest prefix of them and how many it pairs: (base pages, record or None, paired). The
    lookup alone (Edge-LLM 0.10 `DraftPathIndex::lookupLongest`): whether the plan binds the
    record is plan_paired's decision."""
    base_pages = []
    for key in history.keys(n // page_size):
        page = cache.index.get(key)
        if page is None:
            break
        base_pages.append(page)
    record, paired = pairing_record(cache, base_pages)
    return base_pages, record, paired


def plan_paired(history, n: int, page_size: int, cache, steps=None) -> Plan:
    """CR-SPEC-1: match the base pages (CR-PLAN-1), then pair the longest prefix of them with one
    record's draft path; base-only matches are ignored (no pair: a cold plan).
    CR-SPEC-2: the last paired page is always replayed: kept = paired - 1 pages of both kinds,
    matched = paired * P, reused = (paired - 1) * P; kind full_input_rewind when the aligned input
    was paired whole, no_reusable_prefix when nothing remains, else standard.
    CR-SPEC-6: the private demand is ceil(n/P) - kept in each pool; the pairing record is
    protected during the admission (plan.record) and its kept draft pages pinned.
    CR-SPEC-1: a hit that pairs one page keeps nothing and binds no record (plan.record None):
    the admission neither protects nor touches it (Edge-LLM 0.10 `makeSpecReusePlan` resets
    `draftRecord` when no base page is kept, reusePlan.cpp:241-244; the manager protects and
    touches only a bound record, contextCacheManager.cpp:443, 468-471). `steps`: the
    sequence's trace recorder, or None."""
    base_pages, record, paired = paired_lookup(history, n, page_size, cache)
    total = ceil_div(n, page_size)
    if paired == 0:
        if steps is not None:
            _unpaired(steps, history, n, page_size, len(base_pages))
        return Plan(NO_REUSABLE_PREFIX, 0, 0, [], total, draft_private=total)
    kept = paired - 1
    if paired * page_size == n:
        kind = FULL_INPUT_REWIND
    else:
        kind = STANDARD if kept else NO_REUSABLE_PREFIX
    bound = record if kept else None               # CR-SPEC-1: a one-page pairing binds no record
    plan = Plan(kind, paired * page_size, kept * page_size, base_pages[:kept], total - kept, bound,
                draft_kept=record.draft_pages[:kept], draft_private=total - kept, replay=True)
    if steps is not None:
        by = record.step.by if record.step is not None and record.step.by else "an earlier request"
        pair = steps("CR-SPEC-1", "matched_tokens", plan.matched, f"{len(base_pages)} base page(s) match; the "
                     f"record of {by} pairs {pages_of(0, paired)} with its draft path: matched {plan.matched}",
                     causes=(record.step,))
        replay = (f"the last paired page ({pages_of(kept, paired)}) is always recomputed: {kept} pair(s) kept, "
                  f"reused {plan.reused}, kind {kind}")
        steps("CR-SPEC-2", "reused_tokens", plan.reused, replay, before=plan.matched, causes=(pair,))
        steps("CR-SPEC-2", "plan", kind, replay, causes=(pair,))
        binding = (f"the pairing record of {by} is bound: protected during the admission and touched after it"
                   if bound is not None else
                   f"one page paired and none kept: the record of {by} is not bound, so the admission neither "
                   "protects it from eviction nor touches it")
        steps("CR-SPEC-1", "pairing_record", bound is not None, binding, causes=(pair,))
    return plan


def _unpaired(steps, history, n: int, page_size: int, base: int) -> None:
    """The steps of a paired lookup that pairs nothing: base-only matches are ignored (CR-SPEC-1),
    or no base page matched (why page 0 is missing)."""
    if base:
        rule, why, causes = "CR-SPEC-1", (f"{pages_of(0, base)} match base pages, but no record's draft path pairs "
                                          "them: base-only matches are ignored, the plan is cold"), ()
    elif n < page_size:
        rule, why, causes = "CR-PLAN-1", "no page is cached", ()
    else:
        rule, why, causes = why_missing(steps, history, 0)
    for value, to in (("matched_tokens", 0), ("reused_tokens", 0), ("plan", NO_REUSABLE_PREFIX)):
        steps(rule, value, to, why, causes=causes)


def paired_pages(tokens: int, page_size: int) -> int:
    """CR-SPEC-4: a publication of a paired sequence whose base and draft KV both cover the first
    `tokens` positions holds floor(tokens / P) pairs."""
    return max(tokens, 0) // page_size


def prefill_end_pairs(seq, page_size: int, steps=None) -> int:
    """CR-SPEC-4 with CR-PUB-1: the prefill-end publication of a paired sequence; 0: none.

    The draft prefill runs after the first token is sampled, over the prompt shifted by one with
    that token appended, so the draft KV covers all n prompt positions and the boundary frozen at
    prefill end is n (Edge-LLM 0.10 `EagleDecoder::initializeForGeneration` sets the common
    length to the input length; `ContextCacheCoordinator::finalizePrefillPublication` freezes
    it and `publishFrozenSpecPrefill` publishes floor(n / P) pairs at the first verification
    or at finish)."""
    if seq.n < page_size and steps is not None:
        not_published(steps, PREFILL_END, "CR-SPEC-4", f"n = {seq.n} < P = {page_size}: no pair")
    return paired_pages(seq.n, page_size)


def decode_end_pairs(seq, page_size: int, including_generated: bool, steps=None) -> int:
    """CR-SPEC-4 with CR-PUB-2/3: the decode-end publication of a paired sequence holding
    n + g - 1 tokens of base KV, if it is more than it has published; 0: none.

    Each verification round adds its accepted tokens to the boundary both caches cover at the
    start of the next round, so at completion the draft covers n + g - 1 - a positions, a >= 1
    being what the last verification accepted (Edge-LLM 0.10 `EagleDecoder::decodeStep` adds
    `mPendingDraftAcceptLengths` to `mCommonMaterializedStateLengths`; `completeDecodeStep`
    publishes at that common length). Where the backend does not report a, the count is
    predicted only when every a in 1 .. g - 1 gives the same answer (none: nothing beyond what
    prefill published); otherwise it raises Unreported, never guessing."""
    if not attempts_decode_end(seq, including_generated, steps):
        return 0
    most = paired_pages(seq.n + seq.generated_count - 2, page_size)          # a = 1
    if most <= seq.published_pages:
        if steps is not None:
            covered = seq.n + seq.generated_count - 2
            not_published(steps, DECODE_END, "CR-PUB-2", f"a paired sequence publishes what both caches cover "
                          f"(CR-SPEC-4): its last verification accepted a >= 1 token(s), so at most n + g - 2 = "
                          f"{covered} positions, floor({covered}/{page_size}) = {most} pair(s), no more than the "
                          f"{seq.published_pages} it published")
        return 0
    if seq.generated is None:
        return most                     # the caller asks for the transcript first (NeedsTranscript)
    if seq.last_accepted is None:
        raise Unreported(
            f"request {seq.request.index}: its decode-end paired publication covers "
            f"floor((n + g - 1 - a) / P) pages (n = {seq.n}, g = {seq.generated_count}, P = {page_size}), a being the "
            f"tokens its last EAGLE verification accepted: between {paired_pages(seq.n, page_size)} and {most} "
            "pages, and the backend does not report a (output field last_verification_accepted)")
    covered = seq.n + seq.generated_count - 1 - seq.last_accepted
    count = paired_pages(covered, page_size)
    if count > seq.published_pages:
        return count
    if steps is not None:
        not_published(steps, DECODE_END, "CR-PUB-2", f"a paired sequence publishes what both caches cover "
                      f"(CR-SPEC-4): its last verification accepted a = {seq.last_accepted}, so n + g - 1 - a = "
                      f"{covered} positions, floor({covered}/{page_size}) = {count} pair(s), no more than the "
                      f"{seq.published_pages} it published")
    return 0


def publish_pairs(cache, seq, count: int, point: str, page_size: int) -> dict:
    """Publish the first `count` pages of a paired sequence with its draft path (CR-SPEC-4).

    A new endpoint is a new record holding the canonical base pages (CR-PUB-5) and the
    sequence's own first `count` draft pages: committed, a pair publication. An endpoint held
    as a base-only record is upgraded with the draft path and touched: committed, a pair
    publication. An endpoint already paired is touched: existing (CR-PUB-4)."""
    keys = seq.history.keys(count)
    key = (keys[-1], count)
    record = cache.records.get(key)
    draft = seq.draft_pages[:count]
    paired = record is None or record.draft_pages is None
    seq.published_pages = count
    publication = {"point": point, "tokens": count * page_size, "pages": count,
                   "status": COMMITTED if paired else EXISTING}
    seq.publications.append(publication)
    step = None
    if record is not None:
        if seq.steps is not None:
            _traced(seq, publication, record, key, upgraded=paired)
        cache.touch(record)
        if paired:
            cache.attach_draft(record, draft)
    else:
        truths = seq.history.truth.keys(count) if seq.history.truth is not None else None
        pages = cache.canonical_pages(keys, seq.pages, truths)
        if seq.steps is not None:                             # before the insertion, which may evict (CR-CAP-6)
            step = _traced(seq, publication, record, key)
        cache.insert(Record(key, pages, count * page_size, draft_pages=draft, step=step))
    return publication, paired


def _traced(seq, publication: dict, record, key, upgraded: bool = False):
    """The pair publication's step (CR-SPEC-4) and its status (CR-PUB-4, or the upgrade)."""
    pages = publication["pages"]
    how = (f"a paired sequence publishes base and draft pages together: {pages} pair(s), the boundary both caches "
           "cover" + (" (its base-only record upgraded with the draft path)" if upgraded else ""))
    ids_key = seq.history.ids_keys(pages)[-1] + pages.to_bytes(8, "little")
    return traced(seq, publication, record, key, "CR-SPEC-4", how, ids_key)
