"""Compute defects: the cache bookkeeping is right, the numbers read back are not (CR-OUT-1).

These change no counter; only the output comparison with the bypass replay catches them, on
requests that really reuse state (the bundled model is confident: about 9 nats median top-1 /
top-2 margin, and perturbing one KV page moves later logits by more than 0.5).
"""
from __future__ import annotations

from gpu_backend.layers import rope_tables
from gpu_backend.model import Model
from gpu_backend.model_runner import ModelRunner
from gpu_backend.runtime import Runtime
from gpu_backend.scheduler import Scheduler

from .registry import variant


class _SuffixRopeModel(Model):
    """RoPE at positions relative to each row's first computed position while `suffix_starts`
    is set (the runner sets it around prefill); masks and everything else stay absolute."""
    suffix_starts = None

    def _attention(self, h, fb, kv_pool, layer, p, cos, sin, read):
        if self.suffix_starts is not None:
            starts = fb.positions.new_tensor(self.suffix_starts)[:, None]
            rel = (fb.positions - starts).clamp(min=0)                                 # DEFECT
            cos, sin = rope_tables(rel, self.D, self.theta)
        return super()._attention(h, fb, kv_pool, layer, p, cos, sin, read)


class _SuffixStartsRunner(ModelRunner):
    """Tells the model where each row's computed suffix starts, around every forward over inputs."""

    def forward_inputs(self, reqs, page_tables, starts, ends, rec_state, lora):
        self.model.suffix_starts = list(starts)
        try:
            return super().forward_inputs(reqs, page_tables, starts, ends, rec_state, lora)
        finally:
            self.model.suffix_starts = None


@variant("suffix-rope-from-zero", "compute")
class SuffixRopeFromZero(Runtime):
    """After reuse, the suffix prefill applies RoPE as if the suffix started at position 0: the
    queries and the keys it writes are rotated for the wrong positions (masks are right).

    Bug class: backend-offset-prefill / kv-shift-position-bookkeeping. Violates: CR-OUT-1.
    Mirrors: tenstorrent/vllm #415 (prefill resuming from cached KV, num_computed_tokens > 0,
    corrupts the output) and llama.cpp PR #12161 (wrong position bookkeeping after a KV shift).
    """
    model_class = _SuffixRopeModel
    runner_class = _SuffixStartsRunner


@variant("page-table-off-by-one", "compute")
class PageTableOffByOne(Scheduler):
    """The block table of a sequence that reuses k >= 2 pages is filled one entry late: entry
    i holds kept page i - 1 (entry 0 keeps page 0), so the reused prefix reads page 0 twice and
    never its last kept page. The lease itself is right (references are released correctly).

    (Permuting whole reused pages would be an equivalent mutant: attention over a set of keys
    and values does not depend on their order, and every reused position is visible to the
    suffix. A dropped and a duplicated page is what an off-by-one in the table produces.)
    Bug class: block-table indexing (reuse offset). Violates: CR-OUT-1, CR-OUT-3.
    Mirrors: tenstorrent/vllm #415 (prefill from cached KV, num_computed_tokens > 0, corrupts
    the output) and sgl-project/mini-sglang PR #142 (a page table pointing at the wrong pages).
    """

    def _admit(self, r, bypass, warmup):
        s = super()._admit(r, bypass, warmup)
        k = len(s.plan.kept)
        if k >= 2:
            s.lease = s.pages[:k]
            s.pages[1:k] = s.lease[:k - 1]                                             # DEFECT
        return s

    def _release(self, seqs):
        for s in seqs:
            lease = getattr(s, "lease", None)
            if lease is not None and s.pages:
                s.pages[:len(lease)] = lease
        return super()._release(seqs)


class _StateBeforeStepModel(Model):
    """Remembers the recurrent state a forward started from (the previous step's)."""
    state_before = None

    def forward(self, fb, kv_pool):
        self.state_before = [list(layer) for layer in fb.rec_state]
        return super().forward(fb, kv_pool)


class _StateBeforeStepRunner(ModelRunner):
    def capture(self, s, L, slots, state, row):
        if L > s.n:                                          # DEFECT: a decode-end capture uses
            state = self.model.state_before                  # the state before the last step
        return super().capture(s, L, slots, state, row)


@variant("recurrent-state-from-non-endpoint", "compute")
class RecurrentStateFromNonEndpoint(Runtime):
    """A decode-end checkpoint stores the recurrent state from before the last decode step (one
    token short of its length L = n + g - 1), so a later restore resumes from a non-endpoint.

    Bug class: recurrent-snapshot-boundary. Violates: CR-HYB-3, CR-HYB-6, CR-OUT-1.
    Mirrors: vLLM #57267 (Mamba2 hybrid with mamba_cache_mode="all": the same batch gives
    different outputs across calls) and llama.cpp PR #19045 (recurrent memory cannot be rolled
    back: a snapshot must be exactly at its endpoint).
    """
    model_class = _StateBeforeStepModel
    runner_class = _StateBeforeStepRunner


@variant("partial-kv-not-restored", "compute")
class PartialKVNotRestored(ModelRunner):
    """A hybrid restore at L % P != 0 loads the recurrent state but not the partial-KV snapshot:
    positions [L - L % P, L) of the private page keep whatever the page held before.

    Bug class: hybrid restore incomplete (recurrent-snapshot-boundary). Violates: CR-HYB-6,
    CR-OUT-1, CR-OUT-3. Mirrors: vLLM #57267 (hybrid prefix-cache restores that are not
    bit-exact) and Edge-LLM's "partial-KV restore has no private destination page" check
    (edge-llm-0.10-semantics.md section 3.2).
    """

    def restore(self, s, row, rec_state):
        rec = s.plan.record
        for layer, (h, conv) in enumerate(self.snapshots.recurrent[rec.rec_slot]):
            rec_state[layer][0][row] = h
            rec_state[layer][1][row] = conv
        # DEFECT: the L % P positions of rec.pkv_slot are not written into the private page
