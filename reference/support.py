"""The support matrix (spec/context-reuse.md section 9, CR-SUP-1 .. CR-SUP-9).

With context reuse enabled, the start-up checks run in the order CR-SUP-1, 2, 3, 4, 5, 6, 7, 9,
then CR-HYB-2; the first that applies is reported. CR-SUP-8 is a per-batch failure, not a
start-up refusal: see `legacy_capture_failure`.
"""

from dataclasses import dataclass

from .engine import MAX_POOL_PAGES
from .hybrid import required_pools_message


@dataclass(frozen=True)
class Rejection:
    rule: str
    message: str


LEGACY_CAPTURE_MESSAGE = ("Legacy system-prompt KV-cache capture cannot be combined with the "
                          "context-cache manager.")


def _checks(engine, flags):
    """(rule, applies, message) in start-up order: block diffusion (CR-SUP-1), FP16 KV only
    (CR-SUP-2), pool geometry (CR-SUP-3), vision-bidirectional attention (CR-SUP-4), MTP,
    DFlash, DSpark and Gemma4 MTP (CR-SUP-5), hybrid EAGLE (CR-SUP-6), action runners
    (CR-SUP-7), tensor parallelism (CR-SUP-9, in profiles that refuse it), then the snapshot pools
    (CR-HYB-2)."""
    d = engine.deployment
    spec = d.get("spec_decode")
    yield "CR-SUP-1", d.get("block_diffusion", False), \
        "Block Diffusion context reuse is outside the current context-reuse support boundary."
    yield "CR-SUP-2", engine.attention_layers > 0 and engine.kv_cache_dtype != "fp16", \
        ("Context-reuse deployment uses a KV dtype outside the supported non-identity "
         f"page-table boundary (FP16 KV only). KV dtype: {engine.kv_cache_dtype}.")
    low, high = engine.min_pool_pages(), (MAX_POOL_PAGES if engine.attention_layers else 0)
    yield "CR-SUP-3", not low <= engine.kv_pool_pages <= high, \
        (f"Context-reuse deployment has a KV page pool of {engine.kv_pool_pages} pages, outside "
         f"[{low}, {high}] (CR-CAP-1).")
    yield "CR-SUP-4", d.get("vision_bidirectional", False), \
        ("Context-reuse deployment uses vision-bidirectional attention, which is not managed by "
         "the context cache.")
    yield "CR-SUP-5", spec in ("mtp", "dflash", "dspark", "gemma4-mtp"), \
        "Context reuse does not support MTP, DFlash, DSpark, or Gemma4 MTP deployments."
    yield "CR-SUP-6", spec == "eagle" and engine.recurrent_layers > 0, \
        "Hybrid EAGLE context reuse is outside the current context-reuse support boundary."
    yield "CR-SUP-7", d.get("action_runner", False), \
        "Context reuse cannot be enabled with action runners."
    yield "CR-SUP-9", flags.tp_size > 1 and flags.semantics.tp_refusal, \
        ("Tensor-parallel context reuse is not supported yet; omit --enableContextReuse or run "
         "with --tpSize 1.")
    message = required_pools_message(engine, flags)
    yield "CR-HYB-2", message is not None, message


def validate_deployment(engine, flags) -> Rejection | None:
    """The start-up refusal of this deployment, or None when it is accepted.

    Without context reuse nothing is refused (the same FP8 engine must run, CR-SUP-2).
    CR-SUP-3 applies the pool range of CR-CAP-1; an engine without attention layers must have
    a pool of 0 pages.
    """
    if not flags.enable_context_reuse:
        return None
    for rule, applies, message in _checks(engine, flags):
        if applies:
            return Rejection(rule, message)
    return None


def legacy_capture_failure(batch_requests, flags) -> str | None:
    """CR-SUP-8: a batch with any request setting save_system_prompt_kv_cache fails as a whole
    while reuse is enabled; other batches run."""
    if flags.enable_context_reuse and any(r.legacy_capture for r in batch_requests):
        return LEGACY_CAPTURE_MESSAGE
    return None
