"""Batches and the order of events (spec/context-reuse.md section 7, CR-BATCH-1 .. CR-BATCH-7),
with admission (CR-CAP-3, CR-CAP-7), whole-batch failure (CR-CAP-8), decode growth (CR-CAP-9)
and release (CR-CAP-10).

CR-BATCH-1 (batches of batch_size consecutive requests, in file order) and CR-BATCH-4 (one
adapter per batch) are applied when the file is parsed (requests.py); CR-BATCH-3 (reuse across
batches and files) follows from the cache living as long as the Simulator. CR-BATCH-7: a
sequence generates g tokens (`Sequence.generated_count`), the end-of-sequence token included; what ended it
(end-of-sequence, stop string, max-length) changes no count, so only g and the tokens matter.
"""

from .errors import NeedsTranscript
from .hybrid import capture_checkpoints, plan_checkpoint, publish_captures, reserve_captures, restore_pins
from .identity import TokenHistory, adapter_root
from .media import trim_checkpoint_hit, trim_media_boundary
from .planning import Plan, ceil_div, cold_plan, plan_vanilla
from .policy import bypasses_lookup, includes_generated
from .semantics import identity_spans
from .publication import DECODE_END, PREFILL_END, decode_end_pages, prefill_end_pages, publish_pages
from .sequence import Sequence
from .speculative import decode_end_pairs, plan_paired, prefill_end_pairs, publish_pairs
from .support import legacy_capture_failure


OVERWRITTEN = b"overwritten"   # the true identity of a page whose KV another item's recompute replaced


class BatchFailed(Exception):
    """The batch failed as a whole (CR-CAP-8); `rule` names the cause."""

    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.rule = rule
        self.message = message


def check_before_admission(requests, engine, flags, max_generate_length: int) -> None:
    """CR-BATCH-5: a sequence with n > max_input_len or n + max_generate_length >
    max_kv_cache_capacity fails its batch before admission; CR-SUP-8: so does a legacy
    system-prompt capture while reuse is enabled. Neither moves a counter."""
    for r in requests:
        if r.n > engine.max_input_len:
            raise BatchFailed("CR-BATCH-5", f"request {r.index}: input of {r.n} tokens exceeds "
                                            f"max_input_len {engine.max_input_len}")
        if r.n + max_generate_length > engine.max_kv_cache_capacity:
            raise BatchFailed("CR-BATCH-5", f"request {r.index}: {r.n} input tokens + "
                                            f"max_generate_length {max_generate_length} exceed "
                                            f"max_kv_cache_capacity {engine.max_kv_cache_capacity}")
    message = legacy_capture_failure(requests, flags)
    if message:
        raise BatchFailed("CR-SUP-8", message)


class BatchRunner:
    """Runs batches against one cache (without reuse: a plain page pool, CR-POL-6)."""

    def __init__(self, engine, flags, cache, metrics, prefill, speculative: bool = False, first: int = 0):
        """`speculative`: EAGLE reuse with a greedy file, so the sequences that look up in a batch
        without `disable_spec_decode` pair their pages (reference/speculative.py, CR-SPEC-1 ..
        CR-SPEC-8). `first`: the ordinal of the file's first request on this runtime instance.
        While the cache carries a trace (reference/trace.py) each decision below records its
        step there; nothing else changes."""
        self.first = first
        self.trace = cache.trace
        self.speculative = speculative
        self.paired_batch = False
        self.engine, self.flags, self.cache = engine, flags, cache
        self.metrics, self.prefill = metrics, prefill
        self.P = engine.tokens_per_page
        self.profile = flags.semantics
        self.pure = engine.kind == "recurrent"
        self.checkpoints = engine.kind != "vanilla"

    def run(self, requests, parsed, generated, max_generate_length: int, warmup: int = 0, accepted=None):
        """Run one batch in the order of CR-BATCH-6; return its sequences, or raise BatchFailed /
        NeedsTranscript. Every sequence is planned and admitted before any prefill, so none
        reuses what its own batch publishes (CR-BATCH-2). `generated[i]` is the known token
        list of slot i, or None (then g = max_generate_length); `accepted[i]` the tokens its last
        EAGLE verification accepted, as reported, or None (CR-SPEC-4). `warmup`: the number of
        the warmup run (CR-POL-4) this batch is, 0 for the file's own run."""
        check_before_admission(requests, self.engine, self.flags, max_generate_length)
        self.paired_batch = self.speculative and not any(r.disable_spec_decode for r in requests)  # CR-SPEC-7
        seqs = [self._sequence(slot, r, generated[slot], parsed, max_generate_length, warmup)
                for slot, r in enumerate(requests)]
        for seq, a in zip(seqs, accepted or ()):
            seq.last_accepted = a
        for i, seq in enumerate(seqs):                                   # (1)
            if not self._admit(seq, seqs, parsed):
                for earlier in seqs[:i]:
                    self._release(earlier)
                raise BatchFailed("CR-CAP-8", f"request {seq.request.index} cannot be admitted: "
                                              "the page pool cannot hold its private pages")
        self._mark_overwritten_pages(seqs)
        if not warmup:                                                   # (2)
            self.prefill.ran((s.n, s.plan.reused) for s in seqs)
        staged = self._reserve_prefill_captures(seqs)
        for seq in seqs:
            self._unpin_snapshots(seq)
        self._prefill_end(seqs, staged)                                  # (3)
        active = []
        for seq in seqs:                                                 # (4)
            if seq.generated_count == 1:
                if self.trace is not None and not self.checkpoints and not seq.lookup_bypass:
                    self.trace.not_published(seq, DECODE_END, "CR-PUB-2", "it finished with its first token, at "
                                             "prefill: no decode step, so no decode-end publication")
                self._release(seq)
            else:
                active.append(seq)
        self._decode(seqs, active, parsed)
        return seqs

    def _decode(self, seqs, active, parsed) -> None:
        """Decode steps (5)-(8). Steps where no sequence grows or finishes change nothing, so
        the loop jumps from one such event to the next."""
        if not active:
            return
        unknown = [s for s in seqs if s.generated is None]
        including = includes_generated(parsed.commit_policy)
        step = 0
        while active:
            step = min(min(self._next_growth(s), s.generated_count - 1) for s in active)
            evicted = self.cache.evicted
            for seq in active:                                           # (5)
                if self.trace is not None:
                    self.trace.actor = seq
                if not self.cache.grow(seq.pages, self._pages_for(seq.n + step), seq.draft_pages):
                    if unknown:
                        raise NeedsTranscript(
                            f"request {unknown[0].request.index}: decode growth runs out of pages, "
                            "so whether the batch fails depends on how many tokens each request "
                            "generates; give a transcript")
                    for s in active:
                        self._release(s)
                    raise BatchFailed("CR-CAP-8", f"request {seq.request.index}: decode growth "
                                                  "cannot obtain a page")
            if self.cache.evicted != evicted and unknown:
                raise NeedsTranscript(
                    f"request {unknown[0].request.index}: decode growth evicts records, so the "
                    "counts depend on how many tokens each request generates; give a transcript")
            finished = [s for s in active if s.generated_count == step + 1]      # (6)
            self._decode_end(finished, including)                        # (7)
            for seq in finished:                                         # (8)
                self._release(seq)
            active = [s for s in active if s.generated_count > step + 1]

    def _next_growth(self, seq) -> int:
        """The first decode step at which the sequence needs one more page (CR-CAP-9)."""
        if self.pure:
            return seq.generated_count
        return len(seq.pages) * self.P - seq.n + 1

    def _pages_for(self, tokens: int) -> int:
        return 0 if self.pure else ceil_div(tokens, self.P)

    # -- admission (CR-CAP-3, CR-CAP-7) ---------------------------------------------------------

    def _sequence(self, slot, request, generated, parsed, max_generate_length, warmup) -> Sequence:
        spans = identity_spans(request.spans, self.profile)
        if hasattr(request, "history"):      # hook: page keys a trace replay computed (reference/replay.py, SIM-KEY-2)
            history = request.history(self.P)
        else:
            history = TokenHistory(request.tokens, spans, adapter_root(request.lora_name), self.P)
        if spans != request.spans:            # the profile's key conflates media: keep the truth beside it
            history.truth = TokenHistory(request.tokens, request.spans, history.root, self.P)
        if warmup:
            length, generated = 1, []
        else:
            length = len(generated) if generated is not None else max_generate_length
        return Sequence(request, slot, history, request.n, length, generated,
                        bypasses_lookup(parsed.lookup_policy, self.flags, warmup > 0),
                        ordinal=self.first + request.index, warmup=warmup)

    def _plan(self, seq) -> Plan:
        if seq.bypass:
            return self._cold(seq)
        if self.paired_batch:
            return plan_paired(seq.history, seq.n, self.P, self.cache)      # CR-SPEC-1, CR-SPEC-2
        if self.checkpoints:
            return plan_checkpoint(self.cache, seq.history, seq.n, self.P, self.pure)
        return plan_vanilla(seq.history, seq.n, self.P, self.cache.index)

    def _cold(self, seq) -> Plan:
        plan = cold_plan(seq.n, self.P)
        if self.pure:
            plan.private = 0
        return plan

    def _acquire(self, plan: Plan):
        if self.paired_batch and (plan.replay or plan.draft_private):       # CR-SPEC-6
            held = self.cache.acquire(plan.kept, plan.private, protected=plan.record,
                                      draft_kept=plan.draft_kept, draft_private=plan.draft_private)
            return held, ()
        pins = restore_pins(plan.record) if plan.record is not None else ()
        return self.cache.acquire(plan.kept, plan.private, pins, protected=plan.record), pins

    def _admit(self, seq, batch, parsed) -> bool:
        """Plan and acquire; a use_cache plan that cannot be acquired is planned again cold
        (CR-CAP-7, forced cold; with one pool only an EAGLE sequence, whose cold plan needs no
        draft pages, can succeed so, CR-SPEC-6). The media trim applies after acquisition and
        does not change what was acquired (CR-MEDIA-5). Counts the admission (CR-MET-*)."""
        trace = self.trace
        plan = self._plan(seq)
        if trace is not None:
            trace.actor = seq
            self._trace_plan(seq, plan, batch, parsed)
        pages, pins = self._acquire(plan)
        if pages is None and not seq.bypass:
            failed, plan = plan, self._cold(seq)
            pages, pins = self._acquire(plan)
            seq.forced_cold = pages is not None
            if trace is not None and seq.forced_cold:
                trace.forced_cold(seq, failed)
        if pages is None:
            return False
        if isinstance(pages, tuple):                                        # paired (CR-SPEC-6)
            pages, seq.draft_pages = pages
            seq.paired = True
        if self.paired_batch:
            if plan.record is not None and plan.record.key in self.cache.records:
                self.cache.touch(plan.record)                               # CR-SPEC-1
            # CR-SPEC-8: media are not bypassed; the trim applies to the reuse left after the replay
            plan = self._trim(seq, plan)
        elif not self.checkpoints:
            plan = self._trim(seq, plan)
        elif plan.record is not None:
            if plan.record.key in self.cache.records:
                self.cache.touch(plan.record)                    # CR-HYB-6, CR-CAP-5
            if self.profile.hybrid_media_trim and seq.history.media_aware:
                hit = plan
                plan = trim_checkpoint_hit(plan, seq.history, seq.n, self.P, self.profile.media_trim)
                if trace is not None:
                    trace.checkpoint_trim(seq, hit, plan)
            seq.hybrid_restore = plan.record is not None
        seq.plan, seq.pages, seq.slot_pins = plan, pages, list(pins)
        seq.outputs_defined = self._reuses_own_state(seq, plan)
        if trace is not None and not seq.warmup:
            trace.media_aware(seq)
        self.metrics.admitted_sequence(seq)
        return True

    def _trim(self, seq, plan) -> Plan:
        """The media trim of a vanilla or paired plan (CR-MEDIA-3, CR-MEDIA-4)."""
        if self.trace is None or not seq.history.media_aware or plan.reused == 0:
            return trim_media_boundary(plan, seq.history, seq.n, self.P, self.profile.media_trim)
        given_back = []
        trimmed = trim_media_boundary(plan, seq.history, seq.n, self.P, self.profile.media_trim, given_back)
        self.trace.trimmed(seq, plan, trimmed, given_back, self.profile.media_trim)
        return trimmed

    def _trace_plan(self, seq, plan, batch, parsed) -> None:
        """The steps of the plan just made: bypass, lookup, checkpoint or paired match."""
        trace = self.trace
        if seq.bypass:
            trace.bypassed(seq, self.flags, parsed.lookup_policy)
            return
        trace.looks_up(seq, parsed.lookup_policy)
        if self.paired_batch:
            trace.paired_lookup(seq, plan, self.cache, batch)
        elif self.checkpoints:
            trace.checkpoint_lookup(seq, plan, self.cache)
        else:
            trace.looked_up(seq, plan, self.cache, batch)

    def _mark_overwritten_pages(self, seqs) -> None:
        """A trimmed plan recomputes the positions it gave back into the kept pages (CR-MEDIA-5).
        Where the profile's key conflates items, a kept page may hold other pixels' KV: the
        recompute then overwrites a page that its batch-mates and later hits read, so every
        sequence of the batch holding it, and every later hit on it, has undefined outputs."""
        written = set()
        for seq in seqs:
            truth, plan = seq.history.truth, seq.plan
            if truth is None or self.checkpoints:
                continue
            for i, page in enumerate(plan.kept[plan.reused // self.P:], start=plan.reused // self.P):
                if self.cache.truth.get(page) not in (None, truth.key(i)):
                    written.add(page)
        if not written:
            return
        for page in written:
            self.cache.truth[page] = OVERWRITTEN
        for seq in seqs:
            if written.intersection(seq.plan.kept):
                seq.outputs_defined = False

    def _reuses_own_state(self, seq, plan) -> bool:
        """Whether the reused prefix was computed for this sequence's own media: always, unless
        the profile's key conflates items (merged runs, raw bytes) and a reused page or checkpoint
        was produced for other pixels or geometry. Then the outputs are not the bypass run's."""
        truth = seq.history.truth
        if truth is None or plan.reused == 0:
            return True
        if plan.record is not None and not plan.replay:
            return plan.record.truth in (None, truth.exact_digest(plan.reused))
        return all(self.cache.truth.get(page) in (None, truth.key(i))
                   for i, page in enumerate(plan.kept[:plan.reused // self.P]))

    def _unpin_snapshots(self, seq) -> None:
        """CR-HYB-6: restore pins are released at the end of prefill, before checkpoints."""
        for pool, r in seq.slot_pins:
            self.cache.pools[pool].unpin(r)
        seq.slot_pins = []

    def _release(self, seq) -> None:
        self._unpin_snapshots(seq)
        self.cache.release(seq.pages, seq.draft_pages)

    # -- publication (CR-PUB, CR-HYB-3/4) -------------------------------------------------------

    def _reserve_prefill_captures(self, seqs) -> list:
        """CR-BATCH-6 (2): the checkpoints at L = n (CR-HYB-3) are reserved during the prefill, in
        slot order, while restored snapshot slots are still pinned (CR-HYB-4, CR-HYB-6)."""
        if not self.checkpoints:
            return []
        wanted = [(s, s.n) for s in seqs if not s.lookup_bypass]
        return reserve_captures(self.cache, wanted, PREFILL_END, self.P, self.pure, self.metrics)

    def _prefill_end(self, seqs, staged) -> None:
        """CR-BATCH-6 (3): prefill-end publications (CR-PUB-1) or the staged checkpoints at L = n
        (CR-HYB-3), in slot order."""
        if self.checkpoints:
            publish_captures(self.cache, staged, PREFILL_END, self.P, self.pure, self.metrics)
            return
        trace = self.trace
        for seq in seqs:
            if trace is not None:
                trace.actor = seq
            if seq.paired:                                                   # CR-SPEC-4
                count = prefill_end_pairs(seq, self.P)
                if count:
                    self.metrics.published(*publish_pairs(self.cache, seq, count, PREFILL_END, self.P))
                elif trace is not None:
                    trace.not_published(seq, PREFILL_END, "CR-SPEC-4", f"n = {seq.n} < P = {self.P}: no pair")
                continue
            count = prefill_end_pages(seq, self.P)
            if count:
                self.metrics.published(publish_pages(self.cache, seq, count, PREFILL_END, self.P))
            elif trace is not None:
                trace.not_published(seq, PREFILL_END, *trace.why_no_prefill_end(seq))

    def _decode_end(self, finished, including: bool) -> None:
        """CR-BATCH-6 (7): decode-end publications (CR-PUB-2, CR-PUB-3) or checkpoints at
        L = n + g - 1 (CR-HYB-3) of the sequences that finished in this step, in slot order."""
        if self.checkpoints:
            wanted = [(s, s.n + s.generated_count - 1) for s in finished if including and not s.lookup_bypass]
            wanted = [(s, length) for s, length in wanted if length > s.checkpoint_length]
        else:
            wanted = [(s, decode_end_pairs(s, self.P, including) if s.paired
                       else decode_end_pages(s, self.P, including)) for s in finished]
            wanted = [(s, count) for s, count in wanted if count]
        if self.trace is not None:
            chosen = {id(s) for s, _ in wanted}
            for s in finished:
                if id(s) not in chosen and not s.warmup:
                    self.trace.not_published(s, DECODE_END, *self.trace.why_no_decode_end(
                        s, including, self.checkpoints))
        for seq, _ in wanted:
            if seq.generated is None:
                raise NeedsTranscript(
                    f"request {seq.request.index}: its decode-end publication depends on how many "
                    "tokens it generates; give a transcript (or use prefill_state_only or "
                    "max_generate_length 1)")
            seq.history.extend(seq.generated[:seq.generated_count - 1])   # the last token has no KV
        if self.checkpoints:
            capture_checkpoints(self.cache, wanted, DECODE_END, self.P, self.pure, self.metrics)
            return
        for seq, count in wanted:
            if self.trace is not None:
                self.trace.actor = seq
            if seq.paired:                                                   # CR-SPEC-4
                self.metrics.published(*publish_pairs(self.cache, seq, count, DECODE_END, self.P))
            else:
                self.metrics.published(publish_pages(self.cache, seq, count, DECODE_END, self.P))
