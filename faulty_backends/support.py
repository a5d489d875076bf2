"""Support-matrix defects: deployments and requests the runtime must refuse or bypass (CR-SUP,
CR-POL-3)."""
from __future__ import annotations

from gpu_backend.runtime import Runtime
from gpu_backend.scheduler import Scheduler

from .registry import variant


@variant("fp8-kv-accepted", "support")
class Fp8KvAccepted(Runtime):
    """An FP8-KV engine is accepted with context reuse: the start-up check reads the KV dtype
    from the default (FP16) instead of the engine.

    Bug class: quantized-kv-reuse. Violates: CR-SUP-2.
    Mirrors: TensorRT-LLM #2699 (wrong outputs with FP8 KV-cache reuse); Edge-LLM 0.10 refuses
    non-FP16 KV with context reuse.
    """

    def _check_deployment(self, tp_size, rec_slots, pkv_slots):
        dtype, self.cfg["kv_cache_dtype"] = self.cfg["kv_cache_dtype"], "fp16"         # DEFECT
        try:
            super()._check_deployment(tp_size, rec_slots, pkv_slots)
        finally:
            self.cfg["kv_cache_dtype"] = dtype


@variant("pool-minimum-off-by-one", "support")
class PoolMinimumOffByOne(Runtime):
    """The start-up pool check accepts a page pool one page below the CR-CAP-1 minimum: it
    compares the pool with the minimum less one.

    Bug class: deployment-minimum-pool-boundary. Violates: CR-SUP-3, CR-CAP-1.
    Mirrors: Edge-LLM 0.10 checks `kvPoolPages >= computeMinimumKvPoolPages(...)` when the
    deployment starts (cpp/runtime/state/contextCache/contextCacheDeployment.cpp); a runtime of
    the kit's power study (written outside the project) accepted the minimum less one, unseen
    because the bundled build refuses such a pool before any runtime sees it.
    """

    def _check_deployment(self, tp_size, rec_slots, pkv_slots):
        pages = self.cfg["kv_pool_pages"]
        self.cfg["kv_pool_pages"] = pages + 1                                          # DEFECT
        try:
            super()._check_deployment(tp_size, rec_slots, pkv_slots)
        finally:
            self.cfg["kv_pool_pages"] = pages


@variant("hidden-states-not-bypassed", "support")
class HiddenStatesNotBypassed(Scheduler):
    """With hidden-state output, requests still look up and publish: the forced bypass of
    CR-POL-3 is not applied, so cached positions have no hidden states of their own.

    Bug class: feature-requires-bypass. Violates: CR-POL-3.
    Mirrors: vLLM #3251 / #8268 (prompt_logprobs with prefix caching: shape mismatch or wrong
    values, because cached positions have no logits).
    """

    def run_batch(self, batch, rf, *, warmup):
        self._file_bypass = warmup or rf.lookup_policy == "bypass"                    # DEFECT
        return super().run_batch(batch, rf, warmup=warmup)

    def _admit(self, r, bypass, warmup):
        return super()._admit(r, self._file_bypass, warmup)

    def _publishing(self, seqs, point, bypass):
        return super()._publishing(seqs, point, self._file_bypass)
