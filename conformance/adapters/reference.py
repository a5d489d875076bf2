"""The `reference` adapter: the oracle posing as a backend (spec/RUNNING.md section 1).

A self-check of the runner: every case must PASS against it. The oracle is a model of the
cache, not of a language model, so this adapter generates text with a documented stand-in:
a deterministic function of the request's input (token ids, media identities, LoRA adapter) and
of nothing else. Equal inputs therefore give equal outputs whatever the cache did, which is
what CR-OUT-1 asks of a real backend, and the tokens it returns feed the oracle's decode-end
publications like a real transcript.
"""
from __future__ import annotations

import hashlib
import random

from ..judge import oracle
from .base import Adapter, BuildRefused, Engine, RunResult, Session
from .engines import digest

LETTERS = b"abcdefghijklmnopqrstuvwxyz ,."
EOS = 257


class Vocabulary:
    """What the stand-in generator writes: bytes-v1 letters and <|eos|>, or, for an engine with a
    real tokenizer, one-token words of that tokenizer (conformance/materialize/units.py; one-token
    letters where it has no such words, as a byte-level vocabulary without merges) and its
    end-of-sequence token; `text` spells generated ids as the engine's tokenizer decodes them."""

    def __init__(self, engine=None):
        self.hf = engine is not None and engine.hf
        if not self.hf:
            self.letters, self.eos = list(LETTERS), EOS
            return
        from ..materialize.units import unit_ids
        self.tok = engine.hf_tokenizer()
        self.eos = engine.eos_token_id
        try:
            self.letters = unit_ids(engine)[:len(LETTERS)]
        except ValueError:       # a vocabulary without one-token words (one token per byte): letters
            self.letters = [ids[0] for ids in (self.tok.encode(chr(b), add_special_tokens=False) for b in LETTERS)
                            if len(ids) == 1]

    def text(self, ids: list[int]) -> str:
        return bytes(ids).decode("ascii") if not self.hf else self.tok.decode(ids)

    def spell(self, token: int) -> tuple[str, list[int]]:
        if not self.hf:
            return ("<|eos|>", list(b"<|eos|>")) if token == EOS else (chr(token), [token])
        piece = self.tok.decode([token])
        return piece, list(piece.encode("utf-8"))


BYTES = Vocabulary()
# every profile the oracle knows, its default first: the self-check runs under any of them
PROFILES = [oracle.DEFAULT_PROFILE] + [p for p in oracle.PROFILE_NAMES if p != oracle.DEFAULT_PROFILE]


def stand_in(request, max_length: int, stop: list[str], vocab: Vocabulary = BYTES) -> tuple[list[int], str, str]:
    """(generated ids, finish reason, output text) of the stand-in generator for one request.

    Ids are the vocabulary's letters (printable ASCII bytes for bytes-v1), sometimes ending in
    its end-of-sequence token; generation stops at the first of end-of-sequence, a stop string in
    the text, or `max_length` tokens (CR-BATCH-7).
    """
    seed = hashlib.sha256(request.tokens.tobytes() + b"|" + (request.lora_name or "").encode()
                          + b"".join(s.digest for s in request.spans)).digest()
    rng = random.Random(seed)
    ids: list[int] = []
    while True:
        if ids and rng.random() < 0.2:
            ids.append(vocab.eos)
            return ids, "end-of-sequence", vocab.text(ids[:-1])
        ids.append(vocab.letters[rng.randrange(len(vocab.letters))])
        text = vocab.text(ids)
        hits = [text.find(s) for s in stop if s in text]
        if hits:
            return ids, "stop-words", text[:min(hits)]
        if len(ids) >= max_length:
            return ids, "max-length", text


def last_accepted(request, generated: int) -> int | None:
    """The stand-in's last EAGLE verification: 1 to min(g - 1, 4) tokens accepted, a function of
    the input like the generated tokens; None when nothing was generated after the prefill's
    first token (no verification round ran)."""
    if generated < 2:
        return None
    seed = hashlib.sha256(b"accepted|" + request.tokens.tobytes()).digest()
    return 1 + seed[0] % min(generated - 1, 4)


def logprobs(ids: list[int], k: int, vocab: Vocabulary = BYTES) -> list[list[dict]]:
    """Top-k candidates per step: the chosen token first (a clear winner), then runners-up."""
    out = []
    for step, token in enumerate(ids):
        others = [t for t in vocab.letters if t != token][: max(0, k - 1)]
        cands = [token] + others
        out.append([dict(zip(("token", "bytes"), vocab.spell(t)), token_id=t, logprob=round(-0.01 - 2.0 * rank, 4))
                    for rank, t in enumerate(cands)])
    return out


class ReferenceSession(Session):
    def __init__(self, engine: Engine, runtime: dict):
        self.config = engine.description
        self.vocab = Vocabulary(self.config) if self.config.hf else BYTES
        self.flags = oracle.flags_of(runtime)
        self.sim = None

    def run(self, request: dict, base_dir: str) -> RunResult:
        refused = oracle.rejection(self.config, self.flags)
        if refused is not None:
            return RunResult("rejected", message=refused.message, exit_code=3)
        try:
            parsed = oracle.parse(request, base_dir, self.config, self.flags)
        except oracle.InputError as e:
            return RunResult("input_error", message=e.message, error_path=e.path, exit_code=2)
        max_length = self.flags.max_generate_length or parsed.max_generate_length
        made = [stand_in(r, max_length, r.stop, self.vocab) for r in parsed.requests]
        if self.sim is None:
            self.sim = oracle.OracleSession(self.config, self.flags)
        eagle = self.config.deployment.get("spec_decode") == "eagle"
        accepted = [last_accepted(r, len(m[0])) if eagle else None for r, m in zip(parsed.requests, made)]
        predicted = self.sim.run(request, base_dir, [m[0] for m in made], accepted)
        responses = []
        for p, (ids, finish, text), raw, a in zip(predicted.responses, made, request["requests"], accepted):
            r = {"request_idx": p["request_idx"], "batch_idx": p["batch_idx"],
                 "input_tokens": p["input_tokens"], "context_cache": p.get("context_cache")}
            if p["status"] != "ok":
                r.update(output_text=p.get("error") or "batch failed", finish_reason="error", output_ids=[])
            else:
                r.update(output_text=text, finish_reason=finish, output_ids=ids)
                if a is not None:
                    r["last_verification_accepted"] = a
                k = raw.get("num_logprobs", request.get("num_logprobs", 0))
                if k:
                    r["logprobs"] = logprobs(ids, k, self.vocab)
            responses.append(r)
        failed = sum(1 for b in predicted.batches if b["status"] != "ok")
        return RunResult("ok", responses, predicted.profile, failed, 1 if failed else 0, wrote_output=True)


class ReferenceAdapter(Adapter):
    name = "reference"
    sessions = True
    edits_descriptions = True    # it runs on descriptions alone

    def capabilities(self) -> dict:
        return {
            "format": "kvconform-capabilities-v1", "backend": "reference",
            "version": oracle.SPEC_VERSION, "semantics_profile": PROFILES,
            "tokenizer": ["bytes-v1", "hf"],
            "observables": {"per_request_metrics": True, "output_ids": True, "logprobs": True,
                            "prefill_profile": True, "rejection_messages": True,
                            "last_verification_accepted": True},
            "model_kinds": ["attention", "recurrent", "hybrid"], "media": ["image", "audio"],
            "features": ["lora", "warmup", "hidden_state_output", "stop_strings", "batching",
                         "poison_fresh_pages", "kv_dtype_fp8", "tp", "sampling",
                         "spec_decode_eagle"],
            "tokens_per_page": "any",
        }

    def engine(self, build_args: dict) -> Engine:
        try:
            config = oracle.derive_engine(build_args).to_config()
        except oracle.InputError as e:
            raise BuildRefused(f"{e.path}: {e.message}") from None
        return Engine(digest(build_args), config)

    def start(self, engine: Engine, runtime: dict) -> Session:
        return ReferenceSession(engine, runtime)
