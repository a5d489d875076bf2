"""Batching defects: the order of events inside a batch (CR-BATCH)."""
from __future__ import annotations

from gpu_backend.errors import BatchFailure
from gpu_backend.responses import error_response
from gpu_backend.scheduler import Scheduler

from .registry import variant


@variant("reuse-within-batch", "batching")
class ReuseWithinBatch(Scheduler):
    """The sequences of a batch are admitted one after another, each after the previous one's
    prefill-end publication, so a request reuses what its own batch-mate just published.

    Bug class: intra-batch reuse (continuous-batching scheduling). Violates: CR-BATCH-2, CR-BATCH-6.
    Mirrors: the continuous-batching schedulers of vLLM and SGLang, where a request admitted after
    another in the same step may hit its blocks (right there, a violation of the Edge-LLM batch
    contract, which plans and admits a whole batch before any prefill).
    """

    def run_batch(self, batch, rf, *, warmup):
        if len(batch) == 1:
            return super().run_batch(batch, rf, warmup=warmup)
        try:
            self._precheck(batch)
        except BatchFailure as e:
            return [error_response(r, str(e)) for r in batch], False, {}
        out, ok, hidden = [], True, {}
        for r in batch:                                      # DEFECT: one slot at a time
            o, k, h = super().run_batch([r], rf, warmup=warmup)
            out += o
            ok = ok and k
            hidden.update(h)
        return out, ok, hidden
