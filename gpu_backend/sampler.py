"""Token selection: masking, logit bias, greedy and seeded sampling, top-k log-probabilities.

The sampler can emit only bytes below 0x80 and <|eos|> (spec/tokenizer.md section 4), so
generated text is ASCII and round-trips into a later turn. Log-probabilities are taken at
temperature 1 over the logits the sampler actually uses: masked and biased.

What may be emitted, and how a candidate is spelled, is the engine's vocabulary: `BYTES_V1`
here, or an `hf_prompt.HFText` (normal tokens and its EOS), passed to `select` as `vocab`.
"""
import torch

from .tokenizer import EOS, VOCAB, token_entry

_ALLOWED = torch.zeros(VOCAB, dtype=torch.bool)
_ALLOWED[:128] = True
_ALLOWED[EOS] = True


class BytesVocab:
    """The bytes-v1 vocabulary as the runtime and `select` see it."""
    vocab_size, eos, allowed = VOCAB, EOS, _ALLOWED
    allowed_count = int(_ALLOWED.sum())

    @staticmethod
    def token_entry(token_id: int):
        return token_entry(token_id)

    @staticmethod
    def text(ids) -> str:
        return bytes(t for t in ids if t != EOS).decode("ascii")


BYTES_V1 = BytesVocab()


def bias_row(logit_bias: dict, size: int = VOCAB) -> torch.Tensor | None:
    if not logit_bias:
        return None
    row = torch.zeros(size)
    for tid, b in logit_bias.items():
        row[tid] = b
    return row


def masked_logits(logits: torch.Tensor, biases: list, allowed: torch.Tensor = _ALLOWED) -> torch.Tensor:
    """logits [B, V] (any device) -> float32 CPU logits with bias added and the never-emitted
    tokens at -inf."""
    out = logits.detach().to("cpu", torch.float32).clone()
    for b, row in enumerate(biases):
        if row is not None:
            out[b] += row
    return out.masked_fill_(~allowed, float("-inf"))


def sample_row(row: torch.Tensor, temperature: float, top_k: int, top_p: float, gen: torch.Generator,
               allowed_count: int | None = None) -> int:
    """Temperature, then top-k (0: off), then nucleus top-p, then one draw from `gen`."""
    logits = row / temperature
    if not torch.isfinite(logits.max()):
        # A tiny temperature overflows the division (5e-324 is a valid JSON number >= 0, and 0
        # in float32): shift by the maximum first, in float64, the same distribution without an
        # inf - inf = NaN in softmax; the maximum stays 0, everything else goes to -inf.
        logits = (row.double() - row.max().double()) / temperature
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, allowed_count or int(_ALLOWED.sum()))).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        p, idx = torch.sort(probs, descending=True, stable=True)
        drop = (torch.cumsum(p, 0) - p) >= top_p          # keep the smallest prefix reaching top_p
        drop[0] = False      # never empty: a top_p below float32's range (1e-300 > 0) rounds to 0
        p[drop] = 0
        probs = torch.zeros_like(probs).scatter_(0, idx, p)
    return int(torch.multinomial(probs, 1, generator=gen).item())


def top_logprobs(row: torch.Tensor, k: int, entry=token_entry) -> list:
    """The k most likely tokens of a masked row, descending, ties by token id (Edge-LLM format)."""
    lp = torch.log_softmax(row, dim=-1)
    # Only the tokens at or above the k-th largest value can be among the first k: sort those
    # (ids ascending, so the stable sort keeps ties by id) instead of the whole vocabulary, a
    # tenth of a decode step at a 32k vocabulary. A NaN row (topk and sort rank NaN above all)
    # leaves fewer than k and takes the whole sort.
    kth = torch.topk(lp, min(k, lp.numel())).values[-1]
    idx = torch.nonzero(lp >= kth).flatten()                         # [m >= k], ascending ids
    if idx.numel() < k:
        idx = torch.arange(lp.numel())
    vals, order = torch.sort(lp[idx], descending=True, stable=True)
    idx = idx[order]
    out = []
    for v, i in zip(vals[:k].tolist(), idx[:k].tolist()):
        token, raw = entry(i)
        out.append({"token_id": i, "token": token, "bytes": raw, "logprob": min(v, 0.0)})
    return out


def select(logits: torch.Tensor, seqs, vocab=BYTES_V1) -> list:
    """Choose the next token of each sequence; returns [(token, logprob entries or None)]."""
    rows = masked_logits(logits, [s.bias for s in seqs], vocab.allowed)
    greedy = rows.argmax(dim=-1).tolist()
    out = []
    for b, s in enumerate(seqs):
        r = s.req
        tok = greedy[b] if r.greedy else sample_row(rows[b], r.temperature, r.top_k, r.top_p, s.generator,
                                                    vocab.allowed_count)
        out.append((tok, top_logprobs(rows[b], r.num_logprobs, vocab.token_entry) if r.num_logprobs else None))
    return out
