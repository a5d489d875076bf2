"""What the runtime refuses before it runs anything: deployments outside the context-reuse
support boundary (exit 3) and flag values out of range (exit 2).

A refused deployment is refused at start-up, whole, with the first rule that applies, so a
runner sees the same rule and message whatever the request file (CR-SUP, CR-HYB-2). Flags are
bounded so a typo cannot run for hours (`--warmup`) or allocate without end.
"""
import math

from .errors import BackendInputError, DeploymentRejected
from .inputs import MAX_POOL

# spec/engine.md section 3: --warmup runs the first batch this many times at most, so a typo
# (an extra few zeros) is refused instead of running for hours.
MAX_WARMUP = 1000


def check_warmup(warmup) -> None:
    """CR-POL-4 runs the first batch `warmup` times: bounded, so a typo cannot run for hours."""
    if type(warmup) is not int or warmup < 0:
        raise BackendInputError("--warmup", f"expected a non-negative integer, got {warmup!r}")
    if warmup > MAX_WARMUP:
        raise BackendInputError("--warmup", f"{warmup} is above the maximum {MAX_WARMUP}")


def check_runtime_flags(max_records, recurrent_snapshot_bytes, partial_kv_snapshot_bytes, tp_size, seed) -> None:
    """The integer flags of `infer`, each with its lower bound (None: any integer)."""
    for flag, v, lo in (("--contextCacheMaxRecords", max_records, 0),
                        ("--contextCacheRecurrentSnapshotPoolBytes", recurrent_snapshot_bytes, 0),
                        ("--contextCachePartialKVSnapshotPoolBytes", partial_kv_snapshot_bytes, 0),
                        ("--tpSize", tp_size, 1), ("--seed", seed, None)):
        if type(v) is not int or (lo is not None and v < lo):
            raise BackendInputError(flag, f"expected an integer >= {lo}, got {v!r}" if lo is not None
                                    else f"expected an integer, got {v!r}")


def check_deployment(cfg, P: int, semantics, tp_size: int, rec_slots: int, pkv_slots: int) -> None:
    """CR-SUP-1..7, 9, then CR-HYB-2, in that order; the first that applies is raised as
    DeploymentRejected. Called only with context reuse on: without it every deployment runs."""
    dep = cfg.get("deployment") or {}
    has_att = "attention" in cfg["layer_kinds"]
    has_rec = "recurrent" in cfg["layer_kinds"]
    minimum = cfg["max_batch_size"] * math.ceil(cfg["max_kv_cache_capacity"] / P)
    checks = [
        ("CR-SUP-1", dep.get("block_diffusion"),
         "Block Diffusion context reuse is outside the current context-reuse support boundary."),
        ("CR-SUP-2", has_att and cfg["kv_cache_dtype"] != "fp16",
         f"Context reuse deployment uses a KV dtype ({cfg['kv_cache_dtype']}) outside the supported"
         " non-identity page-table boundary (FP16 KV only)."),
        ("CR-SUP-3", has_att and not minimum <= cfg["kv_pool_pages"] <= MAX_POOL,
         f"Context reuse deployment has a KV page pool of {cfg['kv_pool_pages']} pages outside the supported"
         f" range [{minimum}, {MAX_POOL}]."),
        ("CR-SUP-4", dep.get("vision_bidirectional"),
         "Context reuse deployment uses vision-bidirectional attention, which is not managed by the context cache."),
        ("CR-SUP-5", dep.get("spec_decode") in ("mtp", "dflash", "dspark", "gemma4-mtp"),
         "Context reuse does not support MTP, DFlash, DSpark, or Gemma4 MTP deployments."),
        ("CR-SUP-6", dep.get("spec_decode") == "eagle" and has_rec,
         "Hybrid EAGLE context reuse is outside the current context-reuse support boundary."),
        ("CR-SUP-7", dep.get("action_runner"), "Context reuse cannot be enabled with action runners."),
        ("CR-SUP-9", tp_size > 1 and semantics.tp_refusal,
         "Tensor-parallel context reuse is not supported yet; omit --enableContextReuse or run with --tpSize 1."),
        ("CR-HYB-2", has_rec and rec_slots == 0,
         "Hybrid context reuse requires at least one recurrent snapshot slot"),
        ("CR-HYB-2", has_rec and has_att and pkv_slots == 0,
         "Hybrid attention context reuse requires at least one partial-KV snapshot slot"),
    ]
    for rule, applies, message in checks:
        if applies:
            raise DeploymentRejected(message, rule)
