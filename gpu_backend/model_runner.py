"""The model runner: sequences in, forward batches through the model, tokens out.

It knows nothing of the cache's bookkeeping: it is handed sequences whose page tables the
scheduler already leased and fills their histories. Its steps, in the order a batch uses them
(CR-BATCH-6):

    prefill       one batched forward over every sequence's suffix [reused, n), after loading
                  the recurrent state and partial page of a restored checkpoint (CR-HYB-6)
    decode_step   one token for every running sequence, reading KV through its page table
    verify_step   an EAGLE step: draft proposals scored by one base forward, the longest prefix
                  the base model agrees with kept (CR-SPEC-4, CR-SPEC-7)
    take          sampling and the stop conditions (CR-BATCH-7)
    capture       a checkpoint's recurrent state and partial page into its snapshot slots
                  (CR-HYB-4)

Every forward reads KV only through the pool (`KVPool.attend`), which decides whether it
gathers the keys first or reads the pages inside the attention call (kv_pool.py).
"""
import time

import numpy as np
import torch

from . import sampler
from .eagle_runner import EagleRunnerMixin
from .model import ForwardBatch


class ModelRunner(EagleRunnerMixin):
    def __init__(self, engine):
        self.model, self.kv, self.device, self.P = engine.model, engine.kv, engine.device, engine.P
        self.kind, self.vocab, self.snapshots, self.loras = engine.kind, engine.vocab, engine.snapshots, engine.loras
        self.draft, self.draft_kv = engine.draft, engine.draft_kv
        self.output_hidden_states = engine.output_hidden_states
        self.media_cache: dict = {}        # encoder outputs of the current request file, by media identity
        self.stats = {"runs": 0, "reused": 0, "computed": 0, "seconds": 0.0}   # the profile's prefill section

    # ------------------------------------------------------------------ forward inputs

    def slots(self, pages, positions: np.ndarray) -> np.ndarray:
        """Token slots of `positions` through the page table `pages`."""
        pt = np.asarray(pages, dtype=np.int64)
        return pt[positions // self.P] * self.P + positions % self.P

    def _reads(self, page_tables, ends) -> dict:
        """The KV read of a forward (kv_pool.KVRead): token slots of positions [0, end) of each
        row (padding: the scratch page), and, for the paged path, the page tables themselves."""
        B, P, kv = len(ends), self.P, self.kv
        if not kv:
            return {"read_slots": torch.zeros(B, 1, dtype=torch.int64, device=self.device)}
        read = np.full((B, max(ends)), kv.scratch_page * P, np.int64)
        for b, (pages, e) in enumerate(zip(page_tables, ends)):
            read[b, :e] = self.slots(pages, np.arange(e))
        out = {"read_slots": torch.as_tensor(read, device=self.device)}
        if kv.path == "paged":
            table = np.full((B, max(len(p) for p in page_tables)), kv.scratch_page, np.int64)
            for b, pages in enumerate(page_tables):
                table[b, :len(pages)] = pages
            out["page_table"] = torch.as_tensor(table, device=self.device)
            out["kv_lengths"] = torch.as_tensor(np.asarray(ends, np.int64), device=self.device)
        return out

    def forward_inputs(self, reqs, page_tables, starts, ends, rec_state, lora):
        """One forward over input positions [start, end) of each request, reading KV [0, end)
        through its page table. Returns the final hidden states [B, T, d] and the row lengths."""
        dev = self.device
        B = len(reqs)
        lens = [e - st for st, e in zip(starts, ends)]
        T = max(lens)
        ids = np.zeros((B, T), np.int64)
        pos = np.zeros((B, T), np.int64)
        valid = np.zeros((B, T), bool)
        writes, m_idx, m_emb = [], [], []
        for b, (r, pages, st, e) in enumerate(zip(reqs, page_tables, starts, ends)):
            ids[b, :e - st] = r.ids[st:e]
            pos[b, :e - st] = np.arange(st, e)
            valid[b, :e - st] = True
            if self.kv:
                writes.append(self.slots(pages, np.arange(st, e)))
            for sp in r.spans:                               # media embeddings of computed positions
                lo, hi = max(sp.start, st), min(sp.end, e)
                if lo < hi:
                    m_idx.append(np.arange(lo, hi) - st + b * T)
                    m_emb.append(self.media_embedding(sp)[lo - sp.start:hi - sp.start])
        to = lambda a: torch.as_tensor(a, device=dev)
        fb = ForwardBatch(
            ids=to(ids), positions=to(pos), lengths=to(np.asarray(lens, np.int64)), valid=to(valid),
            write_slots=to(np.concatenate(writes)) if writes else None, rec_state=rec_state,
            media_index=to(np.concatenate(m_idx)) if m_idx else None,
            media_embeds=torch.cat(m_emb) if m_emb else None, lora=lora, all_valid=all(n == T for n in lens),
            **self._reads(page_tables, ends))
        with torch.inference_mode():
            return self.model.forward(fb, self.kv), lens

    def media_embedding(self, span):
        """Encoder output of a media item, memoized by identity for the current request file."""
        if span.digest not in self.media_cache:
            with torch.inference_mode():
                self.media_cache[span.digest] = self.model.encode_media(span.modality, span.data, count=span.count)
        return self.media_cache[span.digest]

    def lora_of(self, seqs):
        """The adapter weights of a batch (one adapter per batch: request.py checks it)."""
        name = seqs[0].req.lora_name
        return None if name is None else self.loras[name][1]

    # ------------------------------------------------------------------ prefill and decode

    def prefill(self, seqs, warmup: bool):
        """Step (2): one batched prefill over every sequence's suffix [reused, n). Returns the
        hidden states to report (by request index) and the batch's recurrent state."""
        t0 = time.perf_counter()
        B = len(seqs)
        rec_state = self.model.new_recurrent_state(B) if self.kind != "vanilla" else []
        for b, s in enumerate(seqs):
            if s.plan.restores:
                self.restore(s, b, rec_state)
        starts = [s.plan.reused for s in seqs]
        hidden, lens = self.forward_inputs([s.req for s in seqs], [s.pages for s in seqs], starts,
                                           [s.n for s in seqs], rec_state, self.lora_of(seqs))
        with torch.inference_mode():
            last = hidden[torch.arange(B, device=self.device), torch.as_tensor(lens, device=self.device) - 1]
            logits = self.model.logits(last)
        states = {}
        if self.output_hidden_states and not warmup:
            states = {s.req.idx: hidden[b, :lens[b]].to("cpu", torch.float32).clone() for b, s in enumerate(seqs)}
        self.take(seqs, logits)
        for b, s in enumerate(seqs):
            if s.draft_pages is not None:                 # the draft KV of [reused, n) (CR-SPEC-4)
                self._commit_draft(s, hidden[b, :lens[b]], s.n)
        if not warmup:
            st = self.stats
            st["runs"] += 1
            st["reused"] += sum(starts)
            st["computed"] += sum(lens)
            st["seconds"] += time.perf_counter() - t0
        return states, rec_state

    def decode_step(self, active, state) -> None:
        """Step (6): feed each sequence's last token at its position, take the next one."""
        dev, B = self.device, len(active)
        pos = np.asarray([s.computed for s in active], np.int64)
        reads = self._reads([s.pages for s in active], list(pos + 1) if self.kv else [1] * B)
        writes = None
        if self.kv:
            writes = reads["read_slots"][torch.arange(B, device=dev), torch.as_tensor(pos, device=dev)]
        to = lambda a: torch.as_tensor(a, device=dev)
        fb = ForwardBatch(
            ids=to(np.asarray([[s.generated[-1]] for s in active], np.int64)), positions=to(pos[:, None]),
            lengths=to(np.ones(B, np.int64)), valid=torch.ones(B, 1, dtype=torch.bool, device=dev),
            write_slots=writes, rec_state=state, lora=self.lora_of(active), all_valid=True, **reads)
        with torch.inference_mode():
            logits = self.model.logits(self.model.forward(fb, self.kv)[:, 0])
        self.take(active, logits)

    def take(self, seqs, logits):
        """Append the chosen token of each sequence and apply CR-BATCH-7."""
        for s, (tok, lp) in zip(seqs, sampler.select(logits, seqs, self.vocab)):
            s.generated.append(tok)
            s.ident.append(tok)
            if lp is not None:
                s.logprobs.append(lp)
            r = s.req
            if tok == self.vocab.eos:
                s.finish = "end-of-sequence"
                continue
            if r.stop:
                text = self.vocab.text(s.generated)
                hits = [text.find(x) for x in r.stop if x in text]
                if hits:
                    s.finish, s.text_end = "stop-words", min(hits)
                    continue
            if len(s.generated) >= r.max_generate_length:
                s.finish = "max-length"

    # ------------------------------------------------------------------ checkpoints (CR-HYB)

    def restore(self, s, row, rec_state):
        """Load a checkpoint's recurrent state and partial page into a new sequence (CR-HYB-6)."""
        rec = s.plan.record
        for layer, (h, conv) in enumerate(self.snapshots.recurrent[rec.rec_slot]):
            rec_state[layer][0][row] = h
            rec_state[layer][1][row] = conv
        L = s.plan.reused
        if rec.pkv_slot is not None:
            slots = self.slots(s.pages, np.arange(L - L % self.P, L))
            self.kv.write_positions(torch.as_tensor(slots, device=self.device), self.snapshots.partial[rec.pkv_slot])

    def capture(self, s, L, slots, state, row):
        """Copy the state at length L into reserved snapshot slots (CR-HYB-4): every recurrent
        layer's state of batch row `row`, and the KV of the L % P positions of its partial page."""
        self.snapshots.recurrent[slots[0]] = [(h[row].clone(), conv[row].clone()) for h, conv in state]
        if slots[1] is not None:
            src = self.slots(s.pages, np.arange(L - L % self.P, L))
            self.snapshots.partial[slots[1]] = self.kv.read_positions(torch.as_tensor(src, device=self.device)).clone()
