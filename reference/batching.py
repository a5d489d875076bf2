"""Batches and the order of events (spec/context-reuse.md section 7, CR-BATCH-1 .. CR-BATCH-7),
with admission (CR-CAP-3, CR-CAP-7), whole-batch failure (CR-CAP-8), decode growth (CR-CAP-9)
and release (CR-CAP-10).

CR-BATCH-1 (batches of batch_size consecutive requests, in file order) and CR-BATCH-4 (one
adapter per batch) are applied when the file is parsed (requests.py); CR-BATCH-3 (reuse across
batches and files) follows from the cache living as long as the Simulator. CR-BATCH-7: a
sequence generates g tokens (`Sequence.generated_count`), the end-of-sequence token included; what ended it
(end-of-sequence, stop string, max-length) changes no count, so only g and the tokens matter.
"""

from functools import partial

from .errors import NeedsTranscript
from .hybrid import (capture_checkpoints, decode_end_length, plan_checkpoint, publish_captures, reserve_captures,
                     restore_pins)
from .identity import TokenHistory, adapter_root
from .media import trim_checkpoint_hit, trim_media_boundary
from .planning import Plan, ceil_div, cold_plan, plan_vanilla
from .policy import bypasses_lookup, includes_generated
from .semantics import identity_spans
from .publication import DECODE_END, PREFILL_END, decode_end_pages, not_published, prefill_end_pages, publish_pages
from .sequence import Sequence
from .speculative import decode_end_pairs, plan_paired, prefill_end_pairs, publish_pairs
from .support import legacy_capture_failure
from .trace import Steps


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
        While the cache carries a trace (reference/trace.py) each sequence gets a recorder
        (`Sequence.steps`) that the deciding functions record their steps with; nothing else
        changes."""
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
        if self.trace is not None:
            for seq in seqs:
                seq.steps.missing = partial(self._missing, seq, seqs)
        for seq, a in zip(seqs, accepted or ()):
            seq.last_accepted = a
        for i, seq in enumerate(seqs):                                   # (1)
            if not self._admit(seq):
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
                if seq.steps is not None and not self.checkpoints and not seq.lookup_bypass:
                    not_published(seq.steps, DECODE_END, "CR-PUB-2", "it finished with its first token, at prefill: "
                                  "no decode step, so no decode-end publication")
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
                if seq.steps is not None:
                    self.trace.actor = seq.steps
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
        seq = Sequence(request, slot, history, request.n, length, generated, False,
                       ordinal=self.first + request.index, warmup=warmup)
        if self.trace is not None:
            seq.steps = Steps(self.trace, seq, self.cache)
            if not warmup:
                k = len(request.spans)
                seq.steps("CR-MEDIA-2", "media_aware", bool(k), f"{seq.steps.name} has {k} media item(s)" if k
                          else f"{seq.steps.name} has no media position")
        seq.bypass = bypasses_lookup(parsed.lookup_policy, self.flags, warmup, seq.steps)
        return seq

    def _plan(self, seq) -> Plan:
        steps = seq.steps
        if seq.bypass:
            plan = self._cold(seq)
            if steps is not None:                            # CR-POL-2: for the reason its lookup step gave
                lookup = steps.trace.last(steps.owner, "lookup_bypass")
                why = (f"{lookup.why}: it does not look up, and plans no_reusable_prefix with all "
                       f"{ceil_div(seq.n, self.P)} pages private")
                for value, to in (("plan", plan.kind), ("matched_tokens", 0), ("reused_tokens", 0)):
                    steps(lookup.rule, value, to, why)
            return plan
        if self.paired_batch:
            return plan_paired(seq.history, seq.n, self.P, self.cache, steps)      # CR-SPEC-1, CR-SPEC-2
        if self.checkpoints:
            return plan_checkpoint(self.cache, seq.history, seq.n, self.P, self.pure, steps)
        return plan_vanilla(seq.history, seq.n, self.P, self.cache.index, steps)

    def _missing(self, seq, batch, k: int) -> tuple:
        """(rule, phrase, causes) of page k of `seq` not being in the page index at its lookup:
        CR-BATCH-2 where a sequence of its own batch publishes that page at its prefill end
        (CR-PUB-1), after every sequence of the batch was admitted; else what the cache knows
        of the key (ContextCache.why_unindexed)."""
        key = seq.history.key(k)
        for mate in batch:
            if mate is not seq and prefill_end_pages(mate, self.P) > k and mate.history.key(k) == key:
                return "CR-BATCH-2", (f"is what {mate.steps.name} of the same batch publishes at its prefill end, "
                                      "after every sequence of the batch was admitted: a batch never reuses its own "
                                      "publications"), ()
        return self.cache.why_unindexed(seq.history, k, seq.steps)

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

    def _admit(self, seq) -> bool:
        """Plan and acquire; a use_cache plan that cannot be acquired is planned again cold
        (CR-CAP-7, forced cold; with one pool only an EAGLE sequence, whose cold plan needs no
        draft pages, can succeed so, CR-SPEC-6). The media trim applies after acquisition and
        does not change what was acquired (CR-MEDIA-5). Counts the admission (CR-MET-*)."""
        steps = seq.steps
        if steps is not None:
            self.trace.actor = steps
        plan = self._plan(seq)
        pages, pins = self._acquire(plan)
        if pages is None and not seq.bypass:
            failed, plan = plan, self._cold(seq)
            pages, pins = self._acquire(plan)
            seq.forced_cold = pages is not None
            if steps is not None and seq.forced_cold:
                self._forced_cold(steps, failed, seq.n)
        if pages is None:
            return False
        if isinstance(pages, tuple):                                        # paired (CR-SPEC-6)
            pages, seq.draft_pages = pages
            seq.paired = True
        if self.paired_batch:
            if plan.record is not None and plan.record.key in self.cache.records:
                self.cache.touch(plan.record)                               # CR-SPEC-1
            # CR-SPEC-8: media are not bypassed; the trim applies to the reuse left after the replay
            plan = trim_media_boundary(plan, seq.history, seq.n, self.P, self.profile.media_trim, steps)
        elif not self.checkpoints:
            plan = trim_media_boundary(plan, seq.history, seq.n, self.P, self.profile.media_trim, steps)
        elif plan.record is not None:
            if plan.record.key in self.cache.records:
                self.cache.touch(plan.record)                    # CR-HYB-6, CR-CAP-5
            if self.profile.hybrid_media_trim and seq.history.media_aware:
                plan = trim_checkpoint_hit(plan, seq.history, seq.n, self.P, self.profile.media_trim, steps)
            seq.hybrid_restore = plan.record is not None
        seq.plan, seq.pages, seq.slot_pins = plan, pages, list(pins)
        seq.outputs_defined = self._reuses_own_state(seq, plan)
        self.metrics.admitted_sequence(seq)
        return True

    def _forced_cold(self, steps, failed: Plan, n: int) -> None:
        """CR-CAP-7: the plan `failed` could not be acquired, its bypass retry could."""
        demand = f"{failed.private} private page(s)" + (f" and {failed.draft_private} draft page(s)"
                                                         if failed.draft_private else "")
        why = (f"its {failed.kind} plan (matched {failed.matched}, {len(failed.kept)} page(s) kept) needs {demand}, "
               "which the pools cannot give even by evicting every record: planned again under bypass, admitted "
               "forced cold")
        cold = steps("CR-CAP-7", "forced_cold", True, why, before=False)
        steps("CR-CAP-7", "lookup_bypass", True, why, before=False, causes=(cold,))
        retry = (f"the retry plans as a bypass sequence: no lookup, all {ceil_div(n, self.P)} pages private and no "
                 "managed draft page")
        for value, to, before in (("plan", "no_reusable_prefix", failed.kind), ("matched_tokens", 0, failed.matched),
                                  ("reused_tokens", 0, failed.reused)):
            steps("CR-POL-2", value, to, retry, before=before, causes=(cold,))

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
        for seq in seqs:
            if seq.steps is not None:
                self.trace.actor = seq.steps
            if seq.paired:                                                   # CR-SPEC-4
                count = prefill_end_pairs(seq, self.P, seq.steps)
                if count:
                    self.metrics.published(*publish_pairs(self.cache, seq, count, PREFILL_END, self.P))
                continue
            count = prefill_end_pages(seq, self.P, seq.steps)
            if count:
                self.metrics.published(publish_pages(self.cache, seq, count, PREFILL_END, self.P))

    def _decode_end(self, finished, including: bool) -> None:
        """CR-BATCH-6 (7): decode-end publications (CR-PUB-2, CR-PUB-3) or checkpoints at
        L = n + g - 1 (CR-HYB-3) of the sequences that finished in this step, in slot order."""
        if self.checkpoints:
            wanted = [(s, decode_end_length(s, including, s.steps)) for s in finished]
        else:
            wanted = [(s, decode_end_pairs(s, self.P, including, s.steps) if s.paired
                       else decode_end_pages(s, self.P, including, s.steps)) for s in finished]
        wanted = [(s, count) for s, count in wanted if count]
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
            if seq.steps is not None:
                self.trace.actor = seq.steps
            if seq.paired:                                                   # CR-SPEC-4
                self.metrics.published(*publish_pairs(self.cache, seq, count, DECODE_END, self.P))
            else:
                self.metrics.published(publish_pages(self.cache, seq, count, DECODE_END, self.P))
