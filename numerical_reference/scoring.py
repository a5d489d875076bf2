"""Teacher-forced reference log-probabilities of one request (spec/RUNNING.md section 5).

For a greedy request whose backend generated g_0 .. g_{m-1}, the reference runs the float64
forward once over the input followed by g_0 .. g_{m-2} and reads, at each generation step s,
the distribution the backend sampled g_s from: the logits at position n - 1 + s, with the
request's `logit_bias` added and the tokens the engine never emits masked (bytes-v1: bytes
below 0x80 and <|eos|>, spec/tokenizer.md section 4; an `hf` tokenizer: its normal tokens and
the EOS, spec/engine.md section 5), normalised at temperature 1. Each step keeps the
log-probability of g_s, the reference's two most likely tokens, and how far the log-probability
of g_s moves when keys and values are kept exact instead of rounded to the engine's KV dtype: the
measured size of KV rounding on this very request, from which the tolerances are calibrated.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

from .forward import Forward, audio_rows, image_rows
from .layout import Weights
from .media import decoded, media_items

BYTES_V1_EOS = 257


@dataclass
class Step:
    token: int                 # the token the backend generated at this step
    logprob: float             # its reference log-probability
    top: list                  # [(token id, log-probability)] of the two most likely tokens
    kv_shift: float = 0.0      # |log-probability of `token` with exact KV - with rounded KV|

    def to_json(self) -> dict:
        return {"token_id": self.token, "logprob": self.logprob, "top": [list(t) for t in self.top],
                "kv_shift": self.kv_shift}

    @classmethod
    def from_json(cls, d: dict) -> "Step":
        return cls(int(d["token_id"]), float(d["logprob"]), [(int(t), float(lp)) for t, lp in d["top"]],
                   float(d.get("kv_shift", 0.0)))


@dataclass
class Scored:
    """The reference's view of one request's generation."""
    steps: list = field(default_factory=list)

    @property
    def kv_rounding(self) -> float:
        """The largest log-probability shift KV rounding causes on this request (nats)."""
        return max((s.kv_shift for s in self.steps), default=0.0)


@dataclass
class Inputs:
    """What the reference needs of one request, all of it in the cache key."""
    tokens: list
    media: list                # [(start, end, modality, digest bytes, path)]
    adapter: str | None        # LoRA weight file path
    bias: dict                 # token id -> bias
    forced: list               # generated token ids

    def key(self, weights: Weights, emission: str) -> str:
        adapter = weights.adapter(self.adapter)[0] if self.adapter else None
        material = {"engine": weights.digest, "adapter": adapter, "tokens": self.tokens,
                    "media": [(a, b, m, d.hex()) for a, b, m, d, _ in self.media],
                    "bias": sorted(self.bias.items()), "forced": self.forced, "emission": emission}
        return hashlib.sha256(json.dumps(material, separators=(",", ":")).encode()).hexdigest()


def inputs_of(parsed_request, request: dict, doc: dict, base_dir: str, forced: list) -> Inputs:
    """The reference inputs of request `parsed_request` (the oracle's tokenization) as written
    in `request` (media paths relative to `base_dir`) of file `doc`."""
    import os
    items = media_items(request)
    if len(items) != len(parsed_request.spans):
        raise ValueError(f"{len(items)} media items for {len(parsed_request.spans)} media spans")
    media = []
    for (kind, path), span in zip(items, parsed_request.spans):
        full = path if os.path.isabs(path) else os.path.join(base_dir, path)
        media.append((span.start, span.end, span.modality, span.digest, full))
    bias = {int(k): float(v) for k, v in (doc.get("logit_bias") or {}).items()}
    bias.update({int(k): float(v) for k, v in (request.get("logit_bias") or {}).items()})
    adapter = None
    if parsed_request.lora_name is not None:
        ref = (doc.get("available_lora_weights") or {})[parsed_request.lora_name]
        adapter = ref if os.path.isabs(ref) else os.path.join(base_dir, ref)
    return Inputs([int(t) for t in parsed_request.tokens], media, adapter, bias, [int(t) for t in forced])


_MASKS: dict = {}


def emission_mask(weights: Weights, engine) -> tuple[str, np.ndarray]:
    """(name, bool [V]) of the tokens the engine may emit (spec/engine.md section 5)."""
    V = weights.cfg["vocab_size"]
    if not engine.hf:
        mask = np.zeros(V, dtype=bool)
        mask[:128] = True
        mask[weights.cfg.get("eos_token_id", BYTES_V1_EOS)] = True
        return "bytes-v1", mask
    tok = engine.hf_tokenizer()
    name = f"hf:{tok.folder}:{tok.loader}:{weights.cfg.get('eos_token_id')}"
    if name not in _MASKS:
        backend = tok._backend                      # the `tokenizers` object the oracle loaded
        added = set(backend.get_added_tokens_decoder())
        pieces = backend.decode_batch([[i] for i in range(V)], skip_special_tokens=False)
        mask = np.array([i not in added and "\ufffd" not in p for i, p in enumerate(pieces)], dtype=bool)
        mask[weights.cfg["eos_token_id"]] = True
        _MASKS[name] = mask
    return name, _MASKS[name]


def score(weights: Weights, inputs: Inputs, mask: np.ndarray) -> Scored:
    """Run the forward and read each generation step (module docstring)."""
    m = len(inputs.forced)
    if m == 0:
        return Scored([])
    lora = weights.adapter(inputs.adapter)[1] if inputs.adapter else None
    model = Forward(weights, lora)
    ids = inputs.tokens + inputs.forced[:-1]
    media = []
    for start, end, modality, digest, path in inputs.media:
        data = decoded(modality, path, digest)
        rows = image_rows(weights, data, end - start) if modality == "image" else audio_rows(weights, data)
        if len(rows) != end - start:
            raise ValueError(f"{path}: {len(rows)} encoder rows for {end - start} placeholders")
        media.append((start, rows))
    first = len(inputs.tokens) - 1                     # positions first .. first + m - 1 = len(ids) - 1
    kv_dtype = weights.cfg.get("kv_cache_dtype", "fp16")
    has_kv = "attention" in weights.cfg["layer_kinds"]
    rounded = _logprobs(model, model.hidden(ids, media, kv_dtype, first), inputs.bias, mask)
    exact = _logprobs(model, model.hidden(ids, media, None, first), inputs.bias, mask) if has_kv else rounded
    steps = []
    for s, token in enumerate(inputs.forced):
        lp = rounded[s]
        first = int(np.argmax(lp))
        second = int(np.argmax(np.where(np.arange(len(lp)) == first, -np.inf, lp)))
        order = (first, second)
        steps.append(Step(token, float(lp[token]), [(int(t), float(lp[t])) for t in order],
                          float(abs(exact[s][token] - lp[token])) if np.isfinite(lp[token]) else 0.0))
    return Scored(steps)


def _logprobs(model: Forward, hidden, bias: dict, mask: np.ndarray):
    z = model.logits(hidden)
    for t, b in bias.items():
        z[:, t] += b
    z = np.where(mask[None, :], z, -np.inf)
    top = z.max(-1, keepdims=True)
    return z - top - np.log(np.exp(z - top).sum(-1, keepdims=True))
