"""Numerical defects: what the model says is wrong, sometimes the same way with and without reuse.

The bypass replay cannot see a model that is wrong the same way twice (garbage logits, attention
that never reads its cache, a LoRA delta at the wrong scale), and sees a small perturbation of
reused KV only as log-probability drift. The numerical reference (numerical_reference/) judges
every greedy request against what the engine's weights say, so these are caught there (CR-OUT-1
when a token is not the reference's, CR-OUT-2 when log-probabilities drift beyond the tolerance).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from gpu_backend.model import Model
from gpu_backend.runtime import Runtime
from gpu_backend.scheduler import Scheduler

from .registry import variant


class _RewritesReusedKV(Scheduler):
    """Rewrites, in place, the K and V of the pages a sequence keeps from the cache when it is
    admitted: what a runtime does that reloads reused KV through a lossy path (an offload tier,
    a re-quantizing copy, a dequantization scale)."""

    def _admit(self, r, bypass, warmup):
        s = super()._admit(r, bypass, warmup)
        k, kv = len(s.plan.kept), self.runner.kv
        if k and kv is not None:
            slots = kv.slots(s.pages[:k], kv.kv.device)
            data = kv.read_positions(slots).to(torch.float32)
            kv.write_positions(slots, self._reloaded(data).to(kv.dtype))
        return s

    def _reloaded(self, data):
        raise NotImplementedError


@variant("kv-fp8-requantized-on-reuse", "compute")
class KvFp8RequantizedOnReuse(_RewritesReusedKV):
    """Reused KV pages come back from a round trip through FP8 (e4m3): an FP16 engine's cached
    keys and values lose seven mantissa bits whenever a later request reuses them.

    Bug class: quantized-kv-reuse (lossy KV offload / reload). Violates: CR-OUT-2, CR-OUT-1.
    Mirrors: TensorRT-LLM #2699 (wrong outputs with FP8 KV-cache reuse) and LMCache #717
    (lm_eval accuracy degrades when the KV is served from LMCache's cache).
    """

    def _reloaded(self, data):
        return data.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).to(torch.float32)       # DEFECT


@variant("kv-scaled-on-reuse", "compute")
class KvScaledOnReuse(_RewritesReusedKV):
    """Reused KV pages are scaled by 1.01 when a later request reuses them (a stale or mismatched
    dequantization scale): 1% on keys and values, far below what flips most greedy tokens.

    Bug class: kv-scale-mismatch on reload. Violates: CR-OUT-2. Mirrors: flashinfer #1023 and
    #4979 (k_scale / v_scale silently not applied by one prefill wrapper) and SGLang #18818 /
    PR #20705 (KV cache scales loaded but silently ignored: accuracy drifts, nothing crashes).
    """

    def _reloaded(self, data):
        return data * 1.01                                                                   # DEFECT


class _ConstantLogitsModel(Model):
    def logits(self, hidden):
        row = torch.linspace(-2.0, 2.0, self.lm_head.shape[0], device=hidden.device).flip(0)   # DEFECT
        return row.expand(*hidden.shape[:-1], -1).clone()


@variant("constant-logits", "compute")
class ConstantLogits(Runtime):
    """The logits ignore the hidden state: a fixed row (a head never loaded, a buffer never
    written), so every request says the same thing with and without reuse.

    Bug class: garbage-output (logits independent of the input). Violates: CR-OUT-1.
    Mirrors: likejazz/llama3.cuda #5 (the logits stay the same at every step: "dream dream
    dream ..."), a runtime that is wrong identically with and without a cache.
    """
    model_class = _ConstantLogitsModel
    reuse_independent = True          # wrong without reuse too: only the numerical reference sees it


class _NoCacheAttentionModel(Model):
    def _attend(self, q, k, v, kv_pool, layer, read):
        # DEFECT: attends over the positions of this forward only, never the cached ones
        k, v = k.to(kv_pool.dtype).to(torch.float32), v.to(kv_pool.dtype).to(torch.float32)
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=q.shape[1] > 1, enable_gqa=self.H != self.G).transpose(1, 2)


@variant("attention-ignores-cache", "compute")
class AttentionIgnoresCache(Runtime):
    """Attention reads only the keys and values of the positions the current forward computes:
    a decode step attends to itself, a suffix prefill to the suffix. Writes to the cache are
    right, so every counter is; a plain prefill from position 0 is right too.

    Bug class: kv-cache-not-read (a kernel given the wrong context length). Violates: CR-OUT-1.
    Mirrors: mistral.rs #765 (garbage output when decode does not attend to the KV cache) and
    torchtune #959 (generation with and without the KV cache gives different results).
    """
    model_class = _NoCacheAttentionModel
    reuse_independent = True          # decode steps read no cache with or without reuse


class _LoraScaleModel(Model):
    def _lora(self, fb, name):
        got = super()._lora(fb, name)
        if got is None:
            return None
        a, b = got
        return a, b * 2.0                                                                    # DEFECT


@variant("wrong-lora-scale", "compute")
class WrongLoraScale(Runtime):
    """LoRA deltas are applied at twice their scale (alpha / rank applied to adapters whose B
    already carries it), the same with and without reuse, so only the reference sees it.

    Bug class: lora-scaling. Violates: CR-OUT-1. Mirrors: TensorRT-LLM #1668 (LoRA alpha scaling
    wrong for rsLoRA adapters: bad generations) and mlx-vlm #841 (alpha applied instead of
    alpha / rank).
    """
    model_class = _LoraScaleModel
    reuse_independent = True
