"""The runtime: one engine, one KV pool, one context cache, request file after request file.

`Runtime` is the engine half of the bundled backend: it loads an engine folder (config, weights,
tokenizer, the EAGLE draft head), refuses deployments outside the context-reuse support
boundary at start-up (refusals.py: CR-SUP, CR-HYB-2), loads LoRA adapters (lora.py), and
hands each batch to its scheduler (scheduler.py: admission, publication, release, over the
context cache it owns), which hands the computing to the model runner (model_runner.py).

A `Runtime` stays alive across `infer` calls, so successive request files share its cache
(CR-BATCH-3, CR-ID-5). `infer` validates a whole request file first (nothing runs on bad
input), then runs its batches strictly in file order (CR-BATCH-1); a batch that cannot run
fails as a whole (CR-CAP-8) and the others still run.
"""
import math
import os

import torch
from safetensors import SafetensorError

from . import lora, refusals, sampler
from .draft_head import DraftHead
from .engine_config import deployment_kind, load_engine_config, resolve_device
from .errors import BackendInputError
from .identity import SequenceIdentity
from .inputs import MAX_POOL
from .kv_pool import KVPool
from .model import Model
from .model_runner import ModelRunner
from .prefix_cache import ContextCache
from .refusals import check_warmup
from .request import parse_request_file
from .scheduler import Scheduler
from .semantics import DEFAULT as DEFAULT_SEMANTICS
from .semantics import PROFILES as SEMANTICS
from .snapshots import SnapshotStore, partial_kv_slot_bytes, recurrent_slot_bytes


class Runtime:
    # The components a runtime builds, as class attributes so a subclass can substitute one
    # (faulty_backends/ injects single defects this way; behaviour is unchanged).
    model_class = Model
    cache_class = ContextCache
    identity_class = SequenceIdentity
    scheduler_class = Scheduler
    runner_class = ModelRunner

    def __init__(self, engine_dir, *, enable_context_reuse=False, max_records=1024, recurrent_snapshot_bytes=0,
                 partial_kv_snapshot_bytes=0, tp_size=1, device="auto", poison_fresh_pages=False,
                 output_hidden_states=False, dump_profile=False, seed=0, check_invariants=False,
                 semantics_profile=DEFAULT_SEMANTICS, attention="auto"):
        refusals.check_runtime_flags(max_records, recurrent_snapshot_bytes, partial_kv_snapshot_bytes, tp_size, seed)
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
        rec_slots, pkv_slots = self._snapshot_slots(recurrent_snapshot_bytes, partial_kv_snapshot_bytes)
        if self.reuse:
            self._check_deployment(tp_size, rec_slots, pkv_slots)
        if tp_size > 1:
            raise BackendInputError("--tpSize", "gpu_backend runs on one device; --tpSize > 1 is not supported")
        self.device = resolve_device(device)
        self.max_records = max_records
        self.output_hidden_states, self.dump_profile = output_hidden_states, dump_profile
        self.seed, self.check = seed, check_invariants
        self.model = self._load_model()
        self.kv = self._make_kv_pool(poison_fresh_pages, attention)
        pages = self.kv.pages if self.kv else 0
        self.snapshots = SnapshotStore()
        self.eagle = self.reuse and self.kind == "vanilla" and cfg["deployment"].get("spec_decode") == "eagle"
        draft_pages, self.draft, self.draft_kv = 0, None, None
        if self.eagle:                                      # CR-SPEC-5: the draft head and its pool
            draft_pages = cfg.get("draft_kv_pool_pages", pages)
            self.draft, self.draft_kv = self._load_draft(draft_pages, poison_fresh_pages)
        self.pool_sizes = {"pages": pages, "recurrent": rec_slots, "partial_kv": pkv_slots, "draft": draft_pages}
        self.loras: dict = {}
        self.runner = self.runner_class(self)
        self.scheduler = self.scheduler_class(self, self.runner)

    @property
    def cache(self) -> ContextCache:
        """The context cache (the scheduler owns it)."""
        return self.scheduler.cache

    @property
    def prefill_stats(self) -> dict:
        return self.runner.stats

    # ------------------------------------------------------------------ loading

    def _config_path(self) -> str:
        return os.path.join(self.engine_dir, "config.json")

    def _snapshot_slots(self, recurrent_bytes: int, partial_bytes: int) -> tuple[int, int]:
        """Slots of the two snapshot pools, floor(budget / slot size) (CR-HYB-1); budgets are
        ignored without reuse and on an attention-only deployment."""
        cfg, rec_slots, pkv_slots = self.cfg, 0, 0
        slot_bytes = cfg.get("snapshot_slot_bytes") or {}
        if self.reuse and self.kind != "vanilla":
            rec_slots = recurrent_bytes // (slot_bytes.get("recurrent") or recurrent_slot_bytes(cfg))
            if self.kind == "hybrid":
                pkv_slots = partial_bytes // (slot_bytes.get("partial_kv") or partial_kv_slot_bytes(cfg))
        return rec_slots, pkv_slots

    def _load_model(self):
        weights = os.path.join(self.engine_dir, self.cfg.get("weights", "model.safetensors"))
        try:
            return self.model_class(self.cfg, weights, self.device)
        except (OSError, SafetensorError, KeyError, ValueError, RuntimeError) as e:
            raise BackendInputError("$.weights", f"cannot load the engine weights: {e}", file=self._config_path()) from None

    def _make_kv_pool(self, poison: bool, attention: str):
        """The paged KV pool of the attention layers (none without them), reading along the
        `attention` path (kv_pool.py: auto, gather or paged)."""
        cfg = self.cfg
        n_att = cfg["layer_kinds"].count("attention")
        if not n_att:
            return None
        dtype = torch.float16 if cfg["kv_cache_dtype"] == "fp16" else torch.float8_e4m3fn
        try:
            return KVPool(layers=n_att, pages=cfg["kv_pool_pages"], P=self.P, kv_heads=cfg["num_kv_heads"],
                          head_dim=cfg["head_dim"], dtype=dtype, device=self.device, poison=poison, attention=attention)
        except ValueError as e:
            raise BackendInputError("attention", str(e)) from None
        except (RuntimeError, MemoryError) as e:
            raise BackendInputError("$.kv_pool_pages", f"cannot allocate a KV pool of {cfg['kv_pool_pages']} pages: {e}",
                                    file=self._config_path()) from None

    def _load_draft(self, pages: int, poison: bool):
        """The EAGLE draft head (draft_head.py) and its KV pool of `pages` draft pages."""
        cfg, where = self.cfg, self._config_path()
        if type(pages) is not int or not 0 <= pages <= MAX_POOL:
            raise BackendInputError("$.draft_kv_pool_pages", f"expected an integer in [0, {MAX_POOL}], got {pages!r}",
                                    file=where)
        try:
            head = DraftHead(cfg, self.engine_dir, self.model, self.device)
        except (OSError, SafetensorError, KeyError, ValueError, RuntimeError) as e:
            raise BackendInputError("$.deployment.spec_decode", f"cannot load the EAGLE draft head: {e}",
                                    file=where) from None
        pool = KVPool(layers=1, pages=pages, P=self.P, kv_heads=cfg["num_kv_heads"], head_dim=cfg["head_dim"],
                      dtype=torch.float16, device=self.device, poison=poison, attention="gather")
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
            raise BackendInputError(e.path, e.message, file=self._config_path()) from None

    def _check_deployment(self, tp_size, rec_slots, pkv_slots):
        """CR-SUP-1..7, 9, then CR-HYB-2, in that order; the first that applies is reported
        (refusals.check_deployment)."""
        refusals.check_deployment(self.cfg, self.P, self.semantics, tp_size, rec_slots, pkv_slots)

    def _load_lora(self, name: str, path: str) -> None:
        """Load adapter `name` from `path` once (lora.py); ValueError when the file does not fit."""
        key = (name, os.path.realpath(path))
        if self.loras.get(name, (None,))[0] == key:
            return
        self.loras[name] = (key, lora.read_adapter(path, self.model.lora_shapes(), self.device))

    def _hf_text(self):
        return None if self.vocab is sampler.BYTES_V1 else self.vocab

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
        self.runner.media_cache = {}
        for _ in range(warmup):                             # CR-POL-4
            self.scheduler.run_batch(rf.batches[0], rf, warmup=True)
        responses, hidden, failures = [], {}, []
        for b, batch in enumerate(rf.batches):
            out, ok, states = self.scheduler.run_batch(batch, rf, warmup=False)
            responses.extend(out)
            if not ok:
                failures.append((b, next((r["output_text"] for r in out if r["finish_reason"] == "error"), "failed")))
            hidden.update(states)
        result = {"responses": responses, "failed_batches": len(failures), "failures": failures}
        if self.output_hidden_states:
            result["hidden_states"] = hidden
        return result

    def profile(self) -> dict:
        """The profile file's sections: context_cache with reuse (CR-MET), prefill (CR-MET-12)."""
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
        adapter = None if r.lora_name is None else self.loras[r.lora_name][1]
        out, start = [], 0
        try:
            for size in sizes:
                hidden, _ = self.runner.forward_inputs([r], [pages], [start], [start + size], rec_state, adapter)
                with torch.inference_mode():
                    out.append(self.model.logits(hidden[0]).to("cpu", torch.float32))
                start += size
        finally:
            self.cache.release(pages)
            self.runner.media_cache = {}
        return torch.cat(out)
