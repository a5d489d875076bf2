"""The runtime instance the oracle simulates, and the predictions it writes.

A Simulator is one runtime instance (CR-ID-5): its cache starts empty and lives across `run`
calls, so a second request file sees the records of the first (CR-BATCH-3).
"""

import gc
from contextlib import contextmanager

from .version import SPEC_VERSION
from .batching import BatchFailed, BatchRunner
from .capacity import ContextCache
from .errors import DeploymentRejected, InputError
from .hybrid import snapshot_slots
from .metrics import Metrics, PrefillStats
from .policy import reuse_enabled
from .requests import input_steps, parse_request_file
from .speculative import eagle_reuse, greedy_file
from .support import validate_deployment
from .tokenizer import EOS, VOCAB_SIZE


class Simulator:
    """Simulate request files on one engine with one set of runtime flags. With `trace` the
    instance records the decision trace of every prediction (reference/trace.py, `self.trace`);
    the predictions are the same either way."""

    def __init__(self, engine, flags, trace: bool = False):
        self.engine = engine
        self.flags = flags
        self.rejection = validate_deployment(engine, flags)
        self.metrics = Metrics()
        self.prefill = PrefillStats()
        self.reuse = reuse_enabled(flags) and self.rejection is None
        # Without reuse the pool still bounds admission and growth (CR-POL-6); it holds no records.
        recurrent, partial = snapshot_slots(engine, flags) if self.reuse else (0, 0)
        pages = engine.kv_pool_pages if engine.attention_layers else 0
        self.eagle = eagle_reuse(engine, self.reuse)                        # CR-SPEC-5: the draft pool
        draft = engine.draft_kv_pool_pages if self.eagle else 0
        self.trace = self.open_counts = None
        if trace:
            from .media import OpenCounts
            from .trace import Trace
            self.trace = Trace(engine.tokens_per_page)
            self.open_counts = OpenCounts(self.trace, engine.tokens_per_page)          # CR-MEDIA-6
        self.cache = ContextCache(pages, recurrent, partial, flags.max_records, draft, self.trace)
        self.batches: list[dict] = []     # batch records of every run, in order
        self._files = 0
        self.requests_run = 0             # requests of earlier files: the ordinal of this file's first

    def run(self, request_dict, base_dir: str, generated=None, *, lora_files: bool = False,
            last_accepted=None, parsed=None) -> list[dict]:
        """Run one request file's batches; return one prediction per request (the `responses`
        items of spec/schemas/predictions.schema.json). `generated[i]` is request i's generated
        token ids (<|eos|> included when it ended so), or None when unknown; `last_accepted[i]`
        the tokens request i's last EAGLE verification accepted (output field
        last_verification_accepted), or None when not reported. Raises InputError, Unreported,
        NeedsTranscript, DeploymentRejected or OutOfScope (the profile leaves the counts undefined,
        spec/profiles.md); after NeedsTranscript the instance is
        in an unspecified state and should be discarded. `lora_files`: see parse_request_file.
        `parsed`: the file as parse_request_file already read it for this engine and batch size
        (a caller that holds it need not tokenize the file again); read, never changed."""
        with _cyclic_gc_paused():
            return self._run(request_dict, base_dir, generated, lora_files, last_accepted, parsed)

    def _run(self, request_dict, base_dir: str, generated=None, lora_files: bool = False,
             last_accepted=None, parsed=None) -> list[dict]:
        if self.rejection is not None:
            raise DeploymentRejected(self.rejection)
        if parsed is None:
            parsed = parse_request_file(request_dict, base_dir, self.engine, self.flags.batch_size,
                                        lora_files=lora_files)
        mgl = self.flags.max_generate_length or parsed.max_generate_length
        gens = _check_generated(generated, len(parsed.requests), mgl, self.engine)
        accepted = _check_accepted(last_accepted, gens)
        speculative = self.eagle and greedy_file(request_dict)              # CR-SPEC-7
        first_ordinal = self.requests_run
        runner = BatchRunner(self.engine, self.flags, self.cache, self.metrics, self.prefill, speculative,
                             first_ordinal)
        trace = self.trace
        if trace is not None:
            for r in parsed.requests:
                for s in input_steps(self.engine, parsed, r):
                    trace.add(first_ordinal + r.index, s.rule, s.value, s.to, s.why, s.before, s.refs)
            self.open_counts.started(parsed, first_ordinal, gens)
        if self._files == 0 and self.flags.warmup:
            first = [parsed.requests[i] for i in parsed.batches[0]]
            for run in range(1, self.flags.warmup + 1):                # CR-POL-4
                try:
                    runner.run(first, parsed, [None] * len(first), mgl, warmup=run)
                except BatchFailed:
                    pass
        self._files += 1
        self.requests_run += len(parsed.requests)
        responses = []
        for b, batch in enumerate(parsed.batches):
            requests = [parsed.requests[i] for i in batch]
            try:
                seqs = runner.run(requests, parsed, [gens[i] for i in batch], mgl,
                                  accepted=[accepted[i] for i in batch])
            except BatchFailed as failure:
                self.batches.append({"batch_idx": b, "status": "failed", "error": failure.message,
                                     "rule": failure.rule})
                responses += [_response(r, b, "error", failure.message) for r in requests]
                if trace is not None:                   # CR-CAP-8, CR-BATCH-5, CR-SUP-8: as the batch failed
                    step = trace.add(None, failure.rule, f"batch[{b}]", "failed", failure.message)
                    for r in requests:
                        trace.add(first_ordinal + r.index, failure.rule, "status", "error",
                                  f"batch {b} fails: {failure.message}", causes=(step,))
                continue
            self.batches.append({"batch_idx": b, "status": "ok", "error": None, "rule": None})
            if trace is not None:
                for seq in seqs:                        # CR-CAP-8: the batch runs
                    admission = [s for s in trace.requests.get(seq.ordinal, ()) if s.value in ("forced_cold", "plan")]
                    trace.add(seq.ordinal, "CR-CAP-8", "status", "ok", f"batch {b} runs: every sequence was admitted "
                              "(CR-CAP-3) within the length limits (CR-BATCH-5) and every decode step obtained its "
                              "pages (CR-CAP-9)", causes=tuple(admission[-2:]))
            for seq in seqs:
                known = seq.generated is not None or mgl == 1
                response = _response(seq.request, b, "ok", None, seq.generated_count if known else None,
                                     seq.facts() if self.reuse else None)
                if not seq.outputs_defined:
                    response["outputs_defined"] = False
                responses.append(response)
        if trace is not None:
            self.open_counts.done(parsed, first_ordinal, self.cache.evicted > 0)
        return responses

    def profile(self) -> dict:
        """The profile JSON: `context_cache` when reuse is enabled (CR-POL-6), `prefill` with
        --dumpProfile, or always under a profile that writes it with the profile file
        (CR-MET-12, spec/profiles.md); nothing for a refused deployment."""
        if self.rejection is not None:
            return {}
        out = {}
        if self.reuse:
            out["context_cache"] = self.metrics.context_cache(self.cache)
        if self.flags.dump_profile or self.flags.semantics.prefill_section == "profile-output-file":
            out["prefill"] = self.prefill.section()
        return out

    def check_invariants(self) -> None:
        """Assert internal consistency between runs: refcounts, free counts, index vs records,
        and the counter identities of CR-MET (attempts = committed + existing, plans = admitted)."""
        m = self.metrics
        assert m.attempts == m.committed + m.existing, "attempts != committed + existing"
        assert sum(m.plans.values()) == m.admitted, "plan kinds do not add up to admitted"
        assert max(m.hits, m.lookup_bypass, m.media_aware, m.restores) <= m.admitted
        assert m.forced_cold <= m.lookup_bypass, "forced cold sequences are lookup bypasses"
        assert m.reused_tokens <= m.matched_tokens, "reused more than matched"
        self.cache.check(live_pages=[], live_slots=[])


@contextmanager
def _cyclic_gc_paused():
    """Pause Python's cyclic garbage collector while a file runs (speed only, no semantics).

    A run allocates a few container objects per request and frees them without cycles, but
    each full collection walks every live object, the caller's parsed request file included:
    on a 100k-request file that made parsing and simulating 1.4x slower and superlinear.
    Reference counting still frees everything at once; collection resumes afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _response(request, batch_idx, status, error, generated_tokens=None, facts=None) -> dict:
    return {"request_idx": request.index, "batch_idx": batch_idx, "input_tokens": request.n,
            "status": status, "error": error, "generated_tokens": generated_tokens,
            "context_cache": facts}


def _check_generated(generated, count: int, max_generate_length: int, engine=None) -> list:
    if generated is None:
        return [None] * count
    vocab = engine.vocab_size if engine is not None else VOCAB_SIZE
    eos = engine.eos_token_id if engine is not None else EOS
    if not isinstance(generated, list) or len(generated) != count:
        raise InputError("$.generated", f"needs one entry per request ({count})")
    for i, tokens in enumerate(generated):
        if tokens is None:
            continue
        where = f"$.generated[{i}]"
        if not isinstance(tokens, list) or not all(type(t) is int and 0 <= t < vocab for t in tokens):
            raise InputError(where, f"must be a list of token ids in [0, {vocab})")
        if not 1 <= len(tokens) <= max_generate_length:
            raise InputError(where, f"{len(tokens)} generated tokens, expected 1 to "
                                    f"max_generate_length {max_generate_length}")
        if eos in tokens[:-1]:
            raise InputError(where, f"the end-of-sequence token ({eos}) can only be the last generated token")
    return list(generated)


def _check_accepted(last_accepted, gens: list) -> list:
    """Per request, the tokens its last EAGLE verification accepted: None, or 1 .. g - 1 for a
    request that generated g tokens (its rounds after the prefill's first token added g - 1)."""
    if last_accepted is None:
        return [None] * len(gens)
    if not isinstance(last_accepted, list) or len(last_accepted) != len(gens):
        raise InputError("$.last_accepted", f"needs one entry per request ({len(gens)})")
    for i, (a, tokens) in enumerate(zip(last_accepted, gens)):
        if a is None:
            continue
        where = f"$.last_accepted[{i}]"
        if type(a) is not int or a < 1:
            raise InputError(where, f"must be a positive integer or null, got {a!r}")
        if tokens is not None and a > len(tokens) - 1:
            raise InputError(where, f"{a} tokens accepted by the last verification, but only {len(tokens) - 1} "
                                    "were generated after the prefill's first token")
    return list(last_accepted)


def simulate(engine, flags, request_dict, base_dir: str, generated=None, *,
             lora_files: bool = False) -> tuple[dict, dict]:
    """Simulate one request file on a fresh runtime instance; return (predictions, profile).
    `lora_files`: also require adapter weight files to exist (see parse_request_file)."""
    sim = Simulator(engine, flags)
    predictions = {"format": "kvconform-predictions-v1", "spec_version": SPEC_VERSION,
                   "rejected": None, "responses": [], "batches": []}
    if sim.rejection is not None:
        predictions["rejected"] = {"rule": sim.rejection.rule, "message": sim.rejection.message}
        return predictions, {}
    predictions["responses"] = sim.run(request_dict, base_dir, generated, lora_files=lora_files)
    predictions["batches"] = sim.batches
    return predictions, sim.profile()
