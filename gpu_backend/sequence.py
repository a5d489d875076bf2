"""One request of a running batch, as the scheduler and the model runner share it.

A `Sequence` is a lease and a history: the pages and snapshot pins the context cache handed
out for it (released exactly once, CR-CAP-10), and the tokens, log-probabilities and
publications it has produced. Both halves of the runtime hold the same object: the scheduler
grows, publishes and releases its lease, the model runner fills its history.
"""
from dataclasses import dataclass, field

import torch

from .identity import SequenceIdentity


@dataclass(eq=False)
class Sequence:
    """One request of a running batch: its lease (pages, snapshot pins) and its history."""
    req: object
    ident: SequenceIdentity
    plan: object
    pages: list
    slot_pins: list
    bias: torch.Tensor | None
    generator: torch.Generator
    media_aware: bool
    generated: list = field(default_factory=list)
    logprobs: list = field(default_factory=list)
    finish: str | None = None
    text_end: int | None = None
    published_pages: int = 0
    checkpoint_length: int = 0
    publications: list = field(default_factory=list)
    pressure_skips: int = 0
    draft_pages: list | None = None     # a paired EAGLE sequence's draft page table (CR-SPEC-6)
    draft_done: int = 0                 # positions whose draft KV is stored (what a pair publication covers, CR-SPEC-4)
    last_hidden: object = None          # base hidden state at the last committed position (where proposals start)
    pending_hidden: object = None       # base hidden states of the last round's accepted positions (draft not yet run)
    last_accepted: int | None = None    # tokens the last verification round accepted (CR-SPEC-4)

    @property
    def n(self) -> int:
        return self.req.n

    @property
    def computed(self) -> int:
        """Tokens whose KV is stored: the input and every generated token but the last, which
        is sampled and not yet fed back (CR-PUB-2's n + g - 1)."""
        return self.req.n + len(self.generated) - 1
