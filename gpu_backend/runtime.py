"""The runtime: one engine, one KV pool, one context cache, batch after batch.

A `Runtime` stays alive across `infer` calls, so successive request files share its cache
(CR-BATCH-3, CR-ID-5). `infer` validates a whole request file first (nothing runs on bad
input), then runs its batches strictly in file order. Each batch follows CR-BATCH-6:

  (1) plan and acquire every slot in order      (2) one batched prefill over the suffixes,
  reserving its checkpoints, then release hybrid restore pins   (3) prefill-end publications / checkpoints
  (4) release slots that finished at prefill    and per decode step: (5) growth, (6) the step,
  (7) decode-end publications / checkpoints     (8) release of the slots that finished.

A batch that cannot run fails as a whole (CR-CAP-8); the others still run.
"""
import bisect
import math
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from . import sampler
from .draft_head import PROPOSALS, DraftHead
from .errors import BackendInputError, BatchFailure, DeploymentRejected
from .inputs import check_engine_config, read_json_file
from .identity import SequenceIdentity
from .kv_pool import KVPool
from .model import ForwardBatch, Model
from .prefix_cache import ContextCache
from .request import parse_request_file
from .semantics import DEFAULT as DEFAULT_SEMANTICS
from .semantics import PROFILES as SEMANTICS
from .semantics import identity_spans
from .snapshots import SnapshotStore, partial_kv_slot_bytes, recurrent_slot_bytes

MAX_POOL = 2 ** 30 - 1
# spec/engine.md section 3: --warmup runs the first batch this many times at most, so a typo
# (an extra few zeros) is refused instead of running for hours.
MAX_WARMUP = 1000
PUBLISHABLE = ("end-of-sequence", "max-length", "stop-words")
_CONFIG_KEYS = {"format": str, "model": str, "layer_kinds": list, "tokens_per_page": int,
                "max_input_len": int, "max_kv_cache_capacity": int, "max_batch_size": int, "kv_pool_pages": int,
                "kv_cache_dtype": str, "num_kv_heads": int, "head_dim": int, "hidden_size": int,
                "num_attention_heads": int, "intermediate_size": int, "tie_embeddings": bool}


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise BackendInputError("--device", "cuda was requested but no CUDA device is available")
    if device not in ("cpu", "cuda"):
        raise BackendInputError("--device", f"expected auto, cpu or cuda, got {device!r}")
    return torch.device(device)


def load_engine_config(engine_dir) -> dict:
    path = os.path.join(engine_dir, "config.json")
    if not os.path.lexists(path):
        raise BackendInputError("$", "no engine here (config.json is missing)", file=path)
    cfg = read_json_file(path, "a JSON engine config")
    if not isinstance(cfg, dict):
        raise BackendInputError("$", "expected a JSON object", file=path)
    for key, typ in _CONFIG_KEYS.items():
        if type(cfg.get(key)) is not typ:
            raise BackendInputError(f"$.{key}", f"missing or not a {typ.__name__}", file=path)
    if type(cfg.get("tokenizer")) not in (str, dict):
        raise BackendInputError("$.tokenizer", "missing or not a str", file=path)
    hf = isinstance(cfg["tokenizer"], dict) and cfg["tokenizer"].get("profile") == "hf"
    if cfg["format"] != "kvconform-engine-v1" or (cfg["tokenizer"] != "bytes-v1" and not hf):
        raise BackendInputError("$.format", "not a kvconform-engine-v1 engine with the bytes-v1 tokenizer"
                                            " or an hf tokenizer profile", file=path)
    if not cfg["layer_kinds"] or any(k not in ("attention", "recurrent") for k in cfg["layer_kinds"]):
        raise BackendInputError("$.layer_kinds", "expected a non-empty list of attention / recurrent", file=path)
    if "recurrent" in cfg["layer_kinds"] and not isinstance(cfg.get("recurrent"), dict):
        raise BackendInputError("$.recurrent", "recurrent layers need the recurrent block", file=path)
    for key in ("tokens_per_page", "max_input_len", "max_kv_cache_capacity", "max_batch_size", "num_kv_heads",
                "head_dim", "hidden_size", "num_attention_heads", "intermediate_size"):
        if cfg[key] < 1:
            raise BackendInputError(f"$.{key}", f"must be at least 1, got {cfg[key]}", file=path)
    if cfg["kv_pool_pages"] < 0:
        raise BackendInputError("$.kv_pool_pages", "must be at least 0", file=path)
    if cfg["kv_cache_dtype"] not in ("fp16", "fp8"):
        raise BackendInputError("$.kv_cache_dtype", "expected fp16 or fp8", file=path)
    check_engine_config(cfg, path, hf=hf)
    cfg.setdefault("rope_theta", 10000.0)
    cfg.setdefault("deployment", {})
    cfg.setdefault("lora_adapters", {})
    return cfg


def deployment_kind(cfg) -> str:
    kinds = set(cfg["layer_kinds"])
    return "vanilla" if kinds == {"attention"} else "recurrent" if kinds == {"recurrent"} else "hybrid"


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


@dataclass
class _Window:
    """The token history of one EAGLE verify window, as _forward_inputs reads a request."""
    ids: np.ndarray
    spans: tuple = ()


def check_warmup(warmup) -> None:
    """CR-POL-4 runs the first batch `warmup` times: bounded, so a typo cannot run for hours."""
    if type(warmup) is not int or warmup < 0:
        raise BackendInputError("--warmup", f"expected a non-negative integer, got {warmup!r}")
    if warmup > MAX_WARMUP:
        raise BackendInputError("--warmup", f"{warmup} is above the maximum {MAX_WARMUP}")


class Runtime:
    # The components a runtime builds, as class attributes so a subclass can substitute one
    # (faulty_backends/ injects single defects this way; behaviour is unchanged).
    model_class = Model
    cache_class = ContextCache
    identity_class = SequenceIdentity

    def __init__(self, engine_dir, *, enable_context_reuse=False, max_records=1024, recurrent_snapshot_bytes=0,
                 partial_kv_snapshot_bytes=0, tp_size=1, device="auto", poison_fresh_pages=False,
                 output_hidden_states=False, dump_profile=False, seed=0, check_invariants=False,
                 semantics_profile=DEFAULT_SEMANTICS):
        for flag, v, lo in (("--contextCacheMaxRecords", max_records, 0),
                            ("--contextCacheRecurrentSnapshotPoolBytes", recurrent_snapshot_bytes, 0),
                            ("--contextCachePartialKVSnapshotPoolBytes", partial_kv_snapshot_bytes, 0),
                            ("--tpSize", tp_size, 1), ("--seed", seed, None)):
            if type(v) is not int or (lo is not None and v < lo):
                raise BackendInputError(flag, f"expected an integer >= {lo}, got {v!r}" if lo is not None
                                        else f"expected an integer, got {v!r}")
        if semantics_profile not in SEMANTICS:
            raise BackendInputError("--semanticsProfile", f"expected one of {', '.join(SEMANTICS)}, got "
                                                         f"{semantics_profile!r}")
        self.semantics = SEMANTICS[semantics_profile]
        self.engine_dir = str(engine_dir)
        self.cfg = cfg = load_engine_config(engine_dir)
        self.vocab = self._load_vocab(cfg)
        self.kind = deployment_kind(cfg)
        self.reuse = bool(enable_context_reuse)
        self.P = cfg["tokens_per_page"]
        slot_bytes = cfg.get("snapshot_slot_bytes") or {}
        rec_slots = pkv_slots = 0
        if self.reuse and self.kind != "vanilla":           # CR-HYB-1; budgets ignored without reuse
            rec_slots = recurrent_snapshot_bytes // (slot_bytes.get("recurrent") or recurrent_slot_bytes(cfg))
            if self.kind == "hybrid":
                pkv_slots = partial_kv_snapshot_bytes // (slot_bytes.get("partial_kv") or partial_kv_slot_bytes(cfg))
        if self.reuse:
            self._check_deployment(tp_size, rec_slots, pkv_slots)
        if tp_size > 1:
            raise BackendInputError("--tpSize", "gpu_backend runs on one device; --tpSize > 1 is not supported")
        self.device = resolve_device(device)
        self.max_records = max_records
        self.output_hidden_states, self.dump_profile = output_hidden_states, dump_profile
        self.seed, self.check = seed, check_invariants
        weights = os.path.join(self.engine_dir, cfg.get("weights", "model.safetensors"))
        try:
            self.model = self.model_class(cfg, weights, self.device)
        except (OSError, SafetensorError, KeyError, ValueError, RuntimeError) as e:
            raise BackendInputError("$.weights", f"cannot load the engine weights: {e}",
                                    file=os.path.join(self.engine_dir, "config.json")) from None
        n_att = cfg["layer_kinds"].count("attention")
        pages = cfg["kv_pool_pages"] if n_att else 0
        self.kv = None
        if n_att:
            dtype = torch.float16 if cfg["kv_cache_dtype"] == "fp16" else torch.float8_e4m3fn
            try:
                self.kv = KVPool(layers=n_att, pages=pages, P=self.P, kv_heads=cfg["num_kv_heads"],
                                 head_dim=cfg["head_dim"], dtype=dtype, device=self.device, poison=poison_fresh_pages)
            except (RuntimeError, MemoryError) as e:
                raise BackendInputError("$.kv_pool_pages", f"cannot allocate a KV pool of {pages} pages: {e}",
                                        file=os.path.join(self.engine_dir, "config.json")) from None
        self.snapshots = SnapshotStore()
        self.eagle = self.reuse and self.kind == "vanilla" and cfg["deployment"].get("spec_decode") == "eagle"
        draft_pages, self.draft, self.draft_kv = 0, None, None
        if self.eagle:                                      # CR-SPEC-5: the draft head and its pool
            draft_pages = cfg.get("draft_kv_pool_pages", pages)
            self.draft, self.draft_kv = self._load_draft(draft_pages, poison_fresh_pages)
        self.cache = self.cache_class(P=self.P, kind=self.kind, num_pages=pages, rec_slots=rec_slots,
                                      pkv_slots=pkv_slots, max_records=max_records, enabled=self.reuse,
                                      trim_checkpoint_hits=self.semantics.trim_checkpoint_hits,
                                      on_page_allocate=self.kv.on_allocate if self.kv else None,
                                      on_slot_free=self.snapshots.drop, draft_pages=draft_pages,
                                      on_draft_allocate=self.draft_kv.on_allocate if self.draft_kv else None)
        self.loras: dict = {}
        self._media_cache: dict = {}
        self.prefill_stats = {"runs": 0, "reused": 0, "computed": 0, "seconds": 0.0}

    # ------------------------------------------------------------------ start-up checks

    def _load_draft(self, pages: int, poison: bool):
        """The EAGLE draft head (draft_head.py) and its KV pool of `pages` draft pages."""
        cfg, where = self.cfg, os.path.join(self.engine_dir, "config.json")
        if type(pages) is not int or not 0 <= pages <= MAX_POOL:
            raise BackendInputError("$.draft_kv_pool_pages", f"expected an integer in [0, {MAX_POOL}], got {pages!r}",
                                    file=where)
        try:
            head = DraftHead(cfg, self.engine_dir, self.model, self.device)
        except (OSError, SafetensorError, KeyError, ValueError, RuntimeError) as e:
            raise BackendInputError("$.deployment.spec_decode", f"cannot load the EAGLE draft head: {e}",
                                    file=where) from None
        pool = KVPool(layers=1, pages=pages, P=self.P, kv_heads=cfg["num_kv_heads"], head_dim=cfg["head_dim"],
                      dtype=torch.float16, device=self.device, poison=poison)
        return head, pool

    def _load_vocab(self, cfg):
        """The engine's tokenizer as the sampler and the responses see it: bytes-v1, or the
        `hf` profile's tokenizer loaded from the engine folder (spec/hf-tokenizer.md)."""
        if cfg["tokenizer"] == "bytes-v1":
            return sampler.BYTES_V1
        from .hf_prompt import EngineTextError, HFText
        try:
            return HFText(self.engine_dir, cfg)
        except EngineTextError as e:
            raise BackendInputError(e.path, e.message, file=os.path.join(self.engine_dir, "config.json")) from None

    def _check_deployment(self, tp_size, rec_slots, pkv_slots):
        """CR-SUP-1..7, 9, then CR-HYB-2, in that order; the first that applies is reported."""
        cfg, dep = self.cfg, self.cfg.get("deployment") or {}
        has_att = "attention" in cfg["layer_kinds"]
        has_rec = "recurrent" in cfg["layer_kinds"]
        minimum = cfg["max_batch_size"] * math.ceil(cfg["max_kv_cache_capacity"] / self.P)
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
            ("CR-SUP-9", tp_size > 1 and self.semantics.tp_refusal,
             "Tensor-parallel context reuse is not supported yet; omit --enableContextReuse or run with --tpSize 1."),
            ("CR-HYB-2", has_rec and rec_slots == 0,
             "Hybrid context reuse requires at least one recurrent snapshot slot"),
            ("CR-HYB-2", has_rec and has_att and pkv_slots == 0,
             "Hybrid attention context reuse requires at least one partial-KV snapshot slot"),
        ]
        for rule, applies, message in checks:
            if applies:
                raise DeploymentRejected(message, rule)

    # ------------------------------------------------------------------ adapters

    def _load_lora(self, name: str, path: str) -> None:
        key = (name, os.path.realpath(path))
        if self.loras.get(name, (None,))[0] == key:
            return
        try:
            t = load_file(path, device=str(self.device))
        except (OSError, SafetensorError, ValueError, RuntimeError) as e:
            raise ValueError(f"not a safetensors file ({e})") from None
        shapes, out, rank = self.model.lora_shapes(), {}, None
        for k in t:
            base, _, part = k.rpartition(".")
            if base not in shapes or part not in ("lora_A", "lora_B"):
                raise ValueError(f"unexpected tensor {k!r}")
        for proj, (o, i) in shapes.items():
            a, b = t.get(f"{proj}.lora_A"), t.get(f"{proj}.lora_B")
            if a is None and b is None:
                continue
            if a is None or b is None or a.dim() != 2 or b.dim() != 2:
                raise ValueError(f"{proj} needs both lora_A and lora_B matrices")
            r = a.shape[0]
            if tuple(a.shape) != (r, i) or tuple(b.shape) != (o, r) or (rank is not None and r != rank):
                raise ValueError(f"{proj}: shapes {tuple(a.shape)}, {tuple(b.shape)} do not fit ({o}, {i})")
            rank = r
            out[proj] = (a.to(torch.float32), b.to(torch.float32))
        if not out:
            raise ValueError("no adapter tensors")
        self.loras[name] = (key, out)

    # ------------------------------------------------------------------ public API

    def infer(self, request: dict, base_dir, *, warmup: int = 0, batch_size: int | None = None,
              max_generate_length: int | None = None) -> dict:
        """Run one request file (already parsed JSON) on this runtime's cache: `prepare`, then `run`.

        Raises BackendInputError before running anything if the file or a flag is bad.
        """
        check_warmup(warmup)
        rf = self.prepare(request, base_dir, batch_size=batch_size, max_generate_length=max_generate_length)
        return self.run(rf, warmup=warmup)

    def prepare(self, request: dict, base_dir, *, batch_size: int | None = None,
                max_generate_length: int | None = None):
        """Validate a request file completely and load its adapters; nothing runs. The result's
        `warnings` list the keys the runtime ignores."""
        for flag, v in (("--batchSize", batch_size), ("--maxGenerateLength", max_generate_length)):
            if v is not None and (type(v) is not int or v < 1):
                raise BackendInputError(flag, f"expected a positive integer, got {v!r}")
        rf = parse_request_file(request, engine=self.cfg, base_dir=str(base_dir), lora_check=self._load_lora,
                                batch_size=batch_size, max_generate_length=max_generate_length, text=self._hf_text())
        for name, path in rf.lora_paths.items():
            self._load_lora(name, path)
        return rf

    def run(self, rf, *, warmup: int = 0) -> dict:
        """Run a prepared request file's batches in file order (CR-BATCH-1), after `warmup` bypass
        runs of its first batch (CR-POL-4). Returns {"responses": [...], "failed_batches": int,
        "failures": [(batch index, reason)]} (+ "hidden_states" when requested)."""
        check_warmup(warmup)
        self._media_cache = {}
        for _ in range(warmup):                             # CR-POL-4
            self._run_batch(rf.batches[0], rf, warmup=True)
        responses, hidden, failures = [], {}, []
        for b, batch in enumerate(rf.batches):
            out, ok, states = self._run_batch(batch, rf, warmup=False)
            responses.extend(out)
            if not ok:
                failures.append((b, next((r["output_text"] for r in out if r["finish_reason"] == "error"), "failed")))
            hidden.update(states)
        result = {"responses": responses, "failed_batches": len(failures), "failures": failures}
        if self.output_hidden_states:
            result["hidden_states"] = hidden
        return result

    def profile(self) -> dict:
        out = {}
        if self.reuse:
            out["context_cache"] = self.cache.profile()
        if self.dump_profile or self.semantics.prefill_with_profile_file:
            s = self.prefill_stats
            runs, computed, secs = s["runs"], s["computed"], s["seconds"]
            out["prefill"] = {
                "total_runs": runs, "reused_tokens": s["reused"], "computed_tokens": computed,
                "average_tokens_per_run": computed / runs if runs else 0.0,
                "average_time_per_run_ms": 1000 * secs / runs if runs else 0.0,
                "tokens_per_second": computed / secs if secs else 0.0,
                "average_time_per_token_ms": 1000 * secs / computed if computed else 0.0,
            }
        return out

    # ------------------------------------------------------------------ one batch

    def _run_batch(self, batch, rf, *, warmup: bool):
        """Returns (responses, ok, hidden states)."""
        bypass = warmup or self.output_hidden_states or rf.lookup_policy == "bypass"   # CR-POL-2..4
        # CR-SPEC-7: greedy and no disable_spec_decode in the batch: its sequences that look up pair
        self.cache.paired = self.eagle and all(r.greedy and not r.disable_spec_decode for r in batch)
        seqs: list[Sequence] = []
        try:
            self._precheck(batch)
            for slot, r in enumerate(batch):                                        # (1)
                seqs.append(self._admit(r, bypass, warmup))
            hidden, state = self._prefill(seqs, warmup)                             # (2)
            rows = {id(s): b for b, s in enumerate(seqs)}
            staged = self._reserve_captures(seqs, "prefill_end", bypass, state, rows)  # restores still pinned
            for s in seqs:
                self.cache.release([], s.slot_pins)                                 # restore pins end here
                s.slot_pins = []
            self._publish(seqs, "prefill_end", bypass, state, rows, staged)         # (3)
            self._release([s for s in seqs if s.finish])                            # (4)
            self._decode([s for s in seqs if not s.finish], rf, bypass, state, rows)  # (5)-(8)
        except BatchFailure as e:
            self._release(seqs)
            if self.check:
                self.cache.check_invariants()
            return [self._error_response(r, str(e)) for r in batch], False, {}
        if self.check:
            self.cache.check_invariants()
        if warmup:
            return [], True, {}
        return [self._response(s) for s in seqs], True, hidden

    def _precheck(self, batch):
        """Failures detected before admission: they move no counter (CR-SUP-8, CR-BATCH-5)."""
        cfg = self.cfg
        if self.reuse and any(r.save_system_prompt for r in batch):
            raise BatchFailure("Legacy system-prompt KV-cache capture cannot be combined with the context-cache manager.")
        for r in batch:
            if r.n > cfg["max_input_len"]:
                raise BatchFailure(f"request {r.idx}: input of {r.n} tokens exceeds max_input_len {cfg['max_input_len']}")
            if r.n + r.max_generate_length > cfg["max_kv_cache_capacity"]:
                raise BatchFailure(f"request {r.idx}: {r.n} input tokens + max_generate_length {r.max_generate_length}"
                                   f" exceed max_kv_cache_capacity {cfg['max_kv_cache_capacity']}")

    def _identity_spans(self, spans: list) -> list:
        """The media items the page keys see: the request's own, or the runs the semantics profile
        merges them into (semantics.py)."""
        return identity_spans(spans, self.semantics)

    def _admit(self, r, bypass, warmup) -> Sequence:
        ident = self.identity_class(r.ids, self._identity_spans(r.spans), self.P, r.lora_name)
        starts = [sp.start for sp in r.spans]

        def item_of(a):
            i = bisect.bisect_right(starts, a) - 1
            return i if i >= 0 and a < r.spans[i].end else None

        def splits_media(a, b):
            """Whether a reuse boundary between positions a and b splits media, so the trim gives
            it back (CR-MEDIA-3): both in one item, or under edge-llm-0.10 both media positions
            whatever their items (semantics.py `trim_any_media`)."""
            i, j = item_of(a), item_of(b)
            if self.semantics.trim_any_media:
                return i is not None and j is not None
            return i is not None and i == j

        got = self.cache.admit(ident, r.n, bypass=bypass, media_aware=bool(r.spans), splits_media=splits_media)
        if got is None:
            raise BatchFailure(f"request {r.idx}: the KV page pool cannot hold the batch")
        plan, pages, pins = got
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + r.idx + (7919 if warmup else 0)) % 2 ** 63)
        s = Sequence(r, ident, plan, pages, pins, sampler.bias_row(r.logit_bias, self.vocab.vocab_size), gen,
                     bool(r.spans))
        if getattr(plan, "paired", False):                   # CR-SPEC-6
            s.draft_pages, s.draft_done = plan.draft_pages, plan.reused
        return s

    def _release(self, seqs):
        for s in seqs:
            self.cache.release(s.pages, s.slot_pins, s.draft_pages)
            s.pages, s.slot_pins, s.draft_pages = [], [], None

    # ------------------------------------------------------------------ prefill and decode

    def _slots(self, pages, positions: np.ndarray) -> np.ndarray:
        pt = np.asarray(pages, dtype=np.int64)
        return pt[positions // self.P] * self.P + positions % self.P

    def _forward_inputs(self, reqs, page_tables, starts, ends, rec_state, lora):
        """One forward over input positions [start, end) of each request, reading KV [0, end)
        through its page table. Returns the final hidden states [B, T, d] and the row lengths."""
        dev, P = self.device, self.P
        B = len(reqs)
        lens = [e - st for st, e in zip(starts, ends)]
        T, S = max(lens), (max(ends) if self.kv else 1)            # no KV to read without attention
        ids = np.zeros((B, T), np.int64)
        pos = np.zeros((B, T), np.int64)
        valid = np.zeros((B, T), bool)
        read = np.full((B, S), (self.kv.scratch_page * P) if self.kv else 0, np.int64)
        writes, m_idx, m_emb = [], [], []
        for b, (r, pages, st, e) in enumerate(zip(reqs, page_tables, starts, ends)):
            ids[b, :e - st] = r.ids[st:e]
            pos[b, :e - st] = np.arange(st, e)
            valid[b, :e - st] = True
            if self.kv:
                writes.append(self._slots(pages, np.arange(st, e)))
                read[b, :e] = self._slots(pages, np.arange(e))
            for sp in r.spans:                               # media embeddings of computed positions
                lo, hi = max(sp.start, st), min(sp.end, e)
                if lo < hi:
                    m_idx.append(np.arange(lo, hi) - st + b * T)
                    m_emb.append(self._media_embedding(sp)[lo - sp.start:hi - sp.start])
        to = lambda a: torch.as_tensor(a, device=dev)
        fb = ForwardBatch(
            ids=to(ids), positions=to(pos), lengths=to(np.asarray(lens, np.int64)), valid=to(valid),
            write_slots=to(np.concatenate(writes)) if writes else None, read_slots=to(read), rec_state=rec_state,
            media_index=to(np.concatenate(m_idx)) if m_idx else None,
            media_embeds=torch.cat(m_emb) if m_emb else None, lora=lora, all_valid=all(n == T for n in lens))
        with torch.inference_mode():
            return self.model.forward(fb, self.kv), lens

    def _prefill(self, seqs, warmup):
        """Step (2): one batched prefill over every sequence's suffix [reused, n)."""
        t0 = time.perf_counter()
        B = len(seqs)
        rec_state = self.model.new_recurrent_state(B) if self.kind != "vanilla" else []
        for b, s in enumerate(seqs):
            if s.plan.record is not None and not getattr(s.plan, "paired", False):
                self._restore(s, b, rec_state)
        starts = [s.plan.reused for s in seqs]
        hidden, lens = self._forward_inputs([s.req for s in seqs], [s.pages for s in seqs], starts,
                                            [s.n for s in seqs], rec_state, self._lora(seqs))
        with torch.inference_mode():
            last = hidden[torch.arange(B, device=self.device), torch.as_tensor(lens, device=self.device) - 1]
            logits = self.model.logits(last)
        states = {}
        if self.output_hidden_states and not warmup:
            states = {s.req.idx: hidden[b, :lens[b]].to("cpu", torch.float32).clone() for b, s in enumerate(seqs)}
        self._take(seqs, logits)
        for b, s in enumerate(seqs):
            if s.draft_pages is not None:                 # the draft KV of [reused, n) (CR-SPEC-4)
                self._commit_draft(s, hidden[b, :lens[b]], s.n)
        if not warmup:
            st = self.prefill_stats
            st["runs"] += 1
            st["reused"] += sum(starts)
            st["computed"] += sum(lens)
            st["seconds"] += time.perf_counter() - t0
        return states, rec_state

    def teacher_forced_logits(self, request: dict, base_dir, chunks=None) -> torch.Tensor:
        """Logits [n, vocab] (CPU float32) at every input position of the file's first request,
        computed in consecutive chunks (sizes `chunks`, the rest one position at a time) through
        the paged pool and the recurrent state carry, as prefill and decode run. Uses private
        pages (evicting records like decode growth if the pool is full); looks nothing up and
        publishes nothing. For diagnosis and tests."""
        rf = parse_request_file(request, engine=self.cfg, base_dir=str(base_dir), lora_check=self._load_lora,
                                text=self._hf_text())
        r = rf.requests[0]
        n = r.n
        sizes = list(chunks or [n])
        sizes += [1] * (n - sum(sizes))
        pages = []
        if self.kv and not self.cache.grow(pages, math.ceil(n / self.P)):
            raise BackendInputError("$.requests[0]", "the KV page pool cannot hold this input")
        rec_state = self.model.new_recurrent_state(1) if self.kind != "vanilla" else []
        lora = None if r.lora_name is None else self.loras[r.lora_name][1]
        out, start = [], 0
        try:
            for size in sizes:
                hidden, _ = self._forward_inputs([r], [pages], [start], [start + size], rec_state, lora)
                with torch.inference_mode():
                    out.append(self.model.logits(hidden[0]).to("cpu", torch.float32))
                start += size
        finally:
            self.cache.release(pages)
            self._media_cache = {}
        return torch.cat(out)

    def _media_embedding(self, span):
        """Encoder output of a media item, memoized by identity for the current request file."""
        if span.digest not in self._media_cache:
            with torch.inference_mode():
                self._media_cache[span.digest] = self.model.encode_media(span.modality, span.data, count=span.count)
        return self._media_cache[span.digest]

    def _hf_text(self):
        return None if self.vocab is sampler.BYTES_V1 else self.vocab

    def _lora(self, seqs):
        name = seqs[0].req.lora_name
        return None if name is None else self.loras[name][1]

    def _restore(self, s, row, rec_state):
        """Load a checkpoint's recurrent state and partial page into a new sequence (CR-HYB-6)."""
        rec = s.plan.record
        for layer, (h, conv) in enumerate(self.snapshots.recurrent[rec.rec_slot]):
            rec_state[layer][0][row] = h
            rec_state[layer][1][row] = conv
        L = s.plan.reused
        if rec.pkv_slot is not None:
            slots = self._slots(s.pages, np.arange(L - L % self.P, L))
            self.kv.write_positions(torch.as_tensor(slots, device=self.device), self.snapshots.partial[rec.pkv_slot])

    # ------------------------------------------------------------------ EAGLE (CR-SPEC)

    def _draft_slots(self, s):
        return lambda positions: self._slots(s.draft_pages, np.asarray(positions, np.int64))

    def _commit_draft(self, s, hidden, covered: int) -> None:
        """Store the draft KV of positions draft_done .. covered - 1. The draft of position t reads
        the base hidden state at t and the token at t + 1, so it can cover every committed
        position once the token after it is sampled: the draft prefill runs after the first token,
        over all n prompt positions (CR-SPEC-4). `hidden` [T, d] holds the base hidden states of
        the last T committed positions c - T .. c - 1 (c = base tokens held, covered <= c)."""
        c = s.n + len(s.generated) - 1
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

    def _history(self, s) -> np.ndarray:
        return np.concatenate([np.asarray(s.req.ids, np.int64), np.asarray(s.generated, np.int64)])

    def _verify_step(self, active) -> None:
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
            c = s.n + len(s.generated) - 1
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
            reqs.append(_Window(np.concatenate([self._history(s), np.asarray(p, np.int64)])))
            starts.append(c)
            ends.append(c + 1 + len(p))
        hidden, lens = self._forward_inputs(reqs, [s.pages for s in active], starts, ends, [], self._lora(active))
        with torch.inference_mode():
            logits = self.model.logits(hidden)
        for b, (s, p) in enumerate(zip(active, props)):
            for i in range(len(p) + 1):
                self._take([s], logits[b, i][None])
                if s.finish or i == len(p) or s.generated[-1] != p[i]:
                    break
            if s.draft_pages is not None:             # the draft runs over them next round
                s.pending_hidden, s.last_hidden, s.last_accepted = hidden[b, :i + 1], hidden[b, i], i + 1

    def _take(self, seqs, logits):
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

    def _decode(self, active, rf, bypass, state, rows):
        dev, P = self.device, self.P
        keep = [rows[id(s)] for s in active]                 # rows of the prefill batch still running
        state = [[t[keep] for t in layer] for layer in state]
        while active:
            for s in active:                                                         # (5) CR-CAP-9
                if self.kv and not self.cache.grow(s.pages, math.ceil((s.n + len(s.generated)) / P), s.draft_pages):
                    raise BatchFailure(f"request {s.req.idx}: no KV page for decode growth")
            if any(s.draft_pages is not None for s in active):
                self._verify_step(active)                                            # (6) EAGLE
                self._end_step(active, rf, bypass, state)
                active = [s for s in active if not s.finish]
                continue
            B = len(active)
            pos = np.asarray([s.n + len(s.generated) - 1 for s in active], np.int64)
            S = int(pos.max()) + 1 if self.kv else 1
            read = np.full((B, S), (self.kv.scratch_page * P) if self.kv else 0, np.int64)
            writes = []
            if self.kv:
                for b, s in enumerate(active):
                    read[b, :pos[b] + 1] = self._slots(s.pages, np.arange(pos[b] + 1))
                    writes.append(read[b, pos[b]])
            to = lambda a: torch.as_tensor(a, device=dev)
            fb = ForwardBatch(
                ids=to(np.asarray([[s.generated[-1]] for s in active], np.int64)), positions=to(pos[:, None]),
                lengths=to(np.ones(B, np.int64)), valid=torch.ones(B, 1, dtype=torch.bool, device=dev),
                write_slots=to(np.asarray(writes, np.int64)) if writes else None, read_slots=to(read),
                rec_state=state, lora=self._lora(active), all_valid=True)
            with torch.inference_mode():
                logits = self.model.logits(self.model.forward(fb, self.kv)[:, 0])  # (6)
            self._take(active, logits)
            done = [s for s in active if s.finish]
            if done:
                rows = {id(s): b for b, s in enumerate(active)}
                if rf.commit_policy == "including_generated_tokens":
                    self._publish(done, "decode_end", bypass, state, rows)          # (7)
                self._release(done)                                                  # (8)
                keep = [b for b, s in enumerate(active) if not s.finish]
                state = [[t[keep] for t in layer] for layer in state]
                active = [s for s in active if not s.finish]

    def _end_step(self, active, rf, bypass, state) -> None:
        """Steps (7) and (8) after an EAGLE step (attention only: no recurrent state to keep)."""
        done = [s for s in active if s.finish]
        if done:
            if rf.commit_policy == "including_generated_tokens":
                self._publish(done, "decode_end", bypass, state, {id(s): b for b, s in enumerate(active)})
            self._release(done)

    # ------------------------------------------------------------------ publication

    def _publishing(self, seqs, point, bypass) -> list:
        """The sequences that publish at this point (CR-PUB-7, CR-CAP-7, CR-PUB-2)."""
        if not self.reuse or bypass:                                                # CR-PUB-7
            return []
        seqs = [s for s in seqs if not s.plan.forced_cold]                         # CR-CAP-7: a bypass now
        if point == "decode_end":
            seqs = [s for s in seqs if s.finish in PUBLISHABLE]
        return seqs

    def _publish(self, seqs, point, bypass, state, rows, staged=None):
        """Prefill-end (CR-PUB-1, CR-HYB-3) or decode-end (CR-PUB-2) publications, slot order.
        `staged`: prefill-end captures already reserved during the prefill (CR-HYB-4)."""
        seqs = self._publishing(seqs, point, bypass)
        if self.kind == "vanilla":
            for s in seqs:
                k = (s.n + len(s.generated) - 1) // self.P if point == "decode_end" else s.n // self.P
                if s.draft_pages is not None:               # CR-SPEC-4: capped at the draft's boundary
                    k = s.draft_done // self.P
                    if k >= 1 and k > s.published_pages:
                        status = self.cache.publish_pairs(s.ident, s.pages, s.draft_pages, k)
                        s.published_pages = k
                        s.publications.append({"point": point, "tokens": k * self.P, "pages": k, "status": status})
                    continue
                if k >= 1 and k > s.published_pages:
                    status = self.cache.publish_pages(s.ident, s.pages, k)
                    s.published_pages = k
                    s.publications.append({"point": point, "tokens": k * self.P, "pages": k, "status": status})
            return
        if staged is None:
            staged = self._reserve_captures(seqs, point, bypass, state, rows)
        for s, L, slots in staged:                                                  # publish pass
            status = self.cache.publish_checkpoint(s.ident, s.pages, L, slots)
            s.checkpoint_length = L
            pages = L // self.P if self.kind == "hybrid" else 0
            s.publications.append({"point": point, "tokens": L, "pages": pages, "status": status})

    def _reserve_captures(self, seqs, point, bypass, state, rows) -> list:
        """CR-HYB-4, the reserve pass in slot order: one recurrent slot and, in a hybrid deployment
        when L % P != 0, one partial-KV slot per capture, evicting records when needed; a capture
        that cannot reserve is a snapshot-pressure skip. At prefill end this runs during the
        prefill, while the snapshot slots of restored checkpoints are still pinned (CR-HYB-6).
        Only a decode step counts a capture synchronization (CR-MET-11)."""
        if self.kind == "vanilla":
            return []
        staged = []
        for s in self._publishing(seqs, point, bypass):
            L = s.n + len(s.generated) - 1 if point == "decode_end" else s.n
            if L <= s.checkpoint_length:
                continue
            slots = self.cache.reserve_capture(self.kind == "hybrid" and L % self.P != 0)
            if slots is None:
                s.pressure_skips += 1
                continue
            self._capture(s, L, slots, state, rows[id(s)])
            staged.append((s, L, slots))
        if staged and point == "decode_end":       # prefill-end captures ride the prefill's own sync
            self.cache.metrics.capture_syncs += 1
        return staged

    def _capture(self, s, L, slots, state, row):
        self.snapshots.recurrent[slots[0]] = [(h[row].clone(), conv[row].clone()) for h, conv in state]
        if slots[1] is not None:
            src = self._slots(s.pages, np.arange(L - L % self.P, L))
            self.snapshots.partial[slots[1]] = self.kv.read_positions(torch.as_tensor(src, device=self.device)).clone()

    # ------------------------------------------------------------------ responses

    def _facts(self, s) -> dict | None:
        if not self.reuse:
            return None
        p = s.plan
        return {"plan": p.kind, "matched_tokens": p.matched, "reused_tokens": p.reused, "media_aware": s.media_aware,
                "lookup_bypass": p.bypass, "forced_cold": p.forced_cold,
                "hybrid_restore": p.record is not None and not getattr(p, "paired", False),
                "snapshot_pressure_skips": s.pressure_skips, "publications": s.publications}

    def _response(self, s) -> dict:
        r = s.req
        text = self.vocab.text(s.generated)
        if s.text_end is not None:
            text = text[:s.text_end]
        out = {"request_idx": r.idx, "batch_idx": r.batch_idx, "output_text": text, "finish_reason": s.finish,
               "messages": r.messages, "formatted_complete_request": r.formatted, "input_tokens": r.n,
               "output_ids": list(s.generated)}
        if r.num_logprobs:
            out["logprobs"] = s.logprobs
        if s.last_accepted is not None:
            out["last_verification_accepted"] = s.last_accepted
        out["context_cache"] = self._facts(s)
        return out

    def _error_response(self, r, message) -> dict:
        return {"request_idx": r.idx, "batch_idx": r.batch_idx, "output_text": message, "finish_reason": "error",
                "messages": r.messages, "formatted_complete_request": r.formatted, "input_tokens": r.n,
                "output_ids": [], "context_cache": None}
