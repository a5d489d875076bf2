"""The decision trace: a rule-tagged step wherever the oracle decides a predicted value
(spec/RUNNING.md section 7).

A step says which rule decided which value, the value it decided (and, where it changed one,
the value before), why in the request's own terms, what it refers to where a reader of the
trace needs it (`refs`: the request that published a page or record, the page boundaries a
media trim gave back) and which earlier steps it followed from (its causes):

    CR-PLAN-1   request 2 matched_tokens 8: pages 0-1 (positions 0-7) are in the page index ...
    CR-MEDIA-3  request 2 reused_tokens 8 -> 4: image #1 at positions 6-9 straddles the boundary at 8
    CR-CAP-4    records: the record of request 0 (2 pages) evicted: least recently used, for ...

Steps belong to a request (by its ordinal on the runtime instance: a second request file's
first request comes after the first file's last) or to the file (evictions, pages leaving the
index, failed batches, warmup, what is left unspecified). The runner explains a mismatch by the
step that decided the value that differs, and shows the chain of its causes; nothing outside
the oracle works out a rule again.

Tracing is optional (`Simulator(..., trace=True)`): the counts never depend on it. The trace
keeps what explanations need beside the cache, and only while tracing: where each indexed page
came from, which pages left the index and why, the pages a bypass sequence computed but never
published, and the same pages keyed by their token ids alone (adapter and media left out), so
a miss can say that the ids were cached under another adapter or with other media.
"""

import hashlib
import weakref
from array import array

from .identity import TokenHistory, adapter_root

UNSET = object()
MAX_CAUSES = 4
"""Causes kept per step: a hit names where its pages came from and the latest evictions they
survived, not every eviction of a long run."""


class Step:
    """One decision: `rule` decided `value` (a per-request fact such as "reused_tokens", a
    publication "publications[0]", or a file fact such as "records") to be `to`."""
    __slots__ = ("rule", "value", "to", "before", "why", "refs", "causes", "owner", "order")

    def __init__(self, rule, value, to, why, before=UNSET, refs=None, causes=()):
        self.rule, self.value, self.to, self.why, self.before = rule, value, to, why, before
        self.refs, self.causes = refs, tuple(c for c in causes if c is not None)[:MAX_CAUSES]
        self.owner, self.order = None, 0

    @property
    def changed(self) -> bool:
        """Whether the step changed the value it decided (a step without `before` set it)."""
        return self.before is UNSET or self.before != self.to


def deciding(steps):
    """The step that decided a value, of the steps recorded for it: the last that changed it
    (a later step that checked it and left it as it was explains nothing new)."""
    return next((s for s in reversed(steps) if s.changed), steps[-1]) if steps else None


def chain(steps) -> list:
    """The steps and, transitively, their causes, in the order they were taken (each once)."""
    seen, todo = {}, list(steps)
    while todo:
        s = todo.pop()
        if id(s) not in seen:
            seen[id(s)] = s
            todo.extend(s.causes)
    return sorted(seen.values(), key=lambda s: s.order)


def pages_of(lo: int, hi: int) -> str:
    """`page 3` or `pages 0-2` for the pages lo .. hi - 1."""
    return f"page {lo}" if hi - lo == 1 else f"pages {lo}-{hi - 1}"


def positions_of(lo: int, hi: int) -> str:
    return f"position {lo}" if hi - lo == 1 else f"positions {lo}-{hi - 1}"


def items_in(spans, lo: int, hi: int) -> list:
    """(ordinal from 1, span) of the media items with positions in [lo, hi)."""
    return [(k, s) for k, s in enumerate(spans, 1) if s.start < hi and s.end > lo]


def item_name(k: int, span) -> str:
    return f"{span.modality} #{k} at {positions_of(span.start, span.end)}"


def adapter_name(lora) -> str:
    return f"adapter {lora!r}" if lora is not None else "no adapter"


class Trace:
    """The steps of one runtime instance, and what explaining them needs (module docstring)."""

    def __init__(self, page_size: int):
        self.P = page_size
        self.requests: dict[int, list] = {}
        self.file: list = []
        self._order = 0
        self.actor = None                 # the sequence whose admission, growth or publication runs
        self.origin: dict[bytes, Step] = {}        # page key -> the publication that indexed it
        self.gone_pages: dict[bytes, Step] = {}    # page key -> the step that took it out of the index
        self.gone_records: dict[tuple, Step] = {}  # record key -> its eviction
        self.record_origin: dict[tuple, Step] = {}  # record key -> the publication that inserted it
        self.withheld: dict[bytes, Step] = {}      # page key a bypass sequence computed -> its CR-PUB-7 step
        self.by_ids: dict[bytes, dict] = {}        # ids-only key -> {page or record key: (publisher, adapter)}
        self.page_hit: dict[int, tuple] = {}       # page -> (when, by whom) it was last hit (CR-CAP-5)
        self.touched_at: dict[tuple, int] = {}     # record key -> when it was inserted or last touched
        self._ids_keys = weakref.WeakKeyDictionary()
        self.first_audio = None                    # the ordinal of the first request with audio input
        self.audio_pages: dict[bytes, int] = {}    # first-page key of an audio request's history -> it
        self.tails: dict[bytes, list] = {}         # parent key -> (ids of a publisher's partial last page, who)

    # --- recording ----------------------------------------------------------------------------
    def add(self, owner, rule, value, to, why, before=UNSET, refs=None, causes=()) -> Step:
        """Record a step of request `owner` (an ordinal), or of the file when `owner` is None."""
        step = Step(rule, value, to, why, before, refs, causes)
        steps = self.file if owner is None else self.requests.setdefault(owner, [])
        step.owner, step.order = owner, self._order
        self._order += 1
        steps.append(step)
        return step

    def of(self, seq):
        """The owner of a sequence's steps: its ordinal, or None (the file) for a warmup run."""
        return None if seq.warmup else seq.ordinal

    @staticmethod
    def name(seq) -> str:
        return f"warmup run {seq.warmup} of request {seq.ordinal}" if seq.warmup else f"request {seq.ordinal}"

    def steps_of(self, owner, value: str) -> list:
        return [s for s in self.requests.get(owner, ()) if s.value == value]

    # --- keys of token ids alone (what a miss is compared with) -----------------------------------
    def ids_keys(self, history: TokenHistory, count: int) -> list:
        """The first `count` page keys of `history` over its token ids only: no adapter root, no
        media identity (a media position is its placeholder id), so two pages that differ only
        by adapter or by media share it. Explanation only: never a cache key."""
        keys = self._ids_keys.setdefault(history, [])
        data = history.tokens.tobytes()
        width = array("i").itemsize
        while len(keys) < count:
            j = len(keys)
            parent = keys[-1] if keys else b"ids"
            keys.append(hashlib.sha256(parent + data[j * self.P * width:(j + 1) * self.P * width]).digest())
        return keys[:count]

    def ids_digest(self, history: TokenHistory, length: int) -> bytes:
        """The ids-only identity of the exact prefix [0, length) (checkpoints, CR-HYB-5)."""
        return hashlib.sha256(b"ids-prefix" + history.tokens[:length].tobytes()).digest()

    def _same_ids(self, ids_key: bytes, own_key, lora, live):
        """(publisher, its adapter) of a live page or record with the same ids but another key."""
        for key, (who, their_lora) in (self.by_ids.get(ids_key) or {}).items():
            if key != own_key and live(key):
                return who, their_lora
        return None

    def _identity_cause(self, owner, seq, other, lo: int, hi: int, what: str):
        """The CR-ID-3 / CR-ID-4 step for ids that are cached under another identity."""
        who, their_lora = other
        lora = seq.request.lora_name
        if their_lora != lora:
            return "CR-ID-3", (f"{who} holds the same ids at {positions_of(lo, hi)} under {adapter_name(their_lora)}, "
                               f"{self.name(seq)} runs under {adapter_name(lora)}: adapters never share {what}")
        items = items_in(seq.request.spans, lo, hi)
        named = ", ".join(item_name(k, s) for k, s in items) or "its media"
        return "CR-ID-4", (f"{who} holds the same token ids at {positions_of(lo, hi)}, but {named} is another media "
                           f"item there (pixels, geometry or position): media identity keeps them apart")

    # --- lookup (CR-PLAN-1, CR-ID, CR-BATCH-2, CR-CAP, CR-PUB-7) -----------------------------------
    def missing_page(self, seq, k: int, cache, batch) -> tuple:
        """(rule, why, causes) of why page k of `seq` is not in the page index."""
        P, key = self.P, seq.history.key(k)
        lo, hi = k * P, (k + 1) * P
        where = f"{pages_of(k, k + 1)} ({positions_of(lo, hi)})"
        for mate in batch:
            if (mate is not seq and not mate.lookup_bypass and mate.n // P > k
                    and mate.history.key(k) == key):
                return "CR-BATCH-2", (f"{where} is what {self.name(mate)} of the same batch publishes at its prefill "
                                      "end, after every sequence of the batch was admitted: a batch never reuses "
                                      "its own publications"), ()
        gone = self.gone_pages.get(key)
        if gone is not None:
            root = gone.causes[0] if gone.causes else gone
            return root.rule, f"{where} left the page index: {gone.why}", (gone,)
        withheld = self.withheld.get(key)
        if withheld is not None:
            return withheld.rule, f"{where} was computed by {withheld.refs['by']}, which published nothing: " \
                                  f"{withheld.why}", (withheld,)
        other = self._same_ids(self.ids_keys(seq.history, k + 1)[k], key, seq.request.lora_name,
                               lambda x: x in cache.index)
        if other is not None:
            rule, why = self._identity_cause(self.of(seq), seq, other, 0, hi, "pages")
            return rule, f"{where} is not cached: {why}", ()
        mine = seq.history.tokens[lo:hi]
        for tail, who in self.tails.get(self._parent(seq.history, k), ()):
            if mine[:len(tail)] == tail:
                return "CR-ID-2", (f"{where} is not cached: {who} holds {positions_of(lo, lo + len(tail))} of the "
                                   f"same prefix only in its partial last page, and only complete pages have an "
                                   f"identity"), ()
        return "CR-ID-1", (f"{where} is not cached: its identity (the ids of positions 0-{hi - 1} under "
                           f"{adapter_name(seq.request.lora_name)}, compared exactly, CR-ID-6) is that of no page "
                           "an earlier request published"), ()

    @staticmethod
    def _parent(history, k: int):
        """What page k of `history` hangs from: page k - 1's key, or the adapter's root."""
        return history.key(k - 1) if k else history.root

    def hit_causes(self, key) -> tuple:
        """Where the page of `key` came from, and the latest evictions it survived since."""
        origin = self.origin.get(key)
        if origin is None:
            return ()
        later = [s for s in self.file if s.order > origin.order and s.value == "records"]  # evictions survived
        return (origin, *later[-(MAX_CAUSES - 1):])

    def _profile_identity(self, seq, m: int) -> Step:
        """CR-ID-4 as the semantics profile reads it, where its page keys conflate media items
        (merged runs of adjacent placeholders, or items keyed by their raw bytes)."""
        P = self.P
        runs = [s for s in seq.history.spans if s.start < m * P]
        said = ", ".join(f"{s.modality} run at {positions_of(s.start, s.end)}" for s in runs[:4])
        return self.add(self.of(seq), "CR-ID-4", "matched_tokens", m * P,
                        f"pages 0-{m - 1} are keyed by the semantics profile's media identity, not per item: {said}")

    def looked_up(self, seq, plan, cache, batch) -> None:
        """The steps of a vanilla lookup (CR-PLAN-1 .. CR-PLAN-4): matched, reused and kind."""
        P, n, owner = self.P, seq.n, self.of(seq)
        m, full = plan.matched // P, n // P
        causes = self.hit_causes(seq.history.key(m - 1)) if m else ()
        found = (f"{pages_of(0, m)} (positions 0-{m * P - 1}) {'is' if m == 1 else 'are'} in the page index"
                 + (f", first published by {causes[0].refs['by']}" if causes and causes[0].refs else "")) if m else ""
        for k in range(m):                                # CR-CAP-5: a hit touches no record
            self.page_hit[cache.index[seq.history.key(k)]] = (self._order, self.name(seq))
        if m and seq.history.truth is not None and seq.history.spans:
            causes = causes + (self._profile_identity(seq, m),)
        if m < full:
            rule, why, stop = self.missing_page(seq, m, cache, batch)
            why = (found + "; " if found else "") + why
            causes = causes + stop
        elif full == 0:
            rule, why = "CR-ID-2", f"n = {n} < P = {P}: the input has no complete page, so nothing is looked up"
        else:
            rule = "CR-PLAN-1"
            why = found + (f"; {positions_of(full * P, n)} of the partial last page "
                           f"{'are' if n - full * P > 1 else 'is'} never keyed (CR-ID-2)" if n % P else "")
        self.add(owner, rule, "matched_tokens", m * P, why, causes=causes)
        self.add(owner, rule, "reused_tokens", m * P, why, causes=causes)
        kind = "standard" if m else "no_reusable_prefix"
        self.add(owner, rule, "plan", kind, why, causes=causes)
        if m and m == full:
            self._rewind(seq, plan, owner)

    def _rewind(self, seq, plan, owner) -> None:
        """CR-PLAN-2 on a sequence whose complete pages all matched."""
        P, n = self.P, seq.n
        m = n // P
        if n % P == 0:
            why = (f"n = {n} is a multiple of P = {P} and all {m} pages match: the last page is given back and "
                   f"recomputed, {m - 1} page(s) kept, matched stays {n}")
            self.add(owner, "CR-PLAN-2", "reused_tokens", n - P, why, before=n)
            self.add(owner, "CR-PLAN-2", "plan", "full_input_rewind", why, before="standard")
        else:
            why = (f"every complete page matched, but n = {n} is not a multiple of P = {P}: the partial last page "
                   f"leaves {n - m * P} token(s) to compute, so no page is given back (kind standard)")
            self.add(owner, "CR-PLAN-2", "reused_tokens", m * P, why, before=m * P)
            self.add(owner, "CR-PLAN-2", "plan", "standard", why, before="standard")

    def bypassed(self, seq, flags, policy: str) -> None:
        """A sequence that does not look up (CR-POL-2, -3, -4): its plan and what it computes."""
        owner, n = self.of(seq), seq.n
        if seq.warmup:
            rule, why = "CR-POL-4", f"warmup run {seq.warmup} of the first batch runs under bypass"
        elif flags.output_hidden_states:
            rule, why = "CR-POL-3", "hidden-state output forces every request to bypass lookup"
        else:
            rule, why = "CR-POL-2", "the file's lookup policy is bypass"
        self.add(owner, rule, "lookup_bypass", True, why)
        plan_why = f"{why}: it does not look up, and plans no_reusable_prefix with all {-(-n // self.P)} pages private"
        for value, to in (("plan", "no_reusable_prefix"), ("matched_tokens", 0), ("reused_tokens", 0)):
            self.add(owner, rule, value, to, plan_why)

    def looks_up(self, seq, policy: str) -> None:
        self.add(self.of(seq), "CR-POL-1", "lookup_bypass", False,
                 f"the file's lookup policy is {policy}: {self.name(seq)} looks up")

    def forced_cold(self, seq, failed) -> None:
        """CR-CAP-7: the plan could not be acquired, the bypass plan could."""
        owner, n = self.of(seq), seq.n
        demand = f"{failed.private} private page(s)" + (f" and {failed.draft_private} draft page(s)"
                                                         if failed.draft_private else "")
        why = (f"its {failed.kind} plan (matched {failed.matched}, {len(failed.kept)} page(s) kept) needs {demand}, "
               "which the pools cannot give even by evicting every record: planned again under bypass, admitted "
               "forced cold")
        cold = self.add(owner, "CR-CAP-7", "forced_cold", True, why, before=False)
        self.add(owner, "CR-CAP-7", "lookup_bypass", True, why, before=False, causes=(cold,))
        bypass = (f"the retry plans as a bypass sequence: no lookup, all {-(-n // self.P)} pages private and no "
                  "managed draft page")
        for value, to, before in (("plan", "no_reusable_prefix", failed.kind), ("matched_tokens", 0, failed.matched),
                                  ("reused_tokens", 0, failed.reused)):
            self.add(owner, "CR-POL-2", value, to, bypass, before=before, causes=(cold,))

    def trimmed(self, seq, before, after, given_back: list, test: str) -> None:
        """CR-MEDIA-3 / CR-MEDIA-4 on a media-aware plan that reused r > 0 tokens."""
        owner = self.of(seq)
        spans = seq.request.spans
        if given_back:
            parts = []
            for r in given_back:
                inside = items_in(spans, r - 1, r + 1)
                what = (" and ".join(item_name(k, s) for k, s in inside) or "media")
                parts.append(f"{what} {'straddles' if len(inside) == 1 else 'meet at'} the boundary at {r}")
            why = "; ".join(parts) + f", so reuse must stop at {after.reused} ({len(given_back)} page(s) given back)"
            if test == "any-media" and any(len(items_in(spans, r - 1, r + 1)) > 1 for r in given_back):
                why += " (the profile trims where both positions are media)"
            refs = {"boundaries": list(given_back)}
        else:
            r = before.reused
            inside = items_in(spans, r - 1, r + 1)
            if r >= seq.n:
                why = f"the boundary at {r} is the end of the input: nothing to give back"
            elif len(inside) == 2:
                why = (f"the boundary at {r} lies between {item_name(*inside[0])} and {item_name(*inside[1])}, "
                       "two items: it splits neither, nothing given back")
            elif inside:
                why = f"the boundary at {r} is at an edge of {item_name(*inside[0])}: it splits no item"
            else:
                why = f"the boundary at {r} lies between text positions: it splits no media item, nothing given back"
            refs = {"boundaries": [r]}
        trim = self.add(owner, "CR-MEDIA-3", "reused_tokens", after.reused, why, before=before.reused, refs=refs)
        restated = (f"a media-aware plan is restated after the trim: kind {after.kind}, matched = the kept "
                    f"length {after.matched}")
        if given_back:
            restated = f"{why}; {restated}"
        rule = "CR-MEDIA-3" if given_back else "CR-MEDIA-4"
        self.add(owner, rule, "matched_tokens", after.matched, restated, before=before.matched, causes=(trim,))
        self.add(owner, rule, "plan", after.kind, restated, before=before.kind, causes=(trim,))

    def media_aware(self, seq) -> None:
        k = len(seq.request.spans)
        self.add(self.of(seq), "CR-MEDIA-2", "media_aware", bool(k),
                 f"{self.name(seq)} has {k} media item(s)" if k else f"{self.name(seq)} has no media position")

    # --- checkpoints (CR-HYB) and pairs (CR-SPEC) ---------------------------------------------------
    def checkpoint_lookup(self, seq, plan, cache) -> None:
        """CR-HYB-5: the longest checkpoint length L < n held for exactly [0, L)."""
        owner, n = self.of(seq), seq.n
        held = sorted(L for L in cache.lengths if L < n)
        if plan.record is not None:
            L = plan.reused
            origin = self.record_origin.get(plan.record.key)
            why = (f"the longest checkpoint length L < n = {n} recorded for exactly positions 0-{L - 1} is L = {L}"
                   + (f", captured by {origin.refs['by']}" if origin is not None and origin.refs else ""))
            rule, causes = "CR-HYB-5", (origin,)
        else:
            rule, why, causes = self._no_checkpoint(seq, held, cache)
        for value, to in (("matched_tokens", plan.matched), ("reused_tokens", plan.reused), ("plan", plan.kind)):
            self.add(owner, rule, value, to, why, causes=causes)
        self.add(owner, rule, "hybrid_restore", plan.record is not None,
                 f"a checkpoint hit restores its recurrent state (CR-HYB-6): {why}", causes=causes)

    def _no_checkpoint(self, seq, held: list, cache) -> tuple:
        n = seq.n
        lengths = ", ".join(map(str, held[-8:])) or "none"
        for L in reversed(held):
            other = self._same_ids(self.ids_digest(seq.history, L) + L.to_bytes(8, "little"), None,
                                   seq.request.lora_name, lambda key: key in cache.records)
            if other is not None:
                rule, why = self._identity_cause(self.of(seq), seq, other, 0, L, "checkpoints")
                return rule, f"no checkpoint of exactly this prefix (lengths held below n = {n}: {lengths}): {why}", ()
        for key, step in self.gone_records.items():
            L = key[1] if isinstance(key[1], int) else None
            if L is not None and L < n and key == (seq.history.exact_digest(L), L):
                return step.rule, f"the checkpoint of positions 0-{L - 1} is gone: {step.why}", (step,)
        return "CR-HYB-5", (f"no checkpoint recorded for exactly a prefix of this input (lengths held below n = "
                            f"{n}: {lengths}): nothing is reused"), ()

    def checkpoint_trim(self, seq, before, after) -> None:
        """CR-HYB-7 under a profile that trims checkpoint hits."""
        if after.reused == before.reused:
            return
        owner = self.of(seq)
        why = (f"the profile trims a media-aware checkpoint hit: L = {before.reused} floored to pages and trimmed "
               f"at media items to {after.reused}")
        for value, to, old in (("reused_tokens", after.reused, before.reused),
                               ("matched_tokens", after.matched, before.matched), ("plan", after.kind, before.kind),
                               ("hybrid_restore", after.record is not None, True)):
            self.add(owner, "CR-HYB-7", value, to, why, before=old)

    def paired_lookup(self, seq, plan, cache, batch) -> None:
        """CR-SPEC-1 (pairs from one record) and CR-SPEC-2 (the last pair replayed)."""
        P, owner = self.P, self.of(seq)
        paired = plan.matched // P
        base = 0
        for key in seq.history.keys(seq.n // P):
            if key not in cache.index:
                break
            base += 1
        origin = self.record_origin.get(plan.record.key) if plan.record is not None else None
        if paired == 0:
            if base:
                why = (f"{pages_of(0, base)} match base pages, but no record's draft path pairs them: base-only "
                       "matches are ignored, the plan is cold")
                rule, causes = "CR-SPEC-1", ()
            else:
                rule, why, causes = ("CR-PLAN-1", "no page is cached", ()) if seq.n // P == 0 else \
                    self.missing_page(seq, 0, cache, batch)
            for value, to in (("matched_tokens", 0), ("reused_tokens", 0), ("plan", "no_reusable_prefix")):
                self.add(owner, rule, value, to, why, causes=causes)
            return
        why = (f"{base} base page(s) match; the record of {origin.refs['by'] if origin and origin.refs else 'an earlier request'} "
               f"pairs {pages_of(0, paired)} with its draft path: matched {paired * P}")
        pair = self.add(owner, "CR-SPEC-1", "matched_tokens", plan.matched, why, causes=(origin,))
        replay = (f"the last paired page ({pages_of(paired - 1, paired)}) is always recomputed: {paired - 1} pair(s) "
                  f"kept, reused {plan.reused}, kind {plan.kind}")
        self.add(owner, "CR-SPEC-2", "reused_tokens", plan.reused, replay, before=plan.matched, causes=(pair,))
        self.add(owner, "CR-SPEC-2", "plan", plan.kind, replay, causes=(pair,))

    # --- publication (CR-PUB, CR-HYB-3/4, CR-SPEC-4) ----------------------------------------------
    def page_publication(self, seq, publication: dict, record_key, cache, upgraded: bool = False) -> None:
        """A page publication (CR-PUB-1/2, CR-SPEC-4) and its status (CR-PUB-4)."""
        P, pages, point = self.P, publication["pages"], publication["point"]
        if seq.paired:
            rule = "CR-SPEC-4"
            how = (f"a paired sequence publishes base and draft pages together: {pages} pair(s), the boundary both "
                   "caches cover" + (" (its base-only record upgraded with the draft path)" if upgraded else ""))
        elif point == "prefill_end":
            rule, how = "CR-PUB-1", (f"n = {seq.n}, P = {P}: the prefill-end record holds floor(n/P) = {pages} "
                                     f"complete page(s)")
        else:
            held = seq.n + seq.generated_count - 1
            rule, how = "CR-PUB-2", (f"n = {seq.n} and g = {seq.generated_count}: the sequence holds n + g - 1 = "
                                     f"{held} tokens of KV, floor({held}/{P}) = {pages} page(s), more than the "
                                     f"{self._published_before(seq)} published at prefill end")
        ids = self.ids_keys(seq.history, pages)[pages - 1] + pages.to_bytes(8, "little")
        self._published(seq, publication, record_key, cache, rule, how, ids, pages, upgraded)

    def checkpoint_publication(self, seq, publication: dict, record_key, cache) -> None:
        """A checkpoint capture (CR-HYB-3) and its status (CR-PUB-4)."""
        L = publication["tokens"]
        how = (f"a checkpoint at the endpoint L = {L} ({'n' if publication['point'] == 'prefill_end' else 'n + g - 1'})"
               f" with {publication['pages']} complete page(s)")
        ids = self.ids_digest(seq.history, L) + L.to_bytes(8, "little")
        self._published(seq, publication, record_key, cache, "CR-HYB-3", how, ids, publication["pages"], False)

    def _published_before(self, seq) -> int:
        return seq.publications[0]["pages"] if len(seq.publications) > 1 else 0

    def _published(self, seq, publication, record_key, cache, rule, how, ids_key, pages, upgraded) -> None:
        owner, k = self.of(seq), len(seq.publications) - 1
        point = publication["point"]
        step = self.add(owner, rule, f"publications[{k}]", {kk: publication[kk] for kk in ("point", "tokens", "pages")},
                        how, refs={"by": self.name(seq)})
        if publication["status"] == "existing":
            origin = self.record_origin.get(record_key)
            by = origin.refs["by"] if origin is not None and origin.refs else "an earlier publication"
            self.add(owner, "CR-PUB-4", f"publications[{k}].status", "existing",
                     f"the record of {by} already holds this endpoint: it is touched, nothing new is inserted",
                     causes=(origin, step))
        elif upgraded:
            self.add(owner, "CR-SPEC-4", f"publications[{k}].status", "committed",
                     "a base-only record holds this endpoint: it is upgraded with the draft path, a new pair",
                     causes=(self.record_origin.get(record_key), step))
        else:
            gone = self.gone_records.get(record_key)
            other = self._same_ids(ids_key, record_key, seq.request.lora_name, lambda x: x in cache.records)
            if gone is not None:
                status_rule, why, causes = gone.rule, f"the record that held this endpoint is gone: {gone.why}", (gone,)
            elif other is not None:
                status_rule, why = self._identity_cause(owner, seq, other, 0, publication["tokens"], "records")
                why, causes = f"a new endpoint: {why}", ()
            else:
                status_rule, why, causes = "CR-PUB-4", "no record holds this endpoint: a new record is inserted", ()
            self.add(owner, status_rule, f"publications[{k}].status", "committed", why, causes=(*causes, step))
            self.record_origin[record_key] = step
            self.gone_records.pop(record_key, None)
        self.by_ids.setdefault(ids_key, {})[record_key] = (self.name(seq), seq.request.lora_name)
        if seq.warmup:
            return
        held = min(len(seq.history.tokens), seq.n if point == "prefill_end" else seq.n + seq.generated_count - 1)
        if held % self.P and held // self.P == pages:          # the partial page past its record (CR-ID-2)
            self.tails.setdefault(self._parent(seq.history, pages), []).append(
                (seq.history.tokens[pages * self.P:held], self.name(seq)))
        for j in range(pages):
            key = seq.history.key(j)
            if key not in self.origin and key in cache.index:
                self.origin[key] = step
                self.gone_pages.pop(key, None)
                self.withheld.pop(key, None)
                ids = self.ids_keys(seq.history, j + 1)[j]
                self.by_ids.setdefault(ids, {})[key] = (self.name(seq), seq.request.lora_name)

    def why_no_prefill_end(self, seq) -> tuple:
        """(rule, why) of a sequence that attempts no prefill-end publication."""
        if seq.forced_cold:
            return "CR-PUB-7", "it was forced cold (CR-CAP-7): a sequence that bypassed lookup never publishes"
        if seq.lookup_bypass:
            return "CR-PUB-7", "a sequence that bypassed lookup never publishes" + (
                " (a warmup run, CR-POL-4)" if seq.warmup else "")
        return "CR-PUB-1", f"n = {seq.n} < P = {self.P}: no complete page to publish"

    def why_no_decode_end(self, seq, including: bool, checkpoints: bool) -> tuple:
        """(rule, why) of a sequence that finished in a decode step and attempts no decode-end
        publication (CR-PUB-2, CR-PUB-3, CR-PUB-7, CR-HYB-3)."""
        if seq.lookup_bypass:
            return "CR-PUB-7", "a sequence that bypassed lookup never publishes"
        if not including:
            return "CR-PUB-3", "under prefill_state_only no decode-end publication is attempted"
        held = seq.n + seq.generated_count - 1
        if checkpoints:
            return "CR-HYB-3", f"its endpoint L = n + g - 1 = {held} was already captured"
        return "CR-PUB-2", (f"n + g - 1 = {held} tokens of KV make floor({held}/{self.P}) = {held // self.P} "
                            f"page(s), no more than the {seq.published_pages} it published")

    def not_published(self, seq, point: str, rule: str, why: str) -> Step:
        """No publication at `point` (CR-PUB-1/2/3/7, CR-HYB-3)."""
        step = self.add(self.of(seq), rule, f"publications.{point}", None, why,
                        refs={"by": self.name(seq)})
        if seq.lookup_bypass and point == "prefill_end":
            for key in seq.history.keys(seq.n // self.P):
                if key not in self.origin:
                    self.withheld.setdefault(key, step)
        return step

    def pressure_skip(self, seq, length: int) -> None:
        self.add(self.of(seq), "CR-HYB-4", "snapshot_pressure_skips", seq.pressure_skips,
                 f"the capture at L = {length} cannot reserve its snapshot slot(s), even by evicting every record: "
                 "skipped (not an attempt)", before=seq.pressure_skips - 1)

    # --- records and pages (CR-CAP) -------------------------------------------------------------------
    def evicted(self, cache, record, rule: str, left_index: list, kept_in_use: list, freed: int) -> None:
        """A record evicted by the planner (CR-CAP-4) or the record limit (CR-CAP-6)."""
        origin = self.record_origin.pop(record.key, None)
        actor = self.name(self.actor) if self.actor is not None else "a sequence"
        by = origin.refs["by"] if origin is not None and origin.refs else actor
        size = f"{len(record.pages)} page(s)" + (f", L = {record.tokens}" if record.recurrent_slot is not None else "")
        if rule == "CR-CAP-6":
            why = (f"the record of {by} ({size}) evicted by the record limit {cache.max_records}: "
                   + ("every new record is evicted at once" if cache.max_records == 0 else
                      f"{actor}'s new record found the store full, and this was the least recently used"))
        else:
            why = (f"the record of {by} ({size}) evicted: least recently used while the planner freed room for "
                   f"{actor}")
        since = self.touched_at.pop(record.key, -1)
        hits = [self.page_hit[p] for p in record.pages if self.page_hit.get(p, (-1,))[0] > since]
        untouched = None
        if hits:
            untouched = self.add(None, "CR-CAP-5", "recency", by,
                                 f"{max(hits)[1]} hit the pages of the record of {by} after it was last touched: a "
                                 "page hit does not touch a record, so it stays where publication put it in the "
                                 "LRU order")
        step = self.add(None, rule, "records", cache.evicted, why, refs={"by": by},
                        causes=(origin, untouched))
        self.gone_records[record.key] = step
        if left_index:
            gone = self.add(None, "CR-CAP-2", "pages", len(left_index),
                            f"{len(left_index)} page(s) of the record of {by} leave the page index: no record holds "
                            f"them any more (evicted by {rule})", causes=(step,))
            for key in left_index:
                self.gone_pages[key] = gone
                self.origin.pop(key, None)
        if kept_in_use:
            self.add(None, "CR-CAP-2", "pages", len(kept_in_use),
                     f"{len(kept_in_use)} page(s) of the evicted record stay allocated: a running sequence still "
                     f"uses them (active count > 0); {freed} freed", causes=(step,))

    def touched(self, record) -> None:
        self.touched_at[record.key] = self._order

    # --- batches --------------------------------------------------------------------------------------
    def batch_ran(self, seqs, batch_idx: int) -> None:
        for seq in seqs:
            admission = [s for s in self.requests.get(seq.ordinal, ()) if s.value in ("forced_cold", "plan")]
            self.add(seq.ordinal, "CR-CAP-8", "status", "ok",
                     f"batch {batch_idx} runs: every sequence was admitted (CR-CAP-3) within the length limits "
                     "(CR-BATCH-5) and every decode step obtained its pages (CR-CAP-9)",
                     causes=tuple(admission[-2:]))

    def batch_failed(self, ordinals, batch_idx: int, rule: str, message: str) -> None:
        step = self.add(None, rule, f"batch[{batch_idx}]", "failed", message)
        for o in ordinals:
            self.add(o, rule, "status", "error", f"batch {batch_idx} fails: {message}", causes=(step,))

    # --- files: inputs, and what CR-MEDIA-6 leaves unspecified ------------------------------------
    def file_started(self, engine, parsed, first: int, generated: list, reuse: bool) -> None:
        """The input steps of every request of a file, and its audio requests (CR-MEDIA-6)."""
        including = parsed.commit_policy == "including_generated_tokens"
        for request in parsed.requests:
            ordinal = first + request.index
            for step in input_steps(engine, parsed, request):
                self.add(ordinal, step.rule, step.value, step.to, step.why, step.before, step.refs)
            if not request.has_audio:
                continue
            if self.first_audio is None:
                self.first_audio = ordinal
            tokens = array("i", request.tokens)
            gen = generated[request.index]
            if including and gen:
                tokens.extend(gen[:-1])
            if len(tokens) >= self.P:
                history = TokenHistory(tokens, request.spans, adapter_root(request.lora_name), self.P)
                self.audio_pages.setdefault(history.key(0), ordinal)

    def file_done(self, engine, parsed, first: int, evicted: bool) -> None:
        """CR-MEDIA-6: the counts of an audio request, and of what could depend on one, are
        unspecified: a later request that shares a full first page with an audio request (under
        the same adapter), and once records were evicted every request after the first audio one."""
        start = self.first_audio
        for request in parsed.requests:
            ordinal = first + request.index
            if start is None or ordinal < start:
                continue
            if request.has_audio:
                why = f"request {ordinal} has audio input"
            elif evicted:
                why = (f"records were evicted on this runtime instance, and which ones depends on what audio "
                       f"request {start} left in the cache")
            else:
                shared = None
                if request.n >= self.P:
                    own = TokenHistory(array("i", request.tokens), request.spans, adapter_root(request.lora_name),
                                       self.P)
                    shared = self.audio_pages.get(own.key(0))
                if shared is None or shared >= ordinal:
                    continue
                why = f"its first page equals one that audio request {shared} may have published"
            self.add(ordinal, "CR-MEDIA-6", "counts", "unspecified",
                     f"{why}: the spec leaves the reuse counts of audio input open")
        if start is not None:
            self.add(None, "CR-MEDIA-6", "aggregates", "unspecified",
                     f"the counters add up the counts of audio request {start}, which the spec leaves open")

    def unspecified(self, ordinal: int):
        """The CR-MEDIA-6 step that leaves request `ordinal`'s counts open, or None."""
        return next((s for s in self.requests.get(ordinal, ()) if s.value == "counts"), None)

    def aggregates_unspecified(self):
        return next((s for s in self.file if s.value == "aggregates"), None)


def input_steps(engine, parsed, request) -> list:
    """How request `request`'s input length n was decided (spec/tokenizer.md; on an `hf` engine
    TOK-HF-2/3 for the loader's ids, TOK-HF-4 for template switches, TOK-MEDIA-* per image)."""
    n = request.n
    media = sum(s.end - s.start for s in request.spans)
    if not engine.hf:
        why = f"bytes-v1 (spec/tokenizer.md) gives n = {n}" + (f", {media} of them media placeholders" if media else "")
        return [Step(None, "input_tokens", n, why)]
    loader = engine.tokenizer["loader"]
    loader_rule = {"tokenizers-raw": "TOK-HF-2", "transformers-auto": "TOK-HF-3"}.get(loader, "TOK-HF-9")
    template = getattr(parsed, "template", None) or {}
    switches = {k: v for k, v in template.items() if k != "apply_chat_template"}
    kwargs = dict(engine.tokenizer.get("chat_template_kwargs") or {})
    text = n - media
    profile = f"the hf profile ({loader} loader, {loader_rule}, spec/hf-tokenizer.md)"
    steps = [Step(loader_rule, "input_tokens", text, f"{profile} gives n = {text} text and template ids"
                  + (" before the images are expanded" if media else ""))]
    # what the prompt the loader encodes is: the template's switches decide the text ids as much
    # as the loader does, so where the file sets them theirs is the deciding step
    if not template.get("apply_chat_template", True):
        steps.append(Step("TOK-HF-8", "input_tokens", text, "apply_chat_template is false: the message texts are "
                                                             f"joined and encoded, no template: {text} ids"))
    elif switches or kwargs:
        said = ", ".join(f"{k}={v!r}" for k, v in {**kwargs, **switches}.items())
        steps.append(Step("TOK-HF-4", "input_tokens", text, f"the chat template renders the prompt with {said}: "
                                                             f"{text} text and template ids"))
    counter = (engine.vision or {}).get("counter")
    rule = {"hf/qwen-vl": "TOK-MEDIA-2", "vllm/qwen-vl": "TOK-MEDIA-2", "edge-llm/qwen-vl": "TOK-MEDIA-3",
            "hf/internvl": "TOK-MEDIA-4", "edge-llm/internvl": "TOK-MEDIA-5",
            "hf/phi-3-vision": "TOK-MEDIA-6"}.get(counter, "TOK-MEDIA-1")
    count = text
    for k, s in enumerate(request.spans, 1):
        size = s.end - s.start
        images = ", ".join(str(x.end - x.start) for x in request.spans[:k])
        steps.append(Step(rule, "input_tokens", count + size,
                          f"{profile} gives n = {count + size}: {text} text and template ids and {k} image(s) of "
                          f"{images} tokens under {counter} ({rule}, spec/media-tokens.md)",
                          before=count))
        count += size
    return steps

