"""The model runner's EAGLE steps (spec/context-reuse.md section 12): draft KV kept in step with
the base, and the verify step that takes the base model's own choices.

A mixin of `model_runner.ModelRunner` (as vLLM's GPU model runner takes its LoRA and KV-connector
parts): it uses the runner's forward_inputs, take, slots and model, and its draft head and draft
pool (`draft`, `draft_kv`, draft_head.py).
"""
from dataclasses import dataclass

import numpy as np
import torch

from .draft_head import PROPOSALS


@dataclass
class Window:
    """The token history of one EAGLE verify window, as forward_inputs reads a request."""
    ids: np.ndarray
    spans: tuple = ()


class EagleRunnerMixin:
    def _draft_slots(self, s):
        return lambda positions: self.slots(s.draft_pages, np.asarray(positions, np.int64))

    @staticmethod
    def _history(s) -> np.ndarray:
        return np.concatenate([np.asarray(s.req.ids, np.int64), np.asarray(s.generated, np.int64)])

    def _commit_draft(self, s, hidden, covered: int) -> None:
        """Store the draft KV of positions draft_done .. covered - 1. The draft of position t reads
        the base hidden state at t and the token at t + 1, so it can cover every committed
        position once the token after it is sampled: the draft prefill runs after the first token,
        over all n prompt positions (CR-SPEC-4). `hidden` [T, d] holds the base hidden states of
        the last T committed positions c - T .. c - 1 (c = base tokens held, covered <= c)."""
        c = s.computed
        first = c - hidden.shape[0]
        if covered > s.draft_done:
            rows = torch.cat([s.last_hidden[None], hidden]) if s.draft_done < first else hidden
            start = first - 1 if s.draft_done < first else first
            assert start <= s.draft_done, "draft KV out of step with the base"
            tokens = self._history(s)[s.draft_done + 1:covered + 1]
            self.draft.commit(self.draft_kv, self._draft_slots(s), s.draft_done,
                              rows[s.draft_done - start:covered - start], torch.as_tensor(tokens, device=self.device))
            s.draft_done = covered
        s.last_hidden = hidden[-1]

    def verify_step(self, active) -> None:
        """One EAGLE decode step (6): each paired sequence's draft head proposes up to PROPOSALS
        tokens; one base forward over [last token, proposals] scores them; each sequence takes
        the base model's own choices while they equal the proposals (the first that differs is
        taken as the correction), so it generates what vanilla greedy decoding would. The
        window never leaves the pages the sequence holds (CR-CAP-9 counts committed tokens), and
        unpaired sequences of the batch take one token as usual.

        The draft runs over a round's accepted tokens at the start of the next round, as
        Edge-LLM 0.10's EagleDecoder does (runDraftModelAcceptToken, then the common length grows
        by the previous round's acceptance): so when a sequence finishes, its draft KV covers
        n + g - 1 - a positions, a being what its last verification accepted (CR-SPEC-4)."""
        reqs, starts, ends, props = [], [], [], []
        for s in active:
            c = s.computed
            k = 0
            if s.draft_pages is not None and s.pending_hidden is not None:
                self._commit_draft(s, s.pending_hidden, c)          # the previous round's positions
                s.pending_hidden = None
            if s.draft_pages is not None:
                room = len(s.pages) * self.P - c - 1
                k = max(0, min(PROPOSALS, room, s.req.max_generate_length - len(s.generated) - 1))
            p = self.draft.propose(self.draft_kv, self._draft_slots(s), c - 1, s.last_hidden,
                                   s.generated[-1], k) if k else []
            props.append(p)
            reqs.append(Window(np.concatenate([self._history(s), np.asarray(p, np.int64)])))
            starts.append(c)
            ends.append(c + 1 + len(p))
        hidden, lens = self.forward_inputs(reqs, [s.pages for s in active], starts, ends, [], self.lora_of(active))
        with torch.inference_mode():
            logits = self.model.logits(hidden)
        for b, (s, p) in enumerate(zip(active, props)):
            for i in range(len(p) + 1):
                self.take([s], logits[b, i][None])
                if s.finish or i == len(p) or s.generated[-1] != p[i]:
                    break
            if s.draft_pages is not None:             # the draft runs over them next round
                s.pending_hidden, s.last_hidden, s.last_accepted = hidden[b, :i + 1], hidden[b, i], i + 1
