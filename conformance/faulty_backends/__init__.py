"""The catalogue of faulty backends: the bundled backend with exactly one defect each.

Every variant subclasses one component of `gpu_backend` (the cache identity, the context cache,
the model or the runtime) and is injected through the runtime's component seams
(`Runtime.identity_class`, `.cache_class`, `.model_class`) or as a `Runtime` subclass; the
production code has no fault switch. `kvconform selftest` runs the conformance suite against
each one and requires every variant to be caught (a FAIL or an ERROR).

    from conformance.faulty_backends import CATALOGUE
    adapter = CATALOGUE["lora-not-in-key"].adapter()      # an `inprocess` adapter on that runtime

The catalogue (variant: rule it violates, bug class):

identity
    lora-not-in-key                 CR-ID-3    the LoRA adapter is not in the page key
    media-placeholders-only         CR-ID-4    media content left out: placeholders only
    media-position-omitted          CR-ID-4    item digests without position/offset in the page
    media-hash-without-geometry     CR-ID-4    item hashed over raw bytes, no geometry/modality
    adjacent-media-merged           CR-ID-4    adjacent images merged into one item (0.10 quirk)
    weak-16bit-digest               CR-ID-6    16-bit page keys (birthday collisions)
    checkpoint-partial-page-ignored CR-HYB-5   checkpoint key without its partial page's positions
    sub-page-checkpoint-without-lora CR-ID-3   a checkpoint shorter than a page keyed without its adapter
    merged-run-own-first-digest     CR-ID-4    edge-llm-0.10: a merged run keyed by its own first image
planning
    full-hit-zero-token-prefill     CR-PLAN-2  no rewind: a full hit leaves nothing to compute
    full-hit-replays-last-token     CR-PLAN-2  full hit keeps every page, replays the last token
    rewind-non-aligned              CR-PLAN-2  rewind also when n is not a multiple of P
    media-trim-missing              CR-MEDIA-3 no page-boundary media trim
    trim-at-text-boundaries         CR-MEDIA-3 the media trim also fires at text|text boundaries
    trim-any-media-pair             CR-MEDIA-3 trim between two different adjacent items (0.10)
    partial-page-reuse              CR-ID-2    partial pages matched (copy-on-partial-reuse)
    media-trim-once                 CR-MEDIA-3 the media trim gives back one page, not until unsplit
    last-paired-page-not-replayed   CR-SPEC-2  an EAGLE hit keeps its last pair instead of replaying it
publication
    prefill-only-publishes-generated CR-PUB-3  prefill_state_only still publishes at decode end
    bypass-publishes                CR-PUB-7   bypass sequences still publish
    bypass-looks-up                 CR-POL-2   bypass sequences still look up
    decode-end-off-by-one           CR-PUB-2   decode-end publishes floor((n + g) / P) pages
    errored-sequence-published      CR-BATCH-5 late capacity check: an errored batch publishes
    stop-string-end-not-published   CR-PUB-2   a stop-string finish is not published at decode end
    draft-page-without-base         CR-SPEC-4  a paired record holds a draft page past its base pages
capacity
    hit-touches-record              CR-CAP-5   a vanilla hit moves records to MRU
    evicts-mru                      CR-CAP-4   the planner evicts most recently used first
    record-limit-off-by-one         CR-CAP-6   M + 1 records kept
    stale-index-after-evict         CR-CAP-2   an evicted page stays in the index
    pinned-pages-evicted            CR-CAP-2   eviction frees pages a live sequence holds
batching
    reuse-within-batch              CR-BATCH-2 a batch-mate's prefill-end record is reused
compute
    suffix-rope-from-zero           CR-OUT-1   suffix prefill RoPE positions restart at 0
    page-table-off-by-one           CR-OUT-1   reused pages enter the block table one entry late
    recurrent-state-from-non-endpoint CR-HYB-3 decode-end checkpoint holds the state one step early
    partial-kv-not-restored         CR-HYB-6   hybrid restore skips the partial-KV snapshot
    kv-fp8-requantized-on-reuse     CR-OUT-2   reused FP16 KV pages round-trip through FP8
    kv-scaled-on-reuse              CR-OUT-2   reused KV pages scaled by 1.01
    constant-logits                 CR-OUT-1   logits independent of the input (with and without reuse)
    attention-ignores-cache         CR-OUT-1   attention reads only the current forward's keys
    wrong-lora-scale                CR-OUT-1   LoRA deltas applied at twice their scale
support
    fp8-kv-accepted                 CR-SUP-2   FP8 KV accepted with reuse
    pool-minimum-off-by-one         CR-SUP-3   a pool one page below the CR-CAP-1 minimum accepted
    hidden-states-not-bypassed      CR-POL-3   hidden-state output does not force bypass
metrics
    hit-counted-at-lookup           CR-MET-2   hits counted at lookup (forced-cold / trimmed as hit)
    media-aware-per-batch           CR-MET-3   media-aware counted per batch
    prefill-section-only-with-reuse CR-MET-12  edge-llm-0.10: no prefill section without reuse or --dumpProfile
tokenizer
    loader-ignored                  TOK-HF-2   tokenizer.json read raw whatever the engine's loader
    edge-llm-qwen-vl-unclamped      TOK-MEDIA-3 Edge-LLM Qwen-VL images counted by transformers' smart_resize
    qwen-vl-max-pixels-inclusive    TOK-MEDIA-3 an image whose rounded area equals max_pixels is shrunk
    internvl-thumbnail-always       TOK-MEDIA-4 HF InternVL adds a thumbnail to one-tile images
    template-switches-ignored       TOK-HF-4   the file's add_generation_prompt and enable_thinking dropped
    special-tokens-emitted          CR-OUT-1   an hf engine's sampler may emit added and special tokens

Each class's docstring names its bug class, the rules it violates and the real-world issue it
mirrors; README.md in this folder has the kill matrix.
"""
from __future__ import annotations

from . import (batching, boundaries, capacity, compute, identity, metrics, numerics, planning,  # noqa: F401
               publication, speculative, support, tokenizer)
from .registry import CATALOGUE, GROUPS, FaultyAdapter, Variant

# catalogue order: by group as listed above, then by definition order within the group
_ordered = sorted(CATALOGUE.values(), key=lambda v: GROUPS.index(v.group))
CATALOGUE.clear()
CATALOGUE.update((v.name, v) for v in _ordered)

__all__ = ["CATALOGUE", "GROUPS", "FaultyAdapter", "Variant"]
