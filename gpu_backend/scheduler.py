"""The scheduler: one batch at a time, in the order CR-BATCH-6 fixes, over the context cache it owns.

    (1) plan and acquire every slot in order      (2) one batched prefill over the suffixes,
    reserving its checkpoints, then release hybrid restore pins   (3) prefill-end publications /
    checkpoints   (4) release slots that finished at prefill    and per decode step: (5) growth,
    (6) the step, (7) decode-end publications / checkpoints     (8) release of the slots that finished.

Every slot of a batch is planned and acquired before any prefill, so no request reuses what a
batch-mate publishes in the same batch (CR-BATCH-2). A batch that cannot run fails as a whole
and releases what it held (CR-CAP-8); the next batch still runs. The model runner
(model_runner.py) computes; the scheduler decides what it computes over, and what the cache
keeps afterwards.
"""
import bisect
import math

import torch

from . import responses, sampler
from .errors import BatchFailure
from .semantics import identity_spans
from .sequence import Sequence

PUBLISHABLE = ("end-of-sequence", "max-length", "stop-words")


class Scheduler:
    def __init__(self, engine, runner):
        self.runner, self.cfg, self.P, self.kind = runner, engine.cfg, engine.P, engine.kind
        self.semantics, self.reuse, self.eagle, self.vocab = engine.semantics, engine.reuse, engine.eagle, engine.vocab
        self.seed, self.check, self.identity_class = engine.seed, engine.check, engine.identity_class
        self.output_hidden_states, self.attends = engine.output_hidden_states, engine.kv is not None
        pools = engine.pool_sizes
        self.cache = engine.cache_class(
            P=self.P, kind=self.kind, num_pages=pools["pages"], rec_slots=pools["recurrent"],
            pkv_slots=pools["partial_kv"], max_records=engine.max_records, enabled=self.reuse,
            trim_checkpoint_hits=self.semantics.trim_checkpoint_hits,
            on_page_allocate=engine.kv.on_allocate if engine.kv else None, on_slot_free=engine.snapshots.drop,
            draft_pages=pools["draft"], on_draft_allocate=engine.draft_kv.on_allocate if engine.draft_kv else None)

    # ------------------------------------------------------------------ one batch

    def run_batch(self, batch, rf, *, warmup: bool):
        """Run one batch (CR-BATCH-6). Returns (responses, ok, hidden states)."""
        bypass = warmup or self.output_hidden_states or rf.lookup_policy == "bypass"   # CR-POL-2..4
        # CR-SPEC-7: greedy and no disable_spec_decode in the batch: its sequences that look up pair
        self.cache.paired = self.eagle and all(r.greedy and not r.disable_spec_decode for r in batch)
        seqs: list[Sequence] = []
        try:
            self._precheck(batch)
            for r in batch:                                                         # (1)
                seqs.append(self._admit(r, bypass, warmup))
            hidden, state = self.runner.prefill(seqs, warmup)                       # (2)
            rows = {id(s): b for b, s in enumerate(seqs)}
            staged = self._reserve_captures(seqs, "prefill_end", bypass, state, rows)  # restores still pinned
            for s in seqs:
                self.cache.release([], s.slot_pins)                                 # restore pins end here
                s.slot_pins = []
            self._publish(seqs, "prefill_end", bypass, state, rows, staged)         # (3)
            self._release([s for s in seqs if s.finish])                            # (4)
            self._decode([s for s in seqs if not s.finish], rf, bypass, state, rows)  # (5)-(8)
        except BatchFailure as e:
            self._release(seqs)
            if self.check:
                self.cache.check_invariants()
            return [responses.error_response(r, str(e)) for r in batch], False, {}
        if self.check:
            self.cache.check_invariants()
        if warmup:
            return [], True, {}
        return [responses.response(s, self.vocab, self.reuse) for s in seqs], True, hidden

    def _precheck(self, batch):
        """Failures detected before admission: they move no counter (CR-SUP-8, CR-BATCH-5)."""
        cfg = self.cfg
        if self.reuse and any(r.save_system_prompt for r in batch):
            raise BatchFailure("Legacy system-prompt KV-cache capture cannot be combined with the context-cache manager.")
        for r in batch:
            if r.n > cfg["max_input_len"]:
                raise BatchFailure(f"request {r.idx}: input of {r.n} tokens exceeds max_input_len {cfg['max_input_len']}")
            if r.n + r.max_generate_length > cfg["max_kv_cache_capacity"]:
                raise BatchFailure(f"request {r.idx}: {r.n} input tokens + max_generate_length {r.max_generate_length}"
                                   f" exceed max_kv_cache_capacity {cfg['max_kv_cache_capacity']}")

    # ------------------------------------------------------------------ admission and release

    def _identity_spans(self, spans: list) -> list:
        """The media items the page keys see: the request's own, or the runs the semantics profile
        merges them into (semantics.py)."""
        return identity_spans(spans, self.semantics)

    def _splits_media(self, r):
        """`splits_media(a, b)` of request r: whether a reuse boundary between positions a and b
        splits media, so the trim gives it back (CR-MEDIA-3): both in one item, or under
        edge-llm-0.10 both media positions whatever their items (semantics.py `trim_any_media`)."""
        starts = [sp.start for sp in r.spans]

        def item_of(a):
            i = bisect.bisect_right(starts, a) - 1
            return i if i >= 0 and a < r.spans[i].end else None

        def splits_media(a, b):
            i, j = item_of(a), item_of(b)
            if self.semantics.trim_any_media:
                return i is not None and j is not None
            return i is not None and i == j
        return splits_media

    def _admit(self, r, bypass, warmup) -> Sequence:
        """Step (1) for one request: its identity, plan and lease (CR-CAP-3, CR-CAP-7)."""
        ident = self.identity_class(r.ids, self._identity_spans(r.spans), self.P, r.lora_name)
        got = self.cache.admit(ident, r.n, bypass=bypass, media_aware=bool(r.spans), splits_media=self._splits_media(r))
        if got is None:
            raise BatchFailure(f"request {r.idx}: the KV page pool cannot hold the batch")
        plan, pages, pins = got
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + r.idx + (7919 if warmup else 0)) % 2 ** 63)
        s = Sequence(r, ident, plan, pages, pins, sampler.bias_row(r.logit_bias, self.vocab.vocab_size), gen,
                     bool(r.spans))
        if plan.paired:                                      # CR-SPEC-6
            s.draft_pages, s.draft_done = plan.draft_pages, plan.reused
        return s

    def _release(self, seqs):
        """Steps (4) and (8): drop each sequence's lease (CR-CAP-10), once."""
        for s in seqs:
            self.cache.release(s.pages, s.slot_pins, s.draft_pages)
            s.pages, s.slot_pins, s.draft_pages = [], [], None

    # ------------------------------------------------------------------ decode

    def _decode(self, active, rf, bypass, state, rows):
        """Steps (5) to (8) until every sequence of the batch has finished."""
        keep = [rows[id(s)] for s in active]                 # rows of the prefill batch still running
        state = [[t[keep] for t in layer] for layer in state]
        while active:
            for s in active:                                                         # (5) CR-CAP-9
                if self.attends and not self.cache.grow(s.pages, math.ceil((s.computed + 1) / self.P), s.draft_pages):
                    raise BatchFailure(f"request {s.req.idx}: no KV page for decode growth")
            if any(s.draft_pages is not None for s in active):
                self.runner.verify_step(active)                                      # (6) EAGLE
                self._end_step(active, rf, bypass, state)
                active = [s for s in active if not s.finish]
                continue
            self.runner.decode_step(active, state)                                   # (6)
            done = [s for s in active if s.finish]
            if done:
                rows = {id(s): b for b, s in enumerate(active)}
                if rf.commit_policy == "including_generated_tokens":
                    self._publish(done, "decode_end", bypass, state, rows)          # (7)
                self._release(done)                                                  # (8)
                keep = [b for b, s in enumerate(active) if not s.finish]
                state = [[t[keep] for t in layer] for layer in state]
                active = [s for s in active if not s.finish]

    def _end_step(self, active, rf, bypass, state) -> None:
        """Steps (7) and (8) after an EAGLE step (attention only: no recurrent state to keep)."""
        done = [s for s in active if s.finish]
        if done:
            if rf.commit_policy == "including_generated_tokens":
                self._publish(done, "decode_end", bypass, state, {id(s): b for b, s in enumerate(active)})
            self._release(done)

    # ------------------------------------------------------------------ publication

    def _publishing(self, seqs, point, bypass) -> list:
        """The sequences that publish at this point (CR-PUB-7, CR-CAP-7, CR-PUB-2)."""
        if not self.reuse or bypass:                                                # CR-PUB-7
            return []
        seqs = [s for s in seqs if not s.plan.forced_cold]                         # CR-CAP-7: a bypass now
        if point == "decode_end":
            seqs = [s for s in seqs if s.finish in PUBLISHABLE]
        return seqs

    def _publish(self, seqs, point, bypass, state, rows, staged=None):
        """Prefill-end (CR-PUB-1, CR-HYB-3) or decode-end (CR-PUB-2) publications, slot order.
        `staged`: prefill-end captures already reserved during the prefill (CR-HYB-4)."""
        seqs = self._publishing(seqs, point, bypass)
        if self.kind == "vanilla":
            for s in seqs:
                self._publish_pages(s, point)
            return
        if staged is None:
            staged = self._reserve_captures(seqs, point, bypass, state, rows)
        for s, L, slots in staged:                                                  # publish pass
            status = self.cache.publish_checkpoint(s.ident, s.pages, L, slots)
            s.checkpoint_length = L
            pages = L // self.P if self.kind == "hybrid" else 0
            s.publications.append({"point": point, "tokens": L, "pages": pages, "status": status})

    def _publish_pages(self, s, point) -> None:
        """A vanilla publication: the complete pages computed so far (CR-PUB-1, CR-PUB-2), or for
        a paired sequence those its draft KV covers too (CR-SPEC-4)."""
        k = s.computed // self.P if point == "decode_end" else s.n // self.P
        if s.draft_pages is not None:                       # CR-SPEC-4: capped at the draft's boundary
            k = s.draft_done // self.P
        if k < 1 or k <= s.published_pages:
            return
        if s.draft_pages is not None:
            status = self.cache.publish_pairs(s.ident, s.pages, s.draft_pages, k)
        else:
            status = self.cache.publish_pages(s.ident, s.pages, k)
        s.published_pages = k
        s.publications.append({"point": point, "tokens": k * self.P, "pages": k, "status": status})

    def _reserve_captures(self, seqs, point, bypass, state, rows) -> list:
        """CR-HYB-4, the reserve pass in slot order: one recurrent slot and, in a hybrid deployment
        when L % P != 0, one partial-KV slot per capture, evicting records when needed; a capture
        that cannot reserve is a snapshot-pressure skip. At prefill end this runs during the
        prefill, while the snapshot slots of restored checkpoints are still pinned (CR-HYB-6).
        Only a decode step counts a capture synchronization (CR-MET-11)."""
        if self.kind == "vanilla":
            return []
        staged = []
        for s in self._publishing(seqs, point, bypass):
            L = s.computed if point == "decode_end" else s.n
            if L <= s.checkpoint_length:
                continue
            slots = self.cache.reserve_capture(self.kind == "hybrid" and L % self.P != 0)
            if slots is None:
                s.pressure_skips += 1
                continue
            self.runner.capture(s, L, slots, state, rows[id(s)])
            staged.append((s, L, slots))
        if staged and point == "decode_end":       # prefill-end captures ride the prefill's own sync
            self.cache.metrics.capture_syncs += 1
        return staged
